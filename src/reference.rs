//! Plain-Rust f32 versions of every GPU kernel: the oracle the kernels are tested against.
//!
//! These favour clarity over speed. Each kernel function mirrors one file in `kernels/` by name;
//! `logits_topk`'s oracle is [`penalized_logprobs`] followed by the search's top-k.

use crate::layout::{AttentionLayout, AttentionShape};
use crate::positions::positional_encoding;
use crate::search::{StepRequest, StepRow};
use crate::weights::QuantizedMatrix;
use serde::Serialize;

/// `y[m, n] = x[m, k] · Wᵀ + bias` with `W` the dequantized int8 matrix (see `matmul_q8.wgsl`),
/// then `max(0, y)` when `relu`.
///
/// # Shapes
/// - `x`: `[m, k]` row-major, `w`: `[n, k]`, `bias`: `[n]`; returns `[m, n]`.
pub fn matmul_q8(x: &[f32], m: usize, w: &QuantizedMatrix, bias: &[f32], relu: bool) -> Vec<f32> {
    assert_eq!(x.len(), m * w.k, "x must be [m, k]");
    assert_eq!(bias.len(), w.n, "bias must be [n]");
    let w_f32 = w.dequantize();
    let mut y = Vec::with_capacity(m * w.n);
    for x_row in x.chunks_exact(w.k) {
        for (w_row, b) in w_f32.chunks_exact(w.k).zip(bias) {
            let dot: f32 = x_row.iter().zip(w_row).map(|(a, b)| a * b).sum();
            y.push(if relu { (dot + b).max(0.0) } else { dot + b });
        }
    }
    y
}

/// `LayerNorm(x · Wᵀ + bias + residual) · gamma + beta`, as `matmul_q8_norm.wgsl`: the
/// [`matmul_q8`] product, then [`add_layernorm`] with the residual.
#[allow(clippy::too_many_arguments)]
pub fn matmul_q8_norm(
    x: &[f32],
    m: usize,
    w: &QuantizedMatrix,
    bias: &[f32],
    residual: &[f32],
    gamma: &[f32],
    beta: &[f32],
    eps: f32,
) -> Vec<f32> {
    add_layernorm(&matmul_q8(x, m, w, bias, false), residual, gamma, beta, eps)
}

/// `LayerNorm(x + residual) · gamma + beta` per row of `gamma.len()` values, with the biased
/// variance and `eps` inside the square root (burn's and PyTorch's LayerNorm).
///
/// # Shapes
/// `x`, `residual`: `[rows, d_model]`; `gamma`, `beta`: `[d_model]`; returns `[rows, d_model]`.
pub fn add_layernorm(
    x: &[f32],
    residual: &[f32],
    gamma: &[f32],
    beta: &[f32],
    eps: f32,
) -> Vec<f32> {
    let d = gamma.len();
    let mut y = Vec::with_capacity(x.len());
    for (xr, rr) in x.chunks_exact(d).zip(residual.chunks_exact(d)) {
        let v: Vec<f32> = xr.iter().zip(rr).map(|(a, b)| a + b).collect();
        let mean = v.iter().sum::<f32>() / d as f32;
        let var = v.iter().map(|a| (a - mean) * (a - mean)).sum::<f32>() / d as f32;
        let inv_std = 1.0 / (var + eps).sqrt();
        y.extend(
            v.iter()
                .zip(gamma.iter().zip(beta))
                .map(|(a, (g, b))| (a - mean) * inv_std * g + b),
        );
    }
    y
}

/// Token embeddings from the int8 table, × √d_model, plus the positional encoding: row `r` is
/// token `tokens[r]` at position `start_pos + r % seq_len` (ids past the table read `<unk>`).
///
/// # Shapes
/// `tokens`: `[rows]`; `table`: `[vocab, d_model]`; returns `[rows, d_model]`.
pub fn embed(
    tokens: &[u32],
    table: &QuantizedMatrix,
    seq_len: usize,
    start_pos: usize,
) -> Vec<f32> {
    let d = table.k;
    let scale = (d as f32).sqrt();
    let weights = table.dequantize();
    let pe = positional_encoding(start_pos + seq_len, d);
    let mut x = Vec::with_capacity(tokens.len() * d);
    for (r, &token) in tokens.iter().enumerate() {
        let token = if (token as usize) < table.n {
            token as usize
        } else {
            1
        };
        let pos = start_pos + r % seq_len;
        let row = &weights[token * d..(token + 1) * d];
        x.extend(
            row.iter()
                .zip(&pe[pos * d..(pos + 1) * d])
                .map(|(w, p)| w * scale + p),
        );
    }
    x
}

/// A decoder step's request for rows with these histories (sentence 0, parent 0), as the
/// search would send it with these penalties and `repeatable` tokens.
pub fn step_request<'a>(
    histories: &'a [Vec<u32>],
    k: usize,
    penalty: f32,
    window: usize,
    block: usize,
    repeatable: &'a [bool],
) -> StepRequest<'a> {
    StepRequest {
        step: 0,
        k,
        repetition_penalty: penalty,
        repetition_window: window,
        block_repeats: block,
        repeatable,
        rows: histories
            .iter()
            .map(|h| StepRow {
                sentence: 0,
                parent: 0,
                last_token: h.last().copied().unwrap_or(crate::config::BOS_ID),
                history: h,
            })
            .collect(),
    }
}

/// Per row of `logits` (`[request.rows.len(), vocab]`): log-softmax, then the request's
/// repetition penalty and repeat block over the row's history — the full penalized log-prob
/// table, the oracle of `logits_topk`, built from the search module's own definitions.
pub fn penalized_logprobs(
    logits: &[f32],
    vocab: usize,
    request: &StepRequest<'_>,
) -> Vec<Vec<f32>> {
    logits
        .chunks_exact(vocab)
        .zip(&request.rows)
        .map(|(row, r)| {
            let mut lp = row.to_vec();
            crate::search::log_softmax(&mut lp);
            request.penalize(&mut lp, r.history);
            lp
        })
        .collect()
}

/// Scaled dot-product attention over interleaved heads, as `attention.wgsl`, with the same
/// [`AttentionLayout`]: masked keys (at or past `key_len[b]`, or after the query's position when
/// causal) score −1e9, as in the burn model (`ancestors`: `[batch, stride]` beam history, as `(data, stride)`). Returns the context
/// `[batch, n_queries, d_model]` and the weights `[batch, n_heads, n_queries, n_keys]`.
pub fn attention(
    s: &AttentionShape,
    l: &AttentionLayout,
    q: &[f32],
    kv: &[f32],
    key_len: &[u32],
    ancestors: Option<(&[u32], usize)>,
) -> (Vec<f32>, Vec<f32>) {
    let (d, dh) = (s.d_model, s.d_head());
    let mut context = vec![0.0; s.batch * s.n_queries * d];
    let mut weights = vec![0.0; s.batch * s.n_heads * s.n_queries * s.n_keys];
    for b in 0..s.batch {
        let row = |j: usize| {
            let owner = ancestors.map_or(b, |(a, stride)| a[b * stride + j] as usize);
            l.kv_start + (j * l.pos_rows + owner * l.batch_rows) * l.kv_stride
        };
        for h in 0..s.n_heads {
            for i in 0..s.n_queries {
                let qi = &q[l.q_start + (b * s.n_queries + i) * l.q_stride + h * dh..][..dh];
                let scores: Vec<f32> = (0..s.n_keys)
                    .map(|j| {
                        let hidden = j >= key_len[b] as usize || (s.causal && j > s.q_offset + i);
                        if hidden {
                            return -1e9;
                        }
                        let kj = &kv[row(j) + l.k_col + h * dh..][..dh];
                        qi.iter().zip(kj).map(|(a, c)| a * c).sum::<f32>() / (dh as f32).sqrt()
                    })
                    .collect();
                let max = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                let exps: Vec<f32> = scores.iter().map(|x| (x - max).exp()).collect();
                let sum: f32 = exps.iter().sum();
                let w_base = ((b * s.n_heads + h) * s.n_queries + i) * s.n_keys;
                for (j, e) in exps.iter().enumerate() {
                    let w = e / sum;
                    weights[w_base + j] = w;
                    let vj = &kv[row(j) + l.v_col + h * dh..][..dh];
                    for (c, x) in vj.iter().enumerate() {
                        context[(b * s.n_queries + i) * d + h * dh + c] += w * x;
                    }
                }
            }
        }
    }
    (context, weights)
}

/// How closely a kernel's output matched its reference.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Comparison {
    /// Elements compared.
    pub len: usize,
    /// Elements outside `atol + rtol · |expected|` (NaN counts as outside).
    pub n_bad: usize,
    /// The first element outside tolerance, if any.
    pub first_bad: Option<usize>,
    /// The largest absolute difference, and where it is.
    pub max_abs_err: f32,
    pub worst_index: usize,
}

impl Comparison {
    /// True when every element is within tolerance and the lengths agree.
    pub fn passed(&self) -> bool {
        self.n_bad == 0
    }
}

/// Compares `got` with `want` element by element: `|got - want| <= atol + rtol · |want|`.
/// A length mismatch counts every missing or extra element as bad.
pub fn compare(got: &[f32], want: &[f32], atol: f32, rtol: f32) -> Comparison {
    let mut result = Comparison {
        len: want.len(),
        n_bad: got.len().abs_diff(want.len()),
        first_bad: (got.len() != want.len()).then_some(got.len().min(want.len())),
        max_abs_err: 0.0,
        worst_index: 0,
    };
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let err = (g - w).abs();
        // NaN (from either side) is bad.
        if err.is_nan() || err > atol + rtol * w.abs() {
            result.n_bad += 1;
            result.first_bad = Some(result.first_bad.map_or(i, |f| f.min(i)));
        }
        if err > result.max_abs_err || err.is_nan() {
            result.max_abs_err = err;
            result.worst_index = i;
        }
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matmul_q8_reference_by_hand() {
        // Rows whose largest magnitude is 127 get scale 1, so int8 holds them exactly.
        let w = QuantizedMatrix::quantize(&[127.0, 2.0, 3.0, 4.0, -1.0, 0.0, 0.0, 127.0], 2, 4)
            .expect("valid shape");
        let y = matmul_q8(
            &[1.0, 1.0, 1.0, 1.0, 0.5, 0.0, 0.0, 2.0],
            2,
            &w,
            &[10.0, 0.0],
            false,
        );
        let want = [146.0, 126.0, 81.5, 253.5];
        let c = compare(&y, &want, 1e-5, 0.0);
        assert!(c.passed(), "{c:?} {y:?}");
        let relu = matmul_q8(&[-1.0, 0.0, 0.0, 0.0], 1, &w, &[10.0, 0.0], true);
        assert_eq!(relu, vec![0.0, 1.0]);
    }

    #[test]
    fn compare_reports_worst_and_first_bad() {
        let c = compare(&[1.0, 2.5, 3.0, f32::NAN], &[1.0, 2.0, 3.1, 4.0], 0.2, 0.0);
        assert_eq!(c.n_bad, 2);
        assert_eq!(c.first_bad, Some(1));
        assert_eq!(c.worst_index, 3);
        assert!(!c.passed());
        let ok = compare(&[1.0], &[1.00001], 1e-4, 1e-4);
        assert!(ok.passed());
        let short = compare(&[1.0], &[1.0, 2.0], 1e-4, 1e-4);
        assert_eq!((short.n_bad, short.first_bad), (1, Some(1)));
    }
}
