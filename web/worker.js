// The translation engine's Web Worker: the wasm module (webnmt.js + webnmt_bg.wasm) runs here, so
// downloads, shader compilation and decoding never block the page.
//
// Two builds of the wasm module, the same code: webnmt.js + webnmt_bg.wasm (simd128) and
// webnmt_relaxed.js + webnmt_relaxed_bg.wasm (the CPU engine's int8 products with relaxed SIMD's
// int8 dot product; it asks the browser on first use how that dot product reads bytes above
// 127 and takes one per 16 columns where it can, two elsewhere: `RelaxedDot` in
// src/cpu/matmul.rs). The relaxed one is faster only where the browser makes that dot product
// one instruction (x86 AVX-VNNI, ARM SDOT); elsewhere it is slower (README, Performance). So
// where the browser validates relaxed SIMD (a module with an instruction the browser lacks does
// not compile at all) and the model will likely run on the CPU engine (see Engines), the worker
// loads both, times the same int8 product in each (KernelProbe, a few ms) and keeps the relaxed
// one only when it is clearly faster; where it will run on a GPU (and loading a second build
// would delay the first translation) it loads the relaxed build alone; elsewhere the simd128
// build alone. `?wasm=simd128` or `?wasm=relaxed` on the worker's URL (app.js passes the page's
// own on) forces one. 'started' says which build runs and why.
//
// Engines: 'gpu' (WebGPU) or 'cpu' (the int8 CPU engine in wasm, simd128 kernels). A load asks
// for one, or for 'auto': WebGPU when the browser grants a hardware adapter, the CPU engine when
// it grants none or only a fallback adapter (a GPU emulated on the CPU, such as SwiftShader:
// many times slower than the CPU engine, as `translate` decides natively). A load that asks for
// 'gpu' without WebGPU (no navigator.gpu, no adapter granted, or WebGPU failing to open) loads
// on the CPU instead; 'loaded' says which engine runs it. `?engine=gpu` or `?engine=cpu` on the
// worker's URL (app.js passes the page's own on, and asks for that engine) only tells the build
// choice above which engine the page will ask for.
//
// Messages from the page:
//   { type: 'load', model, engine }            download (or read from the Cache API) and load a
//                                              bundle on engine 'auto' (the default), 'gpu' or
//                                              'cpu'
//   { type: 'translate', id, text, options }   translate; a newer request cancels an older one
//   { type: 'document', id, segments, options } translate a document: segments are its lines (or
//                                              subtitle cues), each translated as the box would;
//                                              a newer document replaces (cancels) an older one
//   { type: 'cancel', id }                     stop document `id`
//   { type: 'selfcheck' }                      run every WebGPU kernel against its CPU reference
// Messages to the page:
//   { type: 'started', defaults, webgpu, emulated, build } the wasm module is ready; the
//                                              decoding defaults; whether WebGPU gives this
//                                              worker an adapter, and whether it is a fallback
//                                              adapter (emulated on the CPU); build = { name:
//                                              'simd128' | 'relaxed', why } (the wasm build)
//   { type: 'progress', model, engine, loaded, total, fromCache }
//   { type: 'loaded', model, engine, webgpu, emulated, info, fromCache }
//   { type: 'load-error', model, error }       error = { kind, message }
//   { type: 'result', id, result } / { type: 'translate-error', id, error }
//   { type: 'document-progress', id, results, done, total, distinct }
//                                              results: [{ index, text, last }] in order, one per
//                                              finished sentence of segment `index` (its
//                                              translation, to join with spaces) or one with
//                                              text '' for a segment without sentences; `last`:
//                                              the segment is complete. done / total: sentences;
//                                              distinct: different sentences (each repeated one
//                                              is translated once)
//   { type: 'document-done', id, done, total, distinct, ms }
//   { type: 'document-error', id, error }      error.kind 'cancelled' once the work has stopped
//   { type: 'selfcheck', report } / { type: 'selfcheck-error', error }
//   { type: 'panic', message }                 the wasm module panicked: this worker is unusable
//
// Error kinds: no-webgpu (the self-check only: a load falls back to the CPU), integrity, bundle,
// options, gpu (never from the CPU engine), tokenizer, search, internal, cancelled (from the wasm
// side), and network, internal (from here). The page restarts this worker only for gpu.
//
// Documents: the segments are split into sentences (splitSentences, the pipeline's own split),
// which are translated in chunks through translateTexts: a small first chunk so the first
// sentence shows up soon, then larger ones (up to DOCUMENT_CHUNK_MAX) so the decoder batches
// stay full and sentences of similar length decode together. A segment's translation is its
// sentences' translations joined by spaces, exactly what 'translate' gives for it. The wasm
// side keeps a cache of translated sentences for as long as the model is loaded, so repeated
// sentences are searched once. (How many sentences of a document the cache answered is not
// reported: a chunk resumed after an interruption finds the pieces the interrupted call
// decoded in the cache, so no per-document count would be exact.) Documents are searched with
// n_best 1 and no heatmaps (the page sends those options): only the best translation is used.
//
// Priority: the interactive box first. A 'translate' request that arrives while a document is
// translated stops the document's chunk at its next decoder step (the sentences finished so
// far are kept, and are in the cache), runs, and the document resumes where it stopped. So a
// person typing never waits for a document, and a document only waits while requests keep
// coming.
/**
 * A module whose one function uses `i32x4.relaxed_dot_i8x16_i7x16_add_s`, the relaxed SIMD
 * instruction of the relaxed build's kernels, so it validates where that build compiles: the
 * header, a type `() -> v128`, one function of it, and its body (59 bytes, no locals):
 * `v128.const 0` three times (fd 0c + 16 bytes), the instruction (fd 93 02), `end` (0b).
 * sw.js spells it alike (tests/browser/names.test.mjs).
 */
const RELAXED_SIMD_PROBE = new Uint8Array([0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00, 0x01, 0x05, 0x01, 0x60, 0x00, 0x01, 0x7b, 0x03, 0x02, 0x01, 0x00, 0x0a, 0x3d, 0x01, 0x3b, 0x00, ...[0, 1, 2].flatMap(() => [0xfd, 0x0c, ...new Array(16).fill(0)]), 0xfd, 0x93, 0x02, 0x0b]);

/** `?wasm=` on the worker's URL: 'simd128' or 'relaxed' forces that build (see the top). */
const ASKED_BUILD = new URL(self.location.href).searchParams.get('wasm');
/** `?engine=` on the worker's URL: 'gpu' or 'cpu', the engine the page will ask for. */
const ASKED_ENGINE = new URL(self.location.href).searchParams.get('engine');
/**
 * KernelProbe runs per call (about 1–10 ms each); untimed calls for at least `warmupMs` (and
 * `warmup` calls) first, then `rounds` timed calls. The untimed time is what V8 needs to move
 * both modules' hot functions from its baseline compiler to its optimizing one (in the
 * background): with 2 untimed calls only, the relaxed build was still unoptimized in 4 of 6
 * page loads on a 2-vCPU machine (2.3–4.1 ms against 0.8–0.9 ms optimized) and lost the choice.
 */
const PROBE = { reps: 8, warmup: 2, warmupMs: 100, rounds: 4 };
/** The relaxed build is kept only when its product takes at most this share of simd128's. */
const RELAXED_MARGIN = 0.95;

/** The wasm module's exports (Translator, defaultOptions, …), once `ready` resolves. */
let wasm = null;

/** Cache API store of verified model files; sw.js serves model requests from it too. */
const MODEL_CACHE = 'webnmt-models-v1';
/** Progress messages at most this often (ms): enough for a smooth bar, few messages. */
const PROGRESS_INTERVAL_MS = 50;
/** A document's first chunk of sentences: small, so the first translation comes soon. */
const DOCUMENT_CHUNK_FIRST = 1;
/** The largest chunk of sentences given to translateTexts at once. */
const DOCUMENT_CHUNK_MAX = 256;
/** Document results are posted at most this often (ms), and at the end of each chunk. */
const DOCUMENT_POST_INTERVAL_MS = 100;

let panicked = false;
self.onwasmpanic = (message) => {
  if (panicked) return;
  panicked = true;
  self.postMessage({ type: 'panic', message: String(message) });
};

/** Error kinds that mean the model's files are bad (src/web.rs), as opposed to the engine. */
const FILE_ERRORS = new Set(['integrity', 'bundle', 'tokenizer']);

/** `{ kind, message }` of anything thrown: the wasm side's typed errors pass through. */
function toError(e, kind = 'internal') {
  if (e && typeof e === 'object' && typeof e.kind === 'string' && typeof e.message === 'string') {
    return { kind: e.kind, message: e.message };
  }
  return { kind, message: e instanceof Error ? e.message : String(e) };
}

/**
 * What WebGPU gives this worker: 'none' (no navigator.gpu, or no adapter granted), 'emulated'
 * (a fallback adapter: a GPU emulated on the CPU, such as SwiftShader; wgpu calls it
 * DeviceType::Cpu) or 'hardware'.
 */
async function webgpuKind() {
  if (!('gpu' in navigator) || !navigator.gpu) return 'none';
  try {
    const adapter = await navigator.gpu.requestAdapter();
    if (adapter === null) return 'none';
    // GPUAdapterInfo.isFallbackAdapter; browsers before it had GPUAdapter.isFallbackAdapter.
    return (adapter.info?.isFallbackAdapter ?? adapter.isFallbackAdapter) ? 'emulated' : 'hardware';
  } catch {
    return 'none';
  }
}

/** What WebGPU gives this worker, asked once: the answer does not change while it runs. */
let webgpu = webgpuKind();

/** The 'started' and 'loaded' messages' view of `kind`: whether there is WebGPU, and emulated. */
function adapterFields(kind) {
  return { webgpu: kind !== 'none', emulated: kind === 'emulated' };
}

/** The engine a load asking for `requested` ('auto', 'gpu' or 'cpu') uses with WebGPU `kind`. */
function engineFor(requested, kind) {
  if (kind === 'none' || requested === 'cpu') return 'cpu';
  return requested === 'gpu' || kind === 'hardware' ? 'gpu' : 'cpu';
}

async function loadBuild(build) {
  const glue = await import(`./${build}.js`);
  await glue.default({ module_or_path: new URL(`${build}_bg.wasm`, import.meta.url) });
  return glue;
}

/**
 * The fastest of PROBE.rounds timed calls of each build's KernelProbe (ms), the builds
 * alternating so that a busy moment slows both; untimed calls first (compilation tiers).
 */
function timeProbes(glues) {
  const probes = glues.map((glue) => new glue.KernelProbe());
  const best = glues.map(() => Infinity);
  const start = performance.now();
  let untimed = 0;
  while (untimed < PROBE.warmup || performance.now() - start < PROBE.warmupMs) {
    probes.forEach((probe) => probe.run(PROBE.reps));
    untimed++;
  }
  for (let r = 0; r < PROBE.rounds; r++) {
    probes.forEach((probe, i) => {
      const t0 = performance.now();
      probe.run(PROBE.reps);
      best[i] = Math.min(best[i], performance.now() - t0);
    });
  }
  probes.forEach((probe) => probe.free());
  return best;
}

/** Loads the wasm build (see the top of this file); returns { name, why }. */
async function startWasm() {
  if (ASKED_BUILD === 'simd128' || !WebAssembly.validate(RELAXED_SIMD_PROBE)) {
    wasm = await loadBuild('webnmt');
    return { name: 'simd128', why: ASKED_BUILD === 'simd128' ? '?wasm=simd128' : 'no relaxed SIMD in this browser' };
  }
  if (ASKED_BUILD === 'relaxed') {
    wasm = await loadBuild('webnmt_relaxed');
    return { name: 'relaxed', why: '?wasm=relaxed' };
  }
  // When the model will run on the GPU (the CPU engine only if the person picks it): the
  // relaxed build alone, as the engine's own work is the same in both. Otherwise both.
  const relaxedLoad = loadBuild('webnmt_relaxed');
  relaxedLoad.catch(() => {}); // awaited below
  const onGpu = engineFor(ASKED_ENGINE ?? 'auto', await webgpu) === 'gpu';
  const plainLoad = onGpu ? null : loadBuild('webnmt');
  plainLoad?.catch(() => {}); // awaited below
  let relaxed;
  try {
    relaxed = await relaxedLoad;
  } catch (e) {
    console.warn(`webnmt_relaxed did not load (${e}); using the simd128 build`);
    wasm = await (plainLoad ?? loadBuild('webnmt'));
    return { name: 'simd128', why: `the relaxed build did not load (${e})` };
  }
  let plain;
  try {
    plain = await plainLoad;
  } catch (e) {
    wasm = relaxed;
    return { name: 'relaxed', why: `the simd128 build did not load (${e})` };
  }
  if (!plain) {
    wasm = relaxed;
    return { name: 'relaxed', why: 'the model runs on WebGPU here, so the CPU builds were not timed' };
  }
  const [plainMs, relaxedMs] = timeProbes([plain, relaxed]);
  const times = `int8 product: relaxed ${relaxedMs.toFixed(1)} ms, simd128 ${plainMs.toFixed(1)} ms`;
  if (relaxedMs <= RELAXED_MARGIN * plainMs) {
    wasm = relaxed;
    return { name: 'relaxed', why: `${times}: relaxed SIMD is faster here` };
  }
  wasm = plain;
  return { name: 'simd128', why: `${times}: relaxed SIMD is not clearly faster here` };
}

/** The wasm module and the adapter, once started: see whenReady. */
let ready = start();

function start() {
  const started = Promise.all([startWasm(), webgpu]).then(([build, kind]) => {
    const defaults = wasm.defaultOptions();
    self.postMessage({ type: 'started', defaults, ...adapterFields(kind), build });
  });
  started.catch(() => {}); // reported by the load or self-check that waits for it
  return started;
}

/**
 * Resolves once the wasm module runs; a start that failed is tried again (a failed download of
 * the .wasm file is fetched again; a failed import of its JS glue may stay failed, as browsers
 * may keep a failed module fetch for the worker's lifetime).
 */
function whenReady() {
  ready = ready.catch(() => start());
  return ready;
}

/** The no-WebGPU error (the self-check's); its sentence (from the wasm side) says which browsers and settings work. */
function noWebgpuError() {
  return { kind: 'no-webgpu', message: wasm.noWebgpuMessage() };
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
 * cached one) and from the model cache otherwise (offline). Returns
 * `{ text, manifest, cachedText }` (`cachedText`: the cached copy's text, or null).
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

/**
 * Downloads (or reads from the cache), verifies and loads model `id` of models/index.json on
 * `requested` ('auto', 'gpu' or 'cpu'; see engineFor). A newer load aborts `signal`: the
 * downloads stop, and the loaded model, if it got that far, is never announced.
 */
async function load(id, requested, signal) {
  await whenReady();
  signal.throwIfAborted();
  let engine = engineFor(requested, await webgpu);
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
  // The site ships a new version of this model: its cached files are the old version's, so none
  // is used, and none is deleted before the new ones are verified (a download cut short leaves
  // the old model whole, for offline visits).
  const stale = cachedText !== null && cachedText !== manifestText;
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
    signal.throwIfAborted();
    const url = new URL(name, base);
    const hit = stale ? undefined : await cache.match(url);
    if (hit) {
      files[name] = new Uint8Array(await hit.arrayBuffer());
      loaded += files[name].length;
      post(false);
      continue;
    }
    allCached = false;
    let response;
    try {
      // Revalidated: a file the site replaced under the same name must not come from the
      // browser's HTTP cache (it would fail the sha256 check at every retry).
      response = await fetch(url, { cache: 'no-cache', signal });
    } catch (e) {
      signal.throwIfAborted();
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

  signal.throwIfAborted();
  if (translator) {
    translator.free();
    translator = null;
  }
  const manifestBytes = new TextEncoder().encode(manifestText);
  try {
    try {
      translator = await wasm.Translator.load(manifestBytes, files, engine);
    } catch (e) {
      // An adapter was granted but WebGPU would not open: the CPU engine still translates.
      if (engine !== 'gpu' || toError(e).kind !== 'no-webgpu') throw e;
      console.warn(`WebGPU did not open (${toError(e).message}); loading the model on the CPU`);
      webgpu = Promise.resolve('none');
      engine = 'cpu';
      translator = await wasm.Translator.load(manifestBytes, files, engine);
    }
  } catch (e) {
    // Never keep files that failed verification (the retry downloads them again); files that
    // passed it stay when the engine failed after them (a GPU error, a device lost).
    if (FILE_ERRORS.has(toError(e).kind)) {
      await Promise.all([...names.map((n) => cache.delete(new URL(n, base))), cache.delete(manifestUrl)]);
    }
    throw e;
  }
  // Store only verified files, so the next visit (and sw.js, offline) reads them from disk; the
  // manifest last, so a cache that holds it holds its files too.
  try {
    for (const name of downloaded) {
      await cache.put(new URL(name, base), new Response(files[name], {
        headers: { 'content-type': 'application/octet-stream', 'content-length': String(files[name].length) },
      }));
    }
    await cache.put(manifestUrl, new Response(manifestText, { headers: { 'content-type': 'application/json' } }));
    if (stale) {
      // The old version's files that the new one no longer names.
      const oldNames = Object.keys(JSON.parse(cachedText).files ?? {}).filter((n) => !(n in manifest.files));
      await Promise.all(oldNames.map((n) => cache.delete(new URL(n, base))));
    }
  } catch (e) {
    console.warn(`could not store the model for offline use: ${e.message}`);
  }
  signal.throwIfAborted();
  self.postMessage({ type: 'loaded', model: id, engine, ...adapterFields(await webgpu), info: translator.info(), fromCache: allCached });
}

// Translation requests: one runs at a time; a newer one makes the running one's `cancelled`
// callback return true (checked before each encoder batch and between decoder steps) and
// replaces any waiting one. Interactive requests go before document chunks (see the header).
let generation = 0;
let running = null; // the loop below while it runs
let waiting = null; // the interactive request to run next
let documentJob = null; // the document being translated
/**
 * Documents received but not started yet (they wait for a model load): id → whether a cancel
 * came for it meanwhile. An id leaves when its document starts (or is refused as cancelled).
 */
const queuedDocuments = new Map();

async function runTranslations() {
  for (;;) {
    if (waiting) {
      await runInteractive();
    } else if (documentJob) {
      await runDocumentChunk(documentJob);
      // A task boundary between chunks: a chunk answered from the cache awaits nothing that
      // lets the worker's messages (cancel, a newer request) in.
      await new Promise((resolve) => setTimeout(resolve, 0));
    } else {
      break;
    }
  }
  running = null;
}

function schedule() {
  if (!running) running = runTranslations();
}

async function runInteractive() {
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

function translate(request) {
  generation += 1;
  waiting = { ...request, generation };
  schedule();
}

/**
 * Starts a document (replacing the running one): splits its segments into sentences and makes
 * the job the loop translates chunk by chunk: the sentences (`texts`, with `segmentOf` their
 * segment and `lastOf` whether each ends it), how far it got, and the results not yet posted.
 */
function startDocument({ id, segments, options }) {
  const cancelled = queuedDocuments.get(id) === true;
  queuedDocuments.delete(id);
  if (documentJob) stopDocument(documentJob);
  if (cancelled) {
    self.postMessage({ type: 'document-error', id, error: { kind: 'cancelled', message: 'the document was cancelled' } });
    return;
  }
  if (!Array.isArray(segments) || !segments.every((s) => typeof s === 'string')) {
    self.postMessage({ type: 'document-error', id, error: { kind: 'internal', message: 'a document must be an array of strings' } });
    return;
  }
  const texts = [];
  const segmentOf = [];
  const lastOf = [];
  try {
    segments.forEach((segment, index) => {
      const sentences = wasm.splitSentences(segment);
      sentences.forEach((sentence, k) => {
        texts.push(sentence);
        segmentOf.push(index);
        lastOf.push(k === sentences.length - 1);
      });
    });
  } catch (e) {
    self.postMessage({ type: 'document-error', id, error: toError(e) });
    return;
  }
  documentJob = {
    id,
    options,
    segments: segments.length,
    texts,
    distinct: new Set(texts).size,
    segmentOf,
    lastOf,
    posted: 0, // sentences translated and queued for the page
    postedDone: -1, // `posted` as of the last message
    nextSegment: 0, // the first segment not yet complete
    chunks: 0,
    pending: [], // results not yet posted
    lastPost: 0,
    started: performance.now(),
    running: false, // inside translateTexts
    stopped: false,
  };
  // The total at once, so the page's bar starts from 0 / total.
  postDocumentProgress(documentJob, true);
  schedule();
}

/** Queues the results of sentence `k` (and of any sentence-less segments before it). */
function sentenceDone(job, k, text) {
  const segment = job.segmentOf[k];
  while (job.nextSegment < segment) job.pending.push({ index: job.nextSegment++, text: '', last: true });
  const last = job.lastOf[k];
  job.pending.push({ index: segment, text, last });
  if (last) job.nextSegment = segment + 1;
  job.posted = k + 1;
}

function postDocumentProgress(job, force) {
  const now = performance.now();
  if (!force && now - job.lastPost < DOCUMENT_POST_INTERVAL_MS) return;
  if (job.pending.length === 0 && job.postedDone === job.posted) return; // nothing new
  job.lastPost = now;
  job.postedDone = job.posted;
  const results = job.pending;
  job.pending = [];
  self.postMessage({ type: 'document-progress', id: job.id, results, done: job.posted, total: job.texts.length, distinct: job.distinct });
}

/** Stops `job`: the page hears `cancelled` once no translateTexts of it runs any more. */
function stopDocument(job) {
  job.stopped = true;
  if (documentJob === job) documentJob = null;
  if (!job.running) {
    self.postMessage({ type: 'document-error', id: job.id, error: { kind: 'cancelled', message: 'the document was cancelled' } });
  }
}

/** The next chunk's size: 1, then batch, 4 × batch, … up to DOCUMENT_CHUNK_MAX sentences. */
function chunkSize(job) {
  const batch = Math.max(1, Number(job.options?.batch) || 32);
  return job.chunks === 0 ? DOCUMENT_CHUNK_FIRST : Math.min(DOCUMENT_CHUNK_MAX, batch * 4 ** (job.chunks - 1));
}

async function runDocumentChunk(job) {
  const start = job.posted;
  const end = Math.min(job.texts.length, start + chunkSize(job));
  job.running = true;
  try {
    if (!translator) throw { kind: 'bundle', message: 'no model is loaded yet' };
    if (start < end) {
      await translator.translateTexts(
        job.texts.slice(start, end),
        job.options,
        () => job.stopped || waiting !== null,
        (i, translation) => {
          if (job.stopped) return; // cancelled: the page hears nothing more of it
          sentenceDone(job, start + i, translation.text);
          postDocumentProgress(job, false);
        },
      );
      job.chunks += 1;
    }
    job.running = false;
    if (job.stopped) throw { kind: 'cancelled', message: 'the document was cancelled' };
    if (job.posted === job.texts.length) {
      while (job.nextSegment < job.segments) job.pending.push({ index: job.nextSegment++, text: '', last: true });
      postDocumentProgress(job, true);
      if (documentJob === job) documentJob = null;
      self.postMessage({
        type: 'document-done', id: job.id, done: job.posted, total: job.texts.length, distinct: job.distinct, ms: performance.now() - job.started,
      });
    } else {
      postDocumentProgress(job, true);
    }
  } catch (e) {
    job.running = false;
    const error = toError(e);
    if (error.kind === 'cancelled' && !job.stopped) {
      // Stopped for an interactive request: resume from the first sentence not handed out.
      postDocumentProgress(job, true);
      return;
    }
    if (!job.stopped) postDocumentProgress(job, true);
    if (documentJob === job) documentJob = null;
    job.stopped = true;
    self.postMessage({ type: 'document-error', id: job.id, error });
  }
}

/**
 * Stops document `id`, or marks it so it never starts when it is still queued; a cancel for a
 * document that has finished or stopped already changes nothing.
 */
function cancelDocument(id) {
  if (documentJob && documentJob.id === id) stopDocument(documentJob);
  else if (queuedDocuments.has(id)) queuedDocuments.set(id, true);
}

let loading = Promise.resolve();
let loadAbort = new AbortController(); // the newest load's: a newer one aborts it

self.addEventListener('message', (event) => {
  const message = event.data ?? {};
  if (panicked) {
    self.postMessage({ type: 'panic', message: 'the engine stopped after an internal error' });
    return;
  }
  switch (message.type) {
    case 'load': {
      generation += 1; // cancel a translation of the old model
      if (documentJob) stopDocument(documentJob);
      // A load still downloading (or waiting) stops: the page only wants the newest.
      loadAbort.abort();
      const { signal } = (loadAbort = new AbortController());
      loading = loading
        .then(() => running)
        .then(() => load(message.model, message.engine ?? 'auto', signal))
        .catch((e) => {
          if (!signal.aborted) self.postMessage({ type: 'load-error', model: message.model, error: toError(e) });
        });
      break;
    }
    case 'translate':
      loading.then(() => translate(message));
      break;
    case 'document':
      queuedDocuments.set(message.id, false);
      loading.then(() => startDocument(message));
      break;
    case 'cancel':
      cancelDocument(message.id);
      break;
    case 'selfcheck':
      // WebGPU only: without it, say so before opening anything.
      whenReady()
        .then(() => webgpu)
        .then((kind) => (kind !== 'none' ? wasm.selfCheck() : Promise.reject(noWebgpuError())))
        .then((report) => self.postMessage({ type: 'selfcheck', report }))
        .catch((e) => self.postMessage({ type: 'selfcheck-error', error: toError(e) }));
      break;
    default:
      console.warn(`worker: unknown message type ${message.type}`);
  }
});
