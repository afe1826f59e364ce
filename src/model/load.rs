//! Bundle → burn model: the int8 weights dequantized into a [`Transformer`], so the framework
//! baseline and the tests run the exact weights the GPU engine runs, and training can start
//! from a shipped model.

use super::Transformer;
use crate::config::ModelConfig;
use crate::weights::{Bundle, BundleError, names, tensor_specs};
use burn::module::{Module, ModuleMapper, Param};
use burn::tensor::{Device, Tensor, TensorData};
use safetensors::Dtype;
use std::collections::BTreeMap;

/// Sets every float parameter from `weights` (bundle names, matrices `[n, k]`).
struct Load {
    path: Vec<String>,
    weights: BTreeMap<String, Vec<f32>>,
    problems: Vec<String>,
}

impl ModuleMapper for Load {
    fn enter_module(&mut self, name: &str, _container_type: &str) {
        self.path.push(name.to_string());
    }

    fn exit_module(&mut self, _name: &str, _container_type: &str) {
        self.path.pop();
    }

    fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
        let name = self.path.join(".");
        let Some(values) = self.weights.remove(&name) else {
            self.problems.push(format!("{name} is not in the bundle"));
            return param;
        };
        param.map(|tensor| {
            let dims = tensor.dims();
            if values.len() != dims.iter().product::<usize>() {
                self.problems.push(format!(
                    "{name}: {} values for shape {dims:?}",
                    values.len()
                ));
                return tensor;
            }
            // Bundles hold linear weights as [d_out, d_in]; burn as [d_in, d_out].
            let values = names::bundle_to_burn(&name, &dims, values);
            let loaded = Tensor::from_data(TensorData::new(values, dims), &tensor.device());
            if tensor.is_require_grad() {
                loaded.require_grad()
            } else {
                loaded
            }
        })
    }
}

impl Transformer {
    /// The model of `bundle` with its int8 matrices dequantized (`q · scale`).
    pub fn from_bundle(bundle: &Bundle, device: &Device) -> Result<Self, BundleError> {
        Self::from_bundle_with_dropout(bundle, bundle.config().dropout, device)
    }

    /// [`Self::from_bundle`] with another dropout rate (a training run's own, when it starts
    /// from a bundle's weights): the weights are the same, only training differs.
    pub fn from_bundle_with_dropout(
        bundle: &Bundle,
        dropout: f64,
        device: &Device,
    ) -> Result<Self, BundleError> {
        let config = &ModelConfig {
            dropout,
            ..bundle.config().clone()
        };
        let mut weights = BTreeMap::new();
        for spec in tensor_specs(config) {
            if names::is_weight_scale(&spec.name) {
                continue;
            }
            let values = match names::module_of_weight(&spec.name) {
                Some(module) if spec.dtype == Dtype::I8 => bundle.matrix(module)?.dequantize(),
                _ => bundle.vector(&spec.name)?,
            };
            weights.insert(spec.name, values);
        }
        let mut load = Load {
            path: Vec::new(),
            weights,
            problems: Vec::new(),
        };
        let model = Transformer::new(config, device).map(&mut load);
        load.problems.extend(
            load.weights
                .keys()
                .map(|n| format!("{n} has no place in the model")),
        );
        if load.problems.is_empty() {
            Ok(model)
        } else {
            Err(BundleError::ModelMismatch(load.problems.join("; ")))
        }
    }
}
