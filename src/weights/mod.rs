//! Model weights: the int8 layout of one matrix ([`QuantizedMatrix`]) and the model bundle
//! ([`Bundle`]) that `train` exports and the engine loads, validated before anything reaches
//! the GPU.
//!
//! # Int8 layout
//! A linear layer's weight `W` of shape `[n, k]` (output features × input features, the
//! PyTorch orientation; burn stores `[k, n]`, and [`names`] converts between the two) is quantized
//! symmetrically per output row: `scale[r] = max_i |W[r, i]| / 127`, `q[r, i] =
//! round(W[r, i] / scale[r])` in `-127..=127`. Four consecutive values of a row are packed
//! little-endian into one `u32` (byte `j` of word `c` holds `q[r, 4c + j]`), so `k` must be a
//! multiple of 4 — which is exactly the row-major int8 byte order of the same matrix, so the
//! bundle's I8 tensors upload to the GPU unchanged. One scale per row keeps the kernels simple
//! and the error small for the row-normalised weights of a Transformer.

mod bundle;
pub mod names;
mod quant;

pub use bundle::{
    Bundle, BundleError, FORMAT_VERSION, FileEntry, MANIFEST, Manifest, SOURCE_TOKENIZER,
    TARGET_TOKENIZER, TensorSpec, WEIGHTS, tensor_specs,
};
#[cfg(not(target_arch = "wasm32"))]
pub use bundle::{replace_dir, write_bundle};
pub use quant::{QuantError, QuantizedMatrix};
