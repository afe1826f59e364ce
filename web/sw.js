// The service worker: the page works offline after the first visit.
//
// - install: precaches the app shell (html, glue, wasm, scripts, css, the model index) in one
//   cache per build: the simd128 wasm build, and the relaxed SIMD one too where this browser
//   validates it (worker.js times both and keeps one, so both must be there offline);
// - same-origin GET: that cache first, then the network. The files of one build are only ever
//   served together: a rebuilt site has a new VERSION, so the browser installs a new service
//   worker, which caches the new build whole; it waits until the page asks it to take over
//   (the page's "Reload" after "A new version is ready"), or until no page of the old build is
//   open, so no page runs a mix of two builds;
// - models/…: the model files the engine's worker stored after verifying them (MODEL_CACHE),
//   so a model downloaded once loads with the server gone; the worker's own downloads
//   (`cache: 'no-cache'`) go to the network; the small JSON files (index, manifests) try the
//   network first, for NETWORK_WAIT_MS when a copy is cached, so a newly shipped model shows up;
// - activate: deletes the shell caches of older builds.
/** A hash of the build (scripts/post_build.sh writes it into dist/sw.js). */
const VERSION = 'unbuilt';
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
      .then((cache) => cache.addAll(SHELL.map((p) => new Request(p, { cache: 'reload' })))),
  );
});

// The page's "Reload" on "A new version is ready" (app.js, watchForUpdate).
self.addEventListener('message', (event) => {
  if (event.data?.type === 'skip-waiting') self.skipWaiting();
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

/** How long a JSON file's request waits for the network before a cached copy answers. */
const NETWORK_WAIT_MS = 4000;

async function networkFirst(request, ...cacheNames) {
  const network = fetch(request);
  const wait = new Promise((ok) => setTimeout(() => ok(null), NETWORK_WAIT_MS));
  const answer = await Promise.race([network.then((r) => (r.ok ? r : null), () => null), wait]);
  if (answer) return answer;
  for (const name of cacheNames) {
    const hit = await cached(name, request);
    if (hit) return hit;
  }
  return network; // no copy: whatever the network says, however late
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
    if (path.endsWith('.json')) {
      event.respondWith(networkFirst(request, MODEL_CACHE, SHELL_CACHE));
    } else if (request.cache !== 'no-cache') {
      event.respondWith(cacheFirst(request, MODEL_CACHE, SHELL_CACHE));
    } // else the worker downloading a file it has not verified yet: the network, never a copy
    return;
  }
  if (request.mode === 'navigate') {
    // Any page of the site is the one page.
    event.respondWith(cacheFirst(request, SHELL_CACHE).catch(() => cached(SHELL_CACHE, 'index.html')));
    return;
  }
  event.respondWith(cacheFirst(request, SHELL_CACHE));
});
