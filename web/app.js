// The page: model picker, download progress, translation UI, n-best list, attention heatmap,
// documents (.txt / .srt files and long pasted text) and diagnostics. The engine runs in
// web/worker.js; this script only posts messages and draws.
//
// Documents: a .txt file is one segment per line (empty lines stay empty lines); a .srt file is
// one segment per cue, its text lines joined with a space (a sentence often runs over two
// subtitle lines, and the pipeline ends a sentence at every line break), without the markup
// tags (<i>, {\an8}) the model cannot translate. The worker translates the segments sentence
// by sentence and sends each in order; the page appends them to the preview in one batch per
// message (at most DOC_PREVIEW_ROWS rows: a 1 MB file has tens of thousands of lines, and the
// download holds them all) and writes the download in the file's own format: the same lines,
// or the same cues with their numbers and times and the translated text on one line.
//
// Safety: every string from the user, the model or an error goes into the page through
// textContent or as canvas text, never as HTML; handlers are attached with addEventListener
// (the Content-Security-Policy forbids inline scripts and handlers).

const $ = (id) => document.getElementById(id);

const ui = {
  model: $('model'),
  engineRow: $('engine-row'),
  engine: $('engine'),
  engineNotice: $('engine-notice'),
  progress: $('progress'),
  progressText: $('progress-text'),
  modelStatus: $('model-status'),
  modelInfo: $('model-info'),
  modelQuality: $('model-quality'),
  retry: $('retry'),
  update: $('update'),
  updateReload: $('update-reload'),
  source: $('source'),
  translate: $('translate'),
  translateStatus: $('translate-status'),
  output: $('output'),
  copy: $('copy'),
  copyStatus: $('copy-status'),
  timings: $('timings'),
  details: $('details-section'),
  sentence: $('sentence'),
  nbest: $('nbest'),
  heatmap: $('heatmap'),
  optReset: $('opt-reset'),
  selfcheckRun: $('selfcheck-run'),
  selfcheckStatus: $('selfcheck-status'),
  selfcheckRows: $('selfcheck-rows'),
  adapter: $('adapter'),
  translateDocument: $('translate-document'),
  dropZone: $('drop-zone'),
  docFile: $('doc-file'),
  docCancel: $('doc-cancel'),
  docDownload: $('doc-download'),
  docStatus: $('doc-status'),
  docProgressBox: $('doc-progress-box'),
  docProgress: $('doc-progress'),
  docProgressText: $('doc-progress-text'),
  docPreviewNote: $('doc-preview-note'),
  docOutput: $('doc-output'),
};

/** The decoding options the page exposes: input id → field of SearchOptions. */
const OPTION_FIELDS = {
  'opt-beam': 'beam',
  'opt-groups': 'groups',
  'opt-diversity': 'diversity',
  'opt-length-penalty': 'length_penalty',
  'opt-repetition-penalty': 'repetition_penalty',
  'opt-repetition-window': 'repetition_window',
  'opt-block-repeats': 'block_repeats',
  'opt-n-best': 'n_best',
};
/** The page shows this many translations per sentence unless the beam is smaller. */
const PAGE_N_BEST = 4;
/** The CPU engine as the page names it (the wasm module is built with simd128). */
const CPU_ENGINE = 'CPU (WebAssembly SIMD)';
/** The one line the page shows when this browser has no WebGPU. */
const NO_WEBGPU_NOTICE = `No WebGPU here: translating on the ${CPU_ENGINE}`;
/** The line when its only WebGPU adapter is emulated on the CPU and the page chose the CPU engine. */
const EMULATED_NOTICE = `WebGPU here runs on the CPU (an emulated GPU, many times slower than the CPU engine): translating on the ${CPU_ENGINE}; pick WebGPU above to use it anyway`;
/** `?engine=gpu` or `?engine=cpu` on the page asks for that engine; otherwise the worker picks. */
const ASKED_ENGINE = ['gpu', 'cpu'].find((e) => e === new URLSearchParams(location.search).get('engine'));
/** The document preview shows this many rows (lines or cues) at most; the download has all. */
const DOC_PREVIEW_ROWS = 2000;
/** The largest file the page opens (a 1 MB text is about 15,000 sentences). */
const DOC_MAX_BYTES = 32 << 20;

const state = {
  worker: null,
  defaults: null, // TranslateOptions from the wasm side
  models: [],
  model: null, // id of the model being loaded or loaded
  // The engine asked for: 'auto' (WebGPU on a hardware adapter, else the CPU engine), 'gpu' or
  // 'cpu' (the worker falls back to 'cpu' without WebGPU); set by ?engine= and the picker.
  engine: ASKED_ENGINE ?? 'auto',
  engineLabel: null, // [name, value] of the engine in the timings line
  ready: false,
  restarts: 0, // worker restarts after a panic or a GPU failure (at most one)
  dead: false, // the engine stopped twice: nothing more is sent; the page must be reloaded
  nextId: 1,
  pending: null, // the translation request in flight: { id, text, options, retried }
  result: null,
  selfcheckPending: false,
  langs: null, // { source, target } of the loaded model (document file names)
  doc: null, // the document being translated or last translated (see startDocument)
};

// ---------------------------------------------------------------- small DOM helpers

function el(tag, text, className) {
  const node = document.createElement(tag);
  if (text !== undefined) node.textContent = text;
  if (className) node.className = className;
  return node;
}

function setStatus(node, dataState, text) {
  node.dataset.state = dataState;
  node.textContent = text;
}

function formatBytes(n) {
  if (n >= 1e6) return `${(n / 1e6).toFixed(1)} MB`;
  if (n >= 1e3) return `${(n / 1e3).toFixed(0)} kB`;
  return `${n} B`;
}

function describeError(error) {
  switch (error.kind) {
    case 'integrity':
      return `The model download is damaged: a file does not match the checksum the site lists for it (${error.message}). Nothing from it was used or kept. Retry to download it again.`;
    case 'network':
      return `The model could not be downloaded: ${error.message}.`;
    case 'bundle':
      return `The model files are not usable: ${error.message}.`;
    case 'gpu':
      return `The GPU failed: ${error.message}. Try again, or pick CPU under Engine above to translate without the GPU.`;
    case 'options':
      return `These decoding options cannot be used: ${error.message}.`;
    default:
      return `Something went wrong (${error.kind}): ${error.message}.`;
  }
}

// ---------------------------------------------------------------- the worker

function startWorker() {
  const url = new URL('worker.js', import.meta.url);
  // `?wasm=simd128` or `?wasm=relaxed` on the page forces a wasm build (see worker.js).
  const build = new URLSearchParams(location.search).get('wasm');
  if (build) url.searchParams.set('wasm', build);
  // The engine the page asks for decides whether the worker times both builds.
  if (state.engine !== 'auto') url.searchParams.set('engine', state.engine);
  const worker = new Worker(url, { type: 'module' });
  worker.addEventListener('message', (event) => onWorkerMessage(worker, event.data));
  worker.addEventListener('error', (event) => {
    if (worker !== state.worker) return;
    event.preventDefault();
    onEngineCrash(`the engine's worker failed: ${event.message || 'could not start'}`);
  });
  state.worker = worker;
  state.ready = false;
  return worker;
}

/**
 * Replaces a crashed or failed worker once; returns false when the one restart is used up.
 * What the old worker was doing ends here (it will never answer): the box's translation unless
 * the caller marked it for a retry (`sent = false`), the running document, the self-check.
 */
function restartWorker() {
  if (state.restarts >= 1) return false;
  state.restarts += 1;
  state.worker?.terminate();
  endWork('The translation engine was restarted', true);
  startWorker();
  if (state.model) loadModel(state.model);
  return true;
}

/**
 * Ends the work sent to a worker that is gone, saying `why`; `again` says whether a new worker
 * takes the next try (otherwise the page must be reloaded). Work not sent yet (waiting for the
 * model) stays, for the new worker.
 */
function endWork(why, again) {
  const next = again ? 'Translate again.' : 'Reload the page to start over.';
  if (state.pending?.sent) dropPending('error', `${why} before this translation finished. ${next}`);
  if (state.doc?.sent) {
    failDocument(`${why}. ${again ? 'Translate the document again.' : next}`);
  }
  if (state.selfcheckPending) {
    state.selfcheckPending = false;
    ui.selfcheckRun.disabled = !again;
    const then = again ? 'Run it again.' : next;
    setStatus(ui.selfcheckStatus, 'error', `${why} during the self-check. ${then}`);
  }
}

/** Stops waiting for the box's translation (the worker drops it or is gone), saying why. */
function dropPending(dataState, text) {
  const request = state.pending;
  if (!request) return;
  state.pending = null;
  setBusy(false);
  setTranslateStatus(dataState, text, request.id);
}

function onEngineCrash(message) {
  failDocument(`The translation engine stopped (${message}). Translate the document again.`);
  const request = state.pending;
  if (restartWorker()) {
    setTranslateStatus('error', `The translation engine stopped (${message}); it was restarted.`, request?.id);
  } else {
    state.worker?.terminate();
    state.ready = false;
    state.dead = true;
    endWork('The translation engine stopped again', false);
    dropPending('error', 'The translation engine stopped again before this translation was sent. Reload the page to start over.');
    setBusy(false);
    // Nothing would answer these any more.
    for (const control of [ui.translate, ui.model, ui.engine, ui.selfcheckRun, ui.translateDocument, ui.docFile]) {
      control.disabled = true;
    }
    ui.retry.hidden = true;
    setTranslateStatus('error', `The translation engine stopped again (${message}). Reload the page to start over.`, request?.id);
    setStatus(ui.modelStatus, 'error', 'The translation engine stopped. Reload the page to start over.');
  }
}

function onWorkerMessage(worker, message) {
  if (worker !== state.worker) return; // a replaced worker
  switch (message.type) {
    case 'started':
      if (!state.defaults) {
        state.defaults = message.defaults;
        state.defaults.search.n_best = Math.min(PAGE_N_BEST, state.defaults.search.beam);
        fillOptions(state.defaults.search);
      }
      showEngine(message.webgpu, message.emulated, null);
      // Which wasm build runs (worker.js chooses), for the curious and the tests.
      document.body.dataset.wasm = message.build.name;
      console.info(`wasm build: ${message.build.name} (${message.build.why})`);
      break;
    case 'progress':
      showProgress(message);
      break;
    case 'loaded':
      onLoaded(message);
      break;
    case 'load-error':
      if (message.model === state.model) onLoadError(message.error);
      break;
    case 'result':
      onResult(message);
      break;
    case 'translate-error':
      onTranslateError(message);
      break;
    case 'document-progress':
      onDocumentProgress(message);
      break;
    case 'document-done':
      onDocumentDone(message);
      break;
    case 'document-error':
      onDocumentError(message);
      break;
    case 'selfcheck':
      showSelfCheck(message.report);
      break;
    case 'selfcheck-error':
      state.selfcheckPending = false;
      ui.selfcheckRun.disabled = false;
      if (message.error.kind === 'no-webgpu') {
        setStatus(ui.selfcheckStatus, 'no-webgpu', `The self-check tests the WebGPU kernels only, and this browser has no WebGPU (translation runs on the ${CPU_ENGINE} instead). ${message.error.message}`);
      } else setStatus(ui.selfcheckStatus, 'error', `The GPU check failed: ${message.error.message}`);
      break;
    case 'panic':
      console.error(`engine panic: ${message.message}`);
      onEngineCrash(`internal error: ${message.message}`);
      break;
    default:
      console.warn(`page: unknown message ${message.type}`);
  }
}

// ---------------------------------------------------------------- models

async function loadIndex() {
  // Revalidated, as the worker's copy is: both must list the same models.
  const response = await fetch('models/index.json', { cache: 'no-cache' });
  if (!response.ok) throw new Error(`models/index.json: HTTP ${response.status}`);
  const index = await response.json();
  state.models = index.models;
  ui.model.replaceChildren(...index.models.map((m) => {
    const option = el('option', m.name);
    option.value = m.id;
    return option;
  }));
  const preferred = index.models.find((m) => m.default) ?? index.models[0];
  ui.model.value = preferred.id;
  ui.model.disabled = state.dead;
  return preferred.id;
}

/**
 * The engine picker and the engine line: with WebGPU the picker offers both engines (showing
 * `engine`, the one running; null while none is); without it only the line, since the CPU is
 * the only choice. The line also says why when the page itself chose the CPU engine over an
 * emulated WebGPU adapter.
 */
function showEngine(webgpu, emulated, engine) {
  ui.engineRow.hidden = !webgpu;
  ui.engine.disabled = !webgpu;
  if (engine) ui.engine.value = engine;
  let notice = '';
  if (!webgpu) notice = NO_WEBGPU_NOTICE;
  else if (emulated && engine === 'cpu' && state.engine === 'auto') notice = EMULATED_NOTICE;
  ui.engineNotice.hidden = notice === '';
  ui.engineNotice.textContent = notice;
}

/** Says `where` that the engine is gone (see onEngineCrash) when it is; true if so. */
function engineGone(where) {
  if (state.dead) setStatus(where, 'error', 'The translation engine stopped. Reload the page to start over.');
  return state.dead;
}

function loadModel(id) {
  if (engineGone(ui.modelStatus)) return;
  state.model = id;
  state.ready = false;
  ui.translate.disabled = true;
  ui.retry.hidden = true;
  ui.progress.value = 0;
  ui.progress.max = 100;
  ui.progressText.textContent = 'Starting…';
  ui.modelInfo.textContent = '';
  const entry = state.models.find((m) => m.id === id);
  const name = entry?.name ?? id;
  ui.modelQuality.textContent = entry?.quality ?? '';
  ui.modelQuality.hidden = !entry?.quality;
  setStatus(ui.modelStatus, 'loading', `Loading ${name}…`);
  state.worker.postMessage({ type: 'load', model: id, engine: state.engine });
}

function showProgress({ model, engine, loaded, total, fromCache }) {
  if (model !== state.model) return;
  const percent = total > 0 ? Math.min(100, Math.floor((loaded / total) * 100)) : 0;
  ui.progress.value = percent;
  ui.progress.dataset.percent = String(percent);
  const source = fromCache ? 'from this device' : 'downloaded';
  ui.progressText.textContent = `${formatBytes(loaded)} of ${formatBytes(total)} ${source} (${percent}%)`;
  if (loaded >= total && total > 0) {
    setStatus(ui.modelStatus, 'loading', `Checking the files and preparing the ${engine === 'cpu' ? 'CPU engine' : 'GPU'}…`);
  }
}

function onLoaded({ model, engine, webgpu, emulated, info, fromCache }) {
  if (model !== state.model) return;
  state.ready = true;
  ui.retry.hidden = true;
  showEngine(webgpu, emulated, engine);
  const name = state.models.find((m) => m.id === model)?.name ?? model;
  setStatus(ui.modelStatus, 'ready', `${name} is ready${fromCache ? ' (loaded from this device)' : ''}.`);
  state.langs = { source: info.source_lang, target: info.target_lang };
  const params = (info.parameters / 1e6).toFixed(1);
  const prepared = `prepared in ${Math.round(info.load_ms)} ms`;
  if (engine === 'cpu') {
    state.engineLabel = ['engine', CPU_ENGINE];
    ui.modelInfo.textContent = `${params} M parameters, int8 · ${CPU_ENGINE} · ${prepared}`;
  } else {
    const a = info.adapter;
    const adapterName = a.name || 'name not reported by the browser';
    state.engineLabel = ['GPU', `${adapterName} (${a.backend})`];
    ui.modelInfo.textContent = `${params} M parameters, int8 · GPU: ${adapterName} (${a.backend}, ${a.device_type}) · ${prepared}`;
  }
  ui.translate.disabled = false;
  ui.model.disabled = false;
  if (state.pending && !state.pending.sent) sendTranslation(state.pending);
  if (state.doc && state.doc.state === 'running' && !state.doc.sent) sendDocument(state.doc);
}

function onLoadError(error) {
  state.ready = false;
  ui.translate.disabled = true;
  if (error.kind === 'gpu' && restartWorker()) {
    setStatus(ui.modelStatus, 'loading', 'The GPU failed while loading; trying once more…');
    return;
  }
  setStatus(ui.modelStatus, error.kind === 'integrity' ? 'integrity' : 'error', describeError(error));
  ui.retry.hidden = false;
  if (state.pending && !state.pending.sent) {
    dropPending('error', 'The model could not be loaded (see above), so this was not translated. Press Retry, then Translate.');
  }
  failDocument('The model could not be loaded (see above), so the document was not translated.');
}

// ---------------------------------------------------------------- options

function fillOptions(search) {
  // The f32 options arrive widened to f64 (0.6 → 0.6000000238…): show them as typed.
  for (const [id, field] of Object.entries(OPTION_FIELDS)) $(id).value = String(Number(search[field].toPrecision(6)));
}

function readOptions() {
  const search = { ...state.defaults.search };
  for (const [id, field] of Object.entries(OPTION_FIELDS)) {
    const input = $(id);
    const value = Number(input.value);
    if (input.value.trim() === '' || !Number.isFinite(value)) {
      throw new Error(`${input.parentElement.firstChild.textContent.trim()} must be a number`);
    }
    search[field] = value;
  }
  return { search, attention: true };
}

// ---------------------------------------------------------------- translation

function setBusy(busy) {
  ui.translate.textContent = busy ? 'Translating…' : 'Translate';
  document.body.dataset.busy = busy ? 'true' : 'false';
}

/** Sets the translation status; `request` marks which request it is about (tests wait on it). */
function setTranslateStatus(dataState, text, request) {
  if (request !== undefined) ui.translateStatus.dataset.request = String(request);
  setStatus(ui.translateStatus, dataState, text);
}

function requestTranslation() {
  const id = state.nextId++;
  const text = ui.source.value;
  if (text.trim() === '') {
    setTranslateStatus('error', 'Type some text to translate first.', id);
    return;
  }
  let options;
  try {
    options = readOptions();
  } catch (e) {
    setTranslateStatus('error', e.message, id);
    return;
  }
  const running = state.pending;
  if (running && running.text === text && JSON.stringify(running.options) === JSON.stringify(options)) {
    return; // the same request again (a second click): let the running one finish
  }
  const request = { id, text, options, retried: false, started: performance.now() };
  state.pending = request;
  setBusy(true);
  setTranslateStatus('running', 'Translating…', request.id);
  if (state.ready) sendTranslation(request);
}

function sendTranslation(request) {
  request.sent = true;
  state.worker.postMessage({ type: 'translate', id: request.id, text: request.text, options: request.options });
}

function onTranslateError({ id, error }) {
  const request = state.pending;
  if (error.kind === 'cancelled') {
    console.info(`translation ${id} was cancelled by a newer request`);
    return;
  }
  if (!request || request.id !== id) return; // superseded
  if (error.kind === 'gpu' && !request.retried && state.restarts < 1) {
    // Device loss or a GPU fault: a fresh worker with a fresh device, then the same request.
    request.retried = true;
    request.sent = false;
    setStatus(ui.translateStatus, 'running', `The GPU failed (${error.message}); restarting the engine and trying again…`);
    restartWorker();
    return;
  }
  state.pending = null;
  setBusy(false);
  setTranslateStatus('error', describeError(error), id);
}

function onResult({ id, result }) {
  const request = state.pending;
  if (!request || request.id !== id) return;
  state.pending = null;
  state.result = result;
  setBusy(false);
  const seconds = ((performance.now() - request.started) / 1000).toFixed(1);
  const n = result.sentences.length;
  setTranslateStatus('done', `Translated ${n} sentence${n === 1 ? '' : 's'} in ${seconds} s.${scriptHint(request.text)}`, id);
  showOutput(result);
  showTimings(result);
  showDetails(result, 0);
}

/**
 * Source languages whose script tells them apart, by the letters a text in them must have: a
 * text without any was not written in the model's source language, and the model, which knows
 * no other, writes something unrelated (fluently) rather than a translation.
 */
const SCRIPTS = {
  ko: { letters: /[\u1100-\u11ff\u3130-\u318f\uac00-\ud7af]/, name: 'Korean letters (Hangul)' },
};

/** ' …' saying that `text` is not in the loaded model's source language, when its script shows it. */
function scriptHint(text) {
  const script = SCRIPTS[state.langs?.source];
  if (!script || script.letters.test(text)) return '';
  return ` This text has no ${script.name}: this model translates only from ${ui.model.selectedOptions[0]?.textContent.split(' → ')[0] ?? 'its source language'}, so the output is not a translation of it.`;
}

function showOutput(result) {
  const nodes = [];
  for (const s of result.sentences) {
    const best = s.hypotheses[0];
    const span = el('span', best ? best.text : '', 'sentence');
    span.dataset.index = String(s.index);
    span.dataset.tokens = best ? best.tokens.join(' ') : '';
    span.title = s.source;
    span.tabIndex = 0;
    span.setAttribute('role', 'button'); // Enter or Space shows its details, as a click does
    if (nodes.length > 0) nodes.push(document.createTextNode(' '));
    nodes.push(span);
  }
  ui.output.replaceChildren(...nodes);
  ui.copy.disabled = result.sentences.length === 0;
  ui.copyStatus.textContent = '';
}

function showTimings(result) {
  const t = result.timings;
  const tokens = result.sentences.reduce((sum, s) => sum + (s.hypotheses[0]?.tokens.length ?? 0), 0);
  const perSecond = t.decoder_ms > 0 ? tokens / (t.decoder_ms / 1000) : 0;
  ui.timings.replaceChildren(
    ...[
      ['encoder', `${t.encoder_ms.toFixed(0)} ms`],
      ['decoder', `${t.decoder_ms.toFixed(0)} ms`],
      ['speed', `${perSecond.toFixed(1)} tokens/s`],
      ['steps', String(t.steps)],
      ['total', `${t.total_ms.toFixed(0)} ms`],
      ...(state.engineLabel ? [state.engineLabel] : []),
    ].map(([k, v]) => {
      const item = el('span', '', 'timing');
      item.append(el('b', `${k} `), document.createTextNode(v));
      return item;
    }),
  );
}

function showDetails(result, index) {
  if (result.sentences.length === 0) {
    ui.details.hidden = true;
    return;
  }
  ui.details.hidden = false;
  ui.sentence.replaceChildren(...result.sentences.map((s, i) => {
    const short = s.source.length > 60 ? `${s.source.slice(0, 57)}…` : s.source;
    const option = el('option', `${i + 1}. ${short}`);
    option.value = String(i);
    return option;
  }));
  ui.sentence.value = String(index);
  showSentence(result.sentences[index]);
}

function showSentence(sentence) {
  ui.nbest.replaceChildren(...sentence.hypotheses.map((h) => {
    const li = el('li', '', 'hypothesis');
    li.append(
      el('span', h.text, 'hyp-text'),
      el('span', `score ${h.score.toFixed(3)} · log-prob ${h.logprob.toFixed(2)}`, 'hyp-score'),
    );
    li.dataset.score = String(h.score);
    return li;
  }));
  drawHeatmap(sentence.attention);
}

/** Draws `attention` (target × source weights) with token labels on the canvas. */
function drawHeatmap(attention) {
  const canvas = ui.heatmap;
  const ctx = canvas.getContext('2d');
  if (!attention || attention.source_tokens.length === 0 || attention.target_tokens.length === 0) {
    canvas.width = 1;
    canvas.height = 1;
    canvas.dataset.rows = '0';
    canvas.dataset.cols = '0';
    return;
  }
  const src = attention.source_tokens;
  const tgt = attention.target_tokens;
  const cell = 24;
  const font = '12px system-ui, sans-serif';
  ctx.font = font;
  const labelWidth = (tokens) => Math.min(160, Math.max(...tokens.map((t) => ctx.measureText(t).width)) + 10);
  const left = labelWidth(tgt);
  const top = labelWidth(src);
  const width = left + src.length * cell + 4;
  const height = top + tgt.length * cell + 4;
  const scale = window.devicePixelRatio || 1;
  canvas.width = Math.ceil(width * scale);
  canvas.height = Math.ceil(height * scale);
  canvas.style.width = `${width}px`;
  canvas.style.height = `${height}px`;
  ctx.setTransform(scale, 0, 0, scale, 0, 0);
  const dark = window.matchMedia('(prefers-color-scheme: dark)').matches;
  ctx.fillStyle = dark ? '#1b1b1f' : '#ffffff';
  ctx.fillRect(0, 0, width, height);
  for (let r = 0; r < tgt.length; r++) {
    for (let c = 0; c < src.length; c++) {
      const w = Math.max(0, Math.min(1, attention.weights[r * src.length + c]));
      // white (0) → deep blue (1)
      const shade = (a, b) => Math.round(a + (b - a) * Math.sqrt(w));
      ctx.fillStyle = `rgb(${shade(247, 8)}, ${shade(251, 48)}, ${shade(255, 107)})`;
      ctx.fillRect(left + c * cell, top + r * cell, cell - 1, cell - 1);
    }
  }
  ctx.font = font;
  ctx.fillStyle = dark ? '#e6e6e6' : '#1f2328';
  ctx.textBaseline = 'middle';
  ctx.textAlign = 'right';
  const clip = (t) => (t.length > 20 ? `${t.slice(0, 19)}…` : t);
  tgt.forEach((t, r) => ctx.fillText(clip(t), left - 6, top + r * cell + cell / 2));
  ctx.textAlign = 'left';
  src.forEach((t, c) => {
    ctx.save();
    ctx.translate(left + c * cell + cell / 2, top - 6);
    ctx.rotate(-Math.PI / 2);
    ctx.fillText(clip(t), 0, 0);
    ctx.restore();
  });
  canvas.dataset.rows = String(tgt.length);
  canvas.dataset.cols = String(src.length);
  canvas.setAttribute('aria-label', `Cross-attention: ${tgt.length} target tokens × ${src.length} source tokens`);
}

// ---------------------------------------------------------------- documents

/** A document that cannot be read: `message` says why, and where. */
class DocumentError extends Error {}

/** The line break the text uses most: '\r\n', '\r' or '\n' (written back in the download). */
function lineBreak(text) {
  const crlf = text.split('\r\n').length - 1;
  const cr = text.split('\r').length - 1 - crlf;
  const lf = text.split('\n').length - 1 - crlf;
  if (crlf > 0 && crlf >= lf && crlf >= cr) return '\r\n';
  return cr > lf ? '\r' : '\n';
}

/** Plain text: one segment per line, empty lines kept; a final line break is kept too. */
function parseTxt(text) {
  const lines = text.split(/\r\n|\r|\n/);
  const finalBreak = lines.length > 1 && lines[lines.length - 1] === '';
  if (finalBreak) lines.pop();
  return { kind: 'txt', segments: lines, eol: lineBreak(text), finalBreak };
}

/** `HH:MM:SS,mmm --> HH:MM:SS,mmm` (a dot for the comma and position settings after it pass). */
const SRT_TIMING = /^\s*\d{1,3}:\d{2}:\d{2}[,.]\d{1,3}\s*-->\s*\d{1,3}:\d{2}:\d{2}[,.]\d{1,3}(\s.*)?$/;
/** A line meant as a timing line (a time, then an arrow), whether or not its times parse. */
const SRT_TIMING_LIKE = /^\s*\d{1,3}:\d{2}.*->/; // `.*-+>` took quadratic time on long dash runs
const SRT_NUMBER = /^\s*\d+\s*$/;
/** Markup the model cannot translate: HTML-like tags and ASS overrides such as {\an8}. */
const SRT_MARKUP = /<\/?[a-zA-Z][^>]*>|\{\\[^}]*\}/g;

/**
 * SubRip subtitles: cues of a number line, a timing line, text lines and a blank line. CRLF or
 * CR line breaks, a missing final blank line, a missing number line, cues not separated by a
 * blank line and blank lines inside a cue's text are tolerated: a cue's text runs until a cue
 * number followed by a timing line, or a timing line. Number and timing lines are kept as they
 * are (the download writes them back unchanged). A cue's segment is its text lines joined by a
 * space, without markup.
 */
function parseSrt(text) {
  const lines = text.split(/\r\n|\r|\n/);
  const shown = (line) => (line === undefined ? 'the end of the file' : `“${line.length > 60 ? `${line.slice(0, 57)}…` : line}”`);
  const badTiming = (at) => new DocumentError(`line ${at + 1}: expected a timing line like 00:00:01,000 --> 00:00:04,000, found ${shown(lines[at])}`);
  /** Whether line `at` starts a cue: a number line followed by a timing line, or a timing line. */
  const startsCue = (at) => SRT_TIMING.test(lines[at]) || (SRT_NUMBER.test(lines[at]) && at + 1 < lines.length && SRT_TIMING.test(lines[at + 1]));
  const cues = [];
  let i = 0;
  while (i < lines.length && lines[i].trim() === '') i += 1;
  while (i < lines.length) {
    let number = null;
    if (SRT_NUMBER.test(lines[i])) {
      number = lines[i];
      i += 1;
    } else if (!SRT_TIMING.test(lines[i])) {
      // Only the first cue gets here: a later line that starts no cue is text of the one before.
      if (SRT_TIMING_LIKE.test(lines[i])) throw badTiming(i);
      throw new DocumentError(`line ${i + 1}: expected a cue number, found ${shown(lines[i])}. Is this a SubRip (.srt) file?`);
    }
    if (i >= lines.length || !SRT_TIMING.test(lines[i])) throw badTiming(i);
    const timing = lines[i];
    i += 1;
    const textLines = [];
    for (; i < lines.length && !startsCue(i); i += 1) {
      if (SRT_TIMING_LIKE.test(lines[i])) throw badTiming(i); // a cue whose times do not parse
      textLines.push(lines[i]);
    }
    while (textLines.length > 0 && textLines[textLines.length - 1].trim() === '') textLines.pop();
    cues.push({ number, timing, source: textLines.join('\n') });
  }
  if (cues.length === 0) throw new DocumentError('the file holds no subtitles');
  const segments = cues.map((c) => c.source.replace(SRT_MARKUP, '').split('\n').map((l) => l.trim()).filter((l) => l !== '').join(' '));
  return { kind: 'srt', segments, cues, eol: lineBreak(text) };
}

/** Where `bytes` stop being UTF-8: `{ byte, line }` (both from 1), or null if they are. */
function invalidUtf8(bytes) {
  let line = 1;
  let i = 0;
  while (i < bytes.length) {
    const b = bytes[i];
    let n = 0;
    let min = 0;
    if (b < 0x80) {
      if (b === 0x0a) line += 1;
      i += 1;
      continue;
    } else if (b >= 0xc2 && b <= 0xdf) [n, min] = [1, 0x80];
    else if (b >= 0xe0 && b <= 0xef) [n, min] = [2, 0x800];
    else if (b >= 0xf0 && b <= 0xf4) [n, min] = [3, 0x10000];
    else return { byte: i + 1, line };
    let code = b & (0x3f >> n);
    for (let k = 1; k <= n; k++) {
      const c = bytes[i + k];
      if (c === undefined || (c & 0xc0) !== 0x80) return { byte: i + 1, line };
      code = (code << 6) | (c & 0x3f);
    }
    if (code < min || code > 0x10ffff || (code >= 0xd800 && code <= 0xdfff)) return { byte: i + 1, line };
    i += n + 1;
  }
  return null;
}

/** The kind of document a file name says: 'txt', 'srt', or a DocumentError. */
function documentKind(name) {
  const match = /\.([^.]+)$/.exec(name);
  const ext = match ? match[1].toLowerCase() : '';
  if (ext === 'txt' || ext === 'srt') return ext;
  throw new DocumentError(`“${name}” is not a .txt or .srt file: only plain text (.txt, UTF-8) and SubRip subtitles (.srt) can be translated here`);
}

/** Reads a File as a document: `{ kind, segments, … }`, or throws a DocumentError. */
async function readDocumentFile(file) {
  const kind = documentKind(file.name);
  if (file.size > DOC_MAX_BYTES) {
    throw new DocumentError(`“${file.name}” is ${formatBytes(file.size)}; files up to ${formatBytes(DOC_MAX_BYTES)} can be translated here`);
  }
  const bytes = new Uint8Array(await file.arrayBuffer());
  let text;
  try {
    text = new TextDecoder('utf-8', { fatal: true }).decode(bytes); // drops a BOM
  } catch {
    const at = invalidUtf8(bytes);
    const where = at ? ` (line ${at.line}, byte ${at.byte})` : '';
    throw new DocumentError(`“${file.name}” is not UTF-8 text${where}: save it as UTF-8 and open it again`);
  }
  try {
    return kind === 'srt' ? parseSrt(text) : parseTxt(text);
  } catch (e) {
    if (e instanceof DocumentError) throw new DocumentError(`“${file.name}”, ${e.message}`);
    throw e;
  }
}

/** The download's name: `film.srt` → `film.en.srt`, `film.de.srt` (from German) → `film.en.srt`. */
function downloadName(name, kind) {
  const target = state.langs?.target ?? 'translated';
  let stem = name.replace(/\.[^.]+$/, '');
  const source = state.langs?.source;
  if (source && stem.toLowerCase().endsWith(`.${source.toLowerCase()}`)) stem = stem.slice(0, -source.length - 1);
  return `${stem || 'document'}.${target}.${kind}`;
}

/**
 * The translated document in its own format: a .srt's number and timing lines as they were,
 * each cue's translation on one line (blank lines inside a cue's text are not written).
 */
function serializeDocument(doc) {
  const { eol } = doc.parsed;
  if (doc.parsed.kind === 'txt') return doc.translations.join(eol) + (doc.parsed.finalBreak ? eol : '');
  return doc.parsed.cues
    .map((cue, i) => [...(cue.number === null ? [] : [cue.number]), cue.timing, ...(doc.translations[i] ? [doc.translations[i]] : [])].join(eol))
    .join(eol + eol) + eol;
}

function setDocumentStatus(dataState, text) {
  if (state.doc) ui.docStatus.dataset.doc = String(state.doc.id);
  setStatus(ui.docStatus, dataState, text);
}

function showDocumentProgress(doc) {
  const { done, total } = doc;
  ui.docProgress.max = Math.max(1, total);
  ui.docProgress.value = done;
  ui.docProgress.dataset.done = String(done);
  ui.docProgress.dataset.total = String(total);
  ui.docProgressText.textContent = `${done} / ${total} sentence${total === 1 ? '' : 's'}`;
}

/**
 * Starts translating `parsed` (from parseTxt or parseSrt) named `name`: any document still
 * running is cancelled first.
 */
function startDocument(parsed, name) {
  if (engineGone(ui.docStatus)) return;
  if (state.doc?.state === 'running') cancelDocument();
  let options;
  try {
    // Only the best translation is written, so no n-best list (early termination is exact: the
    // best is the same, in fewer steps) and no heatmaps; before the worker has said its
    // defaults, the wasm defaults otherwise.
    const base = state.defaults ? readOptions() : {};
    options = { ...base, search: { ...base.search, n_best: 1 }, attention: false };
  } catch (e) {
    showDocumentError(e.message);
    return;
  }
  const doc = {
    id: state.nextId++,
    name,
    parsed,
    options,
    translations: new Array(parsed.segments.length).fill(''),
    rows: [], // the preview's rows: { row, text } per segment shown
    done: 0,
    total: 0,
    state: 'running',
    sent: false,
    started: performance.now(),
    firstResultMs: null,
  };
  state.doc = doc;
  ui.docOutput.replaceChildren();
  ui.docOutput.hidden = parsed.segments.length === 0;
  ui.docProgressBox.hidden = false;
  const unit = parsed.kind === 'srt' ? 'subtitles' : 'lines';
  ui.docPreviewNote.hidden = parsed.segments.length <= DOC_PREVIEW_ROWS;
  ui.docPreviewNote.textContent = `The preview shows the first ${DOC_PREVIEW_ROWS.toLocaleString('en')} of ${parsed.segments.length.toLocaleString('en')} ${unit}; the download has them all.`;
  showDocumentProgress(doc);
  ui.docCancel.disabled = false;
  ui.docDownload.disabled = true;
  setDocumentStatus('running', `Translating ${name} (${parsed.segments.length} ${unit})…`);
  if (state.ready) sendDocument(doc);
}

function sendDocument(doc) {
  doc.sent = true;
  state.worker.postMessage({ type: 'document', id: doc.id, segments: doc.parsed.segments, options: doc.options });
}

/** One preview row for segment `index` of `doc`. */
function documentRow(doc, index) {
  const row = el('div', undefined, 'doc-row');
  row.dataset.index = String(index);
  const source = doc.parsed.kind === 'srt' ? doc.parsed.cues[index].source : doc.parsed.segments[index];
  row.title = source;
  if (doc.parsed.kind === 'srt') {
    const cue = doc.parsed.cues[index];
    row.append(el('span', `${cue.number?.trim() ?? index + 1} · ${cue.timing.trim().replace(/\s*-->\s*/, ' → ')}`, 'doc-meta'));
  }
  const text = el('span', '', 'doc-text');
  row.append(text);
  return { row, text };
}

function onDocumentProgress({ id, results, done, total }) {
  const doc = state.doc;
  if (!doc || doc.id !== id || doc.state !== 'running') return;
  // One fragment per message: the rows are laid out once, however many results came.
  const fragment = document.createDocumentFragment();
  const touched = new Set();
  for (const { index, text, last } of results) {
    if (text) doc.translations[index] = doc.translations[index] ? `${doc.translations[index]} ${text}` : text;
    if (index >= DOC_PREVIEW_ROWS) continue;
    if (!doc.rows[index]) {
      doc.rows[index] = documentRow(doc, index);
      fragment.append(doc.rows[index].row);
    }
    if (last) doc.rows[index].row.dataset.complete = 'true';
    touched.add(index);
  }
  for (const index of touched) doc.rows[index].text.textContent = doc.translations[index];
  ui.docOutput.append(fragment);
  if (doc.firstResultMs === null && done > 0) {
    doc.firstResultMs = performance.now() - doc.started;
    ui.docOutput.dataset.firstResultMs = String(Math.round(doc.firstResultMs));
  }
  Object.assign(doc, { done, total });
  showDocumentProgress(doc);
}

function onDocumentDone({ id, done, total, distinct, ms }) {
  const doc = state.doc;
  if (!doc || doc.id !== id || doc.state !== 'running') return;
  Object.assign(doc, { done, total, state: 'done' });
  showDocumentProgress(doc);
  ui.docCancel.disabled = true;
  ui.docDownload.disabled = false;
  const repeats = total - distinct;
  const once = repeats > 0 ? `; ${distinct} different ones: ${repeats} repeat${repeats === 1 ? ' was' : 's were'} not translated again` : '';
  setDocumentStatus('done', `Translated ${total} sentence${total === 1 ? '' : 's'} in ${(ms / 1000).toFixed(1)} s${once}.`);
}

function onDocumentError({ id, error }) {
  const doc = state.doc;
  if (!doc || doc.id !== id) return;
  if (error.kind === 'cancelled') {
    // The worker has stopped working on it (the page stopped listening at Cancel already).
    ui.docStatus.dataset.stopped = String(id);
    if (doc.state === 'running') {
      doc.state = 'cancelled';
      ui.docCancel.disabled = true;
      setDocumentStatus('cancelled', `Stopped after ${doc.done} of ${doc.total} sentences.`);
    }
    return;
  }
  if (doc.state !== 'running') return;
  doc.state = 'error';
  ui.docCancel.disabled = true;
  if (error.kind === 'gpu') restartWorker();
  setDocumentStatus('error', `The document could not be translated. ${describeError(error)}`);
}

/** Marks the running document as failed with `message` (the engine is gone). */
function failDocument(message) {
  const doc = state.doc;
  if (!doc || doc.state !== 'running') return;
  doc.state = 'error';
  ui.docCancel.disabled = true;
  setDocumentStatus('error', message);
}

/** An error about a document that did not start (unreadable file, bad options). */
function showDocumentError(message) {
  ui.docStatus.dataset.doc = String(state.nextId++);
  setStatus(ui.docStatus, 'error', message);
}

function cancelDocument() {
  const doc = state.doc;
  if (!doc || doc.state !== 'running') return;
  doc.state = 'cancelled';
  ui.docCancel.disabled = true;
  if (doc.sent) state.worker.postMessage({ type: 'cancel', id: doc.id });
  setDocumentStatus('cancelled', `Cancelled after ${doc.done} of ${doc.total} sentences.`);
}

async function openDocumentFile(file) {
  let parsed;
  try {
    parsed = await readDocumentFile(file);
  } catch (e) {
    if (state.doc?.state === 'running') cancelDocument();
    showDocumentError(e instanceof DocumentError ? `${e.message}.` : `“${file.name}” could not be read: ${e.message}.`);
    return;
  }
  startDocument(parsed, file.name);
}

/** The text box as a document: subtitles if it holds some, lines otherwise. */
function translatePastedDocument() {
  const text = ui.source.value.replace(/^\uFEFF/, '');
  if (text.trim() === '') {
    showDocumentError('Type or paste some text into the source box first.');
    return;
  }
  const lines = text.split(/\r\n|\r|\n/).filter((l) => l.trim() !== '');
  const looksSrt = lines.length >= 2 && SRT_NUMBER.test(lines[0]) && SRT_TIMING.test(lines[1]);
  let parsed;
  try {
    parsed = looksSrt ? parseSrt(text) : parseTxt(text);
  } catch (e) {
    showDocumentError(`The pasted subtitles: ${e.message}.`);
    return;
  }
  startDocument(parsed, looksSrt ? 'pasted.srt' : 'pasted.txt');
  ui.docStatus.scrollIntoView?.({ block: 'nearest' });
}

function downloadDocument() {
  const doc = state.doc;
  if (!doc || doc.state !== 'done') return;
  const type = doc.parsed.kind === 'srt' ? 'application/x-subrip' : 'text/plain';
  const url = URL.createObjectURL(new Blob([serializeDocument(doc)], { type: `${type};charset=utf-8` }));
  const link = el('a');
  link.href = url;
  link.download = downloadName(doc.name, doc.parsed.kind);
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 60_000);
}

// ---------------------------------------------------------------- diagnostics

function showSelfCheck(report) {
  state.selfcheckPending = false;
  ui.selfcheckRun.disabled = false;
  const a = report.adapter;
  ui.adapter.textContent = `Adapter: ${a.name || 'name not reported by the browser'} (${a.backend}, ${a.device_type})`;
  ui.selfcheckRows.replaceChildren(...report.checks.map((check) => {
    const c = check.comparison;
    const tr = el('tr');
    for (const text of [
      check.kernel,
      check.shape,
      c.max_abs_err.toExponential(2),
      `${c.n_bad} / ${c.len}`,
      c.n_bad === 0 ? 'match' : 'MISMATCH',
    ]) tr.append(el('td', text));
    return tr;
  }));
  const n = report.checks.length;
  if (report.passed) {
    setStatus(ui.selfcheckStatus, 'pass', `All ${n} kernel checks match the reference (atol 1e-4, rtol 1e-4).`);
  } else {
    const bad = report.checks.filter((c) => c.comparison.n_bad !== 0).length;
    setStatus(ui.selfcheckStatus, 'fail', `${bad} of ${n} kernel checks do not match the reference on this adapter.`);
  }
}

function runSelfCheck() {
  if (state.selfcheckPending || engineGone(ui.selfcheckStatus)) return;
  state.selfcheckPending = true;
  ui.selfcheckRun.disabled = true;
  ui.selfcheckRows.replaceChildren();
  setStatus(ui.selfcheckStatus, 'running', 'Checking the WebGPU kernels…');
  state.worker.postMessage({ type: 'selfcheck' });
}

// ---------------------------------------------------------------- wiring

ui.translate.addEventListener('click', requestTranslation);
ui.source.addEventListener('keydown', (event) => {
  if (event.key === 'Enter' && (event.ctrlKey || event.metaKey)) {
    event.preventDefault();
    if (state.ready) requestTranslation();
  }
});
ui.copy.addEventListener('click', async () => {
  const text = state.result?.text ?? '';
  try {
    await navigator.clipboard.writeText(text);
    ui.copyStatus.textContent = 'Copied.';
  } catch {
    // No clipboard permission (e.g. an insecure origin): select the output for Ctrl+C instead.
    const range = document.createRange();
    range.selectNodeContents(ui.output);
    const selection = window.getSelection();
    selection.removeAllRanges();
    selection.addRange(range);
    ui.copyStatus.textContent = 'Selected: press Ctrl+C to copy.';
  }
});
ui.model.addEventListener('change', () => {
  // The worker cancels a running translation when a load arrives.
  const stopped = 'Stopped: the model changed before this translation finished.';
  dropPending('error', `${stopped} Translate again.`);
  loadModel(ui.model.value);
});
ui.engine.addEventListener('change', () => {
  // The same model again, on the other engine (the worker frees the loaded one first).
  state.engine = ui.engine.value;
  const stopped = 'Stopped: the engine changed before this translation finished.';
  dropPending('error', `${stopped} Translate again.`);
  loadModel(state.model ?? ui.model.value);
});
ui.retry.addEventListener('click', () => loadModel(state.model ?? ui.model.value));
ui.sentence.addEventListener('change', () => {
  if (state.result) showSentence(state.result.sentences[Number(ui.sentence.value)]);
});
/** Shows the details of the output sentence `span` (a click, or Enter / Space on it). */
function pickSentence(span) {
  if (!span || !state.result) return;
  const i = state.result.sentences.findIndex((s) => String(s.index) === span.dataset.index);
  if (i >= 0) {
    ui.sentence.value = String(i);
    showSentence(state.result.sentences[i]);
  }
}
ui.output.addEventListener('click', (event) => pickSentence(event.target.closest('.sentence')));
ui.output.addEventListener('keydown', (event) => {
  if (event.key !== 'Enter' && event.key !== ' ') return;
  const span = event.target.closest('.sentence');
  if (!span) return;
  event.preventDefault(); // Space would scroll the page
  pickSentence(span);
});
ui.optReset.addEventListener('click', () => {
  if (state.defaults) fillOptions(state.defaults.search);
});
ui.selfcheckRun.addEventListener('click', runSelfCheck);
ui.translateDocument.addEventListener('click', translatePastedDocument);
ui.docFile.addEventListener('change', () => {
  const file = ui.docFile.files?.[0];
  ui.docFile.value = ''; // the same file again is a change too
  if (file) openDocumentFile(file);
});
ui.docCancel.addEventListener('click', cancelDocument);
ui.docDownload.addEventListener('click', downloadDocument);
ui.dropZone.addEventListener('dragover', (event) => {
  event.preventDefault();
  event.dataTransfer.dropEffect = 'copy';
  ui.dropZone.dataset.over = 'true';
});
ui.dropZone.addEventListener('dragleave', () => {
  ui.dropZone.dataset.over = 'false';
});
ui.dropZone.addEventListener('drop', (event) => {
  event.preventDefault();
  ui.dropZone.dataset.over = 'false';
  const file = event.dataTransfer.files?.[0];
  if (file) openDocumentFile(file);
});
// A file dropped beside the zone must not replace the page with the file.
for (const type of ['dragover', 'drop']) {
  window.addEventListener(type, (event) => {
    if (event.dataTransfer?.types?.includes('Files')) event.preventDefault();
  });
}

/**
 * A rebuilt site's service worker waits (web/sw.js) while this page runs the build it came
 * with: offer to reload into the new one, which takes over only when asked.
 */
function watchForUpdate(registration) {
  let asked = false;
  const offer = (waiting) => {
    ui.update.hidden = false;
    ui.updateReload.onclick = () => {
      asked = true;
      ui.updateReload.disabled = true;
      waiting.postMessage({ type: 'skip-waiting' });
    };
  };
  // Only an update waits: a first visit's service worker takes over at once.
  const track = (installing) =>
    installing?.addEventListener('statechange', () => {
      if (installing.state === 'installed' && navigator.serviceWorker.controller) offer(installing);
    });
  if (registration.waiting && navigator.serviceWorker.controller) offer(registration.waiting);
  track(registration.installing); // an update found before this ran
  registration.addEventListener('updatefound', () => track(registration.installing));
  const hadController = navigator.serviceWorker.controller !== null;
  navigator.serviceWorker.addEventListener('controllerchange', () => {
    if (asked) {
      window.location.reload();
    } else if (hadController) {
      // Another tab took the new build: this one still runs the old, whose files are gone.
      ui.update.firstChild.textContent = 'webnmt was updated in another tab. ';
      ui.update.hidden = false;
      ui.updateReload.disabled = false;
      ui.updateReload.onclick = () => window.location.reload();
    }
  });
}

async function main() {
  if ('serviceWorker' in navigator) {
    navigator.serviceWorker
      .register('sw.js')
      .then(watchForUpdate)
      .catch((e) => console.warn(`offline support unavailable: ${e.message}`));
  }
  startWorker();
  let id;
  try {
    id = await loadIndex();
  } catch (e) {
    setStatus(ui.modelStatus, 'error', `The list of models could not be loaded: ${e.message}.`);
    ui.retry.hidden = false;
    ui.retry.addEventListener('click', () => window.location.reload(), { once: true });
    return;
  }
  // Without WebGPU, or with only an emulated adapter, the worker loads it on the CPU engine.
  loadModel(id);
}

main();
