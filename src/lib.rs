//! webnmt: neural machine translation that runs in the browser on WebGPU.
//!
//! This crate is shared by the web page (compiled to wasm, feature `web`) and the native tools.
//! Module map (see `README.md`):
//! - [`config`]: `ModelConfig`, the one source of model hyperparameters;
//! - [`positions`]: the sinusoidal positional table (model, engine and reference share it);
//! - [`layout`]: sizes and buffer layouts of kernel calls, shared by kernels and references;
//! - [`gpu`]: adapter and device setup for both targets, pipeline cache, buffers, readback;
//! - [`kernels`]: one WGSL compute shader per file, each with a small Rust driver;
//! - [`reference`]: a plain-Rust f32 version of every kernel, the oracle for tests;
//! - [`weights`]: the int8 weight layout, the tensor names and the validated model bundle;
//! - [`selfcheck`]: runs every kernel against its reference on seeded inputs (native tests and
//!   the page both use it);
//! - [`infer`]: the GPU engine (encoder pass, decoder step, teacher-forced pass);
//! - [`cpu`]: the CPU engine over the same bundle (int8 weights in memory, SIMD int8 matrix
//!   products, KV cache), for machines and browsers without WebGPU;
//! - [`translate`]: text in → text out for every engine (sentences, chunks, encoder batches,
//!   n-best lists, heatmaps, timings) over a [`translate::TranslationEngine`];
//! - [`search`]: beam search (diverse groups, length and repetition penalties) over a
//!   [`search::StepModel`], CPU only and engine-agnostic;
//! - [`eval`]: sacreBLEU-compatible BLEU and chrF, and the reference implementation's error
//!   analysis;
//! - [`tokenizer`]: SentencePiece-style Unigram tokenizers (`tokenizer.json`), trained natively;
//! - feature `train` (native): [`data`] (corpora, cleaning, batches), [`model`] (the burn
//!   Transformer), [`train`] (the training loop), [`export`] (checkpoint → bundle).

#[cfg(feature = "cli")]
pub mod cli;
pub mod config;
pub mod cpu;
#[cfg(feature = "train")]
pub mod data;
pub mod eval;
#[cfg(feature = "train")]
pub mod export;
pub mod gpu;
pub mod infer;
pub mod kernels;
pub mod layout;
#[cfg(feature = "train")]
pub mod model;
pub mod positions;
pub mod reference;
pub mod search;
pub mod selfcheck;
pub mod tokenizer;
#[cfg(feature = "train")]
pub mod train;
pub mod translate;
pub mod weights;

#[cfg(all(feature = "web", target_arch = "wasm32"))]
pub mod web;
