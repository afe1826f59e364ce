//! Label-smoothed cross-entropy over non-padding target positions.

use crate::config::PAD_ID;
use crate::model::cast_to;
use burn::tensor::activation::log_softmax;
use burn::tensor::{DType, Int, Tensor};

/// Mean over real (non-`<pad>`) target tokens of
/// `(1 − ε) · (−log p(target)) + ε · mean_v(−log p(v))`, i.e. cross-entropy against the target
/// distribution smoothed uniformly over the vocabulary by `ε`. Computed in f32 whatever the
/// logits' precision.
///
/// # Shapes
/// `logits [batch, tgt_len, vocab]`, `targets [batch, tgt_len]` → `[1]`.
pub fn label_smoothed_cross_entropy(
    logits: Tensor<3>,
    targets: Tensor<2, Int>,
    smoothing: f64,
) -> Tensor<1> {
    let log_probs = log_softmax(cast_to(logits, DType::F32), 2);
    let nll = log_probs
        .clone()
        .gather(2, targets.clone().unsqueeze_dim::<3>(2))
        .squeeze_dim::<2>(2)
        .neg();
    let uniform = log_probs.mean_dim(2).squeeze_dim::<2>(2).neg();
    let real = targets.not_equal_elem(PAD_ID as i64);
    let per_token = nll.mul_scalar(1.0 - smoothing) + uniform.mul_scalar(smoothing);
    per_token.mask_fill(real.clone().bool_not(), 0.0).sum() / real.float().sum().clamp_min(1.0)
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
}
