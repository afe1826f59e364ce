//! Gradient clipping by the global norm over all parameters (burn's own clipping is per
//! parameter tensor).

use burn::module::{Module, ModuleVisitor, Param};
use burn::optim::GradientsParams;
use burn::tensor::Tensor;

struct SquaredNorm<'a> {
    grads: &'a GradientsParams,
    sum: Option<Tensor<1>>,
}

impl ModuleVisitor for SquaredNorm<'_> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        if let Some(grad) = self.grads.get::<D>(param.id) {
            let s = grad.square().sum();
            self.sum = Some(match self.sum.take() {
                Some(acc) => acc + s,
                None => s,
            });
        }
    }
}

struct Scale<'a> {
    grads: &'a mut GradientsParams,
    factor: f64,
}

impl ModuleVisitor for Scale<'_> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        if let Some(grad) = self.grads.remove::<D>(param.id) {
            self.grads
                .register::<D>(param.id, grad.mul_scalar(self.factor));
        }
    }
}

/// Scales `grads` so their global L2 norm is at most `max_norm`; returns the norm before
/// clipping (for the logs).
pub fn clip_global_norm<M: Module>(model: &M, grads: &mut GradientsParams, max_norm: f64) -> f64 {
    let mut norm = SquaredNorm { grads, sum: None };
    model.visit(&mut norm);
    let total = norm
        .sum
        .map_or(0.0, |s| f64::from(s.into_scalar::<f32>()).sqrt());
    if max_norm > 0.0 && total > max_norm {
        model.visit(&mut Scale {
            grads,
            factor: max_norm / (total + 1e-6),
        });
    }
    total
}
