//! webnmt: neural machine translation that runs in the browser on WebGPU.
//!
//! This crate is shared by the web page (compiled to wasm, feature `web`) and the native tools.
//! Module map (see `README.md` and `ARCHITECTURE` notes there):
//! - [`gpu`]: adapter and device setup for both targets, pipeline cache, buffers, readback;
//! - [`kernels`]: one WGSL compute shader per file, each with a small Rust driver;
//! - [`reference`]: a plain-Rust f32 version of every kernel, the oracle for tests;
//! - [`weights`]: the int8 weight layout and its quantize/dequantize reference;
//! - [`selfcheck`]: runs every kernel against its reference on seeded inputs (native tests and
//!   the page both use it);
//! - [`search`]: beam search (diverse groups, length and repetition penalties) over a
//!   [`search::StepModel`], CPU only and engine-agnostic;
//! - [`eval`]: sacreBLEU-compatible BLEU and chrF, and the reference implementation's error
//!   analysis.

pub mod eval;
pub mod gpu;
pub mod kernels;
pub mod reference;
pub mod search;
pub mod selfcheck;
pub mod weights;

#[cfg(all(feature = "web", target_arch = "wasm32"))]
pub mod web;
