#!/usr/bin/env node
// Where the page's CPU engine spends its time: the trunk build's simd128 wasm (`dist/`), run in
// Node under V8's sampling profiler, translating test lines one at a time on the CPU engine, then
// the functions with the most self time, as a share of all samples.
//
//   node scripts/wasm_profile.mjs [--dist dist] [--model web/models/de-en]
//       [--src ../shared/data/de-en/test.de] [--limit 50] [--beam 4] [--top 25]
//
// Build first (`trunk build --release --config trunk.toml`, as scripts/test.sh does). The function
// names come from the wasm's name section (trunk keeps it). Node's V8 (Node 20 here) runs the
// simd128 build; the relaxed-SIMD one (`webnmt_relaxed_bg.wasm`) needs a newer V8, as in current
// Chromium, so this profiles the build that browsers without relaxed SIMD load. The profile is
// written to target/wasm-profile/*.cpuprofile (open it in Chromium's DevTools for the call tree).
import fs from 'node:fs';
import path from 'node:path';
import { Session } from 'node:inspector/promises';

const args = process.argv.slice(2);
const opt = (name, fallback) => {
  const i = args.indexOf(`--${name}`);
  if (i < 0) return fallback;
  if (i + 1 >= args.length) fail(`--${name} needs a value`);
  return args[i + 1];
};
function fail(msg) {
  console.error(`wasm_profile: ${msg}`);
  process.exit(2);
}
const dist = path.resolve(opt('dist', 'dist'));
const model = path.resolve(opt('model', 'web/models/de-en'));
const src = opt('src', '../shared/data/de-en/test.de');
const limit = Number(opt('limit', '50'));
const beam = Number(opt('beam', '4'));
const top = Number(opt('top', '25'));
for (const [name, v] of [['limit', limit], ['beam', beam], ['top', top]]) {
  if (!Number.isInteger(v) || v < 1) fail(`--${name} must be a positive integer, got ${v}`);
}
for (const f of [path.join(dist, 'webnmt.js'), path.join(dist, 'webnmt_bg.wasm')]) {
  if (!fs.existsSync(f)) fail(`no ${f}: build the page first (trunk build --release --config trunk.toml)`);
}
const files = {};
for (const f of ['manifest.json', 'model.safetensors', 'source.tokenizer.json', 'target.tokenizer.json']) {
  const p = path.join(model, f);
  if (!fs.existsSync(p)) fail(`no ${p}: --model must be a bundle directory (web/models/PAIR)`);
  files[f] = new Uint8Array(fs.readFileSync(p));
}
if (!fs.existsSync(src)) fail(`no ${src}: --src names a file of source lines`);
const lines = fs.readFileSync(src, 'utf8').split('\n').filter((l) => l.trim()).slice(0, limit);

const wasm = await import(path.join(dist, 'webnmt.js'));
wasm.initSync({ module: fs.readFileSync(path.join(dist, 'webnmt_bg.wasm')) });
const manifest = files['manifest.json'];
delete files['manifest.json'];
const translator = await wasm.Translator.load(manifest, files, 'cpu');
const options = { search: { beam, groups: 1 } };
await translator.translate(lines[0], options, () => false); // warm-up, not profiled

const session = new Session();
session.connect();
await session.post('Profiler.enable');
await session.post('Profiler.setSamplingInterval', { interval: 100 });
await session.post('Profiler.start');
const t0 = performance.now();
for (const line of lines) await translator.translate(line, options, () => false);
const ms = performance.now() - t0;
const { profile } = await session.post('Profiler.stop');
session.disconnect();

const outDir = path.resolve('target/wasm-profile');
fs.mkdirSync(outDir, { recursive: true });
const out = path.join(outDir, `beam${beam}-${lines.length}.cpuprofile`);
fs.writeFileSync(out, JSON.stringify(profile));

const self = new Map();
const timeOf = new Map();
profile.samples.forEach((id, i) => timeOf.set(id, (timeOf.get(id) || 0) + (profile.timeDeltas[i] || 0)));
let total = 0;
for (const node of profile.nodes) {
  const t = timeOf.get(node.id) || 0;
  total += t;
  const name = (node.callFrame.functionName || '(anonymous)').replace(/::h[0-9a-f]{16}$/, '');
  self.set(name, (self.get(name) || 0) + t);
}
console.log(`${lines.length} lines, beam ${beam}, CPU engine, adapter ${JSON.stringify(translator.info().adapter)}: ${ms.toFixed(0)} ms`);
const idle = self.get('(idle)') || 0;
console.log(`self time, share of ${(total / 1000).toFixed(0)} ms sampled, and of the ${((total - idle) / 1000).toFixed(0)} ms not idle (profile: ${out}):`);
for (const [name, t] of [...self.entries()].sort((a, b) => b[1] - a[1]).slice(0, top)) {
  const busy = name === '(idle)' ? '' : `${((100 * t) / (total - idle)).toFixed(1)}%`;
  console.log(`${((100 * t) / total).toFixed(1).padStart(5)}% ${busy.padStart(6)}  ${name.slice(0, 120)}`);
}
