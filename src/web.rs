//! The wasm API of the page. Everything here runs inside the page's Web Worker (`web/worker.js`),
//! so translation never blocks the page; the UI (`web/app.js`) only posts messages.
//!
//! - [`Translator::load`] verifies a bundle (format version, sha256 of every file, every
//!   tensor's dtype and shape) before anything touches the GPU, opens WebGPU and uploads it.
//! - [`Translator::translate`] translates a text with the search options of the page and
//!   returns the n-best lists, timings and heatmaps as plain JS objects.
//! - [`self_check`] runs every kernel against its CPU reference (the page's diagnostics).
//!
//! Errors reach JS as `{ kind, message }`: `kind` is `no-webgpu`, `integrity` (a file does not
//! match the manifest's sha256 or size), `bundle` (any other bundle problem), `options`, `gpu`
//! (a GPU failure, including device loss: the page restarts the worker once, and only for
//! this kind), `tokenizer`, `search`, `internal` (a result that cannot become a JS value) or
//! `cancelled`.

use crate::gpu::{AdapterSummary, Gpu, GpuError};
use crate::infer::{Engine, EngineError, UploadError};
use crate::selfcheck;
use crate::translate::{TranslateError, TranslateOptions, TranslationEngine, translate};
use crate::weights::{Bundle, BundleError};
use serde::Serialize;
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

fn translate_error(e: TranslateError<EngineError>) -> JsValue {
    match e {
        TranslateError::Engine(e) => engine_error(e),
        TranslateError::Tokenizer(_) => error("tokenizer", e),
        TranslateError::Cancelled => error("cancelled", e),
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
    adapter: &'a AdapterSummary,
    source_lang: &'a str,
    target_lang: &'a str,
    parameters: usize,
    load_ms: f64,
    metrics: &'a serde_json::Value,
}

/// A loaded model on the GPU.
#[wasm_bindgen]
pub struct Translator {
    engine: Engine,
    adapter: AdapterSummary,
    source_lang: String,
    target_lang: String,
    metrics: serde_json::Value,
}

#[wasm_bindgen]
impl Translator {
    /// Verifies and loads a bundle: `manifest` is `manifest.json`, `files` an object mapping
    /// each other file name of the manifest to its bytes (`Uint8Array`).
    pub async fn load(manifest: Vec<u8>, files: JsValue) -> Result<Translator, JsValue> {
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
        let gpu = Gpu::new().await.map_err(gpu_error)?;
        let adapter = gpu.adapter().clone();
        let engine = Engine::new(gpu, bundle).await.map_err(engine_error)?;
        Ok(Translator {
            engine,
            adapter,
            source_lang,
            target_lang,
            metrics,
        })
    }

    /// `{ adapter, source_lang, target_lang, parameters, load_ms, metrics }`.
    pub fn info(&self) -> Result<JsValue, JsValue> {
        let info = Info {
            adapter: &self.adapter,
            source_lang: &self.source_lang,
            target_lang: &self.target_lang,
            parameters: self.engine.config().n_params(),
            load_ms: self.engine.load_ms,
            metrics: &self.metrics,
        };
        serde_wasm_bindgen::to_value(&info).map_err(internal_error)
    }

    /// Translates `text` with `options` (a `TranslateOptions` object; missing fields take the
    /// defaults of [`default_options`]). `cancelled` is called before each sentence; when it
    /// returns true the translation stops with a `cancelled` error.
    pub async fn translate(
        &self,
        text: String,
        options: JsValue,
        cancelled: js_sys::Function,
    ) -> Result<JsValue, JsValue> {
        let options: TranslateOptions = if options.is_undefined() || options.is_null() {
            TranslateOptions::default()
        } else {
            serde_wasm_bindgen::from_value(options).map_err(|e| error("options", e))?
        };
        let is_cancelled = || cancelled.call0(&JsValue::NULL).is_ok_and(|v| v.is_truthy());
        let translation = translate(&self.engine, &text, &options, &is_cancelled)
            .await
            .map_err(translate_error)?;
        translation
            .serialize(&serde_wasm_bindgen::Serializer::json_compatible())
            .map_err(internal_error)
    }
}

/// The decoding defaults (the reference implementation's): beam 8, 4 groups, diversity 0.5,
/// length penalty 0.6, repetition penalty 1.5 over 30 tokens.
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

/// Opens WebGPU and runs every kernel check: `{ adapter, checks, passed }`.
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
