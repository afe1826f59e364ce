//! Label-smoothed cross-entropy over non-padding target positions.

use crate::config::PAD_ID;
use crate::model::cast_to;
use burn::tensor::{DType, IndexingUpdateOp, Int, Tensor};

/// Mean over real (non-`<pad>`) target tokens of
/// `(1 − ε) · (−log p(target)) + ε · mean_v(−log p(v))`, i.e. cross-entropy against the target
/// distribution smoothed uniformly over the vocabulary by `ε`. Computed in f32 whatever the
/// logits' precision.
///
/// The gradient is written in closed form: `∂loss/∂logits = (softmax − q) / n` at real
/// positions, `q` the smoothed target distribution and `n` the real-token count. The returned
/// tensor's value is the loss; its gradient flows through `Σ logits · g` with `g` that constant,
/// so a step takes one `exp` over the `[batch, tgt_len, vocab]` logits where burn's
/// `log_softmax` took two (its backward pass recomputes the exponential), and none of the
/// vocabulary-sized gather, mean and log-softmax backward passes.
///
/// # Shapes
/// `logits [batch, tgt_len, vocab]`, `targets [batch, tgt_len]` → `[1]`.
pub fn label_smoothed_cross_entropy(
    logits: Tensor<3>,
    targets: Tensor<2, Int>,
    smoothing: f64,
) -> Tensor<1> {
    let logits = cast_to(logits, DType::F32);
    let [batch, len, vocab] = logits.dims();
    let x = logits.clone().detach();
    let targets = targets.unsqueeze_dim::<3>(2);
    let hidden = targets.clone().equal_elem(PAD_ID as i64);
    let real = hidden.clone().bool_not().float().sum().clamp_min(1.0);

    // log p(v) = x_v − lse, lse = max + log Σ exp(x − max).
    let max = x.clone().max_dim(2);
    let exp = (x.clone() - max.clone()).exp();
    let total = exp.clone().sum_dim(2);
    let lse = max + total.clone().log();
    let nll = lse.clone() - x.clone().gather(2, targets.clone());
    let device = x.device();
    let uniform = lse - x.mean_dim(2);
    let per_token = nll.mul_scalar(1.0 - smoothing) + uniform.mul_scalar(smoothing);
    let value = per_token.mask_fill(hidden.clone(), 0.0).sum() / real.clone();
    if !device.is_autodiff() {
        return value; // validation: no gradient to carry
    }

    // g = (softmax − q) / n, zero at padding.
    let off_target = Tensor::<3>::full([batch, len, 1], -(1.0 - smoothing), &device);
    let g = (exp / total)
        .sub_scalar(smoothing / vocab as f64)
        .scatter(2, targets, off_target, IndexingUpdateOp::Add)
        .mask_fill(hidden.expand([batch, len, vocab]), 0.0)
        / real.unsqueeze::<3>();
    let surrogate = (logits * g).sum();
    // `s − s` is exactly zero: the value is the loss, the gradient is the surrogate's.
    (surrogate.clone() - surrogate.detach()) + value
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::tensor::{Device, TensorData};

    #[test]
    fn matches_a_hand_computation_and_ignores_padding() {
        let device = Device::flex();
        // Two positions over a vocabulary of 4; the second target is <pad>.
        let logits = Tensor::<3>::from_data(
            TensorData::new(vec![2.0f32, 0.0, 0.0, 1.0, 5.0, 5.0, 5.0, 5.0], [1, 2, 4]),
            &device,
        );
        let targets = Tensor::<2, Int>::from_data(TensorData::new(vec![3i64, 0], [1, 2]), &device);
        let eps = 0.1;
        let loss = label_smoothed_cross_entropy(logits, targets, eps).into_scalar::<f32>();
        let z: f64 = [2.0f64, 0.0, 0.0, 1.0].iter().map(|v| v.exp()).sum();
        let lp: Vec<f64> = [2.0f64, 0.0, 0.0, 1.0].iter().map(|v| v - z.ln()).collect();
        let want = (1.0 - eps) * -lp[3] + eps * -(lp.iter().sum::<f64>() / 4.0);
        assert!((f64::from(loss) - want).abs() < 1e-5, "{loss} vs {want}");
    }

    /// The loss written with burn's `log_softmax`, differentiated by autodiff.
    fn reference(logits: Tensor<3>, targets: Tensor<2, Int>, eps: f64) -> Tensor<1> {
        let log_probs = burn::tensor::activation::log_softmax(logits, 2);
        let nll = log_probs
            .clone()
            .gather(2, targets.clone().unsqueeze_dim::<3>(2))
            .squeeze_dim::<2>(2)
            .neg();
        let uniform = log_probs.mean_dim(2).squeeze_dim::<2>(2).neg();
        let real = targets.not_equal_elem(PAD_ID as i64);
        let per_token = nll.mul_scalar(1.0 - eps) + uniform.mul_scalar(eps);
        per_token.mask_fill(real.clone().bool_not(), 0.0).sum() / real.float().sum()
    }

    #[test]
    fn value_and_gradient_match_autodiff_through_log_softmax() {
        let device = Device::flex().autodiff();
        device.seed(5);
        let (batch, len, vocab) = (3, 4, 11);
        let data = Tensor::<3>::random(
            [batch, len, vocab],
            burn::tensor::Distribution::Normal(0.0, 3.0),
            &device,
        )
        .into_data();
        // Padding (id 0) at the end of two rows.
        let ids = vec![5i64, 3, 9, 0, 1, 10, 0, 0, 2, 4, 6, 7];
        let targets =
            || Tensor::<2, Int>::from_data(TensorData::new(ids.clone(), [batch, len]), &device);
        let run = |f: fn(Tensor<3>, Tensor<2, Int>, f64) -> Tensor<1>| {
            let logits = Tensor::<3>::from_data(data.clone(), &device).require_grad();
            let loss = f(logits.clone(), targets(), 0.1);
            let grads = loss.backward();
            let grad = logits
                .grad(&grads)
                .map(|g| g.into_data().try_to_vec::<f32>());
            (loss.into_scalar::<f32>(), grad)
        };
        let (value, grad) = run(label_smoothed_cross_entropy);
        let (want_value, want_grad) = run(reference);
        assert!((value - want_value).abs() < 1e-5, "{value} vs {want_value}");
        let (Some(Ok(grad)), Some(Ok(want_grad))) = (grad, want_grad) else {
            panic!("both losses must give the logits a gradient");
        };
        let diff = grad
            .iter()
            .zip(&want_grad)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f32, f32::max);
        assert!(diff < 1e-6, "gradients differ by {diff}");
        // Padding positions get no gradient.
        let pad = (len - 1) * vocab..len * vocab;
        assert!(grad[pad].iter().all(|&g| g == 0.0));
    }
}
