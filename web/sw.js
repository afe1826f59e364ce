// The service worker: the page works offline after the first visit.
//
// - install: precaches the app shell (html, glue, wasm, scripts, css, the model index);
//   the simd128 wasm build, and the relaxed SIMD one too where this browser validates it
//   (worker.js times both and keeps one, so both must be there offline);
// - same-origin GET: the shell cache first, then the network; a shell file served from the
//   cache is refreshed in the background (when the server answers), so a rebuilt site shows up
//   on the next visit without a VERSION bump, and a visit offline still gets a whole shell;
// - models/…: the model files the engine's worker stored after verifying them (MODEL_CACHE),
//   so a model downloaded once loads with the server gone; the small JSON files (index,
//   manifests) try the network first so a newly shipped model shows up;
// - activate: deletes the caches of older versions. Bump VERSION when the shell changes.
const VERSION = 'v1';
const SHELL_CACHE = `webnmt-shell-${VERSION}`;
/** Written by worker.js under the same name (tests/browser/names.test.mjs checks it). */
const MODEL_CACHE = 'webnmt-models-v1';
/**
 * worker.js's probe for WebAssembly relaxed SIMD, spelled alike (tests/browser/names.test.mjs):
 * the shell holds the relaxed build only where the browser can run it.
 */
const RELAXED_SIMD_PROBE = new Uint8Array([0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00, 0x01, 0x05, 0x01, 0x60, 0x00, 0x01, 0x7b, 0x03, 0x02, 0x01, 0x00, 0x0a, 0x3d, 0x01, 0x3b, 0x00, ...[0, 1, 2].flatMap(() => [0xfd, 0x0c, ...new Array(16).fill(0)]), 0xfd, 0x93, 0x02, 0x0b]);
const WASM_BUILDS = WebAssembly.validate(RELAXED_SIMD_PROBE) ? ['webnmt', 'webnmt_relaxed'] : ['webnmt'];
const SHELL = [
  './',
  'index.html',
  'style.css',
  'app.js',
  'worker.js',
  ...WASM_BUILDS.flatMap((build) => [`${build}.js`, `${build}_bg.wasm`]),
  'models/index.json',
];

self.addEventListener('install', (event) => {
  event.waitUntil(
    caches
      .open(SHELL_CACHE)
      .then((cache) => cache.addAll(SHELL.map((p) => new Request(p, { cache: 'reload' }))))
      .then(() => self.skipWaiting()),
  );
});

self.addEventListener('activate', (event) => {
  event.waitUntil(
    caches
      .keys()
      .then((keys) =>
        Promise.all(
          keys
            .filter((k) => k.startsWith('webnmt-shell-') && k !== SHELL_CACHE)
            .map((k) => caches.delete(k)),
        ),
      )
      .then(() => self.clients.claim()),
  );
});

/** The cached answer for `request` in `cacheName`, ignoring the query string. */
async function cached(cacheName, request) {
  const cache = await caches.open(cacheName);
  return cache.match(request, { ignoreSearch: true });
}

async function networkFirst(request, ...cacheNames) {
  try {
    const response = await fetch(request);
    if (response.ok) return response;
  } catch {
    // offline: fall through to the caches
  }
  for (const name of cacheNames) {
    const hit = await cached(name, request);
    if (hit) return hit;
  }
  return fetch(request);
}

async function cacheFirst(request, ...cacheNames) {
  for (const name of cacheNames) {
    const hit = await cached(name, request);
    if (hit) return hit;
  }
  return fetch(request);
}

self.addEventListener('fetch', (event) => {
  const request = event.request;
  const url = new URL(request.url);
  if (request.method !== 'GET' || url.origin !== self.location.origin) return;
  const scope = new URL(self.registration.scope);
  const path = url.pathname.slice(scope.pathname.length);
  if (path.startsWith('models/')) {
    event.respondWith(
      path.endsWith('.json')
        ? networkFirst(request, MODEL_CACHE, SHELL_CACHE)
        : cacheFirst(request, MODEL_CACHE, SHELL_CACHE),
    );
    return;
  }
  if (request.mode === 'navigate') {
    // Any page of the site is the one page.
    event.respondWith(cacheFirstRefresh(event, request).catch(() => cached(SHELL_CACHE, 'index.html')));
    return;
  }
  event.respondWith(cacheFirstRefresh(event, request));
});

/**
 * The shell cache's copy (refreshed in the background afterwards), else the network. The copy
 * is looked up and stored without the query string (`?engine=cpu` serves the same file), so
 * the refresh replaces the copy the next lookup finds.
 */
async function cacheFirstRefresh(event, request) {
  const cache = await caches.open(SHELL_CACHE);
  const hit = await cache.match(request, { ignoreSearch: true });
  if (!hit) return fetch(request);
  const key = new URL(request.url);
  key.search = '';
  event.waitUntil(
    fetch(request.url, { cache: 'no-cache' })
      .then(async (fresh) => {
        if (!fresh.ok) return;
        await cache.delete(key, { ignoreSearch: true }); // older copies stored with a query
        await cache.put(key, fresh);
      })
      .catch(() => undefined), // offline: keep the cached copy
  );
  return hit;
}
