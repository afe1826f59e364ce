//! Dropout with a fast mask on the CPU.
//!
//! burn's `Dropout` draws its mask with `Tensor::random(Bernoulli)`, which on flex samples every
//! element from a ChaCha generator on one thread, then multiplies twice (mask, then 1/keep):
//! about a tenth of a training step on the CPU. On flex this draws the mask from a
//! counter-based hash, in parallel, with the 1/keep scale folded in, and multiplies once. The
//! hash's key comes from the device RNG, so a run stays a function of its seed (the trainer
//! re-seeds the device before every step). Every other backend keeps burn's own dropout (a mask
//! built on the host would have to be uploaded there).

use burn::nn::Dropout;
use burn::tensor::{Device, Distribution, Tensor, TensorData};
use rayon::prelude::*;

use super::cast_to;

/// Elements per parallel task.
const CHUNK: usize = 1 << 16;

/// `layer`'s dropout of `x`: the identity outside training.
pub(super) fn dropout<const D: usize>(layer: &Dropout, x: Tensor<D>) -> Tensor<D> {
    let device = x.device();
    if !layer.training.is_enabled() || !device.is_autodiff() || layer.prob == 0.0 {
        return x;
    }
    if device.clone().without_autodiff() != Device::flex() {
        return layer.forward(x);
    }
    let key = draw_key(&device);
    let shape = x.shape();
    let mask = keep_mask(key, layer.prob, shape.num_elements());
    let mask = Tensor::<D>::from_data(TensorData::new(mask, shape), &device);
    let dtype = x.dtype();
    x * cast_to(mask, dtype)
}

/// A 64-bit key from the device RNG (two uniform f32 draws; their low 24 bits are random).
fn draw_key(device: &Device) -> u64 {
    let draws = Tensor::<1>::random([2], Distribution::Default, device)
        .into_data()
        .try_into_vec::<f32>()
        .unwrap_or_default();
    draws.iter().fold(0x6A09_E667_F3BC_C908u64, |key, v| {
        mix(key ^ u64::from(v.to_bits()))
    })
}

/// SplitMix64's finaliser: a bijective 64-bit mix.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// `n` mask values: `1 / (1 − prob)` with probability `1 − prob`, else 0. Element `i` keeps when
/// its 32-bit half of `mix(key + ⌊i/2⌋ · γ)` is at least `prob · 2³²`.
fn keep_mask(key: u64, prob: f64, n: usize) -> Vec<f32> {
    const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;
    let threshold = (prob * 4_294_967_296.0).round() as u64;
    let scale = (1.0 / (1.0 - prob)) as f32;
    let mut mask = vec![0.0f32; n];
    mask.par_chunks_mut(CHUNK)
        .enumerate()
        .for_each(|(c, chunk)| {
            let first = c * CHUNK;
            for (j, pair) in chunk.chunks_mut(2).enumerate() {
                let bits = mix(key.wrapping_add(((first / 2 + j) as u64).wrapping_mul(GAMMA)));
                for (v, half) in pair.iter_mut().zip([bits & 0xFFFF_FFFF, bits >> 32]) {
                    *v = if half >= threshold { scale } else { 0.0 };
                }
            }
        });
    mask
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mask_keeps_the_expected_share_scaled_and_depends_on_the_key() {
        let n = 1_000_003;
        let mask = keep_mask(7, 0.1, n);
        let kept = mask.iter().filter(|&&v| v != 0.0).count();
        let share = kept as f64 / n as f64;
        // Binomial standard deviation of the share: sqrt(0.09 / n) ≈ 3e-4.
        assert!((share - 0.9).abs() < 2e-3, "kept share {share}");
        assert!(
            mask.iter()
                .all(|&v| v == 0.0 || (v - 1.0 / 0.9).abs() < 1e-6)
        );
        // The mean of the scaled mask is 1: dropout keeps the expectation.
        let mean = mask.iter().map(|&v| f64::from(v)).sum::<f64>() / n as f64;
        assert!((mean - 1.0).abs() < 3e-3, "mean {mean}");
        // Deterministic in the key, different across keys, uncorrelated neighbours.
        assert_eq!(mask, keep_mask(7, 0.1, n));
        let other = keep_mask(8, 0.1, n);
        let same = mask.iter().zip(&other).filter(|(a, b)| a == b).count() as f64 / n as f64;
        assert!((same - (0.81 + 0.01)).abs() < 3e-3, "agreement {same}");
        let pairs = mask
            .windows(2)
            .filter(|w| w[0] == 0.0 && w[1] == 0.0)
            .count() as f64;
        assert!(
            (pairs / (n - 1) as f64 - 0.01).abs() < 1e-3,
            "adjacent drops {pairs}"
        );
    }

    #[test]
    fn flex_dropout_is_reproducible_from_the_device_seed() {
        let device = Device::flex().autodiff();
        let layer = burn::nn::DropoutConfig::new(0.3).init();
        let run = || {
            device.seed(11);
            let x = Tensor::<2>::ones([64, 64], &device);
            dropout(&layer, x)
                .into_data()
                .try_into_vec::<f32>()
                .unwrap_or_default()
        };
        let (a, b) = (run(), run());
        assert_eq!(a.len(), 64 * 64);
        assert_eq!(a, b);
        let dropped = a.iter().filter(|&&v| v == 0.0).count();
        assert!(
            (900..1560).contains(&dropped),
            "{dropped} of 4096 dropped at p = 0.3"
        );
    }
}
