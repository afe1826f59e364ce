// What changes under a visitor (web/sw.js, web/worker.js): a rebuilt page reaches a returning
// visitor whole, only when they ask for it; a new version of a model that fails to download
// leaves the old one working offline; a model picked while another downloads loads at once.
// The update tests serve their own copy of the built page from a temporary folder, and change
// that copy as a deploy would.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { cp, mkdtemp, readFile, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DIST, launch, modelState, openPage, serveStatic, serviceWorkerControls, translate } from './harness.mjs';

const TIMEOUT_MS = 300_000;
const KOREAN = '오늘 날씨가 정말 좋네요.';

let browser;
const folders = [];

before(async () => {
  browser = await launch({ webgpu: false }); // the CPU engine: no shader compilation to wait for
});
after(async () => {
  await browser?.close();
  await Promise.all(folders.map((f) => rm(f, { recursive: true, force: true })));
});

/** A copy of the built page (dist/) in a temporary folder that a test may change. */
async function copyOfSite() {
  const dir = await mkdtemp(join(tmpdir(), 'webnmt-update-'));
  folders.push(dir);
  await cp(DIST, dir, { recursive: true });
  return dir;
}

/** The service worker's VERSION in `dir`/sw.js. */
async function swVersion(dir) {
  const found = (await readFile(join(dir, 'sw.js'), 'utf8')).match(/^const VERSION = '([^']+)';$/m);
  assert.ok(found, 'sw.js defines VERSION');
  return found[1];
}

test('the build stamps the service worker with a version of its own', async () => {
  const version = await swVersion(DIST);
  assert.match(version, /^[0-9a-f]{16}$/, 'scripts/post_build.sh replaced the placeholder with a hash of the build');
  const source = await readFile(new URL('../../web/sw.js', import.meta.url), 'utf8');
  assert.match(source, /^const VERSION = 'unbuilt';$/m, 'the source keeps the placeholder the hook looks for');
});

test('a rebuilt site reaches a returning visitor whole, and only after "Reload"', { timeout: TIMEOUT_MS }, async () => {
  const dir = await copyOfSite();
  const server = await serveStatic(dir);
  try {
    const { page, context, log } = await openPage(browser, server.url);
    const say = () => log.join('\n');
    assert.ok(await serviceWorkerControls(page), `the service worker controls the page\n${say()}`);
    assert.equal(await page.locator('#update').isHidden(), true, 'a first visit offers no update');
    const other = await context.newPage(); // a second tab of the same build
    await other.goto(server.url);
    assert.ok(await serviceWorkerControls(other));
    const before = await swVersion(dir);

    // The deploy: a new page and a new service worker version (as post_build.sh would stamp).
    const html = await readFile(join(dir, 'index.html'), 'utf8');
    await writeFile(join(dir, 'index.html'), html.replace('<h1>webnmt</h1>', '<h1 data-build="new">webnmt</h1>'));
    const sw = await readFile(join(dir, 'sw.js'), 'utf8');
    await writeFile(join(dir, 'sw.js'), sw.replace(`const VERSION = '${before}';`, "const VERSION = 'new';"));

    // The browser finds the new service worker (as it does on each visit) and caches the new build.
    await page.evaluate(async () => (await navigator.serviceWorker.getRegistration()).update());
    await page.locator('#update').waitFor({ state: 'visible', timeout: 60_000 });
    assert.match(await page.locator('#update').textContent(), /A new version of webnmt is ready\. Reload to use it\./);

    // Until asked, this tab keeps the build it has, even across a reload.
    await page.reload();
    await page.locator('#update').waitFor({ state: 'visible', timeout: 60_000 });
    assert.equal(await page.locator('h1').getAttribute('data-build'), null, 'still the old page');

    await Promise.all([page.waitForNavigation({ timeout: 60_000 }), page.click('#update-reload')]);
    await page.locator('h1[data-build="new"]').waitFor({ timeout: 60_000 });
    // The other tab, still on the old build whose files are gone, says so and offers a reload.
    await other.waitForFunction(() => document.querySelector('#update').textContent.startsWith('webnmt was updated in another tab.'), null, { timeout: 60_000 });
    await Promise.all([other.waitForNavigation({ timeout: 60_000 }), other.click('#update-reload')]);
    await other.locator('h1[data-build="new"]').waitFor({ timeout: 60_000 });
    assert.equal(await page.locator('#update').isHidden(), true, 'nothing more to offer');
    const caches = await page.evaluate(() => caches.keys());
    assert.deepEqual(caches.filter((k) => k.startsWith('webnmt-shell-')), ['webnmt-shell-new'], 'the old build is gone');
    const { state, text } = await modelState(page, TIMEOUT_MS);
    assert.equal(state, 'ready', `page says: ${text}\n${say()}`);
    await context.close();
  } finally {
    await server.close();
  }
});

test('a new version of a model that fails to download leaves the old one working offline', { timeout: TIMEOUT_MS }, async () => {
  const dir = await copyOfSite();
  let server = await serveStatic(dir);
  try {
    const { page, context, log } = await openPage(browser, server.url);
    const say = () => log.join('\n');
    let { state, text } = await modelState(page, TIMEOUT_MS);
    assert.equal(state, 'ready', `page says: ${text}\n${say()}`);
    assert.ok(await serviceWorkerControls(page), 'the service worker controls the page');
    const first = await translate(page, KOREAN, { timeout: TIMEOUT_MS });
    assert.equal(first.state, 'done', `page says: ${first.status}\n${say()}`);
    const output = await page.locator('#output').textContent();

    // The deploy of a new ko→en whose files are not all there yet: a new manifest, no files.
    const model = join(dir, 'models', 'ko-en');
    const manifest = JSON.parse(await readFile(join(model, 'manifest.json'), 'utf8'));
    manifest.note = 'a new version';
    for (const name of await readdir(model)) await rm(join(model, name));
    await writeFile(join(model, 'manifest.json'), JSON.stringify(manifest));
    await page.reload();
    ({ state, text } = await modelState(page, TIMEOUT_MS));
    assert.equal(state, 'error', `page says: ${text}\n${say()}`);
    assert.match(text, /could not download .*HTTP 404/);

    // Offline, the old version is whole and loads from this device.
    await server.close();
    server = null;
    await page.reload();
    ({ state, text } = await modelState(page, TIMEOUT_MS));
    assert.equal(state, 'ready', `page says: ${text}\n${say()}`);
    assert.match(text, /loaded from this device/);
    const again = await translate(page, KOREAN, { timeout: TIMEOUT_MS });
    assert.equal(again.state, 'done', `page says: ${again.status}\n${say()}`);
    assert.equal(await page.locator('#output').textContent(), output, 'the same model as before');
    await context.close();
  } finally {
    await server?.close();
  }
});

test('a model picked while another still downloads loads at once', { timeout: TIMEOUT_MS }, async () => {
  const server = await serveStatic();
  const context = await browser.newContext({ serviceWorkers: 'block' });
  try {
    // ko→en's weights never arrive: its download hangs, as on a very slow connection.
    let held = 0;
    await context.route('**/models/ko-en/model.safetensors', () => {
      held += 1; // never answered
    });
    const page = await context.newPage();
    const log = [];
    page.on('console', (m) => log.push(`console.${m.type()}: ${m.text()}`));
    page.on('worker', (w) => w.on('console', (m) => log.push(`worker console.${m.type()}: ${m.text()}`)));
    await page.goto(server.url);
    await page.waitForFunction(() => document.querySelector('#model-status').textContent.startsWith('Loading Korean'));
    for (let i = 0; i < 600 && held === 0; i++) await new Promise((ok) => setTimeout(ok, 100));
    assert.equal(held, 1, 'the ko→en weights were requested and are held');

    await page.selectOption('#model', 'de-en');
    const { state, text } = await modelState(page, TIMEOUT_MS);
    assert.equal(state, 'ready', `page says: ${text}\n${log.join('\n')}`);
    assert.match(text, /^German → English is ready/);
    assert.match(await page.locator('#model-info').textContent(), /M parameters/);
  } finally {
    await context.close();
    await server.close();
  }
});
