// The page runs the WebGPU kernels in the browser and compares them with the Rust reference.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { launch, openPage, serveStatic } from './harness.mjs';

const TIMEOUT_MS = 180_000; // wasm compile + SwiftShader shader compile on 2 CPU cores

let server;
before(async () => {
  server = await serveStatic();
});
after(async () => {
  await server?.close();
});

/** Waits until the self-check has finished and returns its state and text. */
async function finalStatus(page) {
  const status = page.locator('#selfcheck-status:not([data-state="running"])');
  await status.waitFor({ timeout: TIMEOUT_MS });
  return { state: await status.getAttribute('data-state'), text: await status.textContent() };
}

test('kernels match the reference on SwiftShader WebGPU', { timeout: TIMEOUT_MS + 30_000 }, async () => {
  const browser = await launch({ webgpu: true });
  try {
    const { page, log, requests } = await openPage(browser, server.url);
    const { state, text } = await finalStatus(page);
    const rows = await page.locator('#selfcheck-rows tr').allInnerTexts();
    const adapter = await page.locator('#adapter').textContent();
    console.log(`${adapter}\n${rows.join('\n')}`);
    assert.equal(state, 'pass', `page says: ${text}\n${rows.join('\n')}\n${log.join('\n')}`);
    assert.ok(rows.length >= 6, `expected a row per tested shape, got ${rows.length}`);
    for (const row of rows) assert.match(row, /\bmatch$/, `row reports a mismatch: ${row}`);
    const origin = new URL(server.url).origin;
    const foreign = requests.filter((r) => new URL(r).origin !== origin);
    assert.deepEqual(foreign, [], 'the page must only request its own files');
  } finally {
    await browser.close();
  }
});

test('without WebGPU the page says so and what to do', { timeout: TIMEOUT_MS + 30_000 }, async () => {
  const browser = await launch({ webgpu: false });
  try {
    const { page, log } = await openPage(browser, server.url);
    const { state, text } = await finalStatus(page);
    assert.equal(state, 'no-webgpu', `page says: ${text}\n${log.join('\n')}`);
    assert.match(text, /WebGPU is not available/);
    assert.match(text, /Chrome|Edge|Firefox|Safari/);
  } finally {
    await browser.close();
  }
});
