// Names that two scripts of the page must spell alike. The module worker (worker.js) and the
// classic service worker (sw.js) cannot share a module, so each writes the model cache's name
// and the relaxed SIMD probe that picks the wasm build; this test keeps them equal (a mismatch
// would silently break offline loading).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';

const web = new URL('../../web/', import.meta.url);

async function constant(file, name) {
  const text = await readFile(new URL(file, web), 'utf8');
  const found = [...text.matchAll(new RegExp(`^const ${name} = (.+);$`, 'gm'))];
  assert.equal(found.length, 1, `${file} defines ${name} once`);
  return found[0][1];
}

test('worker.js and sw.js name the same model cache', async () => {
  assert.equal(await constant('worker.js', 'MODEL_CACHE'), await constant('sw.js', 'MODEL_CACHE'));
});

test('worker.js and sw.js probe relaxed SIMD alike', async () => {
  assert.equal(await constant('worker.js', 'RELAXED_SIMD_PROBE'), await constant('sw.js', 'RELAXED_SIMD_PROBE'));
});
