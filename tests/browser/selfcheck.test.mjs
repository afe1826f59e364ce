// The diagnostics section runs the WebGPU kernels in the browser and compares them with the Rust
// reference; a browser without WebGPU translates on the CPU engine, and its self-check says that
// it needs WebGPU and what to do.
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
    // Every kernel ran (how many shapes each has is checked natively, where the same Rust runs).
    const kernels = [...new Set(rows.map((row) => row.split('\t')[0].trim()))].sort();
    assert.deepEqual(kernels, ['attention', 'embed', 'logits_topk', 'matmul_q8', 'matmul_q8_norm'], rows.join('\n'));
    for (const row of rows) assert.match(row, /\bmatch$/, `row reports a mismatch: ${row}`);
    assert.deepEqual(foreignRequests(requests, server.url), [], 'the page must only request its own files');
  } finally {
    await browser.close();
  }
});

test('without WebGPU the model loads on the CPU, and the self-check says it needs WebGPU and what to do', { timeout: TIMEOUT_MS + 30_000 }, async () => {
  const browser = await launch({ webgpu: false });
  try {
    const { page, log } = await openPage(browser, server.url);
    const { state, text } = await modelState(page, TIMEOUT_MS);
    assert.equal(state, 'ready', `page says: ${text}\n${log.join('\n')}`);
    assert.equal(await page.locator('#engine-notice').textContent(), 'No WebGPU here: translating on the CPU (WebAssembly SIMD)');
    assert.equal(await page.locator('#translate').isEnabled(), true);
    const check = await selfCheck(page);
    assert.equal(check.state, 'no-webgpu', `page says: ${check.text}\n${log.join('\n')}`);
    assert.match(check.text, /WebGPU kernels only/);
    assert.match(check.text, /WebGPU is not available/);
    assert.match(check.text, /Chrome|Edge|Firefox|Safari/);
    assert.match(check.text, /enable-unsafe-webgpu/);
    assert.equal(await page.locator('#selfcheck-rows tr').count(), 0, 'no kernel rows');
    await screenshot(page, 'no-webgpu');
  } finally {
    await browser.close();
  }
});
