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

/// Divides `grads` by the loss scale `unscale` (1 without loss scaling) and scales them so their
/// global L2 norm is at most `max_norm` (0: no clipping). Returns the unscaled norm before
/// clipping; when that is not finite (an f16 overflow) `grads` are left as they are.
pub fn unscale_and_clip<M: Module>(
    model: &M,
    grads: &mut GradientsParams,
    unscale: f64,
    max_norm: f64,
) -> f64 {
    let mut norm = SquaredNorm { grads, sum: None };
    model.visit(&mut norm);
    let total = norm
        .sum
        .map_or(0.0, |s| f64::from(s.into_scalar::<f32>()).sqrt())
        / unscale;
    if !total.is_finite() {
        return total;
    }
    let clip = if max_norm > 0.0 && total > max_norm {
        max_norm / (total + 1e-6)
    } else {
        1.0
    };
    let factor = clip / unscale;
    if factor != 1.0 {
        model.visit(&mut Scale { grads, factor });
    }
    total
}
