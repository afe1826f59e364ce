#!/usr/bin/env node
// The browser path of `bench` (src/bin/bench.rs, `--browser`): our page in headless Chromium with
// SwiftShader WebGPU, driven through the browser-test harness (tests/browser/harness.mjs).
//
//   node scripts/page_bench.mjs --model web/models/de-en --src ../shared/data/de-en/test.de \
//       --limit 10 [--rows '[{"label":"greedy","search":{…}},…]'] [--engine gpu|cpu]
//       [--wasm auto|simd128|relaxed]
//   node scripts/page_bench.mjs --check [--model DIR]   # only check the set-up (bench does first)
//
// What runs: `dist/` (the trunk build) served on 127.0.0.1, with the bundle `--model` mounted at
// `models/bench/` and a `models/index.json` that lists only it, so the page's own start-up
// (model picker, download, sha256 check, `Translator.load` in its Web Worker) loads that bundle.
// The script then posts `translate` messages to that same worker — the page's worker, captured
// when app.js creates it — one source line at a time, in the message format app.js uses but with
// `attention: false` (as bench's native rows; the page's UI always asks for the heatmap) and
// without drawing the result. So the timed path is the page's worker + wasm + WebGPU
// (SwiftShader), not the page's DOM.
//
// Timing: per line, from `postMessage` to the worker's `result` message, measured with
// `performance.now()` in the page (message passing and the result's conversion to JS included).
// Model download, verification, upload and shader compilation are not timed: the page loads the
// model before the first row, and one untimed warm-up sentence (the first line, the default
// options: beam 8 in 4 groups, as bench's native warm-up) runs before the first row.
//
// Engine: `--engine gpu` (the default) launches Chromium with SwiftShader WebGPU and opens the
// page with `?engine=gpu` (on an emulated adapter the page would pick its CPU engine); `--engine cpu`
// launches it without WebGPU, so the page loads the model on its int8 CPU engine (WebAssembly
// SIMD, one thread), as a browser without WebGPU does; rows are then named `page (CPU, wasm
// relaxed SIMD)` (or `wasm SIMD`, with the build without relaxed SIMD) and the GPU counters are
// zero. `--wasm simd128` or `--wasm relaxed` opens the page with `?wasm=…`, forcing that build
// (by default web/worker.js times both where the browser has relaxed SIMD and keeps the faster).
//
// Rows: `--rows` is a JSON array of `{ label, search }` (`search` is a SearchOptions object;
// bench passes exactly the options of its native rows); without it, greedy (beam 1, no
// repetition penalty) and beam 4 (one group), as bench's native rows. Prints one JSON object on
// stdout, `{ browser, adapter, backend, lines, rows }` (`backend`: the engine the page loaded,
// e.g. `wasm simd128 + relaxed-simd (7-bit int8 dot)`); every row has the fields of bench's `Row`.
// Target tokens are the best hypotheses' tokens (EOS excluded); the GPU counters and the
// encoder / decoder / bookkeeping milliseconds are the engine's own `timings` of each result.
// `peak_rss_mib` is the sum of two peak resident sizes (VmHWM, /proc) at the end of the row:
// Chromium's GPU process (where SwiftShader does the GPU work and holds the GPU buffers) and the
// page's renderer (the largest one: the page, its worker and the wasm heap). Chromium's browser
// and utility processes are left out; pages shared by the two count twice. Null when /proc
// cannot tell. Progress goes to stderr. `CHROMIUM` and `DIST` pick the browser and the page
// folder, as in the browser tests.
import { readFile, readdir, stat } from 'node:fs/promises';
import { basename, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = resolve(join(fileURLToPath(import.meta.url), '../..'));
const BUILD = 'source target/toolchain.env && trunk build --config trunk.toml';
/** Per translation; SwiftShader takes seconds per sentence with a beam. */
const TRANSLATE_TIMEOUT_MS = 300_000;
/** The id of the first request; app.js numbers its own from 1 and ignores other ids. */
const FIRST_ID = 1_000_000;

const DEFAULT_ROWS = [
  { label: 'greedy', search: { beam: 1, groups: 1, repetition_penalty: 1.0 } },
  { label: 'beam 4', search: { beam: 4, groups: 1 } },
];

function fail(message) {
  console.error(`page_bench: ${message}`);
  process.exit(1);
}

function parseArgs(argv) {
  const args = { model: join(ROOT, 'web/models/de-en'), src: null, limit: 100, rows: DEFAULT_ROWS, check: false, engine: 'gpu', wasm: 'auto' };
  for (let i = 0; i < argv.length; i += 2) {
    const [flag, value] = [argv[i], argv[i + 1]];
    if (flag === '--check') {
      args.check = true;
      i -= 1;
      continue;
    }
    if (value === undefined) fail(`${flag} needs a value`);
    switch (flag) {
      case '--model':
        args.model = resolve(value);
        break;
      case '--src':
        args.src = resolve(value);
        break;
      case '--limit':
        args.limit = Number(value);
        if (!Number.isInteger(args.limit) || args.limit < 1) fail(`--limit must be a positive integer, not ${value}`);
        break;
      case '--engine':
        if (value !== 'gpu' && value !== 'cpu') fail(`--engine must be gpu or cpu, not ${value}`);
        args.engine = value;
        break;
      case '--wasm':
        if (!['auto', 'simd128', 'relaxed'].includes(value)) fail(`--wasm must be auto, simd128 or relaxed, not ${value}`);
        args.wasm = value;
        break;
      case '--rows':
        try {
          args.rows = JSON.parse(value);
        } catch (e) {
          fail(`--rows is not JSON: ${e.message}`);
        }
        break;
      default:
        fail(`unknown flag ${flag} (flags: --model DIR --src FILE --limit N --rows JSON --engine gpu|cpu --wasm auto|simd128|relaxed --check)`);
    }
  }
  if (!args.src && !args.check) fail('--src FILE is required');
  return args;
}

/** The newest modification time (ms) of the sources of `dist/` (the bundles are served as they are). */
async function newestSource() {
  let newest = (await stat(join(ROOT, 'index.html'))).mtimeMs;
  for (const dir of ['src', 'web']) {
    for (const entry of await readdir(join(ROOT, dir), { withFileTypes: true, recursive: true })) {
      const path = join(entry.parentPath, entry.name);
      if (entry.isFile() && !path.startsWith(join(ROOT, 'web/models'))) newest = Math.max(newest, (await stat(path)).mtimeMs);
    }
  }
  return newest;
}

/** Checks what the run needs and says how to get what is missing. */
async function checkSetup(harness, model) {
  await stat(harness.CHROMIUM).catch(() =>
    fail(`no Chromium at ${harness.CHROMIUM}: install it (apt-get install chromium, or scripts/setup.sh test) or set CHROMIUM=/path/to/chromium`),
  );
  for (const name of ['index.html', 'worker.js', 'webnmt.js', 'webnmt_bg.wasm']) {
    await stat(join(harness.DIST, name)).catch(() =>
      fail(`${join(harness.DIST, name)} is missing: build the page first: ${BUILD}`),
    );
  }
  const built = (await stat(join(harness.DIST, 'webnmt_bg.wasm'))).mtimeMs;
  if ((await newestSource()) > built) {
    console.error(`page_bench: warning: src/, web/ or index.html changed after dist/ was built; rebuild for current figures: ${BUILD}`);
  }
  const manifest = await readFile(join(model, 'manifest.json'), 'utf8').catch((e) =>
    fail(`${model} is not a model bundle (${e.message})`),
  );
  return JSON.parse(manifest);
}

/**
 * Runs in the page before app.js: wraps `Worker` so the page's own engine worker is reachable
 * (`window.__pageBench.workers`).
 */
function captureWorkers() {
  const Native = window.Worker;
  const bench = { workers: [] };
  window.__pageBench = bench;
  window.Worker = class extends Native {
    constructor(...args) {
      super(...args);
      bench.workers.push(this);
      this.addEventListener('message', (event) => {
        if (event.data?.type === 'loaded') bench.backend = event.data.info?.adapter?.backend ?? '';
      });
    }
  };
}

/**
 * Runs in the page: translates `text` on the page's worker and returns the round-trip time and
 * what bench needs of the result (the full result stays in the page).
 */
function translateInPage({ id, text, options, timeout }) {
  const worker = window.__pageBench.workers.at(-1);
  return new Promise((ok, reject) => {
    const timer = setTimeout(() => done(new Error(`no answer after ${timeout} ms`)), timeout);
    const t0 = performance.now();
    const onMessage = (event) => {
      const m = event.data ?? {};
      if (m.type === 'panic') done(new Error(`the engine panicked: ${m.message}`));
      if (m.id !== id) return;
      if (m.type === 'translate-error') done(new Error(`${m.error.kind}: ${m.error.message}`));
      if (m.type !== 'result') return;
      const ms = performance.now() - t0;
      const t = m.result.timings;
      done(null, {
        ms,
        tokens: m.result.sentences.reduce((n, s) => n + (s.hypotheses[0]?.tokens.length ?? 0), 0),
        steps: t.steps,
        encoder_ms: t.encoder_ms,
        decoder_ms: t.decoder_ms,
        bookkeeping_ms: t.bookkeeping_ms,
        total_ms: t.total_ms,
        gpu: t.gpu,
      });
    };
    function done(error, value) {
      clearTimeout(timer);
      worker.removeEventListener('message', onMessage);
      if (error) reject(error);
      else ok(value);
    }
    worker.addEventListener('message', onMessage);
    worker.postMessage({ type: 'translate', id, text, options });
  });
}

/** `/proc/<pid>/stat` fields of every process: pid → parent pid. */
async function parents() {
  const map = new Map();
  for (const name of await readdir('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    const text = await readFile(`/proc/${name}/stat`, 'utf8').catch(() => null);
    // "pid (comm) state ppid …"; comm may hold spaces and parentheses.
    if (text) map.set(Number(name), Number(text.slice(text.lastIndexOf(')') + 2).split(' ')[1]));
  }
  return map;
}

/**
 * Peak resident size (VmHWM, MiB) of this script's Chromium GPU process plus that of its largest
 * renderer (the page's: it holds the page, its worker and the wasm heap; the others are
 * headless Chromium's own UI and a spare), or null when /proc cannot tell.
 */
async function browserPeakRssMib() {
  try {
    const parent = await parents();
    const mine = new Set([process.pid]);
    for (let grew = true; grew; ) {
      grew = false;
      for (const [pid, ppid] of parent) {
        if (!mine.has(pid) && mine.has(ppid)) {
          mine.add(pid);
          grew = true;
        }
      }
    }
    let gpu = null;
    let renderer = null;
    for (const pid of mine) {
      // Chromium rewrites its command line: arguments end with a space or a NUL.
      const cmdline = await readFile(`/proc/${pid}/cmdline`, 'utf8').catch(() => '');
      const type = /--type=(gpu-process|renderer)[\0 ]/.exec(cmdline)?.[1];
      if (!type || cmdline.includes('--top-chrome-webui')) continue;
      const status = await readFile(`/proc/${pid}/status`, 'utf8').catch(() => '');
      const hwm = /^VmHWM:\s+(\d+) kB/m.exec(status);
      if (!hwm) continue;
      const mib = Number(hwm[1]) / 1024;
      if (type === 'gpu-process') gpu = Math.max(gpu ?? 0, mib);
      else renderer = Math.max(renderer ?? 0, mib);
    }
    return gpu !== null && renderer !== null ? gpu + renderer : null;
  } catch {
    return null;
  }
}

function percentile(sorted, p) {
  return sorted.length === 0 ? 0 : sorted[Math.round((sorted.length - 1) * p)];
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  let harness;
  try {
    harness = await import('../tests/browser/harness.mjs');
  } catch (e) {
    if (e.code === 'ERR_MODULE_NOT_FOUND') {
      fail(`playwright-core is missing: run (cd tests && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci), or scripts/setup.sh test (${e.message})`);
    }
    throw e;
  }
  const manifest = await checkSetup(harness, args.model);
  if (args.check) return;
  const text = await readFile(args.src, 'utf8').catch((e) => fail(`cannot read ${args.src}: ${e.message}`));
  // As Rust's str::lines: no empty last line after a final newline; "\r\n" ends a line too.
  const lines = text.split('\n').map((l) => l.replace(/\r$/, ''));
  if (lines.at(-1) === '') lines.pop();
  lines.splice(args.limit);
  if (lines.length === 0) fail(`${args.src} has no lines`);

  const index = {
    models: [{
      id: 'bench',
      name: `${basename(args.model)} (bench)`,
      source: manifest.source_lang,
      target: manifest.target_lang,
      path: 'models/bench/',
      default: true,
    }],
  };
  const server = await harness.serveStatic(harness.DIST, {
    mounts: { '/models/bench/': args.model },
    files: { '/models/index.json': JSON.stringify(index) },
  });
  const browser = await harness.launch({ webgpu: args.engine === 'gpu' });
  try {
    const query = new URLSearchParams({ engine: args.engine });
    if (args.wasm !== 'auto') query.set('wasm', args.wasm);
    const url = `${server.url}?${query}`;
    const { page, log } = await harness.openPage(browser, url, { init: captureWorkers });
    const t0 = Date.now();
    const { state, text: status } = await harness.modelState(page);
    if (state !== 'ready') throw new Error(`the page did not load the model: ${status}\n${log.join('\n')}`);
    // wgpu on the web reports no adapter name; the browser's GPUAdapterInfo says more.
    const adapter = await page.evaluate(async () => {
      const info = (await navigator.gpu?.requestAdapter())?.info ?? {};
      const { vendor = '', architecture = '', device = '', description = '' } = info;
      return { vendor, architecture, device, description };
    });
    const backend = await page.evaluate(() => window.__pageBench.backend ?? '');
    if ((args.engine === 'cpu') !== backend.startsWith('wasm')) {
      throw new Error(`asked for the ${args.engine.toUpperCase()} engine, the page loaded "${backend}"\n${log.join('\n')}`);
    }
    const label = args.engine === 'cpu'
      ? backend.includes('relaxed') ? 'CPU, wasm relaxed SIMD' : 'CPU, wasm SIMD'
      : adapter.architecture === 'swiftshader'
      ? 'SwiftShader'
      : adapter.description || [adapter.vendor, adapter.architecture].filter(Boolean).join(' ') || 'WebGPU';
    console.error(`page: Chromium ${await browser.version()}, WebGPU adapter ${JSON.stringify(adapter)}, engine backend "${backend}"; model ready in ${((Date.now() - t0) / 1000).toFixed(1)} s`);

    let id = FIRST_ID;
    const translate = (line, options) =>
      page.evaluate(translateInPage, { id: id++, text: line, options, timeout: TRANSLATE_TIMEOUT_MS });
    const w0 = Date.now();
    await translate(lines[0], { attention: false });
    console.error(`page: warm-up sentence (untimed) ${Date.now() - w0} ms`);

    const rows = [];
    for (const { label: setting, search } of args.rows) {
      const name = `page (${label}), ${setting}`;
      console.error(`${name} …`);
      const options = { search, attention: false };
      const ms = [];
      let tokens = 0;
      let steps = 0;
      const sum = { encoder_ms: 0, decoder_ms: 0, bookkeeping_ms: 0, dispatches: 0, submits: 0, bytes_read: 0 };
      for (const line of lines) {
        const r = await translate(line, options);
        ms.push(r.ms);
        tokens += r.tokens;
        steps += r.steps;
        sum.encoder_ms += r.encoder_ms;
        sum.decoder_ms += r.decoder_ms;
        sum.bookkeeping_ms += r.bookkeeping_ms;
        sum.dispatches += r.gpu.dispatches;
        sum.submits += r.gpu.submits;
        sum.bytes_read += r.gpu.bytes_read;
      }
      const sorted = [...ms].sort((a, b) => a - b);
      const seconds = ms.reduce((a, b) => a + b, 0) / 1000;
      const perStep = (x) => x / Math.max(steps, 1);
      rows.push({
        name,
        sentences: ms.length,
        seconds,
        sentences_per_sec: ms.length / Math.max(seconds, 1e-9),
        target_tokens_per_sec: tokens / Math.max(seconds, 1e-9),
        p50_ms: percentile(sorted, 0.5),
        p95_ms: percentile(sorted, 0.95),
        peak_rss_mib: await browserPeakRssMib(),
        steps,
        dispatches_per_step: perStep(sum.dispatches),
        submits_per_step: perStep(sum.submits),
        bytes_read_per_step: perStep(sum.bytes_read),
        encoder_ms: sum.encoder_ms,
        decoder_ms: sum.decoder_ms,
        bookkeeping_ms: sum.bookkeeping_ms,
      });
    }
    const result = {
      browser: await browser.version(),
      adapter,
      backend,
      lines: lines.length,
      rows,
    };
    process.stdout.write(`${JSON.stringify(result)}\n`);
  } finally {
    await browser.close();
    await server.close();
  }
}

main().catch((e) => fail(e.stack ?? String(e)));
