// The translation page as a visitor uses it, with the default model (ko→en): the download with
// its progress bar, a translation with the n-best list and the heatmap, HTML typed as input, the
// requests the page makes, and a second visit with the server stopped (offline). On WebGPU
// (`?engine=gpu`): by default the page runs the CPU engine on an emulated adapter such as this
// machine's SwiftShader (cpu.test.mjs); a visitor with a hardware GPU gets WebGPU.
//
// The tests of this file share one browser context and run in order: the offline test relies
// on the first visit of the tests before it.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { foreignRequests, launch, modelState, openPage, screenshot, serveStatic, setOptions, translate, serviceWorkerControls } from './harness.mjs';

const TIMEOUT_MS = 300_000; // wasm + SwiftShader shader compilation and decoding on 2 CPU cores
const KOREAN = '오늘 날씨가 정말 좋네요. 우리는 공원에 가서 점심을 먹었습니다.';

let server;
let browser;
let session; // { page, context, log, requests }
let opened; // Date.now() when the first visit started

before(async () => {
  server = await serveStatic();
  browser = await launch({ webgpu: true });
  opened = Date.now();
  session = await openPage(browser, `${server.url}?engine=gpu`);
});
after(async () => {
  await browser?.close();
  await server?.close();
});

const say = () => session.log.join('\n');

test('the default model downloads with the progress bar reaching 100% and becomes ready', { timeout: TIMEOUT_MS }, async () => {
  const { page } = session;
  assert.equal(await page.locator('#model').inputValue(), 'ko-en', 'ko→en is the default model');
  const models = await page.locator('#model option').allTextContents();
  assert.deepEqual(models, ['Korean → English', 'German → English'], 'the picker lists models/index.json');
  // What to expect of the model, from models/index.json, with its test score.
  assert.match(await page.locator('#model-quality').textContent(), /^An early model: on news it scores \d+\.\d BLEU/);
  const { state, text } = await modelState(page, TIMEOUT_MS);
  const readyS = ((Date.now() - opened) / 1000).toFixed(1);
  assert.equal(state, 'ready', `page says: ${text}\n${say()}`);
  assert.equal(await page.locator('#progress').evaluate((p) => p.value), 100);
  const progress = await page.locator('#progress-text').textContent();
  // The bytes come from the manifest: 14.0 MB weights + two tokenizers = 15.1 MB.
  assert.match(progress, /^15\.1 MB of 15\.1 MB downloaded \(100%\)$/, progress);
  assert.match(await page.locator('#model-info').textContent(), /M parameters, int8 · GPU: .*BrowserWebGpu/);
  // On WebGPU the worker loads one build (the relaxed one here), untimed.
  assert.equal(await page.locator('body').getAttribute('data-wasm'), 'relaxed');
  assert.ok(session.log.some((line) => line.includes('wasm build: relaxed (the model runs on WebGPU here, so the CPU builds were not timed)')), say());
  assert.equal(await page.locator('#engine').inputValue(), 'gpu');
  assert.equal(await page.locator('#engine-notice').isVisible(), false);
  assert.equal(await page.locator('#translate').isEnabled(), true);
  console.log(`first visit: model ready ${readyS} s after opening the page; ${progress}`);
  await screenshot(page, 'loaded');
});

test('a translation shows the output, n-best list with scores, timings and the heatmap', { timeout: TIMEOUT_MS }, async () => {
  const { page } = session;
  // Default options of the reference (beam 8 in 4 groups), as a first-time visitor has them.
  assert.deepEqual(
    await Promise.all(['#opt-beam', '#opt-groups', '#opt-diversity', '#opt-length-penalty', '#opt-repetition-penalty', '#opt-repetition-window', '#opt-block-repeats', '#opt-n-best']
      .map((s) => page.locator(s).inputValue())),
    ['8', '4', '0.5', '0.6', '1.5', '30', '4', '4'],
  );
  const result = await translate(page, KOREAN, { timeout: TIMEOUT_MS, onBusy: (p) => screenshot(p, 'translating') });
  assert.equal(result.state, 'done', `page says: ${result.status}\n${say()}`);
  const firstS = ((Date.now() - opened) / 1000).toFixed(1);
  console.log(`first visit: first translation ${firstS} s after opening the page (translation ${result.ms} ms)`);

  const sentences = page.locator('#output .sentence');
  assert.equal(await sentences.count(), 2, 'two sentences in, two out');
  for (const text of await sentences.allTextContents()) assert.match(text, /[A-Za-z]/, `an English translation: ${text}`);
  assert.match(await page.locator('#timings').textContent(), /encoder \d+ msdecoder \d+ msspeed [\d.]+ tokens\/ssteps \d+total \d+ msGPU .+/);

  const hypotheses = page.locator('#nbest li');
  // n-best 4, each translation listed once (diverse groups may end on the same tokens).
  const listed = await hypotheses.count();
  assert.ok(listed >= 2 && listed <= 4, `2 to 4 distinct hypotheses, got ${listed}`);
  const texts = await page.locator('#nbest li .hyp-text').allTextContents();
  assert.equal(new Set(texts).size, texts.length, `no duplicates: ${texts}`);
  const scores = (await hypotheses.evaluateAll((li) => li.map((l) => Number(l.dataset.score))));
  assert.deepEqual([...scores].sort((a, b) => b - a), scores, 'n-best sorted by score');
  for (const text of await hypotheses.allTextContents()) assert.match(text, /score -?\d+\.\d{3} · log-prob -?\d+\.\d{2}$/);
  const best = (await sentences.first().textContent()).trim();
  assert.equal((await page.locator('#nbest li .hyp-text').first().textContent()).trim(), best, 'the list starts with the output');

  // Heatmap: a canvas with one row per target token and one column per source token, and the
  // cells actually drawn (not a blank canvas).
  const heatmap = page.locator('#heatmap');
  const rows = Number(await heatmap.getAttribute('data-rows'));
  const cols = Number(await heatmap.getAttribute('data-cols'));
  assert.ok(rows >= 2 && cols >= 2, `heatmap ${rows} × ${cols}`);
  const colours = await heatmap.evaluate((c) => {
    const data = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
    const seen = new Set();
    for (let i = 0; i < data.length; i += 4) seen.add(`${data[i]},${data[i + 1]},${data[i + 2]}`);
    return seen.size;
  });
  assert.ok(colours > 10, `the heatmap has cells of several shades (${colours} colours)`);
  // The second sentence's heatmap replaces the first's, and choosing the first draws it again.
  const drawn = () => heatmap.evaluate((c) => c.toDataURL());
  const first = await drawn();
  await page.selectOption('#sentence', '1');
  assert.ok(Number(await heatmap.getAttribute('data-rows')) >= 1);
  assert.notEqual(await drawn(), first, 'the second sentence has its own heatmap');
  await page.selectOption('#sentence', '0');
  assert.equal(await drawn(), first, 'the first sentence\'s heatmap again');
  // From the keyboard: Enter on an output sentence shows its details, as a click does.
  await sentences.nth(1).focus();
  await page.keyboard.press('Enter');
  assert.equal(await page.locator('#sentence').inputValue(), '1', 'Enter picked the second sentence');
  assert.notEqual(await drawn(), first);
  await sentences.nth(0).focus();
  await page.keyboard.press(' ');
  assert.equal(await page.locator('#sentence').inputValue(), '0', 'Space picked the first again');
  assert.equal(await drawn(), first);
  await page.locator('#details-section').scrollIntoViewIfNeeded();
  await screenshot(page, 'heatmap');
});

test('HTML and script typed as input come back as text', { timeout: TIMEOUT_MS }, async () => {
  const { page } = session;
  await setOptions(page, { beam: 2, groups: 1, n_best: 2 }); // the point here is the page, not the search
  const hostile = '<img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script><b id="injected">굵게</b>';
  const result = await translate(page, hostile, { timeout: TIMEOUT_MS });
  assert.equal(result.state, 'done', `page says: ${result.status}\n${say()}`);
  const found = await page.evaluate(() => ({
    pwned: window.__pwned ?? null,
    imgs: document.querySelectorAll('img').length,
    injected: document.querySelectorAll('#injected, main b:not(.timing b)').length,
    scripts: [...document.scripts].map((s) => s.getAttribute('src')),
    option: document.querySelector('#sentence option').textContent,
    title: document.querySelector('#output .sentence').title,
  }));
  assert.equal(found.pwned, null, 'no script ran');
  assert.equal(found.imgs, 0, 'no <img> element was created');
  assert.equal(found.injected, 0, 'no <b> element was created');
  assert.deepEqual(found.scripts, ['app.js'], 'the only script is the page’s own');
  assert.ok(found.option.includes('<img src=x onerror='), `the source is shown as text: ${found.option}`);
  assert.equal(found.title, hostile, 'the sentence keeps the source as text');
  assert.doesNotMatch(result.status, /no Korean letters/, 'it has some Korean');

  // English typed into the Korean model: translated anyway, with a note that it is not Korean.
  const english = await translate(page, 'Good morning, everyone.', { timeout: TIMEOUT_MS });
  assert.equal(english.state, 'done', `page says: ${english.status}\n${say()}`);
  assert.match(english.status, /This text has no Korean letters \(Hangul\): this model translates only from Korean, so the output is not a translation of it\.$/);
});

test('a new request (Ctrl+Enter) cancels the running one', { timeout: TIMEOUT_MS }, async () => {
  const { page } = session;
  const long = Array.from({ length: 30 }, (_, i) => `${i + 1}번째 문장입니다. 우리는 공원에 가서 점심을 먹었습니다.`).join('\n');
  await page.fill('#source', long);
  await page.click('#translate');
  await page.locator('#translate-status[data-state="running"]').waitFor({ timeout: 10_000 });
  // A second click on the same text and options lets the running request go on.
  const running = await page.locator('#translate-status').getAttribute('data-request');
  await page.click('#translate');
  assert.equal(await page.locator('#translate-status').getAttribute('data-request'), running, 'the same request is not started again');
  assert.equal(await page.locator('#translate-status').getAttribute('data-state'), 'running');
  const cancelled = page.waitForEvent('console', {
    predicate: (m) => /translation \d+ was cancelled by a newer request/.test(m.text()),
    timeout: TIMEOUT_MS,
  });
  await page.fill('#source', '안녕하세요.');
  await page.locator('#source').press('Control+Enter');
  await cancelled;
  const status = page.locator('#translate-status[data-state="done"], #translate-status[data-state="error"]');
  await status.waitFor({ timeout: TIMEOUT_MS });
  assert.equal(await status.getAttribute('data-state'), 'done', `page says: ${await status.textContent()}\n${say()}`);
  assert.equal(await page.locator('#output .sentence').count(), 1, 'the output is the newer request’s');
  assert.equal(await page.locator('#output .sentence').getAttribute('title'), '안녕하세요.');
});

test('every request the page makes is to its own origin', async () => {
  const foreign = foreignRequests(session.requests, server.url);
  assert.deepEqual(foreign, [], 'the page must only request its own files');
  assert.ok(session.requests.some((r) => r.endsWith('/models/ko-en/model.safetensors')), 'the requests were recorded');
});

test('the Content-Security-Policy allows only the site itself, and nothing broke it', async () => {
  const { page, log } = session;
  const csp = await page.locator('meta[http-equiv="Content-Security-Policy"]').getAttribute('content');
  assert.equal(
    csp,
    "default-src 'self'; script-src 'self' 'wasm-unsafe-eval'; style-src 'self'; img-src 'self' data:; connect-src 'self'; worker-src 'self'",
  );
  assert.doesNotMatch(csp, /'unsafe-inline'|'unsafe-eval'/);
  const violations = log.filter((l) => /Content Security Policy|Refused to/.test(l));
  assert.deepEqual(violations, [], 'no CSP violations');
  const inline = await page.evaluate(() => ({
    scripts: [...document.scripts].filter((s) => !s.src).length,
    handlers: [...document.querySelectorAll('*')].flatMap((e) => [...e.attributes].filter((a) => a.name.startsWith('on')).map((a) => `${e.tagName}.${a.name}`)),
  }));
  assert.deepEqual(inline, { scripts: 0, handlers: [] }, 'no inline scripts or inline event handlers');
});

test('after the first visit the page loads and translates with the server stopped', { timeout: TIMEOUT_MS }, async () => {
  const { page } = session;
  // The service worker has precached the shell; the worker stored the verified model.
  assert.ok(await serviceWorkerControls(page), 'the service worker controls the page');
  await server.close();
  server = null;
  const reopened = Date.now();
  await page.reload();
  const { state, text } = await modelState(page, TIMEOUT_MS);
  assert.equal(state, 'ready', `page says: ${text}\n${say()}`);
  assert.match(text, /loaded from this device/);
  console.log(`second visit (offline): model ready ${((Date.now() - reopened) / 1000).toFixed(1)} s after opening the page`);
  assert.match(await page.locator('#progress-text').textContent(), /15\.1 MB of 15\.1 MB from this device \(100%\)/);
  const result = await translate(page, KOREAN, { timeout: TIMEOUT_MS });
  assert.equal(result.state, 'done', `page says: ${result.status}\n${say()}`);
  assert.equal(await page.locator('#output .sentence').count(), 2);
  console.log(`second visit (offline): first translation ${((Date.now() - reopened) / 1000).toFixed(1)} s after opening the page (translation ${result.ms} ms)`);
});

test('after an engine panic the page starts a fresh worker once and says so; after a second it gives up', { timeout: TIMEOUT_MS }, async () => {
  const { page } = session;
  // The wasm panic hook (src/web.rs) calls the worker's self.onwasmpanic; call it the same way.
  const panic = async () => {
    const worker = page.workers().find((w) => new URL(w.url()).pathname.endsWith('/worker.js'));
    assert.ok(worker, `the engine worker runs (workers: ${page.workers().map((w) => w.url())})`);
    await worker.evaluate(() => self.onwasmpanic('panicked at src/infer/mod.rs: simulated'));
  };
  // A self-check the crashed worker was running is reported as stopped, not left running.
  await page.click('#selfcheck-run');
  await panic();
  await page.locator('#translate-status[data-state="error"]').waitFor({ timeout: 10_000 });
  assert.match(await page.locator('#translate-status').textContent(), /The translation engine stopped \(internal error: panicked at .*simulated\); it was restarted\./);
  const check = page.locator('#selfcheck-status');
  assert.equal(await check.getAttribute('data-state'), 'error');
  assert.match(await check.textContent(), /restarted during the self-check\. Run it again\./);
  assert.equal(await page.locator('#selfcheck-run').isEnabled(), true, 'it can run again');
  const { state, text } = await modelState(page, TIMEOUT_MS); // the fresh worker loads the model again
  assert.equal(state, 'ready', `page says: ${text}\n${say()}`);
  const result = await translate(page, '안녕하세요.', { timeout: TIMEOUT_MS });
  assert.equal(result.state, 'done', `the fresh worker translates: ${result.status}\n${say()}`);

  await panic();
  await page.locator('#model-status[data-state="error"]').waitFor({ timeout: 10_000 });
  assert.match(await page.locator('#translate-status').textContent(), /stopped again .* Reload the page/);
  // Nothing is left that would send work to the stopped engine and wait for it forever.
  for (const control of ['#translate', '#model', '#engine', '#selfcheck-run', '#translate-document', '#doc-file']) {
    assert.equal(await page.locator(control).isEnabled(), false, `${control} is disabled`);
  }
});
