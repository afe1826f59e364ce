// The page without WebGPU: the model loads on the int8 CPU engine (wasm SIMD) and translates
// exactly as the native `translate --engine cpu` (AVX2 / AVX-512 VNNI) does, token for token: all
// kernels are exact integer products over the same int8 quantization. Both wasm builds are
// checked, each forced: the relaxed SIMD one (`?wasm=relaxed`) and the plain simd128 one
// (`?wasm=simd128`, what browsers without relaxed SIMD load); by default Chromium's worker
// without WebGPU loads both, times them and keeps the faster, which depends on the CPU. On an
// emulated WebGPU adapter (SwiftShader) the page runs the CPU engine too, says why, and offers
// WebGPU as a choice; switching reloads the model on it.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { ROOT, assertSameBest, launch, modelState, nativeBest, openPage, pageBest, screenshot, serveStatic, setOptions, translate } from './harness.mjs';

const TIMEOUT_MS = 300_000; // wasm compile and decoding on 2 busy CPU cores
const SENTENCES = join(ROOT, 'tests/fixtures/browser/de20.de');
const MODEL = join(ROOT, 'web/models/de-en');
// The options of the de→en WebGPU test (de-en.test.mjs): beam 4 in 2 diverse groups, the other
// options at their defaults on both sides.
const OPTIONS = { beam: 4, groups: 2, n_best: 1 };
const NOTICE = 'No WebGPU here: translating on the CPU (WebAssembly SIMD)';

let server;
/** Native `translate --engine cpu` of SENTENCES with OPTIONS, and how long it took. */
let native;
let nativeS;
before(async () => {
  server = await serveStatic();
  const t0 = Date.now();
  const args = ['--model', MODEL, '--engine', 'cpu', '--beam', String(OPTIONS.beam), '--groups', String(OPTIONS.groups), '--n-best', String(OPTIONS.n_best)];
  native = await nativeBest(args, await readFile(SENTENCES), { timeout: TIMEOUT_MS });
  nativeS = ((Date.now() - t0) / 1000).toFixed(1);
  assert.ok(native.length >= 20, `native: ${native.length} sentences`);
});

/** The wasm builds `requests` (URLs) fetched: their file names, sorted. */
function wasmFetched(requests) {
  return [...new Set(requests.map((u) => new URL(u).pathname.split('/').pop()).filter((n) => n.endsWith('.wasm')))].sort();
}

/** Translates SENTENCES on `page` (a model is ready) and checks them against `native`. */
async function assertEqualsNative(page, text, say, build) {
  await page.selectOption('#model', 'de-en');
  const { state, text: status } = await modelState(page, TIMEOUT_MS);
  assert.equal(state, 'ready', `page says: ${status}\n${say()}`);
  assert.match(status, /German → English is ready/);
  await setOptions(page, OPTIONS);
  const result = await translate(page, text, { timeout: TIMEOUT_MS });
  assert.equal(result.state, 'done', `page says: ${result.status}\n${say()}`);
  const web = await pageBest(page);
  console.log(`native ${nativeS} s, page (${build}) ${(result.ms / 1000).toFixed(1)} s for ${web.length} sentences`);
  assertSameBest(web, native);
}
after(async () => {
  await server?.close();
});

test('without WebGPU the page translates on the CPU engine, equal to native translate --engine cpu', { timeout: TIMEOUT_MS * 2 }, async () => {
  const text = await readFile(SENTENCES, 'utf8');
  assert.equal(text.trim().split('\n').length, 20);
  const browser = await launch({ webgpu: false });
  try {
    const { page, log, requests } = await openPage(browser, server.url);
    const say = () => log.join('\n');
    const first = await modelState(page, TIMEOUT_MS);
    assert.equal(first.state, 'ready', `page says: ${first.text}\n${say()}`);
    assert.equal(await page.locator('#engine-notice').isVisible(), true, 'the no-WebGPU line is shown');
    assert.equal(await page.locator('#engine-notice').textContent(), NOTICE);
    assert.equal(await page.locator('#engine-row').isVisible(), false, 'no engine choice without WebGPU');
    assert.match(await page.locator('#model-info').textContent(), /M parameters, int8 · CPU \(WebAssembly SIMD\) · prepared in \d+ ms/);
    // Chromium has relaxed SIMD: the worker timed both builds and says which it kept and why;
    // the service worker precaches both, so either works offline.
    assert.deepEqual(wasmFetched(requests), ['webnmt_bg.wasm', 'webnmt_relaxed_bg.wasm']);
    const chosen = await page.locator('body').getAttribute('data-wasm');
    assert.ok(['relaxed', 'simd128'].includes(chosen), `data-wasm=${chosen}`);
    const why = log.find((line) => line.includes('wasm build: ')) ?? '';
    assert.match(why, new RegExp(`wasm build: ${chosen} \\(int8 product: relaxed [\\d.]+ ms, simd128 [\\d.]+ ms: relaxed SIMD is (faster|not clearly faster) here\\)`), say());
    assert.equal(/: relaxed SIMD is faster here/.test(why), chosen === 'relaxed', why);
    console.log(why);
    await assertEqualsNative(page, text, say, `wasm ${chosen}, the worker's choice`);

    // The rest of the page works as on the GPU: timings name the engine, the heatmap is drawn.
    assert.match(await page.locator('#timings').textContent(), /encoder \d+ msdecoder \d+ msspeed [\d.]+ tokens\/ssteps \d+total \d+ msengine CPU \(WebAssembly SIMD\)/);
    const heatmap = page.locator('#heatmap');
    assert.ok(Number(await heatmap.getAttribute('data-rows')) >= 2 && Number(await heatmap.getAttribute('data-cols')) >= 2, 'a heatmap');
    assert.ok((await page.locator('#nbest li').count()) >= 1, 'an n-best list');
    await screenshot(page, 'cpu-engine');

    // A new request cancels the running one, as on the GPU (the CPU engine yields to the
    // worker's event loop between sentences).
    const long = Array.from({ length: 12 }, () => text).join('\n');
    await page.fill('#source', long);
    await page.click('#translate');
    await page.locator('#translate-status[data-state="running"]').waitFor({ timeout: 10_000 });
    const cancelled = page.waitForEvent('console', {
      predicate: (m) => /translation \d+ was cancelled by a newer request/.test(m.text()),
      timeout: TIMEOUT_MS,
    });
    await page.fill('#source', 'Guten Morgen.');
    await page.locator('#source').press('Control+Enter');
    await cancelled;
    const done = page.locator('#translate-status[data-state="done"], #translate-status[data-state="error"]');
    await done.waitFor({ timeout: TIMEOUT_MS });
    assert.equal(await done.getAttribute('data-state'), 'done', `page says: ${await done.textContent()}\n${say()}`);
    assert.equal(await page.locator('#output .sentence').getAttribute('title'), 'Guten Morgen.');
  } finally {
    await browser.close();
  }
});

test('on an emulated WebGPU adapter the page picks the CPU engine, says why, and offers WebGPU; switching reloads the model', { timeout: TIMEOUT_MS * 3 }, async () => {
  // Chromium's SwiftShader is a fallback adapter: WebGPU emulated on the CPU, tens of times
  // slower than the CPU engine here (README, Performance), so by default the page skips it as
  // `translate` does natively. `?engine=gpu` (page.test.mjs) asks for it.
  const browser = await launch({ webgpu: true });
  try {
    const opened = Date.now();
    const { page, log } = await openPage(browser, server.url);
    const say = () => log.join('\n');
    const first = await modelState(page, TIMEOUT_MS);
    assert.equal(first.state, 'ready', `page says: ${first.text}\n${say()}`);
    assert.equal(await page.locator('#engine-row').isVisible(), true, 'the engine choice is shown');
    assert.equal(await page.locator('#engine').inputValue(), 'cpu', 'the CPU engine by default');
    assert.match(await page.locator('#engine-notice').textContent(), /^WebGPU here runs on the CPU \(an emulated GPU, many times slower than the CPU engine\): translating on the CPU \(WebAssembly SIMD\); pick WebGPU above to use it anyway$/);
    assert.match(await page.locator('#model-info').textContent(), /· CPU \(WebAssembly SIMD\) ·/);
    // The CPU engine runs, so the worker timed both builds, as without WebGPU.
    assert.ok(log.some((line) => /wasm build: (relaxed|simd128) \(int8 product: /.test(line)), say());
    const result = await translate(page, '오늘 날씨가 정말 좋네요. 우리는 공원에 가서 점심을 먹었습니다.', { timeout: TIMEOUT_MS });
    assert.equal(result.state, 'done', `page says: ${result.status}\n${say()}`);
    assert.match(await page.locator('#timings').textContent(), /engine CPU \(WebAssembly SIMD\)/);
    console.log(`first visit, default engine on SwiftShader (CPU): first translation ${((Date.now() - opened) / 1000).toFixed(1)} s after opening the page (translation ${result.ms} ms)`);

    await page.selectOption('#engine', 'gpu');
    const gpu = await modelState(page, TIMEOUT_MS);
    assert.equal(gpu.state, 'ready', `page says: ${gpu.text}\n${say()}`);
    assert.match(gpu.text, /loaded from this device/, 'the same model, from the cache');
    assert.match(await page.locator('#model-info').textContent(), /· GPU: .*BrowserWebGpu, Cpu/);
    assert.equal(await page.locator('#engine-notice').isVisible(), false, 'WebGPU was picked: no line');
    const onGpu = await translate(page, '안녕하세요.', { timeout: TIMEOUT_MS });
    assert.equal(onGpu.state, 'done', `page says: ${onGpu.status}\n${say()}`);
    assert.match(await page.locator('#timings').textContent(), /GPU .+/);

    await page.selectOption('#engine', 'cpu');
    const cpu = await modelState(page, TIMEOUT_MS);
    assert.equal(cpu.state, 'ready', `page says: ${cpu.text}\n${say()}`);
    assert.match(await page.locator('#model-info').textContent(), /· CPU \(WebAssembly SIMD\) ·/);
    assert.equal(await page.locator('#engine-notice').isVisible(), false, 'the CPU engine was picked: no line');
  } finally {
    await browser.close();
  }
});

for (const [build, file] of [['simd128', 'webnmt_bg.wasm'], ['relaxed', 'webnmt_relaxed_bg.wasm']]) {
  test(`each build, forced (?wasm=${build}), translates equal to native translate --engine cpu`, { timeout: TIMEOUT_MS * 2 }, async () => {
    const text = await readFile(SENTENCES, 'utf8');
    const browser = await launch({ webgpu: false });
    try {
      const { page, log, requests } = await openPage(browser, `${server.url}?wasm=${build}`);
      const say = () => log.join('\n');
      const first = await modelState(page, TIMEOUT_MS);
      assert.equal(first.state, 'ready', `page says: ${first.text}\n${say()}`);
      assert.equal(await page.locator('body').getAttribute('data-wasm'), build);
      assert.ok(log.some((line) => line.includes(`wasm build: ${build} (?wasm=${build})`)), say());
      assert.ok(wasmFetched(requests).includes(file), `the ${build} build is loaded: ${wasmFetched(requests)}`);
      await assertEqualsNative(page, text, say, `wasm ${build}`);
    } finally {
      await browser.close();
    }
  });
}
