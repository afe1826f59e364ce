//! The CPU engine's other kernels: embedding, residual + LayerNorm, softmax and attention of
//! one query. Each mirrors a function of [`crate::reference`] (tested against it below) and
//! computes in the same order as the burn model where that order is visible.

use super::matmul::Q8Linear;
use super::matmul::portable::fmax;

/// Token embeddings × √d_model + positions: row `r` is `tokens[r]` (ids past the table read
/// `<unk>`) at position `positions[r]`, as `reference::embed`.
///
/// # Shapes
/// `tokens`, `positions`: `[rows]`; `table`: `[vocab, d_model]`; `pe`: `[max_pos, d_model]`;
/// returns `[rows, d_model]`.
pub fn embed(tokens: &[u32], positions: &[usize], table: &Q8Linear, pe: &[f32]) -> Vec<f32> {
    let d = table.k;
    let sqrt_d = (d as f32).sqrt();
    let mut x = Vec::with_capacity(tokens.len() * d);
    for (&token, &pos) in tokens.iter().zip(positions) {
        let token = if (token as usize) < table.n {
            token as usize
        } else {
            crate::config::UNK_ID as usize
        };
        let s = table.scale[token];
        x.extend(
            table
                .row(token)
                .iter()
                .zip(&pe[pos * d..][..d])
                .map(|(&q, p)| s * f32::from(q) * sqrt_d + p),
        );
    }
    x
}

/// `x ← LayerNorm(x + residual) · gamma + beta` per row of `gamma.len()` values (biased
/// variance, `eps` inside the square root), as `reference::add_layernorm`.
///
/// # Shapes
/// `x`, `residual`: `[rows, d_model]`; `gamma`, `beta`: `[d_model]`.
pub fn add_layernorm(x: &mut [f32], residual: &[f32], gamma: &[f32], beta: &[f32], eps: f32) {
    let d = gamma.len();
    for (xr, rr) in x.chunks_exact_mut(d).zip(residual.chunks_exact(d)) {
        for (a, b) in xr.iter_mut().zip(rr) {
            *a += b;
        }
        let mean = xr.iter().sum::<f32>() / d as f32;
        let var = xr.iter().map(|a| (a - mean) * (a - mean)).sum::<f32>() / d as f32;
        let inv_std = 1.0 / (var + eps).sqrt();
        for ((a, g), b) in xr.iter_mut().zip(gamma).zip(beta) {
            *a = (*a - mean) * inv_std * g + b;
        }
    }
}

/// Lanes of the vectorizable loops below: independent accumulators in a fixed order, so the
/// result does not depend on the SIMD width (native and wasm agree bit for bit).
const LANES: usize = 16;

/// `e^x` for `x ≤ 0` (`-inf` included; below -87 it returns about 1.6e-38 instead of
/// underflowing), within 3e-7 relative: `x = n · ln 2 + r` with `|r| ≤ ln 2 / 2`, `e^r` by its
/// degree-7 Taylor polynomial, `2^n` built in the exponent bits. Plain float and integer lane
/// operations (the rounding is the `1.5 · 2^23` addition), so loops over it vectorize on
/// every target; libm's `expf` is a call per element.
#[inline(always)]
pub fn exp_le0(x: f32) -> f32 {
    const MAGIC: f32 = 12_582_912.0;
    // ln 2 split in two: the high part (0.693145751953125) has few mantissa bits, so n · LN2_HI
    // is exact.
    const LN2_HI: f32 = f32::from_bits(0x3f31_7200);
    const LN2_LO: f32 = 1.428_606_8e-6;
    let x = if x > -87.0 { x } else { -87.0 };
    let t = x * std::f32::consts::LOG2_E + MAGIC;
    let n = t - MAGIC;
    let r = (x - n * LN2_HI) - n * LN2_LO;
    let p = 1.0
        + r * (1.0
            + r * (0.5
                + r * (1.0 / 6.0
                    + r * (1.0 / 24.0
                        + r * (1.0 / 120.0 + r * (1.0 / 720.0 + r * (1.0 / 5040.0)))))));
    let n = t.to_bits() as i32 - MAGIC.to_bits() as i32;
    p * f32::from_bits(((n + 127) << 23) as u32)
}

/// The largest value of `x` (`-inf` when empty), in lanes.
#[inline(always)]
fn max(x: &[f32]) -> f32 {
    let mut lanes = [f32::NEG_INFINITY; LANES];
    let chunks = x.chunks_exact(LANES);
    let tail = chunks
        .remainder()
        .iter()
        .fold(f32::NEG_INFINITY, |m, &v| fmax(m, v));
    for c in chunks {
        for l in 0..LANES {
            lanes[l] = fmax(lanes[l], c[l]);
        }
    }
    lanes.iter().fold(tail, |m, &v| fmax(m, v))
}

/// `Σ exp(x − max)` in lanes, with [`exp_le0`]; with `store`, also `x ← exp(x − max)`.
#[inline(always)]
fn sum_exp(x: &mut [f32], max: f32, store: bool) -> f32 {
    let mut lanes = [0.0f32; LANES];
    let mut chunks = x.chunks_exact_mut(LANES);
    for c in &mut chunks {
        for l in 0..LANES {
            let e = exp_le0(c[l] - max);
            lanes[l] += e;
            if store {
                c[l] = e;
            }
        }
    }
    let mut sum = 0.0;
    for v in chunks.into_remainder() {
        let e = exp_le0(*v - max);
        sum += e;
        if store {
            *v = e;
        }
    }
    lanes.iter().fold(sum, |s, &v| s + v)
}

/// `x ← softmax(x)` in place (max subtracted first).
pub fn softmax(x: &mut [f32]) {
    let max = max(x);
    let sum = sum_exp(x, max, true);
    for v in x.iter_mut() {
        *v /= sum;
    }
}

/// `x ← log_softmax(x)` in place: `x − max − ln Σ exp(x − max)`, the CPU engine's
/// vectorized counterpart of [`crate::search::log_softmax`] (equal within 1e-6).
pub fn log_softmax(x: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if super::matmul::avx2() {
        // SAFETY: AVX2 and FMA were detected at run time.
        return unsafe { log_softmax_avx2(x) };
    }
    log_softmax_lanes(x);
}

/// [`log_softmax_lanes`] compiled with AVX2: 8-wide lanes instead of SSE's 4, the same
/// operations per lane (no FMA contraction in Rust), so the same result.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn log_softmax_avx2(x: &mut [f32]) {
    log_softmax_lanes(x);
}

#[inline(always)]
fn log_softmax_lanes(x: &mut [f32]) {
    let max = max(x);
    let log_sum = max + sum_exp(x, max, false).ln();
    for v in x.iter_mut() {
        *v -= log_sum;
    }
}

/// `Σ a · b` in 8 lanes (a fixed order: vectorizes, and equal on every target).
#[inline(always)]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut lanes = [0.0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in ca.zip(cb) {
        for l in 0..8 {
            lanes[l] += x[l] * y[l];
        }
    }
    lanes.iter().fold(tail, |s, &v| s + v)
}

/// Attention of one query of one head over `n` keys: `softmax(q · kⱼ / √d_head) · v`.
/// Key `j` is `kv[row(j) + k_col..][..d_head]`, its value `kv[row(j) + v_col..][..d_head]`.
/// Writes the weights into `weights` (`[n]`) and adds nothing: `context` (`[d_head]`) is
/// overwritten.
#[allow(clippy::too_many_arguments)]
pub fn attend(
    q: &[f32],
    kv: &[f32],
    n: usize,
    row: impl Fn(usize) -> usize,
    k_col: usize,
    v_col: usize,
    weights: &mut [f32],
    context: &mut [f32],
) {
    let dh = q.len();
    let scale = (dh as f32).sqrt();
    for (j, s) in weights[..n].iter_mut().enumerate() {
        let k = &kv[row(j) + k_col..][..dh];
        *s = dot(q, k) / scale;
    }
    softmax(&mut weights[..n]);
    context.fill(0.0);
    for (j, &p) in weights[..n].iter().enumerate() {
        let v = &kv[row(j) + v_col..][..dh];
        for (c, x) in context.iter_mut().zip(v) {
            *c += p * x;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::{AttentionLayout, AttentionShape};
    use crate::reference::{self, compare};
    use crate::weights::QuantizedMatrix;
    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};

    fn random(rng: &mut SmallRng, len: usize) -> Vec<f32> {
        (0..len).map(|_| rng.random_range(-1.0..1.0)).collect()
    }

    #[test]
    fn embed_matches_reference() {
        let mut rng = SmallRng::seed_from_u64(1);
        let (vocab, d) = (13, 12);
        let table = QuantizedMatrix::quantize(&random(&mut rng, vocab * d), vocab, d)
            .expect("a valid int8 shape");
        let tokens = [0, 5, 12, 40, 7, 3, 2];
        let seq = 7;
        let pe = crate::positions::positional_encoding(3 + seq, d);
        let positions: Vec<usize> = (0..tokens.len()).map(|r| 3 + r % seq).collect();
        let got = embed(&tokens, &positions, &Q8Linear::new(&table, &[]), &pe);
        let want = reference::embed(&tokens, &table, seq, 3);
        let c = compare(&got, &want, 1e-5, 1e-4);
        assert!(c.passed(), "{c:?}");
    }

    #[test]
    fn add_layernorm_matches_reference() {
        let mut rng = SmallRng::seed_from_u64(2);
        for (rows, d) in [(1, 4), (7, 36), (33, 256)] {
            let x = random(&mut rng, rows * d);
            let r = random(&mut rng, rows * d);
            let (g, b) = (random(&mut rng, d), random(&mut rng, d));
            let want = reference::add_layernorm(&x, &r, &g, &b, 1e-5);
            let mut got = x.clone();
            add_layernorm(&mut got, &r, &g, &b, 1e-5);
            let c = compare(&got, &want, 1e-5, 1e-4);
            assert!(c.passed(), "rows {rows} d {d}: {c:?}");
        }
    }

    #[test]
    fn softmax_matches_a_plain_loop() {
        let mut x = vec![1.0, 2.0, -3.0, 1e3, 1e3 - 1.0];
        let mut want = x.clone();
        let max = 1e3;
        let sum: f32 = want.iter().map(|v: &f32| (v - max).exp()).sum();
        for v in want.iter_mut() {
            *v = (*v - max).exp() / sum;
        }
        softmax(&mut x);
        let c = compare(&x, &want, 1e-6, 1e-5);
        assert!(c.passed(), "{c:?}");
    }

    /// `exp_le0` against `f32::exp` over [-100, 0] and at the edges.
    #[test]
    fn exp_le0_matches_exp() {
        for i in 0..=200_000 {
            let x = -87.0 * i as f32 / 200_000.0;
            let (got, want) = (exp_le0(x), x.exp());
            assert!(
                ((got - want) / want).abs() < 3e-7,
                "exp({x}): {got} against {want}"
            );
        }
        assert_eq!(exp_le0(0.0), 1.0);
        assert!(exp_le0(-100.0) < 1e-37 && exp_le0(f32::NEG_INFINITY) < 1e-37);
    }

    #[test]
    fn log_softmax_matches_search_log_softmax() {
        let mut rng = SmallRng::seed_from_u64(4);
        for len in [1, 5, 16, 17, 7820] {
            let mut x: Vec<f32> = random(&mut rng, len).iter().map(|v| v * 30.0).collect();
            if len > 1 {
                x[len / 2] = f32::NEG_INFINITY;
            }
            let mut want = x.clone();
            crate::search::log_softmax(&mut want);
            log_softmax(&mut x);
            if len > 1 {
                // -inf stays -inf (compare counts -inf − -inf = NaN as a failure).
                assert!(x[len / 2] == f32::NEG_INFINITY && want[len / 2] == f32::NEG_INFINITY);
                (x[len / 2], want[len / 2]) = (0.0, 0.0);
            }
            let c = compare(&x, &want, 1e-5, 1e-6);
            assert!(c.passed(), "len {len}: {c:?}");
        }
    }

    /// Self-attention of whole sequences with padding (key_len < n_keys), through the fused
    /// QKV layout, against `reference::attention`.
    #[test]
    fn attention_matches_reference() {
        let mut rng = SmallRng::seed_from_u64(3);
        for (batch, n, d, heads) in [(1, 1, 8, 2), (2, 7, 16, 4), (3, 33, 32, 2)] {
            let shape = AttentionShape {
                batch,
                n_queries: n,
                n_keys: n,
                d_model: d,
                n_heads: heads,
                q_offset: 0,
                causal: false,
            };
            let layout = AttentionLayout::fused_qkv(d, n);
            let qkv = random(&mut rng, batch * n * 3 * d);
            let key_len: Vec<u32> = (0..batch).map(|b| (n - b.min(n - 1)) as u32).collect();
            let (want_ctx, want_w) =
                reference::attention(&shape, &layout, &qkv, &qkv, &key_len, None);
            let dh = d / heads;
            let mut ctx = vec![0.0; batch * n * d];
            let mut w = vec![0.0; batch * heads * n * n];
            for b in 0..batch {
                let len = key_len[b] as usize;
                for i in 0..n {
                    for h in 0..heads {
                        let q = &qkv[(b * n + i) * 3 * d + h * dh..][..dh];
                        let w_row = &mut w[((b * heads + h) * n + i) * n..][..n];
                        attend(
                            q,
                            &qkv,
                            len,
                            |j| (b * n + j) * 3 * d,
                            d + h * dh,
                            2 * d + h * dh,
                            w_row,
                            &mut ctx[(b * n + i) * d + h * dh..][..dh],
                        );
                    }
                }
            }
            let c = compare(&ctx, &want_ctx, 1e-5, 1e-4);
            assert!(c.passed(), "context {batch}×{n}, d {d}: {c:?}");
            let c = compare(&w, &want_w, 1e-6, 1e-4);
            assert!(c.passed(), "weights {batch}×{n}, d {d}: {c:?}");
        }
    }
}
