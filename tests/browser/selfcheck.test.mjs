// The diagnostics section runs the WebGPU kernels in the browser and compares them with the Rust
// reference; a browser without WebGPU is told so, with what to do, before any download.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { foreignRequests, launch, modelState, openPage, screenshot, serveStatic } from './harness.mjs';

const TIMEOUT_MS = 240_000; // wasm compile + SwiftShader shader compile on 2 CPU cores

let server;
before(async () => {
  server = await serveStatic();
});
after(async () => {
  await server?.close();
});

/** Presses the self-check button and waits until the check has finished. */
async function selfCheck(page) {
  await page.click('#selfcheck-run');
  const status = page.locator('#selfcheck-status:not([data-state="running"]):not([data-state="idle"])');
  await status.waitFor({ timeout: TIMEOUT_MS });
  return { state: await status.getAttribute('data-state'), text: await status.textContent() };
}

test('kernels match the reference on SwiftShader WebGPU', { timeout: TIMEOUT_MS + 30_000 }, async () => {
  const browser = await launch({ webgpu: true });
  try {
    const { page, log, requests } = await openPage(browser, server.url);
    const { state, text } = await selfCheck(page);
    const rows = await page.locator('#selfcheck-rows tr').allInnerTexts();
    const adapter = await page.locator('#adapter').textContent();
    console.log(`${adapter}\n${rows.join('\n')}`);
    assert.equal(state, 'pass', `page says: ${text}\n${rows.join('\n')}\n${log.join('\n')}`);
    assert.ok(rows.length >= 6, `expected a row per tested shape, got ${rows.length}`);
    for (const row of rows) assert.match(row, /\bmatch$/, `row reports a mismatch: ${row}`);
    assert.deepEqual(foreignRequests(requests, server.url), [], 'the page must only request its own files');
  } finally {
    await browser.close();
  }
});

test('without WebGPU the page says so and what to do', { timeout: TIMEOUT_MS + 30_000 }, async () => {
  const browser = await launch({ webgpu: false });
  try {
    const { page, log, requests } = await openPage(browser, server.url);
    const { state, text } = await modelState(page, TIMEOUT_MS);
    assert.equal(state, 'no-webgpu', `page says: ${text}\n${log.join('\n')}`);
    assert.match(text, /WebGPU is not available/);
    assert.match(text, /Chrome|Edge|Firefox|Safari/);
    assert.match(text, /enable-unsafe-webgpu/);
    assert.equal(await page.locator('#translate').isEnabled(), false);
    assert.ok(!requests.some((r) => r.endsWith('.safetensors')), 'no model download without WebGPU');
    const check = await selfCheck(page);
    assert.equal(check.state, 'no-webgpu', `page says: ${check.text}\n${log.join('\n')}`);
    await screenshot(page, 'no-webgpu');
  } finally {
    await browser.close();
  }
});
