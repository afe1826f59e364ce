//! The wasm API of the page. Everything here runs inside the page's Web Worker (`web/worker.js`),
//! so translation never blocks the page; the UI (`web/app.js`) only posts messages.
//!
//! - [`Translator::load`] verifies a bundle (format version, sha256 of every file, every
//!   tensor's dtype and shape) before anything touches the GPU, then loads it on the engine the
//!   worker asks for: `"gpu"` opens WebGPU and uploads it ([`Engine`]), `"cpu"` keeps the int8
//!   weights in wasm memory ([`CpuEngine`], simd128 kernels) for browsers without WebGPU.
//! - [`Translator::translate`] translates a text with the search options of the page on
//!   whichever engine is loaded and returns the n-best lists, timings and heatmaps as plain JS
//!   objects (the same shape for both engines).
//! - [`Translator::translate_texts`] translates many texts (a document's sentences) together,
//!   handing each translation to a callback in input order as soon as it is done, and skips
//!   sentences translated before: the translator keeps a [`TranslationCache`] for as long as
//!   its model is loaded (the page's lifetime), as Firefox Translations does.
//!   [`split_sentences`] gives the worker the same sentences the pipeline translates, so it
//!   can count progress in sentences and send the first ones first.
//! - [`self_check`] runs every WebGPU kernel against its CPU reference (the page's diagnostics;
//!   WebGPU only).
//!
//! Errors reach JS as `{ kind, message }`: `kind` is `no-webgpu`, `integrity` (a file does not
//! match the manifest's sha256 or size), `bundle` (any other bundle problem), `options`, `gpu`
//! (a GPU failure, including device loss: the page restarts the worker once, and only for
//! this kind; never from the CPU engine), `tokenizer`, `search`, `internal` (a result that
//! cannot become a JS value, an unknown engine name, or a broken contract inside the CPU
//! engine) or `cancelled`.

use crate::config::ModelConfig;
use crate::cpu::{CpuEncoded, CpuEngine, CpuError};
use crate::gpu::{AdapterSummary, Gpu, GpuError};
use crate::infer::{Engine, EngineError, UploadError};
use crate::search::{SearchOptions, SearchResult};
use crate::selfcheck;
use crate::tokenizer::Tokenizer;
use crate::translate::{
    SearchStats, TranslateError, TranslateOptions, Translation, TranslationCache,
    TranslationEngine, text, translate,
};
use crate::weights::{Bundle, BundleError};
use serde::Serialize;
use std::cell::{Cell, RefCell};
use wasm_bindgen::prelude::*;

/// The seed of the self-check inputs (any value works; fixed so runs are comparable).
const SELFCHECK_SEED: u64 = 2024;

/// Runs when the module loads: panics go to the console and to `self.onwasmpanic` (set by the
/// worker, which reports the panic and lets the page start a fresh worker).
#[wasm_bindgen(start)]
pub fn start() {
    std::panic::set_hook(Box::new(|info| {
        let message = info.to_string();
        web_sys::console::error_1(&JsValue::from_str(&message));
        let global = js_sys::global();
        if let Ok(hook) = js_sys::Reflect::get(&global, &JsValue::from_str("onwasmpanic"))
            && let Some(hook) = hook.dyn_ref::<js_sys::Function>()
        {
            let _ = hook.call1(&JsValue::NULL, &JsValue::from_str(&message));
        }
    }));
}

/// A JS error object `{ kind, message }`.
#[derive(Serialize)]
struct WebError {
    kind: &'static str,
    message: String,
}

fn error(kind: &'static str, message: impl ToString) -> JsValue {
    let e = WebError {
        kind,
        message: message.to_string(),
    };
    serde_wasm_bindgen::to_value(&e).unwrap_or_else(|_| JsValue::from_str(&e.message))
}

fn gpu_error(e: GpuError) -> JsValue {
    match e {
        GpuError::WebGpuUnavailable => error("no-webgpu", e),
        other => error("gpu", other),
    }
}

fn bundle_error(e: BundleError) -> JsValue {
    match e {
        BundleError::Integrity { .. } => error("integrity", e),
        other => error("bundle", other),
    }
}

fn engine_error(e: EngineError) -> JsValue {
    match e {
        EngineError::Gpu(g) | EngineError::Upload(UploadError::Gpu(g)) => gpu_error(g),
        EngineError::Upload(UploadError::Bundle(b)) => bundle_error(b),
        EngineError::Options(_) | EngineError::TooManyCandidates { .. } => error("options", e),
        EngineError::Search(_) => error("search", e),
    }
}

/// The CPU engine's errors: never `gpu` (the page restarts the worker only for GPU failures).
fn cpu_error(e: CpuError) -> JsValue {
    match e {
        CpuError::Bundle(b) => bundle_error(b),
        CpuError::Fuse { .. } => error("bundle", e),
        CpuError::Options(_) => error("options", e),
        CpuError::Search(_) => error("search", e),
        // The pipeline never asks for these, and the page's engine has no pool threads: a bug
        // here, not a problem of the model or options.
        CpuError::Request(_) | CpuError::Step(_) | CpuError::Threads(_) => error("internal", e),
    }
}

fn translate_error<E>(e: TranslateError<E>, engine_error: impl FnOnce(E) -> JsValue) -> JsValue
where
    E: std::error::Error + 'static,
{
    match e {
        TranslateError::Engine(e) => engine_error(e),
        TranslateError::Tokenizer(_) => error("tokenizer", e),
        TranslateError::Cancelled => error("cancelled", e),
        TranslateError::MissingResults { .. } => internal_error(e),
    }
}

/// A result that could not be turned into a JS value: a bug here, not a GPU failure (the page
/// restarts the worker only for `gpu`).
fn internal_error(e: impl ToString) -> JsValue {
    error("internal", e)
}

/// What the page shows about a loaded model.
#[derive(Serialize)]
struct Info<'a> {
    /// `gpu` or `cpu`.
    engine: &'static str,
    /// The WebGPU adapter, or for the CPU engine a stand-in naming it ([`cpu_summary`]).
    adapter: &'a AdapterSummary,
    source_lang: &'a str,
    target_lang: &'a str,
    parameters: usize,
    load_ms: f64,
    metrics: &'a serde_json::Value,
}

/// What the page shows as the "adapter" of the CPU engine.
fn cpu_summary() -> AdapterSummary {
    let simd = cfg!(target_feature = "simd128");
    AdapterSummary {
        name: if simd {
            "CPU (WebAssembly SIMD)"
        } else {
            "CPU (WebAssembly)"
        }
        .into(),
        // The kernels, with the relaxed build's int8 dot mode: "wasm simd128 + relaxed-simd
        // (unsigned int8 dot)".
        backend: format!("wasm {}", crate::cpu::matmul::simd_name()),
        driver: String::new(),
        device_type: "Cpu".into(),
    }
}

/// Lets the worker's event loop run once (a `setTimeout(0)` task). The CPU engine computes
/// without awaiting anything, so without this a newer request could not reach the worker, and
/// make `cancelled` answer true, before the whole text was translated.
async fn yield_to_event_loop() {
    let promise = js_sys::Promise::new(&mut |resolve, _reject| {
        let global = js_sys::global();
        let set_timeout = js_sys::Reflect::get(&global, &JsValue::from_str("setTimeout"))
            .ok()
            .and_then(|f| f.dyn_into::<js_sys::Function>().ok());
        let scheduled =
            set_timeout.is_some_and(|f| f.call2(&global, &resolve, &JsValue::from(0)).is_ok());
        if !scheduled {
            let _ = resolve.call0(&JsValue::NULL);
        }
    });
    let _ = wasm_bindgen_futures::JsFuture::from(promise).await;
}

/// The CPU engine as the page runs it: the same engine, yielding to the worker's event loop
/// before each encoder batch and, during a search, before a decoder step once
/// [`YIELD_EVERY_MS`] have passed ([`CpuEngine::set_pause`]), so a newer request reaches the
/// worker and cancels the search between two steps, as it does on the GPU engine (whose
/// readbacks yield by themselves).
struct PageCpuEngine(CpuEngine);

/// The longest the page's CPU engine computes without letting the worker's event loop run.
const YIELD_EVERY_MS: f64 = 30.0;

impl PageCpuEngine {
    fn new(mut engine: CpuEngine) -> Self {
        engine.set_pause(|| Box::pin(yield_to_event_loop()), YIELD_EVERY_MS);
        Self(engine)
    }
}

impl TranslationEngine for PageCpuEngine {
    type Error = CpuError;
    type Encoded = CpuEncoded;

    fn config(&self) -> &ModelConfig {
        self.0.config()
    }

    fn source_tokenizer(&self) -> &Tokenizer {
        self.0.source_tokenizer()
    }

    fn target_tokenizer(&self) -> &Tokenizer {
        self.0.target_tokenizer()
    }

    fn check_options(&self, options: &SearchOptions) -> Result<(), CpuError> {
        self.0.check_options(options)
    }

    async fn encode(&self, sources: &[Vec<u32>]) -> Result<CpuEncoded, CpuError> {
        yield_to_event_loop().await;
        self.0.encode(sources).await
    }

    async fn search(
        &self,
        encoded: &CpuEncoded,
        pieces: &[usize],
        options: &SearchOptions,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<(Vec<SearchResult>, SearchStats), CpuError> {
        yield_to_event_loop().await;
        self.0.search(encoded, pieces, options, cancelled).await
    }

    async fn cross_attention(
        &self,
        encoded: &CpuEncoded,
        i: usize,
        target_in: &[u32],
    ) -> Result<Vec<f32>, CpuError> {
        self.0.cross_attention(encoded, i, target_in).await
    }
}

/// Runs `$body` with `$engine` bound to the loaded engine (`&impl TranslationEngine`) and
/// `$error` to the function that turns its errors into the page's error objects.
macro_rules! on_engine {
    ($loaded:expr, |$engine:ident, $error:ident| $body:expr) => {
        match $loaded {
            Loaded::Gpu(e) => {
                let ($engine, $error) = (e.as_ref(), engine_error);
                $body
            }
            Loaded::Cpu(e) => {
                let ($engine, $error) = (e.as_ref(), cpu_error);
                $body
            }
        }
    };
}

/// The engine a [`Translator`] runs on (boxed: both hold kilobytes of handles and tables inline).
enum Loaded {
    Gpu(Box<Engine>),
    Cpu(Box<PageCpuEngine>),
}

/// A loaded model, on WebGPU or on the CPU.
#[wasm_bindgen]
pub struct Translator {
    engine: Loaded,
    adapter: AdapterSummary,
    source_lang: String,
    target_lang: String,
    metrics: serde_json::Value,
    /// The translations of document sentences searched so far with this model, so a sentence
    /// that comes again (in the same document or a later one) is not searched again. Used by
    /// [`Translator::translate_texts`] only: the interactive box asks for heatmaps, and the
    /// cache holds one set of options at a time.
    document_cache: RefCell<TranslationCache>,
}

/// `options` as the page sends them: a `TranslateOptions` object whose missing fields take the
/// defaults, or nothing for all defaults.
fn parse_options(options: JsValue) -> Result<TranslateOptions, JsValue> {
    if options.is_undefined() || options.is_null() {
        Ok(TranslateOptions::default())
    } else {
        serde_wasm_bindgen::from_value(options).map_err(|e| error("options", e))
    }
}

/// Runs [`crate::translate::translate_texts`] on `engine`, handing each translation to
/// `on_text` as a JS value. A failing `on_text` (a JS exception, or a translation that cannot
/// become a JS value) stops the work at the next batch, and its error is the result.
async fn translate_texts_on<E: TranslationEngine>(
    engine: &E,
    texts: &[&str],
    options: &TranslateOptions,
    cancelled: &dyn Fn() -> bool,
    cache: &mut TranslationCache,
    on_text: &js_sys::Function,
    engine_error: impl FnOnce(E::Error) -> JsValue,
) -> Result<(), JsValue> {
    let mut failure: Option<JsValue> = None;
    let failed = Cell::new(false);
    let is_cancelled = || failed.get() || cancelled();
    let mut hand_out = |index: usize, translation: Translation| {
        if failed.get() {
            return;
        }
        let handed = translation
            .serialize(&serde_wasm_bindgen::Serializer::json_compatible())
            .map_err(internal_error)
            .and_then(|value| {
                on_text
                    .call2(&JsValue::NULL, &JsValue::from(index as f64), &value)
                    .map(drop)
            });
        if let Err(e) = handed {
            failed.set(true);
            failure = Some(e);
        }
    };
    let result = crate::translate::translate_texts(
        engine,
        texts,
        options,
        &is_cancelled,
        Some(cache),
        &mut hand_out,
    )
    .await;
    if let Some(e) = failure {
        return Err(e);
    }
    result.map_err(|e| translate_error(e, engine_error))
}

#[wasm_bindgen]
impl Translator {
    /// Verifies and loads a bundle: `manifest` is `manifest.json`, `files` an object mapping
    /// each other file name of the manifest to its bytes (`Uint8Array`), `engine` `"gpu"`
    /// (WebGPU) or `"cpu"` (the int8 CPU engine in wasm).
    pub async fn load(
        manifest: Vec<u8>,
        files: JsValue,
        engine: String,
    ) -> Result<Translator, JsValue> {
        let on_gpu = match engine.as_str() {
            "gpu" => true,
            "cpu" => false,
            other => {
                return Err(internal_error(format!(
                    "unknown engine '{other}': use \"gpu\" or \"cpu\""
                )));
            }
        };
        let bundle = Bundle::from_files(&manifest, |name| {
            let value = js_sys::Reflect::get(&files, &JsValue::from_str(name))
                .map_err(|_| "not given".to_string())?;
            if value.is_undefined() {
                return Err("not downloaded".into());
            }
            Ok(js_sys::Uint8Array::new(&value).to_vec())
        })
        .map_err(bundle_error)?;
        let (source_lang, target_lang) = (
            bundle.manifest.source_lang.clone(),
            bundle.manifest.target_lang.clone(),
        );
        let metrics = bundle.manifest.metrics.clone();
        let (engine, adapter) = if on_gpu {
            let gpu = Gpu::new().await.map_err(gpu_error)?;
            let adapter = gpu.adapter().clone();
            let engine = Engine::new(gpu, bundle).await.map_err(engine_error)?;
            (Loaded::Gpu(Box::new(engine)), adapter)
        } else {
            let engine = CpuEngine::new(bundle).map_err(cpu_error)?;
            (
                Loaded::Cpu(Box::new(PageCpuEngine::new(engine))),
                cpu_summary(),
            )
        };
        Ok(Translator {
            engine,
            adapter,
            source_lang,
            target_lang,
            metrics,
            document_cache: RefCell::default(),
        })
    }

    /// `{ engine, adapter, source_lang, target_lang, parameters, load_ms, metrics }`.
    pub fn info(&self) -> Result<JsValue, JsValue> {
        let (engine, parameters, load_ms) = match &self.engine {
            Loaded::Gpu(e) => ("gpu", e.config().n_params(), e.load_ms),
            Loaded::Cpu(e) => ("cpu", e.config().n_params(), e.0.load_ms),
        };
        let info = Info {
            engine,
            adapter: &self.adapter,
            source_lang: &self.source_lang,
            target_lang: &self.target_lang,
            parameters,
            load_ms,
            metrics: &self.metrics,
        };
        serde_wasm_bindgen::to_value(&info).map_err(internal_error)
    }

    /// Translates `text` with `options` (a `TranslateOptions` object; missing fields take the
    /// defaults of [`default_options`]). `cancelled` is called before each encoder batch and
    /// between decoder steps; when it returns true the translation stops with a `cancelled`
    /// error.
    pub async fn translate(
        &self,
        text: String,
        options: JsValue,
        cancelled: js_sys::Function,
    ) -> Result<JsValue, JsValue> {
        let options = parse_options(options)?;
        let is_cancelled = || cancelled.call0(&JsValue::NULL).is_ok_and(|v| v.is_truthy());
        let translation: Translation = on_engine!(&self.engine, |engine, engine_error| {
            translate(engine, &text, &options, &is_cancelled)
                .await
                .map_err(|e| translate_error(e, engine_error))
        })?;
        translation
            .serialize(&serde_wasm_bindgen::Serializer::json_compatible())
            .map_err(internal_error)
    }

    /// Translates `texts` (an array of strings: lines, paragraphs or single sentences) with
    /// `options` as [`Translator::translate`] translates each, decoding `options.batch`
    /// sentences per step across texts, and calls `on_text(index, translation)` for each text
    /// in input order as soon as it and every text before it are done (`translation` has the
    /// shape `translate` returns). Sentences searched before with this model and the same
    /// options come from its cache; identical sentences are searched once. `cancelled` is
    /// called before each encoder batch and between decoder steps; when it returns true the
    /// work stops with a `cancelled` error (the texts handed out so far stay valid).
    #[wasm_bindgen(js_name = translateTexts)]
    pub async fn translate_texts(
        &self,
        texts: Vec<String>,
        options: JsValue,
        cancelled: js_sys::Function,
        on_text: js_sys::Function,
    ) -> Result<(), JsValue> {
        let options = parse_options(options)?;
        let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
        let is_cancelled = || cancelled.call0(&JsValue::NULL).is_ok_and(|v| v.is_truthy());
        // Taken out for the call (no borrow lives across an await): a second call running at
        // the same time starts from an empty cache, and the last one to finish keeps its own.
        let mut cache = self.document_cache.take();
        let result = on_engine!(&self.engine, |engine, engine_error| {
            translate_texts_on(
                engine,
                &texts,
                &options,
                &is_cancelled,
                &mut cache,
                &on_text,
                engine_error,
            )
            .await
        });
        *self.document_cache.borrow_mut() = cache;
        result
    }
}

/// The sentences of `text` as the translation pipeline splits them (trimmed, blank ones
/// dropped, line breaks always ending one): the units of a document's progress. Translating
/// each alone and joining the translations with spaces gives the text's translation.
#[wasm_bindgen(js_name = splitSentences)]
pub fn split_sentences(text: &str) -> Vec<String> {
    text::split_sentences(text)
        .into_iter()
        .map(str::to_string)
        .collect()
}

/// The decoding defaults (the reference implementation's): beam 8, 4 groups, diversity 0.5,
/// length penalty 0.6, repetition penalty 1.5 over 30 tokens; plus our repeat block of 4.
#[wasm_bindgen(js_name = defaultOptions)]
pub fn default_options() -> Result<JsValue, JsValue> {
    TranslateOptions::default()
        .serialize(&serde_wasm_bindgen::Serializer::json_compatible())
        .map_err(|e| error("options", e))
}

/// The sentence the page shows when this browser has no WebGPU (which browsers and settings
/// have it): the one text of that message, for the worker to send without opening a GPU.
#[wasm_bindgen(js_name = noWebgpuMessage)]
pub fn no_webgpu_message() -> String {
    GpuError::WebGpuUnavailable.to_string()
}

/// The CPU engine's int8 product on fixed data ([`crate::cpu::matmul::Int8Probe`]): worker.js
/// times `run` in both wasm builds and keeps the faster.
#[wasm_bindgen]
pub struct KernelProbe(crate::cpu::matmul::Int8Probe);

#[wasm_bindgen]
impl KernelProbe {
    #[wasm_bindgen(constructor)]
    pub fn new() -> Self {
        Self(crate::cpu::matmul::Int8Probe::new())
    }

    /// Runs the product `reps` times; returns a sum of its results (equal in both builds).
    pub fn run(&self, reps: u32) -> f32 {
        self.0.run(reps as usize)
    }
}

impl Default for KernelProbe {
    fn default() -> Self {
        Self::new()
    }
}

/// Opens WebGPU and runs every kernel check: `{ adapter, checks, passed }`. WebGPU only: without
/// it this fails with `no-webgpu` (the CPU engine's kernels are checked by the native tests).
#[wasm_bindgen(js_name = selfCheck)]
pub async fn self_check() -> Result<JsValue, JsValue> {
    let gpu = Gpu::new().await.map_err(gpu_error)?;
    let report = selfcheck::run(&gpu, SELFCHECK_SEED)
        .await
        .map_err(gpu_error)?;
    report
        .serialize(&serde_wasm_bindgen::Serializer::json_compatible())
        .map_err(internal_error)
}
