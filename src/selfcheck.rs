//! Runs every GPU kernel against its plain-Rust reference on seeded random inputs.
//!
//! The native tests assert on the report; the web page shows it, so a user (or the browser
//! test) can see that the kernels compute the right thing on their own adapter.

use crate::gpu::{AdapterSummary, Gpu, GpuError};
use crate::kernels::attention::{AttentionLayout, AttentionShape};
use crate::kernels::matmul_q8::{self, Activation};
use crate::kernels::{attention, embed, logits_topk, matmul_q8_norm};
use crate::reference::{self, Comparison};
use crate::weights::QuantizedMatrix;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

/// Absolute tolerance for matmul-like kernels against the reference on the same int8 weights.
pub const ATOL: f32 = 1e-4;
/// Relative tolerance, ditto.
pub const RTOL: f32 = 1e-4;

/// `(m, n, k)` shapes for `matmul_q8`: single rows, every row-block size, m past a multiple of
/// the 8-row block, n not a multiple of the 4-feature quad or the 64-invocation workgroup, and
/// model-like sizes.
pub const MATMUL_Q8_SHAPES: &[(usize, usize, usize)] = &[
    (1, 1, 4),
    (1, 48, 64),
    (2, 6, 8),
    (3, 9, 12),
    (4, 13, 16),
    (5, 70, 20),
    (6, 31, 8),
    (7, 100, 36),
    (33, 40, 260),
    (16, 16, 64),
    (33, 257, 516),
    (8, 1003, 256),
    (64, 512, 256),
];

/// `(m, n, k)` shapes for `matmul_q8_norm`: the narrowest row, alone and in blocks wider than
/// the workgroup (n / 4 invocations for up to 8 rows), every block size up to a full block, m
/// past a multiple of the 8-row block, and the model widths of `small` and `base` (attention
/// output, FFN second layer) up to the widest row the kernel normalises.
pub const MATMUL_Q8_NORM_SHAPES: &[(usize, usize, usize)] = &[
    (1, 4, 4),
    (8, 4, 4),
    (6, 16, 8),
    (4, 12, 8),
    (7, 36, 20),
    (2, 8, 4),
    (3, 100, 36),
    (5, 32, 64),
    (8, 256, 256),
    (1, 256, 1024),
    (33, 512, 2048),
    (2, 1024, 16),
];

/// `(sentences, seq_len, start_pos, vocab, d_model)` shapes for `embed`: one decoder step for
/// several beams, encoder batches of awkward lengths, and model widths.
pub const EMBED_SHAPES: &[(usize, usize, usize, usize, usize)] = &[
    (1, 1, 0, 10, 32),
    (8, 1, 17, 50, 32),
    (3, 7, 0, 100, 260),
    (2, 33, 0, 1003, 256),
    (1, 149, 0, 64, 512),
];

/// `(rows, vocab, k, window, penalty, block, ties)` shapes for `logits_topk`: greedy on a tiny
/// vocabulary, k equal to the vocabulary, eight beams with the reference's penalty and the
/// default repeat block, model vocabularies, one past the kernel's history bitmap (32768 ids)
/// with the longest block, and integer logits full of exact ties (where the token ids must
/// come out in ascending order, as `search::top_k` orders them). Every history ends with the
/// row's best token twice, so a block bans it.
pub const LOGITS_TOPK_SHAPES: &[(usize, usize, usize, usize, f32, usize, bool)] = &[
    (1, 10, 1, 0, 1.0, 0, false),
    (2, 7, 7, 3, 1.5, 0, false),
    (8, 1003, 8, 30, 1.5, 4, false),
    (3, 5000, 4, 5, 2.0, 1, false),
    (4, 16000, 8, 30, 1.5, 4, false),
    (2, 40000, 4, 30, 1.5, 16, false),
    (4, 300, 8, 0, 1.0, 4, true),
];

/// Cases for `attention` (shape, layout, beam history): encoder self-attention with padding on
/// a fused QKV projection, cross-attention of one decoder step for eight beams reading the
/// third sentence of a batch's fused key/value projection, decoder self-attention over a
/// position-major KV cache through a beam history, a causal full decoder pass, and a long source
/// with eight heads of 64 and two heads of 128 features.
pub const ATTENTION_CASES: &[(AttentionShape, AttentionLayout, bool)] = &[
    (
        shape(2, 7, 7, 32, 2, 0, false),
        AttentionLayout::fused_qkv(32, 7),
        false,
    ),
    (
        shape(1, 8, 33, 64, 4, 0, false),
        AttentionLayout::cross(64, 2 * 40),
        false,
    ),
    (
        shape(4, 1, 5, 32, 2, 4, false),
        AttentionLayout::kv_cache(32, 4, 4),
        true,
    ),
    (
        shape(1, 33, 33, 256, 4, 0, true),
        AttentionLayout::fused_qkv(256, 33),
        false,
    ),
    (
        shape(1, 3, 149, 512, 8, 0, false),
        AttentionLayout::cross(512, 0),
        false,
    ),
    (
        shape(2, 3, 20, 256, 2, 0, false),
        AttentionLayout::cross(256, 0),
        false,
    ),
];

const fn shape(
    batch: usize,
    n_queries: usize,
    n_keys: usize,
    d_model: usize,
    n_heads: usize,
    q_offset: usize,
    causal: bool,
) -> AttentionShape {
    AttentionShape {
        batch,
        n_queries,
        n_keys,
        d_model,
        n_heads,
        q_offset,
        causal,
    }
}

/// One kernel run on one shape.
#[derive(Clone, Debug, Serialize)]
pub struct KernelCheck {
    pub kernel: &'static str,
    pub shape: String,
    pub comparison: Comparison,
}

/// Every check of one run, and the adapter it ran on.
#[derive(Clone, Debug, Serialize)]
pub struct SelfCheckReport {
    pub adapter: AdapterSummary,
    pub checks: Vec<KernelCheck>,
    pub passed: bool,
}

/// Runs every kernel check with inputs drawn from `seed`.
pub async fn run(gpu: &Gpu, seed: u64) -> Result<SelfCheckReport, GpuError> {
    let mut checks = check_matmul_q8(gpu, seed).await?;
    checks.extend(check_matmul_q8_norm(gpu, seed).await?);
    checks.extend(check_embed(gpu, seed).await?);
    checks.extend(check_logits_topk(gpu, seed).await?);
    checks.extend(check_attention(gpu, seed).await?);
    Ok(SelfCheckReport {
        adapter: gpu.adapter().clone(),
        passed: checks.iter().all(|c| c.comparison.passed()),
        checks,
    })
}

/// `matmul_q8` against [`reference::matmul_q8`] on every shape of [`MATMUL_Q8_SHAPES`].
pub async fn check_matmul_q8(gpu: &Gpu, seed: u64) -> Result<Vec<KernelCheck>, GpuError> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut checks = Vec::new();
    for (index, &(m, n, k)) in MATMUL_Q8_SHAPES.iter().enumerate() {
        let x = uniform(&mut rng, m * k);
        // Rows of different magnitudes, so a mixed-up per-row scale shows.
        let w: Vec<f32> = uniform(&mut rng, n * k)
            .into_iter()
            .enumerate()
            .map(|(i, v)| v * (1 + (i / k) % 5) as f32)
            .collect();
        let bias = uniform(&mut rng, n);
        let w = QuantizedMatrix::quantize(&w, n, k).map_err(|e| GpuError::Shape {
            kernel: matmul_q8::NAME,
            message: e.to_string(),
        })?;
        // Every other shape with the fused ReLU of the feed-forward block.
        let relu = index % 2 == 1;
        let activation = if relu {
            Activation::Relu
        } else {
            Activation::None
        };
        let want = reference::matmul_q8(&x, m, &w, &bias, relu);
        let got = matmul_q8::matmul_q8(gpu, &x, m, &w, &bias, activation).await?;
        checks.push(KernelCheck {
            kernel: matmul_q8::NAME,
            shape: format!("m={m} n={n} k={k}{}", if relu { " relu" } else { "" }),
            comparison: reference::compare(&got, &want, ATOL, RTOL),
        });
    }
    Ok(checks)
}

/// `matmul_q8_norm` against [`reference::matmul_q8_norm`] on every shape of
/// [`MATMUL_Q8_NORM_SHAPES`], with residuals offset and scaled like real activations.
pub async fn check_matmul_q8_norm(gpu: &Gpu, seed: u64) -> Result<Vec<KernelCheck>, GpuError> {
    let mut rng = SmallRng::seed_from_u64(seed ^ 0x4c4e);
    let mut checks = Vec::new();
    for &(m, n, k) in MATMUL_Q8_NORM_SHAPES {
        let x = uniform(&mut rng, m * k);
        let w = QuantizedMatrix::quantize(&uniform(&mut rng, n * k), n, k).map_err(|e| {
            GpuError::Shape {
                kernel: matmul_q8_norm::NAME,
                message: e.to_string(),
            }
        })?;
        let bias = uniform(&mut rng, n);
        let residual: Vec<f32> = uniform(&mut rng, m * n)
            .iter()
            .map(|v| 3.0 * v + 0.5)
            .collect();
        let gamma: Vec<f32> = uniform(&mut rng, n).iter().map(|v| 1.0 + 0.5 * v).collect();
        let beta = uniform(&mut rng, n);
        let eps = 1e-5;
        let got =
            matmul_q8_norm::matmul_q8_norm(gpu, &x, m, &w, &bias, &residual, &gamma, &beta, eps)
                .await?;
        let want = reference::matmul_q8_norm(&x, m, &w, &bias, &residual, &gamma, &beta, eps);
        checks.push(KernelCheck {
            kernel: matmul_q8_norm::NAME,
            shape: format!("m={m} n={n} k={k}"),
            comparison: reference::compare(&got, &want, ATOL, RTOL),
        });
    }
    Ok(checks)
}

/// `embed` against [`reference::embed`] on every shape of [`EMBED_SHAPES`], including a token
/// id past the table.
pub async fn check_embed(gpu: &Gpu, seed: u64) -> Result<Vec<KernelCheck>, GpuError> {
    let mut rng = SmallRng::seed_from_u64(seed ^ 0x454d);
    let mut checks = Vec::new();
    for &(sentences, seq_len, start_pos, vocab, d) in EMBED_SHAPES {
        let table =
            QuantizedMatrix::quantize(&uniform(&mut rng, vocab * d), vocab, d).map_err(|e| {
                GpuError::Shape {
                    kernel: embed::NAME,
                    message: e.to_string(),
                }
            })?;
        let mut tokens: Vec<u32> = (0..sentences * seq_len)
            .map(|_| rng.random_range(0..vocab as u32))
            .collect();
        tokens[0] = vocab as u32 + 5;
        let got = embed::embed(gpu, &tokens, &table, seq_len, start_pos).await?;
        let want = reference::embed(&tokens, &table, seq_len, start_pos);
        checks.push(KernelCheck {
            kernel: embed::NAME,
            shape: format!(
                "rows={} seq_len={seq_len} start={start_pos} d_model={d}",
                tokens.len()
            ),
            comparison: reference::compare(&got, &want, ATOL, RTOL),
        });
    }
    Ok(checks)
}

/// `logits_topk` against [`reference::penalized_logprobs`] and `search::top_k`. The compared
/// values are the kernel's k log-probs, then the reference's log-probs of the kernel's k token
/// ids (so a wrong id shows even where scores agree), both against the reference's top k.
pub async fn check_logits_topk(gpu: &Gpu, seed: u64) -> Result<Vec<KernelCheck>, GpuError> {
    let mut rng = SmallRng::seed_from_u64(seed ^ 0x544b);
    let mut checks = Vec::new();
    for &(rows, vocab, k, window, penalty, block, ties) in LOGITS_TOPK_SHAPES {
        let logits: Vec<f32> = uniform(&mut rng, rows * vocab)
            .iter()
            .map(|v| if ties { (3.0 * v).round() } else { 6.0 * v })
            .collect();
        // Histories that repeat tokens and end so that the repeat block bans each row's most
        // likely token (a run `b b`, or a phrase `x y b x y` on odd rows), so the penalty and
        // the block change the ranking; every seventh token is repeatable (never banned).
        let repeatable: Vec<bool> = (0..vocab).map(|t| t % 7 == 3).collect();
        let histories: Vec<Vec<u32>> = (0..rows)
            .map(|r| {
                let row = &logits[r * vocab..(r + 1) * vocab];
                let best = (0..vocab)
                    .max_by(|&a, &b| row[a].total_cmp(&row[b]))
                    .unwrap_or(0);
                let len = rng.random_range(0..40);
                let mut h: Vec<u32> = (0..len)
                    .map(|_| rng.random_range(0..vocab as u32))
                    .collect();
                let best = best as u32;
                if r % 2 == 1 {
                    let (x, y) = (
                        rng.random_range(0..vocab as u32),
                        rng.random_range(0..vocab as u32),
                    );
                    h.extend([x, y, best, x, y]);
                } else {
                    h.extend([best, best]);
                }
                h
            })
            .collect();
        let request = reference::step_request(&histories, k, penalty, window, block, &repeatable);
        let got = logits_topk::logits_topk(gpu, &logits, vocab, &request).await?;
        let table = reference::penalized_logprobs(&logits, vocab, &request);
        let (mut got_values, mut want_values) = (Vec::new(), Vec::new());
        for (row, lp) in got.iter().zip(&table) {
            let want = crate::search::top_k(lp, k);
            got_values.extend(row.iter().map(|c| c.logprob));
            got_values.extend(
                row.iter()
                    .map(|c| lp.get(c.token as usize).copied().unwrap_or(f32::NAN)),
            );
            want_values.extend(want.iter().map(|c| c.logprob));
            want_values.extend(want.iter().map(|c| c.logprob));
            if ties {
                got_values.extend(row.iter().map(|c| c.token as f32));
                want_values.extend(want.iter().map(|c| c.token as f32));
            }
        }
        checks.push(KernelCheck {
            kernel: logits_topk::NAME,
            shape: format!(
                "rows={rows} vocab={vocab} k={k} window={window} penalty={penalty} block={block}"
            ),
            comparison: reference::compare(&got_values, &want_values, ATOL, RTOL),
        });
    }
    Ok(checks)
}

/// `attention` against [`reference::attention`] on every case of [`ATTENTION_CASES`]: one
/// check of the context and one of the weights per shape.
pub async fn check_attention(gpu: &Gpu, seed: u64) -> Result<Vec<KernelCheck>, GpuError> {
    let mut rng = SmallRng::seed_from_u64(seed ^ 0x4154);
    let mut checks = Vec::new();
    for (s, l, with_history) in ATTENTION_CASES {
        // A beam history over `batch` slots, each beam its own slot at the last position.
        let stride = s.n_keys + 2;
        let history: Option<Vec<u32>> = with_history.then(|| {
            (0..s.batch * stride)
                .map(|x| {
                    let (b, j) = (x / stride, x % stride);
                    if j + 1 == s.n_keys {
                        b as u32
                    } else {
                        rng.random_range(0..s.batch as u32)
                    }
                })
                .collect()
        });
        let slots = s.batch;
        let q_len = l.q_start + s.batch * s.n_queries * l.q_stride.max(s.d_model);
        let kv_rows = (s.n_keys - 1) * l.pos_rows + (slots - 1) * l.batch_rows + 1;
        let kv_len = l.kv_start + kv_rows * l.kv_stride;
        let q = uniform(&mut rng, q_len);
        let kv: Vec<f32> = uniform(&mut rng, kv_len).iter().map(|x| 3.0 * x).collect();
        // Padding in every batch row but the first (the causal shapes keep all keys).
        let key_len: Vec<u32> = (0..s.batch)
            .map(|b| {
                if b == 0 || s.causal {
                    s.n_keys as u32
                } else {
                    rng.random_range(1..=s.n_keys as u32)
                }
            })
            .collect();
        let history = history.as_deref();
        let (context, weights) = attention::attention(
            gpu,
            s,
            l,
            &q,
            &kv,
            &key_len,
            history.map(|h| (h, stride, slots)),
        )
        .await?;
        let (want_context, want_weights) =
            reference::attention(s, l, &q, &kv, &key_len, history.map(|h| (h, stride)));
        let name = format!(
            "batch={} queries={} keys={} d_model={} heads={}{}{}",
            s.batch,
            s.n_queries,
            s.n_keys,
            s.d_model,
            s.n_heads,
            if s.causal { " causal" } else { "" },
            if *with_history { " beam history" } else { "" }
        );
        checks.push(KernelCheck {
            kernel: attention::NAME,
            shape: format!("{name} context"),
            comparison: reference::compare(&context, &want_context, ATOL, RTOL),
        });
        checks.push(KernelCheck {
            kernel: attention::NAME,
            shape: format!("{name} weights"),
            comparison: reference::compare(&weights, &want_weights, ATOL, RTOL),
        });
    }
    Ok(checks)
}

/// Test helper: every check ran and matched, and there were `expected` of them.
///
/// # Panics
/// On a GPU error, a missing check or any mismatch, listing the mismatches.
#[cfg(test)]
pub(crate) fn assert_all_match(checks: Result<Vec<KernelCheck>, GpuError>, expected: usize) {
    let checks = checks.unwrap_or_else(|e| panic!("the kernel did not run on this adapter: {e}"));
    assert_eq!(checks.len(), expected, "number of checks");
    let failed: Vec<_> = checks.iter().filter(|c| !c.comparison.passed()).collect();
    assert!(
        failed.is_empty(),
        "mismatches against the reference: {failed:#?}"
    );
}

fn uniform(rng: &mut SmallRng, len: usize) -> Vec<f32> {
    (0..len).map(|_| rng.random_range(-1.0..1.0)).collect()
}
