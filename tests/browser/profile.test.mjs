// scripts/wasm_profile.mjs, the profile of the page's CPU engine (the simd128 wasm in Node's V8),
// runs on the trunk build and names our functions: the README's profile figures come from it.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { join } from 'node:path';
import { DIST, ROOT } from './harness.mjs';

test('wasm_profile.mjs profiles the CPU engine and names its functions', async () => {
  const script = join(ROOT, 'scripts/wasm_profile.mjs');
  const args = [script, '--dist', DIST, '--model', join(ROOT, 'web/models/de-en'), '--src', join(ROOT, 'tests/fixtures/browser/de20.de'), '--limit', '4', '--beam', '2', '--top', '40'];
  const { stdout } = await promisify(execFile)(process.execPath, args, { cwd: ROOT, timeout: 120_000 });
  assert.match(stdout, /^4 lines, beam 2, CPU engine, adapter .*"backend":"wasm simd128"/m);
  // The int8 product is where the engine's time goes; its name comes from the wasm's name section.
  assert.match(stdout, /%\s+\d+\.\d%\s+webnmt::cpu::matmul::/, stdout);
});

test('wasm_profile.mjs refuses a bad flag with a message', async () => {
  const run = promisify(execFile)(process.execPath, [join(ROOT, 'scripts/wasm_profile.mjs'), '--limit', '0'], { cwd: ROOT });
  await assert.rejects(run, (e) => e.code === 2 && /--limit must be a positive integer/.test(e.stderr));
});
