// A damaged model download: the page names the problem, keeps nothing of it, and its retry
// button downloads the model again.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { cp, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DIST, launch, modelState, openPage, screenshot, serveStatic } from './harness.mjs';

const TIMEOUT_MS = 240_000;
const WEIGHTS = 'models/ko-en/model.safetensors'; // the default model's

let dir;
let server;
before(async () => {
  dir = await mkdtemp(join(tmpdir(), 'webnmt-corrupt-'));
  await cp(DIST, dir, { recursive: true });
  server = await serveStatic(dir);
});
after(async () => {
  await server?.close();
  if (dir) await rm(dir, { recursive: true, force: true });
});

test('a model file with one flipped byte gives the integrity message and a working retry', { timeout: TIMEOUT_MS * 2 }, async () => {
  const good = await readFile(join(DIST, WEIGHTS));
  const bad = Buffer.from(good);
  bad[bad.length >> 1] ^= 0x01; // one bit in the middle of the weights: same size, other sha256
  await writeFile(join(dir, WEIGHTS), bad);

  const browser = await launch({ webgpu: true });
  try {
    const { page, log } = await openPage(browser, server.url);
    const { state, text } = await modelState(page, TIMEOUT_MS);
    assert.equal(state, 'integrity', `page says: ${text}\n${log.join('\n')}`);
    assert.match(text, /The model download is damaged/);
    assert.match(text, /model\.safetensors/, 'the message names the file');
    assert.equal(await page.locator('#retry').isVisible(), true, 'a retry button');
    assert.equal(await page.locator('#translate').isEnabled(), false, 'nothing to translate with');
    await screenshot(page, 'integrity');

    // The site is repaired: retry downloads again (the damaged file was not kept).
    await writeFile(join(dir, WEIGHTS), good);
    await page.click('#retry');
    const again = await modelState(page, TIMEOUT_MS);
    assert.equal(again.state, 'ready', `page says: ${again.text}\n${log.join('\n')}`);
    assert.equal(await page.locator('#retry').isVisible(), false);
  } finally {
    await browser.close();
  }
});
