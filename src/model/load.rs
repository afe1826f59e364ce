//! Bundle → burn model: the int8 weights dequantized into a [`Transformer`], so the framework
//! baseline and the tests run the exact weights the GPU engine runs, and training can start
//! from a shipped model.

use super::Transformer;
use crate::export::transpose;
use crate::weights::{Bundle, BundleError, tensor_specs};
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
            let is_linear =
                D == 2 && name.ends_with(".weight") && !name.contains("embed.embedding");
            // Bundles hold linear weights as [d_out, d_in]; burn as [d_in, d_out].
            let values = if is_linear {
                transpose(&values, dims[1], dims[0])
            } else {
                values
            };
            if values.len() != dims.iter().product::<usize>() {
                self.problems.push(format!(
                    "{name}: {} values for shape {dims:?}",
                    values.len()
                ));
                return tensor;
            }
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
        let config = bundle.config();
        let mut weights = BTreeMap::new();
        for spec in tensor_specs(config) {
            if spec.dtype == Dtype::I8 {
                let stem = spec.name.trim_end_matches(".weight");
                weights.insert(spec.name.clone(), bundle.matrix(stem)?.dequantize());
            } else if !spec.name.ends_with(".weight_scale") {
                weights.insert(spec.name.clone(), bundle.vector(&spec.name)?);
            }
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
