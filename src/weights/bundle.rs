//! The model bundle: a folder (or a set of fetched files) holding
//! - `manifest.json`: format and version, languages, the [`ModelConfig`], the size and sha256 of
//!   every other file, and the training metrics;
//! - `model.safetensors`: every weight under its burn module path, linear and embedding
//!   matrices as I8 `[n, k]` with an F32 `<name>_scale` `[n]` beside them, biases and LayerNorm
//!   `gamma` / `beta` as F32 (the full list is [`tensor_specs`]);
//! - `source.tokenizer.json` and `target.tokenizer.json`.
//!
//! [`Bundle::from_files`] checks all of it — version, hashes, sizes, safetensors header, every
//! tensor's dtype and shape against the config, tokenizers and their vocabulary sizes — and
//! returns one [`BundleError`] naming the problem, before any GPU allocation.

use super::names::{self, AttentionNames, Stack};
use super::{QuantError, QuantizedMatrix};
use crate::config::{ConfigError, ModelConfig};
use crate::tokenizer::Tokenizer;
use safetensors::{Dtype, SafeTensors};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;

/// The bundle format this build reads and writes.
pub const FORMAT_VERSION: u32 = 1;
/// The manifest's file name.
pub const MANIFEST: &str = "manifest.json";
/// The weights' file name.
pub const WEIGHTS: &str = "model.safetensors";
/// The source tokenizer's file name.
pub const SOURCE_TOKENIZER: &str = "source.tokenizer.json";
/// The target tokenizer's file name.
pub const TARGET_TOKENIZER: &str = "target.tokenizer.json";
const FORMAT_NAME: &str = "webnmt-bundle";

/// Size and hash of one bundle file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileEntry {
    pub bytes: u64,
    /// Lower-case hex sha256 of the file.
    pub sha256: String,
}

/// `manifest.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// Always `webnmt-bundle`.
    pub format: String,
    pub format_version: u32,
    /// Language codes, e.g. `ko` and `en`.
    pub source_lang: String,
    pub target_lang: String,
    pub model: ModelConfig,
    /// Every file of the bundle except the manifest.
    pub files: BTreeMap<String, FileEntry>,
    /// Training and evaluation figures (free-form, shown to users).
    #[serde(default)]
    pub metrics: serde_json::Value,
}

/// Everything that can be wrong with a bundle. Each message names the file or tensor.
#[derive(Debug, thiserror::Error)]
pub enum BundleError {
    #[error("the bundle's weights do not fit the model it describes: {0}")]
    ModelMismatch(String),
    #[error("{file} is missing from the model bundle: {reason}")]
    MissingFile { file: String, reason: String },
    #[error("manifest.json is not a valid webnmt manifest: {0}")]
    Manifest(String),
    #[error(
        "the model bundle has format version {found}, this build reads version {expected}; \
         re-export the model with this version of `train`, or update the app"
    )]
    Version { found: u32, expected: u32 },
    #[error(
        "{file} is damaged: expected {expected_bytes} bytes with sha256 {expected}, got \
         {actual_bytes} bytes with sha256 {actual}; download or copy it again"
    )]
    Integrity {
        file: String,
        expected: String,
        actual: String,
        expected_bytes: u64,
        actual_bytes: u64,
    },
    #[error("the manifest's model config is invalid: {0}")]
    Config(#[from] ConfigError),
    #[error("model.safetensors is not a valid safetensors file: {0}")]
    Safetensors(String),
    #[error("model.safetensors lacks tensor {0}")]
    MissingTensor(String),
    #[error("model.safetensors has tensor {0}, which this model config does not use")]
    UnexpectedTensor(String),
    #[error("tensor {name} is {found_dtype} {found_shape:?}, the config needs {dtype} {shape:?}")]
    TensorMismatch {
        name: String,
        dtype: String,
        shape: Vec<usize>,
        found_dtype: String,
        found_shape: Vec<usize>,
    },
    #[error("tensor {name} holds a value that is not a finite number")]
    NotFinite { name: String },
    /// An int8 weight of −128: `train` quantizes to −127..=127 (symmetric), and the CPU
    /// engine's kernels rely on it (they negate weights).
    #[error(
        "int8 tensor {name} holds -128 at index {index}; webnmt bundles hold -127..=127, so this \
         file was not written by `train`: re-export the model with `train`"
    )]
    Int8Range { name: String, index: usize },
    /// Writing: a matrix could not be quantized to int8 (wrong number of values, `k` not a
    /// multiple of 4, or a NaN or infinite weight).
    #[error("cannot quantize tensor {name} to int8: {reason}")]
    Quantize { name: String, reason: QuantError },
    #[error("{file} is not a usable tokenizer: {reason}")]
    Tokenizer { file: String, reason: String },
    #[error("{file} has {found} tokens but the model config says {expected}")]
    VocabMismatch {
        file: String,
        found: usize,
        expected: usize,
    },
    #[error("cannot write the bundle to {path}: {reason}")]
    Write { path: String, reason: String },
}

/// One tensor the config requires.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorSpec {
    pub name: String,
    pub dtype: Dtype,
    pub shape: Vec<usize>,
}

/// Every tensor of a bundle for `config`, in a fixed order (names from [`names`]).
pub fn tensor_specs(config: &ModelConfig) -> Vec<TensorSpec> {
    let mut specs = Specs(Vec::new());
    let (d, d_ff) = (config.d_model, config.d_ff);
    for (stack, vocab, layers) in [
        (Stack::Encoder, config.src_vocab_size, config.n_enc_layers),
        (Stack::Decoder, config.tgt_vocab_size, config.n_dec_layers),
    ] {
        specs.matrix(&names::embedding(stack), vocab, d);
        for l in 0..layers {
            let layer = names::layer(stack, l);
            specs.attention(&layer.self_attn, d);
            specs.norm(&layer.self_attn_norm, d);
            if let Some((cross_attn, norm)) = &layer.cross_attn {
                specs.attention(cross_attn, d);
                specs.norm(norm, d);
            }
            specs.linear(&layer.ffn_linear1, d, d_ff);
            specs.linear(&layer.ffn_linear2, d_ff, d);
            specs.norm(&layer.ffn_norm, d);
        }
    }
    specs.0
}

struct Specs(Vec<TensorSpec>);

impl Specs {
    fn push(&mut self, name: String, dtype: Dtype, shape: Vec<usize>) {
        self.0.push(TensorSpec { name, dtype, shape });
    }

    /// An int8 matrix `[n, k]` and its per-row scales.
    fn matrix(&mut self, module: &str, n: usize, k: usize) {
        self.push(names::weight(module), Dtype::I8, vec![n, k]);
        self.push(names::weight_scale(module), Dtype::F32, vec![n]);
    }

    fn linear(&mut self, module: &str, d_in: usize, d_out: usize) {
        self.matrix(module, d_out, d_in);
        self.push(names::bias(module), Dtype::F32, vec![d_out]);
    }

    fn norm(&mut self, norm: &str, d: usize) {
        self.push(names::gamma(norm), Dtype::F32, vec![d]);
        self.push(names::beta(norm), Dtype::F32, vec![d]);
    }

    fn attention(&mut self, block: &AttentionNames, d: usize) {
        for proj in block.all() {
            self.linear(proj, d, d);
        }
    }
}

/// A validated bundle: the manifest, both tokenizers and the raw safetensors bytes.
#[derive(Clone)]
pub struct Bundle {
    pub manifest: Manifest,
    pub source_tokenizer: Tokenizer,
    pub target_tokenizer: Tokenizer,
    weights: Vec<u8>,
}

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn dtype_name(dtype: Dtype) -> String {
    format!("{dtype:?}")
}

impl Bundle {
    /// Validates a bundle given its manifest bytes and a way to fetch the other files by name.
    pub fn from_files(
        manifest: &[u8],
        mut fetch: impl FnMut(&str) -> Result<Vec<u8>, String>,
    ) -> Result<Self, BundleError> {
        let manifest: Manifest =
            serde_json::from_slice(manifest).map_err(|e| BundleError::Manifest(e.to_string()))?;
        if manifest.format != FORMAT_NAME {
            return Err(BundleError::Manifest(format!(
                "format is '{}', expected '{FORMAT_NAME}'",
                manifest.format
            )));
        }
        if manifest.format_version != FORMAT_VERSION {
            return Err(BundleError::Version {
                found: manifest.format_version,
                expected: FORMAT_VERSION,
            });
        }
        manifest.model.validate()?;
        for required in [WEIGHTS, SOURCE_TOKENIZER, TARGET_TOKENIZER] {
            if !manifest.files.contains_key(required) {
                return Err(BundleError::Manifest(format!(
                    "it does not list {required}"
                )));
            }
        }
        let mut read = |name: &str| -> Result<Vec<u8>, BundleError> {
            let entry = &manifest.files[name];
            let bytes = fetch(name).map_err(|reason| BundleError::MissingFile {
                file: name.to_string(),
                reason,
            })?;
            let actual = sha256_hex(&bytes);
            if actual != entry.sha256 || bytes.len() as u64 != entry.bytes {
                return Err(BundleError::Integrity {
                    file: name.to_string(),
                    expected: entry.sha256.clone(),
                    actual,
                    expected_bytes: entry.bytes,
                    actual_bytes: bytes.len() as u64,
                });
            }
            Ok(bytes)
        };
        let weights = read(WEIGHTS)?;
        let source = read(SOURCE_TOKENIZER)?;
        let target = read(TARGET_TOKENIZER)?;
        let tokenizer = |file: &str, bytes: &[u8], expected: usize| {
            let text = std::str::from_utf8(bytes).map_err(|e| BundleError::Tokenizer {
                file: file.to_string(),
                reason: e.to_string(),
            })?;
            let tok = Tokenizer::from_json(text).map_err(|e| BundleError::Tokenizer {
                file: file.to_string(),
                reason: e.to_string(),
            })?;
            if tok.vocab_size() != expected {
                return Err(BundleError::VocabMismatch {
                    file: file.to_string(),
                    found: tok.vocab_size(),
                    expected,
                });
            }
            Ok(tok)
        };
        let source_tokenizer = tokenizer(SOURCE_TOKENIZER, &source, manifest.model.src_vocab_size)?;
        let target_tokenizer = tokenizer(TARGET_TOKENIZER, &target, manifest.model.tgt_vocab_size)?;
        let bundle = Self {
            manifest,
            source_tokenizer,
            target_tokenizer,
            weights,
        };
        bundle.check_tensors()?;
        Ok(bundle)
    }

    /// Reads and validates the bundle in `dir`.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn from_dir(dir: &std::path::Path) -> Result<Self, BundleError> {
        let manifest = std::fs::read(dir.join(MANIFEST)).map_err(|e| BundleError::MissingFile {
            file: dir.join(MANIFEST).display().to_string(),
            reason: e.to_string(),
        })?;
        Self::from_files(&manifest, |name| {
            std::fs::read(dir.join(name)).map_err(|e| format!("{}: {e}", dir.join(name).display()))
        })
    }

    fn tensors(&self) -> Result<SafeTensors<'_>, BundleError> {
        SafeTensors::deserialize(&self.weights).map_err(|e| BundleError::Safetensors(e.to_string()))
    }

    fn check_tensors(&self) -> Result<(), BundleError> {
        let tensors = self.tensors()?;
        let specs = tensor_specs(&self.manifest.model);
        for spec in &specs {
            let view = tensors
                .tensor(&spec.name)
                .map_err(|_| BundleError::MissingTensor(spec.name.clone()))?;
            if view.dtype() != spec.dtype || view.shape() != spec.shape.as_slice() {
                return Err(BundleError::TensorMismatch {
                    name: spec.name.clone(),
                    dtype: dtype_name(spec.dtype),
                    shape: spec.shape.clone(),
                    found_dtype: dtype_name(view.dtype()),
                    found_shape: view.shape().to_vec(),
                });
            }
            if spec.dtype == Dtype::F32 && f32s(view.data()).iter().any(|v| !v.is_finite()) {
                return Err(BundleError::NotFinite {
                    name: spec.name.clone(),
                });
            }
            if spec.dtype == Dtype::I8
                && let Some(index) = view.data().iter().position(|&b| b == i8::MIN as u8)
            {
                return Err(BundleError::Int8Range {
                    name: spec.name.clone(),
                    index,
                });
            }
        }
        if let Some(extra) = tensors
            .names()
            .into_iter()
            .find(|n| !specs.iter().any(|s| s.name == *n))
        {
            return Err(BundleError::UnexpectedTensor(extra.to_string()));
        }
        Ok(())
    }

    /// The model's sizes.
    pub fn config(&self) -> &ModelConfig {
        &self.manifest.model
    }

    /// The int8 matrix of `module` (the name without `.weight`), e.g.
    /// `decoder.layers.0.ffn.linear1`.
    pub fn matrix(&self, module: &str) -> Result<QuantizedMatrix, BundleError> {
        let tensors = self.tensors()?;
        let get = |n: String| {
            tensors
                .tensor(&n)
                .map_err(|_| BundleError::MissingTensor(n))
        };
        let weight = get(names::weight(module))?;
        let scale = get(names::weight_scale(module))?;
        let (n, k) = (weight.shape()[0], weight.shape()[1]);
        let packed = weight
            .data()
            .chunks_exact(4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        Ok(QuantizedMatrix {
            n,
            k,
            packed,
            scale: f32s(scale.data()),
        })
    }

    /// The f32 tensor `name` (a bias, `gamma` or `beta`), flattened.
    pub fn vector(&self, name: &str) -> Result<Vec<f32>, BundleError> {
        let tensors = self.tensors()?;
        let view = tensors
            .tensor(name)
            .map_err(|_| BundleError::MissingTensor(name.to_string()))?;
        Ok(f32s(view.data()))
    }
}

fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

/// Writes a bundle into `dir`: `weights` maps every name of [`tensor_specs`] to its f32 values
/// (matrices `[n, k]` in the PyTorch orientation); matrices are quantized to int8 here. The
/// files are written into `DIR.partial` and the folder then replaces `dir` whole, so a process
/// killed meanwhile never leaves a bundle whose files and manifest disagree (at worst `dir` is
/// missing and `DIR.replaced` holds the old bundle).
#[cfg(not(target_arch = "wasm32"))]
pub fn write_bundle(
    dir: &std::path::Path,
    mut manifest: Manifest,
    weights: &BTreeMap<String, Vec<f32>>,
    source_tokenizer: &str,
    target_tokenizer: &str,
) -> Result<Manifest, BundleError> {
    let write_err = |path: &std::path::Path, e: &dyn std::fmt::Display| BundleError::Write {
        path: path.display().to_string(),
        reason: e.to_string(),
    };
    let specs = tensor_specs(&manifest.model);
    let mut owned: Vec<(String, Dtype, Vec<usize>, Vec<u8>)> = Vec::new();
    for spec in &specs {
        if names::is_weight_scale(&spec.name) {
            continue;
        }
        let values = weights
            .get(&spec.name)
            .ok_or_else(|| BundleError::MissingTensor(spec.name.clone()))?;
        if spec.dtype == Dtype::I8 {
            let (n, k) = (spec.shape[0], spec.shape[1]);
            let q = QuantizedMatrix::quantize(values, n, k).map_err(|reason| {
                BundleError::Quantize {
                    name: spec.name.clone(),
                    reason,
                }
            })?;
            let bytes: Vec<u8> = q.packed.iter().flat_map(|w| w.to_le_bytes()).collect();
            owned.push((spec.name.clone(), Dtype::I8, spec.shape.clone(), bytes));
            let scale = q.scale.iter().flat_map(|s| s.to_le_bytes()).collect();
            let module = names::module_of_weight(&spec.name).unwrap_or(&spec.name);
            owned.push((names::weight_scale(module), Dtype::F32, vec![n], scale));
        } else {
            if values.len() != spec.shape.iter().product::<usize>() {
                return Err(BundleError::TensorMismatch {
                    name: spec.name.clone(),
                    dtype: "F32".into(),
                    shape: spec.shape.clone(),
                    found_dtype: "F32".into(),
                    found_shape: vec![values.len()],
                });
            }
            let bytes = values.iter().flat_map(|v| v.to_le_bytes()).collect();
            owned.push((spec.name.clone(), Dtype::F32, spec.shape.clone(), bytes));
        }
    }
    let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = owned
        .iter()
        .map(|(name, dtype, shape, bytes)| {
            safetensors::tensor::TensorView::new(*dtype, shape.clone(), bytes)
                .map(|v| (name.clone(), v))
                .map_err(|e| BundleError::Safetensors(e.to_string()))
        })
        .collect::<Result<_, _>>()?;
    let weights_bytes =
        safetensors::serialize(views, None).map_err(|e| BundleError::Safetensors(e.to_string()))?;
    let name = dir
        .file_name()
        .ok_or_else(|| write_err(dir, &"not a folder name"))?
        .to_string_lossy()
        .into_owned();
    let sibling = |suffix: &str| dir.with_file_name(format!("{name}.{suffix}"));
    let (staging, replaced) = (sibling("partial"), sibling("replaced"));
    let remove = |path: &std::path::Path| match std::fs::remove_dir_all(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(write_err(path, &e)),
        _ => Ok(()),
    };
    remove(&staging)?;
    std::fs::create_dir_all(&staging).map_err(|e| write_err(&staging, &e))?;
    manifest.files.clear();
    for (name, bytes) in [
        (WEIGHTS, weights_bytes.as_slice()),
        (SOURCE_TOKENIZER, source_tokenizer.as_bytes()),
        (TARGET_TOKENIZER, target_tokenizer.as_bytes()),
    ] {
        let path = staging.join(name);
        write_synced(&path, bytes).map_err(|e| write_err(&path, &e))?;
        manifest.files.insert(
            name.to_string(),
            FileEntry {
                bytes: bytes.len() as u64,
                sha256: sha256_hex(bytes),
            },
        );
    }
    manifest.format = FORMAT_NAME.to_string();
    manifest.format_version = FORMAT_VERSION;
    let json = serde_json::to_vec_pretty(&manifest).map_err(|e| write_err(dir, &e))?;
    let path = staging.join(MANIFEST);
    write_synced(&path, &json).map_err(|e| write_err(&path, &e))?;
    replace_dir(&staging, dir, &replaced).map_err(|e| write_err(dir, &e))?;
    Ok(manifest)
}

/// Puts the complete folder `staging` in the place of `dir`: an existing `dir` is first moved
/// to `aside` in one rename (never deleted in place), then `staging` is renamed to `dir`, then
/// `aside` is removed. A process killed at any point leaves `dir` whole, old or new, or missing
/// with the old one at `aside`. (Bundles, and checkpoints saved again for the same step.)
#[cfg(not(target_arch = "wasm32"))]
pub fn replace_dir(
    staging: &std::path::Path,
    dir: &std::path::Path,
    aside: &std::path::Path,
) -> std::io::Result<()> {
    let remove = |path: &std::path::Path| match std::fs::remove_dir_all(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    };
    if dir.exists() {
        remove(aside)?;
        std::fs::rename(dir, aside)?;
    }
    std::fs::rename(staging, dir)?;
    if let Some(parent) = dir.parent()
        && let Ok(parent) = std::fs::File::open(parent)
    {
        // Makes the renames durable where directories can be opened.
        let _ = parent.sync_all();
    }
    remove(aside)
}

/// Writes `bytes` to `path` and syncs it to disk.
#[cfg(not(target_arch = "wasm32"))]
fn write_synced(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let mut file = std::fs::File::create(path)?;
    file.write_all(bytes)?;
    file.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::{Path, PathBuf};

    fn tiny_config() -> ModelConfig {
        ModelConfig::preset("tiny", 10, 12).expect("valid preset")
    }

    fn tokenizer(extra: usize) -> String {
        let pieces = (0..extra).map(|i| (format!("▁{}", char::from(b'a' + i as u8)), -1.0));
        Tokenizer::from_pieces(pieces)
            .and_then(|t| t.to_json())
            .expect("tokenizer")
    }

    /// Deterministic f32 weights for every tensor of `config` that `write_bundle` takes.
    fn tiny_weights(config: &ModelConfig) -> BTreeMap<String, Vec<f32>> {
        tensor_specs(config)
            .into_iter()
            .filter(|s| !names::is_weight_scale(&s.name))
            .map(|s| {
                let n: usize = s.shape.iter().product();
                (
                    s.name,
                    (0..n).map(|i| ((i * 7 % 13) as f32 - 6.0) / 10.0).collect(),
                )
            })
            .collect()
    }

    fn tiny_manifest() -> Manifest {
        Manifest {
            format: String::new(),
            format_version: 0,
            source_lang: "de".into(),
            target_lang: "en".into(),
            model: tiny_config(),
            files: BTreeMap::new(),
            metrics: serde_json::Value::Null,
        }
    }

    /// `weights` as a bundle of the tiny preset in `dir`.
    fn write_tiny_weights(
        dir: &Path,
        weights: &BTreeMap<String, Vec<f32>>,
    ) -> Result<Manifest, BundleError> {
        write_bundle(dir, tiny_manifest(), weights, &tokenizer(6), &tokenizer(8))
    }

    /// A valid bundle of the tiny preset with deterministic weights, in a fresh directory.
    fn write_tiny(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("webnmt-bundle-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let weights = tiny_weights(&tiny_config());
        write_tiny_weights(&dir, &weights).expect("written");
        dir
    }

    #[test]
    fn a_matrix_that_cannot_be_quantized_is_named_with_the_reason() {
        let dir = std::env::temp_dir().join(format!("webnmt-bundle-nan-{}", std::process::id()));
        let mut weights = tiny_weights(&tiny_config());
        let name = "decoder.layers.1.ffn.linear2.weight";
        weights.get_mut(name).expect("a matrix")[3] = f32::NAN;
        let err = write_tiny_weights(&dir, &weights).expect_err("NaN cannot be quantized");
        assert!(
            matches!(err, BundleError::Quantize { name: ref n, .. } if n == name),
            "{err}"
        );
        assert!(err.to_string().contains("not a finite number"), "{err}");
        assert!(!err.to_string().contains("F32"), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    fn edit_manifest(dir: &Path, edit: impl FnOnce(&mut serde_json::Value)) {
        let path = dir.join(MANIFEST);
        let mut json: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&path).expect("manifest")).expect("json");
        edit(&mut json);
        std::fs::write(&path, serde_json::to_vec(&json).expect("json")).expect("write");
    }

    #[test]
    fn a_written_bundle_loads_and_round_trips_its_weights() {
        let dir = write_tiny("ok");
        let bundle = Bundle::from_dir(&dir).expect("valid bundle");
        assert_eq!(bundle.config(), &tiny_config());
        let q = bundle
            .matrix("decoder.layers.1.ffn.linear2")
            .expect("matrix");
        assert_eq!((q.n, q.k), (32, 64));
        let gamma = bundle
            .vector("encoder.layers.0.norm2.gamma")
            .expect("vector");
        assert_eq!(gamma.len(), 32);
        assert_eq!(gamma[1], (7.0 - 6.0) / 10.0);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Writing again over a bundle (and over a killed export's leftover `.partial`) replaces
    /// the folder whole and leaves nothing beside it.
    #[test]
    fn a_bundle_written_again_replaces_the_folder_whole() {
        let dir = write_tiny("again");
        let leftover = dir.with_file_name(format!(
            "{}.partial",
            dir.file_name().expect("name").to_string_lossy()
        ));
        std::fs::create_dir_all(&leftover).expect("leftover");
        std::fs::write(leftover.join("model.safetensors"), b"half").expect("half");
        std::fs::write(dir.join("stale.txt"), b"from before").expect("stale");
        let mut weights = tiny_weights(&tiny_config());
        weights
            .get_mut("encoder.layers.0.norm2.gamma")
            .expect("gamma")[1] = 2.5;
        write_tiny_weights(&dir, &weights).expect("written again");
        let bundle = Bundle::from_dir(&dir).expect("valid bundle");
        let gamma = bundle
            .vector("encoder.layers.0.norm2.gamma")
            .expect("gamma");
        assert_eq!(gamma[1], 2.5);
        assert!(!dir.join("stale.txt").exists());
        assert!(!leftover.exists());
        let replaced = leftover.with_extension("replaced");
        assert!(!replaced.exists(), "{}", replaced.display());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn every_kind_of_damage_is_a_named_error() {
        // Flipped byte in the weights.
        let dir = write_tiny("flip");
        let path = dir.join(WEIGHTS);
        let mut bytes = std::fs::read(&path).expect("weights");
        let last = bytes.len() - 1;
        bytes[last] ^= 0x40;
        std::fs::write(&path, &bytes).expect("write");
        let err = Bundle::from_dir(&dir).err().expect("must fail");
        assert!(
            matches!(err, BundleError::Integrity { ref file, .. } if file == WEIGHTS),
            "{err}"
        );
        // Truncated file.
        std::fs::write(&path, &bytes[..100]).expect("write");
        let err = Bundle::from_dir(&dir).err().expect("must fail");
        assert!(err.to_string().contains("100 bytes"), "{err}");
        let _ = std::fs::remove_dir_all(&dir);

        // Missing file.
        let dir = write_tiny("missing");
        std::fs::remove_file(dir.join(TARGET_TOKENIZER)).expect("rm");
        let err = Bundle::from_dir(&dir).err().expect("must fail");
        assert!(matches!(err, BundleError::MissingFile { .. }), "{err}");
        let _ = std::fs::remove_dir_all(&dir);

        // Wrong format version.
        let dir = write_tiny("version");
        edit_manifest(&dir, |m| m["format_version"] = 99.into());
        let err = Bundle::from_dir(&dir).err().expect("must fail");
        assert!(
            matches!(err, BundleError::Version { found: 99, .. }),
            "{err}"
        );

        // Config that does not match the tensors, then an impossible config.
        edit_manifest(&dir, |m| {
            m["format_version"] = FORMAT_VERSION.into();
            m["model"]["d_ff"] = 128.into();
        });
        let err = Bundle::from_dir(&dir).err().expect("must fail");
        assert!(matches!(err, BundleError::TensorMismatch { .. }), "{err}");
        edit_manifest(&dir, |m| {
            m["model"]["d_ff"] = 64.into();
            m["model"]["n_heads"] = 3.into();
        });
        let err = Bundle::from_dir(&dir).err().expect("must fail");
        assert!(matches!(err, BundleError::Config(_)), "{err}");

        // Vocabulary size that disagrees with the tokenizer.
        edit_manifest(&dir, |m| {
            m["model"]["n_heads"] = 2.into();
            m["model"]["src_vocab_size"] = 11.into();
        });
        let err = Bundle::from_dir(&dir).err().expect("must fail");
        assert!(matches!(err, BundleError::VocabMismatch { .. }), "{err}");
        let _ = std::fs::remove_dir_all(&dir);

        // An int8 weight of -128 (not damage: the checksum is updated to match).
        let dir = write_tiny("int8");
        let path = dir.join(WEIGHTS);
        let mut bytes = std::fs::read(&path).expect("weights");
        let (name, at) = {
            let tensors = SafeTensors::deserialize(&bytes).expect("safetensors");
            let spec = tensor_specs(&tiny_config())
                .into_iter()
                .find(|s| s.dtype == Dtype::I8)
                .expect("an int8 tensor");
            let data = tensors.tensor(&spec.name).expect("tensor").data();
            (
                spec.name,
                data.as_ptr() as usize - bytes.as_ptr() as usize + 5,
            )
        };
        bytes[at] = 0x80;
        std::fs::write(&path, &bytes).expect("write");
        edit_manifest(&dir, |m| {
            m["files"][WEIGHTS]["sha256"] = sha256_hex(&bytes).into()
        });
        let err = Bundle::from_dir(&dir).err().expect("must fail");
        assert!(
            matches!(err, BundleError::Int8Range { name: ref n, index: 5 } if *n == name),
            "{err}"
        );
        let _ = std::fs::remove_dir_all(&dir);

        // Not JSON, and unknown manifest keys.
        let dir = write_tiny("json");
        edit_manifest(&dir, |m| m["surprise"] = 1.into());
        let err = Bundle::from_dir(&dir).err().expect("must fail");
        assert!(matches!(err, BundleError::Manifest(_)), "{err}");
        std::fs::write(dir.join(MANIFEST), b"{not json").expect("write");
        assert!(matches!(
            Bundle::from_dir(&dir),
            Err(BundleError::Manifest(_))
        ));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn hostile_safetensors_headers_are_rejected() {
        let config = tiny_config();
        for (name, weights) in [
            // A header that claims 2^60 bytes.
            ("huge", {
                let mut b = (1u64 << 60).to_le_bytes().to_vec();
                b.extend_from_slice(b"{}");
                b
            }),
            // Two tensors whose offsets overlap.
            ("overlap", {
                let header = br#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}"#;
                let mut b = (header.len() as u64).to_le_bytes().to_vec();
                b.extend_from_slice(header);
                b.extend_from_slice(&[0; 12]);
                b
            }),
        ] {
            let files: BTreeMap<&str, Vec<u8>> = [
                (WEIGHTS, weights),
                (SOURCE_TOKENIZER, tokenizer(6).into_bytes()),
                (TARGET_TOKENIZER, tokenizer(8).into_bytes()),
            ]
            .into_iter()
            .collect();
            let manifest = Manifest {
                format: FORMAT_NAME.into(),
                format_version: FORMAT_VERSION,
                source_lang: "de".into(),
                target_lang: "en".into(),
                model: config.clone(),
                files: files
                    .iter()
                    .map(|(n, b)| {
                        let entry = FileEntry {
                            bytes: b.len() as u64,
                            sha256: sha256_hex(b),
                        };
                        ((*n).to_string(), entry)
                    })
                    .collect(),
                metrics: serde_json::Value::Null,
            };
            let json = serde_json::to_vec(&manifest).expect("json");
            let result = Bundle::from_files(&json, |n| Ok(files[n].clone()));
            assert!(
                matches!(result, Err(BundleError::Safetensors(_))),
                "{name}: {:?}",
                result.err()
            );
        }
    }

    #[test]
    fn a_broken_tokenizer_is_named() {
        let dir = write_tiny("tokenizer");
        let path = dir.join(SOURCE_TOKENIZER);
        std::fs::write(&path, b"{\"model\": 1}").expect("write");
        let bytes = std::fs::read(&path).expect("read");
        edit_manifest(&dir, |m| {
            m["files"][SOURCE_TOKENIZER] = serde_json::json!({
                "bytes": bytes.len(),
                "sha256": sha256_hex(&bytes),
            });
        });
        let err = Bundle::from_dir(&dir).err().expect("must fail");
        assert!(
            matches!(err, BundleError::Tokenizer { ref file, .. } if file == SOURCE_TOKENIZER),
            "{err}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
