// The translation engine's Web Worker: the wasm module (webnmt.js + webnmt_bg.wasm) runs here, so
// downloads, shader compilation and decoding never block the page.
//
// Engines: 'gpu' (WebGPU) or 'cpu' (the int8 CPU engine in wasm, simd128 kernels). A load asks
// for one; without WebGPU (no navigator.gpu, no adapter granted, or WebGPU failing to open) the
// model loads on the CPU instead, and 'loaded' says which engine runs it.
//
// Messages from the page:
//   { type: 'load', model, engine }            download (or read from the Cache API) and load a
//                                              bundle on engine 'gpu' (the default) or 'cpu'
//   { type: 'translate', id, text, options }   translate; a newer request cancels an older one
//   { type: 'selfcheck' }                      run every WebGPU kernel against its CPU reference
// Messages to the page:
//   { type: 'started', defaults, webgpu }      the wasm module is ready; the decoding defaults;
//                                              whether WebGPU gives this worker an adapter
//   { type: 'progress', model, engine, loaded, total, fromCache }
//   { type: 'loaded', model, engine, webgpu, info, fromCache }
//   { type: 'load-error', model, error }       error = { kind, message }
//   { type: 'result', id, result } / { type: 'translate-error', id, error }
//   { type: 'selfcheck', report } / { type: 'selfcheck-error', error }
//   { type: 'panic', message }                 the wasm module panicked: this worker is unusable
//
// Error kinds: no-webgpu (the self-check only: a load falls back to the CPU), integrity, bundle,
// options, gpu (never from the CPU engine), tokenizer, search, internal, cancelled (from the wasm
// side), and network, internal (from here). The page restarts this worker only for gpu.
import init, { Translator, defaultOptions, noWebgpuMessage, selfCheck } from './webnmt.js';

/** Cache API store of verified model files; sw.js serves model requests from it too. */
const MODEL_CACHE = 'webnmt-models-v1';
/** Progress messages at most this often (ms): enough for a smooth bar, few messages. */
const PROGRESS_INTERVAL_MS = 50;

let panicked = false;
self.onwasmpanic = (message) => {
  if (panicked) return;
  panicked = true;
  self.postMessage({ type: 'panic', message: String(message) });
};

/** `{ kind, message }` of anything thrown: the wasm side's typed errors pass through. */
function toError(e, kind = 'internal') {
  if (e && typeof e === 'object' && typeof e.kind === 'string' && typeof e.message === 'string') {
    return { kind: e.kind, message: e.message };
  }
  return { kind, message: e instanceof Error ? e.message : String(e) };
}

/** True when WebGPU can give this worker an adapter. */
async function webgpuAvailable() {
  if (!('gpu' in navigator) || !navigator.gpu) return false;
  try {
    return (await navigator.gpu.requestAdapter()) !== null;
  } catch {
    return false;
  }
}

/** Whether this worker has WebGPU, asked once: the answer does not change while it runs. */
let webgpu = webgpuAvailable();

const ready = Promise.all([init({ module_or_path: new URL('webnmt_bg.wasm', import.meta.url) }), webgpu]).then(([, available]) => {
  self.postMessage({ type: 'started', defaults: defaultOptions(), webgpu: available });
});

/** The no-WebGPU error (the self-check's); its sentence (from the wasm side) says which browsers and settings work. */
function noWebgpuError() {
  return { kind: 'no-webgpu', message: noWebgpuMessage() };
}

/** Fetches `url` as JSON, or throws a `network` error naming it. */
async function fetchJson(url) {
  let response;
  try {
    response = await fetch(url, { cache: 'no-cache' });
  } catch (e) {
    throw { kind: 'network', message: `could not download ${url.pathname}: ${e.message}; check the connection and retry` };
  }
  if (!response.ok) {
    throw { kind: 'network', message: `could not download ${url.pathname}: HTTP ${response.status}` };
  }
  return { text: await response.text(), response };
}

/**
 * The bundle's manifest, from the network when it answers (so an updated model replaces the
 * cached one) and from the model cache otherwise (offline). Returns `{ bytes, manifest, cached }`.
 */
async function loadManifest(cache, url) {
  const cachedResponse = await cache.match(url);
  let text;
  try {
    ({ text } = await fetchJson(url));
  } catch (e) {
    if (!cachedResponse) throw e;
    text = await cachedResponse.text();
    return { text, manifest: JSON.parse(text), cachedText: text };
  }
  const cachedText = cachedResponse ? await cachedResponse.text() : null;
  let manifest;
  try {
    manifest = JSON.parse(text);
  } catch (e) {
    throw { kind: 'bundle', message: `${url.pathname} is not valid JSON: ${e.message}` };
  }
  return { text, manifest, cachedText };
}

/** Reads a response body chunk by chunk, calling `onBytes(n)` per chunk. */
async function readBody(response, onBytes) {
  const reader = response.body.getReader();
  const chunks = [];
  let length = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    chunks.push(value);
    length += value.length;
    onBytes(value.length);
  }
  const bytes = new Uint8Array(length);
  let offset = 0;
  for (const c of chunks) {
    bytes.set(c, offset);
    offset += c.length;
  }
  return bytes;
}

let translator = null;
let loadedModel = null;

/**
 * Downloads (or reads from the cache), verifies and loads model `id` of models/index.json on
 * `requested` ('gpu' or 'cpu'); on the CPU when this worker has no WebGPU.
 */
async function load(id, requested) {
  await ready;
  const hasWebgpu = await webgpu;
  let engine = requested === 'cpu' || !hasWebgpu ? 'cpu' : 'gpu';
  const indexUrl = new URL('models/index.json', self.location.href);
  const { text: indexText } = await fetchJson(indexUrl);
  const entry = JSON.parse(indexText).models.find((m) => m.id === id);
  if (!entry) throw { kind: 'bundle', message: `models/index.json lists no model '${id}'` };
  // Paths in the index are relative to the site root (where this worker lives).
  const base = new URL(entry.path, self.location.href);
  const manifestUrl = new URL('manifest.json', base);

  const cache = await caches.open(MODEL_CACHE);
  const { text: manifestText, manifest, cachedText } = await loadManifest(cache, manifestUrl);
  const names = Object.keys(manifest.files ?? {});
  if (cachedText !== null && cachedText !== manifestText) {
    // The site ships a new version of this model: forget the old files.
    await Promise.all(names.map((n) => cache.delete(new URL(n, base))));
  }
  const total = names.reduce((sum, n) => sum + (Number(manifest.files[n].bytes) || 0), 0);
  let loaded = 0;
  let lastPost = 0;
  let allCached = true;
  const post = (force) => {
    const now = performance.now();
    if (!force && now - lastPost < PROGRESS_INTERVAL_MS) return;
    lastPost = now;
    self.postMessage({ type: 'progress', model: id, engine, loaded, total, fromCache: allCached });
  };
  post(true);

  const files = {};
  const downloaded = [];
  for (const name of names) {
    const url = new URL(name, base);
    const hit = await cache.match(url);
    if (hit) {
      files[name] = new Uint8Array(await hit.arrayBuffer());
      loaded += files[name].length;
      post(false);
      continue;
    }
    allCached = false;
    let response;
    try {
      response = await fetch(url);
    } catch (e) {
      throw { kind: 'network', message: `could not download ${url.pathname}: ${e.message}; check the connection and retry` };
    }
    if (!response.ok) {
      throw { kind: 'network', message: `could not download ${url.pathname}: HTTP ${response.status}` };
    }
    files[name] = await readBody(response, (n) => {
      loaded += n;
      post(false);
    });
    downloaded.push(name);
  }
  post(true);

  if (translator) {
    translator.free();
    translator = null;
    loadedModel = null;
  }
  const manifestBytes = new TextEncoder().encode(manifestText);
  try {
    try {
      translator = await Translator.load(manifestBytes, files, engine);
    } catch (e) {
      // An adapter was granted but WebGPU would not open: the CPU engine still translates.
      if (engine !== 'gpu' || toError(e).kind !== 'no-webgpu') throw e;
      console.warn(`WebGPU did not open (${toError(e).message}); loading the model on the CPU`);
      webgpu = Promise.resolve(false);
      engine = 'cpu';
      translator = await Translator.load(manifestBytes, files, engine);
    }
  } catch (e) {
    // Never keep files that failed verification: the retry downloads them again.
    await Promise.all([...names.map((n) => cache.delete(new URL(n, base))), cache.delete(manifestUrl)]);
    throw e;
  }
  loadedModel = id;
  // Store only verified files, so the next visit (and sw.js, offline) reads them from disk.
  try {
    await cache.put(manifestUrl, new Response(manifestText, { headers: { 'content-type': 'application/json' } }));
    for (const name of downloaded) {
      await cache.put(new URL(name, base), new Response(files[name], {
        headers: { 'content-type': 'application/octet-stream', 'content-length': String(files[name].length) },
      }));
    }
  } catch (e) {
    console.warn(`could not store the model for offline use: ${e.message}`);
  }
  self.postMessage({ type: 'loaded', model: id, engine, webgpu: await webgpu, info: translator.info(), fromCache: allCached });
}

// Translation requests: one runs at a time; a newer one makes the running one's `cancelled`
// callback return true (checked before each sentence) and replaces any waiting one.
let generation = 0;
let running = null;
let waiting = null;

async function runTranslations() {
  while (waiting) {
    const request = waiting;
    waiting = null;
    const mine = request.generation;
    try {
      if (!translator) throw { kind: 'bundle', message: 'no model is loaded yet' };
      const result = await translator.translate(request.text, request.options, () => generation !== mine);
      self.postMessage({ type: 'result', id: request.id, result });
    } catch (e) {
      self.postMessage({ type: 'translate-error', id: request.id, error: toError(e) });
    }
  }
  running = null;
}

function translate(request) {
  generation += 1;
  waiting = { ...request, generation };
  if (!running) running = runTranslations();
}

let loading = Promise.resolve();

self.addEventListener('message', (event) => {
  const message = event.data ?? {};
  if (panicked) {
    self.postMessage({ type: 'panic', message: 'the engine stopped after an internal error' });
    return;
  }
  switch (message.type) {
    case 'load':
      generation += 1; // cancel a translation of the old model
      loading = loading
        .then(() => running)
        .then(() => load(message.model, message.engine ?? 'gpu'))
        .catch((e) => self.postMessage({ type: 'load-error', model: message.model, error: toError(e) }));
      break;
    case 'translate':
      loading.then(() => translate(message));
      break;
    case 'selfcheck':
      // WebGPU only: without it, say so before opening anything.
      ready
        .then(() => webgpu)
        .then((available) => (available ? selfCheck() : Promise.reject(noWebgpuError())))
        .then((report) => self.postMessage({ type: 'selfcheck', report }))
        .catch((e) => self.postMessage({ type: 'selfcheck-error', error: toError(e) }));
      break;
    default:
      console.warn(`worker: unknown message type ${message.type}`);
  }
});
