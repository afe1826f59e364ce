//! Checkpoint → model bundle: collects every parameter of the burn model under its module
//! path, writes linear weights in the `[d_out, d_in]` orientation (burn keeps `[d_in, d_out]`;
//! the rule is [`names::burn_to_bundle`]) and hands them to [`write_bundle`], which quantizes
//! matrices to int8.

use crate::config::ModelConfig;
use crate::model::Transformer;
use crate::tokenizer::Tokenizer;
use crate::weights::names;
use crate::weights::{BundleError, Manifest, write_bundle};
use burn::module::{Module, ModuleVisitor, Param};
use burn::tensor::Tensor;
use std::collections::BTreeMap;
use std::path::Path;

/// Collects `(path, shape, values)` of every float parameter, and the ones it could not read.
struct Collect {
    path: Vec<String>,
    tensors: Vec<(String, Vec<usize>, Vec<f32>)>,
    unreadable: Vec<String>,
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
        let name = self.path.join(".");
        match tensor.try_into_vec_as::<f32>() {
            Ok(values) => self.tensors.push((name, shape, values)),
            Err(e) => self.unreadable.push(format!("{name}: {e:?}")),
        }
    }
}

/// Every parameter as f32 under its bundle name, matrices as `[n, k]` (output × input).
///
/// # Errors
/// [`BundleError::ModelMismatch`] naming each parameter whose values cannot be read as f32.
pub fn named_weights(model: &Transformer) -> Result<BTreeMap<String, Vec<f32>>, BundleError> {
    let mut collect = Collect {
        path: Vec::new(),
        tensors: Vec::new(),
        unreadable: Vec::new(),
    };
    model.visit(&mut collect);
    if !collect.unreadable.is_empty() {
        return Err(BundleError::ModelMismatch(format!(
            "cannot read these parameters as f32: {}",
            collect.unreadable.join("; ")
        )));
    }
    Ok(collect
        .tensors
        .into_iter()
        .map(|(name, shape, values)| {
            let values = names::burn_to_bundle(&name, &shape, values);
            (name, values)
        })
        .collect())
}

/// Languages and metrics that go into the manifest beside the weights.
pub struct ExportInfo {
    pub source_lang: String,
    pub target_lang: String,
    pub metrics: serde_json::Value,
}

/// The element-wise mean of several models' [`named_weights`] (checkpoint averaging); `None`
/// when `models` is empty or their names or sizes differ.
pub fn average_weights(
    models: &[BTreeMap<String, Vec<f32>>],
) -> Option<BTreeMap<String, Vec<f32>>> {
    let (first, rest) = models.split_first()?;
    let n = models.len() as f32;
    first
        .iter()
        .map(|(name, values)| {
            let mut sum = values.clone();
            for other in rest {
                let theirs = other.get(name).filter(|v| v.len() == sum.len())?;
                for (s, v) in sum.iter_mut().zip(theirs) {
                    *s += v;
                }
            }
            sum.iter_mut().for_each(|s| *s /= n);
            Some((name.clone(), sum))
        })
        .collect::<Option<BTreeMap<_, _>>>()
        .filter(|avg| rest.iter().all(|m| m.len() == avg.len()))
}

/// Writes named weights ([`named_weights`] or [`average_weights`]) as an int8 bundle into
/// `dir`.
pub fn export_weights(
    weights: &BTreeMap<String, Vec<f32>>,
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
        weights,
        &json(source_tokenizer, crate::weights::SOURCE_TOKENIZER)?,
        &json(target_tokenizer, crate::weights::TARGET_TOKENIZER)?,
    )
}

#[cfg(test)]
mod tests {
    use super::average_weights;
    use std::collections::BTreeMap;

    #[test]
    fn averaging_takes_the_element_wise_mean_and_refuses_different_models() {
        let model = |a: f32, b: f32| -> BTreeMap<String, Vec<f32>> {
            [("w".to_string(), vec![a, b]), ("b".to_string(), vec![a])].into()
        };
        let mean = average_weights(&[model(1.0, 2.0), model(3.0, 6.0), model(2.0, 1.0)])
            .expect("same models");
        assert_eq!(mean["w"], vec![2.0, 3.0]);
        assert_eq!(mean["b"], vec![2.0]);
        let mut other = model(1.0, 1.0);
        other.insert("w".into(), vec![1.0]);
        assert!(average_weights(&[model(1.0, 2.0), other]).is_none());
        let mut extra = model(1.0, 1.0);
        extra.insert("x".into(), vec![1.0]);
        assert!(average_weights(&[model(1.0, 2.0), extra]).is_none());
        assert!(average_weights(&[]).is_none());
    }
}
