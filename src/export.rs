//! Checkpoint → model bundle: collects every parameter of the burn model under its module
//! path, writes linear weights in the `[d_out, d_in]` orientation (burn keeps `[d_in, d_out]`)
//! and hands them to [`write_bundle`], which quantizes matrices to int8.

use crate::config::ModelConfig;
use crate::model::Transformer;
use crate::tokenizer::Tokenizer;
use crate::weights::{BundleError, Manifest, write_bundle};
use burn::module::{Module, ModuleVisitor, Param};
use burn::tensor::Tensor;
use std::collections::BTreeMap;
use std::path::Path;

/// Collects `(path, shape, values)` of every float parameter.
struct Collect {
    path: Vec<String>,
    tensors: Vec<(String, Vec<usize>, Vec<f32>)>,
}

impl ModuleVisitor for Collect {
    fn enter_module(&mut self, name: &str, _container_type: &str) {
        self.path.push(name.to_string());
    }

    fn exit_module(&mut self, _name: &str, _container_type: &str) {
        self.path.pop();
    }

    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        let tensor = param.val();
        let shape = tensor.dims().to_vec();
        let values = tensor.try_into_vec_as::<f32>().unwrap_or_default();
        self.tensors.push((self.path.join("."), shape, values));
    }
}

/// Every parameter as f32 under its bundle name, matrices as `[n, k]` (output × input).
pub fn named_weights(model: &Transformer) -> BTreeMap<String, Vec<f32>> {
    let mut collect = Collect {
        path: Vec::new(),
        tensors: Vec::new(),
    };
    model.visit(&mut collect);
    collect
        .tensors
        .into_iter()
        .map(|(name, shape, values)| {
            let is_linear = name.ends_with(".weight") && !name.contains("embed.embedding");
            let values = if is_linear && shape.len() == 2 {
                transpose(&values, shape[0], shape[1])
            } else {
                values
            };
            (name, values)
        })
        .collect()
}

/// `[rows, cols]` → `[cols, rows]`, row-major.
pub(crate) fn transpose(values: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    let mut out = vec![0.0; values.len()];
    for r in 0..rows {
        for c in 0..cols {
            out[c * rows + r] = values[r * cols + c];
        }
    }
    out
}

/// Languages and metrics that go into the manifest beside the weights.
pub struct ExportInfo {
    pub source_lang: String,
    pub target_lang: String,
    pub metrics: serde_json::Value,
}

/// Writes `model` as an int8 bundle into `dir`.
pub fn export_bundle(
    model: &Transformer,
    config: &ModelConfig,
    source_tokenizer: &Tokenizer,
    target_tokenizer: &Tokenizer,
    info: ExportInfo,
    dir: &Path,
) -> Result<Manifest, BundleError> {
    let manifest = Manifest {
        format: String::new(),
        format_version: 0,
        source_lang: info.source_lang,
        target_lang: info.target_lang,
        model: config.clone(),
        files: BTreeMap::new(),
        metrics: info.metrics,
    };
    let json = |t: &Tokenizer, file: &str| {
        t.to_json().map_err(|e| BundleError::Tokenizer {
            file: file.to_string(),
            reason: e.to_string(),
        })
    };
    write_bundle(
        dir,
        manifest,
        &named_weights(&model.valid()),
        &json(source_tokenizer, crate::weights::SOURCE_TOKENIZER)?,
        &json(target_tokenizer, crate::weights::TARGET_TOKENIZER)?,
    )
}
