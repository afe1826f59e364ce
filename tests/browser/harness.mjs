// Browser-test harness: a static file server on 127.0.0.1 and Debian's Chromium driven by
// playwright-core. WebGPU runs on the CPU through SwiftShader; playwright never downloads a browser.
import { execFile } from 'node:child_process';
import { createServer } from 'node:http';
import { mkdir, readFile, stat } from 'node:fs/promises';
import { extname, join, normalize, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import assert from 'node:assert/strict';
import { chromium } from 'playwright-core';

/** The trunk output folder (`dist/` at the repository root unless DIST says otherwise). */
export const DIST = resolve(process.env.DIST ?? join(fileURLToPath(import.meta.url), '../../../dist'));

/** The browser binary: Debian's chromium unless CHROMIUM names another Chromium-based browser. */
export const CHROMIUM = process.env.CHROMIUM ?? '/usr/bin/chromium';

const BASE_FLAGS = [
  '--no-sandbox',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
  '--disable-quic',
  '--no-first-run',
];

/** WebGPU on the CPU through SwiftShader (no shader-f16, but subgroups and timestamps). */
export const WEBGPU_FLAGS = [
  '--enable-unsafe-webgpu',
  '--enable-features=Vulkan',
  '--use-vulkan=swiftshader',
  '--use-webgpu-adapter=swiftshader',
];

const TYPES = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.mjs': 'text/javascript; charset=utf-8',
  '.wasm': 'application/wasm',
  '.css': 'text/css; charset=utf-8',
  '.json': 'application/json',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.ico': 'image/x-icon',
};

/** Where the tests write their screenshots (`target/screenshots/` at the repository root). */
export const SCREENSHOTS = resolve(join(fileURLToPath(import.meta.url), '../../../target/screenshots'));

/** The repository root. */
export const ROOT = resolve(join(fileURLToPath(import.meta.url), '../../..'));

/** The native `translate` binary: TRANSLATE_BIN, else cargo's target folder (CARGO_TARGET_DIR when set, as cargo itself does). */
export const TRANSLATE = process.env.TRANSLATE_BIN
  ?? join(process.env.CARGO_TARGET_DIR ? resolve(ROOT, process.env.CARGO_TARGET_DIR) : join(ROOT, 'target'), 'release/translate');

/** The environment to run TRANSLATE in, after checking that it is built. */
async function translateEnv() {
  await stat(TRANSLATE).catch(() => {
    throw new Error(`${TRANSLATE} is missing: build it with cargo build --release --features cli --bin translate (scripts/test.sh does)`);
  });
  const env = { ...process.env };
  if (!env.XDG_RUNTIME_DIR) {
    env.XDG_RUNTIME_DIR = join(ROOT, 'target/xdg-runtime');
    await mkdir(env.XDG_RUNTIME_DIR, { recursive: true, mode: 0o700 });
  }
  return env;
}

/**
 * Runs the native `translate` binary with `args` (`--json` is added) on `input` (the bytes of
 * stdin) and returns the best translation of every sentence, in order:
 * `[{ source, tokens, text }]` with `tokens` the ids joined by spaces, as the page's output
 * spans carry them (`data-tokens`).
 */
export async function nativeBest(args, input, { timeout = 600_000 } = {}) {
  const env = await translateEnv();
  const child = promisify(execFile)(TRANSLATE, [...args, '--json'], { env, maxBuffer: 64 << 20, timeout });
  child.child.stdin.end(input);
  const { stdout } = await child;
  return stdout
    .trim()
    .split('\n')
    .flatMap((line) => JSON.parse(line).sentences)
    .map((s) => ({ source: s.source, tokens: s.hypotheses[0].tokens.join(' '), text: s.hypotheses[0].text }));
}

/**
 * Runs the native `translate` binary with `args` on `lines` (one text per line, as a document's
 * segments) and returns its output: one translated line per input line, in order.
 */
export async function nativeLines(args, lines, { timeout = 600_000 } = {}) {
  const env = await translateEnv();
  const child = promisify(execFile)(TRANSLATE, args, { env, maxBuffer: 64 << 20, timeout });
  child.child.stdin.end(lines.map((l) => `${l}\n`).join(''));
  const { stdout } = await child;
  const out = stdout.split('\n');
  if (out[out.length - 1] === '') out.pop();
  if (out.length !== lines.length) throw new Error(`native translate: ${lines.length} lines in, ${out.length} out`);
  return out;
}

/**
 * Asserts that the page's best translations (`pageBest`) equal the native ones (`nativeBest`):
 * the same sentence split and sources, and token for token; a differing sentence is printed
 * before the assertion fails.
 */
export function assertSameBest(web, native) {
  assert.equal(web.length, native.length, 'same sentence split');
  let same = 0;
  for (let i = 0; i < native.length; i++) {
    assert.equal(web[i].source, native[i].source, `sentence ${i}: same source`);
    if (web[i].tokens === native[i].tokens) same += 1;
    else console.log(`sentence ${i} differs:\n  native: ${native[i].text} [${native[i].tokens}]\n  page:   ${web[i].text} [${web[i].tokens}]`);
  }
  assert.equal(same, native.length, `${same} of ${native.length} sentences identical`);
  for (let i = 0; i < native.length; i++) assert.equal(web[i].text, native[i].text);
}

/** The page's best translation of every sentence, in order, as [`nativeBest`] gives them. */
export function pageBest(page) {
  return page
    .locator('#output .sentence')
    .evaluateAll((all) => all.map((s) => ({ source: s.title, tokens: s.dataset.tokens, text: s.textContent })));
}

/** Saves a full-page screenshot as `target/screenshots/<name>.png`; returns the path. */
export async function screenshot(page, name) {
  await mkdir(SCREENSHOTS, { recursive: true });
  const path = join(SCREENSHOTS, `${name}.png`);
  await page.screenshot({ path, fullPage: true });
  return path;
}

/**
 * Serves `root` on 127.0.0.1 at a free port. Returns `{ url, close }`; `close` also drops open
 * keep-alive connections, so the page sees a stopped server at once.
 *
 * `mounts` serves other folders under URL prefixes (`{ '/models/bench/': '/path/to/bundle' }`)
 * and `files` answers single paths with fixed contents (`{ '/models/index.json': '{…}' }`);
 * both take precedence over `root`.
 */
export async function serveStatic(root = DIST, { mounts = {}, files = {} } = {}) {
  await stat(join(root, 'index.html')).catch(() => {
    throw new Error(`${root}/index.html is missing: build the page first (trunk build --config trunk.toml)`);
  });
  const server = createServer(async (req, res) => {
    const path = decodeURIComponent(new URL(req.url, 'http://localhost').pathname);
    if (Object.hasOwn(files, path)) {
      res.writeHead(200, { 'content-type': TYPES[extname(path)] ?? 'application/octet-stream' });
      res.end(files[path]);
      return;
    }
    const [prefix, dir] = Object.entries(mounts).find(([p]) => path.startsWith(p)) ?? ['/', root];
    const base = resolve(dir);
    const rest = path.slice(prefix.length);
    const file = normalize(join(base, rest === '' || rest.endsWith('/') ? `${rest}index.html` : rest));
    if (file !== base && !file.startsWith(base + sep)) {
      res.writeHead(403).end();
      return;
    }
    try {
      const body = await readFile(file);
      res.writeHead(200, { 'content-type': TYPES[extname(file)] ?? 'application/octet-stream' });
      res.end(body);
    } catch {
      res.writeHead(404).end();
    }
  });
  await new Promise((ok) => server.listen(0, '127.0.0.1', ok));
  const { port } = server.address();
  return {
    url: `http://127.0.0.1:${port}/`,
    close: () =>
      new Promise((ok) => {
        server.close(ok);
        server.closeAllConnections();
      }),
  };
}

/**
 * Launches headless Chromium (playwright gives it a fresh temporary profile). `webgpu: false`
 * leaves out the WebGPU flags, as a browser without WebGPU.
 */
export function launch({ webgpu = true } = {}) {
  return chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: [...BASE_FLAGS, ...(webgpu ? WEBGPU_FLAGS : [])],
  });
}

/**
 * Opens `url` in a new page of a new browser context (its own caches and service workers),
 * recording console messages, uncaught exceptions and every request of the context (the page,
 * its workers and its service worker), so a failing test can say what the page said. `init`
 * (a function) runs in every page of the context before the page's own scripts.
 */
export async function openPage(browser, url, { init } = {}) {
  const context = await browser.newContext();
  if (init) await context.addInitScript(init);
  const page = await context.newPage();
  const log = [];
  const requests = [];
  page.on('console', (m) => log.push(`console.${m.type()}: ${m.text()}`));
  page.on('pageerror', (e) => log.push(`uncaught: ${e.message}`));
  page.on('worker', (w) => w.on('console', (m) => log.push(`worker console.${m.type()}: ${m.text()}`)));
  context.on('request', (r) => requests.push(r.url()));
  context.on('requestfailed', (r) => log.push(`request failed: ${r.url()} ${r.failure()?.errorText}`));
  await page.goto(url);
  return { page, context, log, requests };
}

/** The requests in `requests` that leave `url`'s origin (data: URLs stay in the page). */
export function foreignRequests(requests, url) {
  const origin = new URL(url).origin;
  return requests.filter((r) => !r.startsWith('data:') && new URL(r).origin !== origin);
}

/** The model's final state: `ready`, `error` or `integrity`, and the status text. */
export async function modelState(page, timeout = 240_000) {
  const status = page.locator('#model-status:not([data-state="loading"])');
  await status.waitFor({ timeout });
  return { state: await status.getAttribute('data-state'), text: await status.textContent() };
}

/** Sets the decoding options of the page (`{ beam, groups, n_best, ... }` by SearchOptions name). */
export async function setOptions(page, options) {
  const ids = {
    beam: '#opt-beam',
    groups: '#opt-groups',
    diversity: '#opt-diversity',
    length_penalty: '#opt-length-penalty',
    repetition_penalty: '#opt-repetition-penalty',
    repetition_window: '#opt-repetition-window',
    block_repeats: '#opt-block-repeats',
    n_best: '#opt-n-best',
  };
  await page.locator('#options-box > summary').click();
  for (const [name, value] of Object.entries(options)) await page.fill(ids[name], String(value));
}

/**
 * Types `text` into the page, presses Translate and waits for the result. Returns
 * `{ state, status, ms }`; `onBusy(page)` runs while the translation is in progress.
 */
export async function translate(page, text, { timeout = 300_000, onBusy } = {}) {
  await page.fill('#source', text);
  const before = Number((await page.locator('#translate-status').getAttribute('data-request')) ?? 0);
  const t0 = Date.now();
  await page.click('#translate');
  if (onBusy) {
    await page.locator('#translate-status[data-state="running"]').waitFor({ timeout: 10_000 });
    await onBusy(page);
  }
  // Done or failed, and about this request (not the one before it).
  await page.waitForFunction(
    (n) => {
      const s = document.getElementById('translate-status');
      return Number(s.dataset.request ?? 0) > n && (s.dataset.state === 'done' || s.dataset.state === 'error');
    },
    before,
    { timeout, polling: 100 },
  );
  const status = page.locator('#translate-status');
  return { state: await status.getAttribute('data-state'), status: await status.textContent(), ms: Date.now() - t0 };
}

/** Waits (up to 10 s) until the page's service worker is ready and controls the page; whether it does. */
export async function serviceWorkerControls(page) {
  return page.evaluate(async () => {
    await navigator.serviceWorker.ready;
    for (let i = 0; i < 100 && !navigator.serviceWorker.controller; i++) await new Promise((ok) => setTimeout(ok, 100));
    return navigator.serviceWorker.controller !== null;
  });
}
