//! Runs every GPU kernel against its plain-Rust reference on seeded random inputs.
//!
//! The native tests assert on the report; the web page shows it, so a user (or the browser
//! test) can see that the kernels compute the right thing on their own adapter.

use crate::gpu::{AdapterSummary, Gpu, GpuError};
use crate::kernels::attention::AttentionShape;
use crate::kernels::matmul_q8::{self, Activation};
use crate::kernels::{add_layernorm, attention, embed, kv_cache, logits_topk};
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

/// `(rows, d_model)` shapes for `add_layernorm`: one row, a row shorter than the workgroup,
/// lengths that are not multiples of it, and model widths.
pub const ADD_LAYERNORM_SHAPES: &[(usize, usize)] =
    &[(1, 32), (7, 4), (33, 100), (8, 256), (3, 1000), (64, 512)];

/// `(sentences, seq_len, start_pos, vocab, d_model)` shapes for `embed`: one decoder step for
/// several beams, encoder batches of awkward lengths, and model widths.
pub const EMBED_SHAPES: &[(usize, usize, usize, usize, usize)] = &[
    (1, 1, 0, 10, 32),
    (8, 1, 17, 50, 32),
    (3, 7, 0, 100, 260),
    (2, 33, 0, 1003, 256),
    (1, 149, 0, 64, 512),
];

/// `(rows, vocab, k, window, penalty, ties)` shapes for `logits_topk`: greedy on a tiny
/// vocabulary, k equal to the vocabulary, eight beams with the reference's penalty, model
/// vocabularies, one past the kernel's history bitmap (32768 ids), and integer logits full of exact ties (where the token ids must come out in
/// ascending order, as `search::top_k` orders them).
pub const LOGITS_TOPK_SHAPES: &[(usize, usize, usize, usize, f32, bool)] = &[
    (1, 10, 1, 0, 1.0, false),
    (2, 7, 7, 3, 1.5, false),
    (8, 1003, 8, 30, 1.5, false),
    (3, 5000, 4, 5, 2.0, false),
    (4, 16000, 8, 30, 1.5, false),
    (2, 40000, 4, 30, 1.5, false),
    (4, 300, 8, 0, 1.0, true),
];

/// Shapes for `attention`: encoder self-attention with padding, cross-attention of one decoder
/// step for eight beams, decoder self-attention over a partly filled KV cache, a causal full
/// decoder pass, and a long source with eight heads.
pub const ATTENTION_SHAPES: &[AttentionShape] = &[
    AttentionShape {
        batch: 2,
        n_queries: 7,
        n_keys: 7,
        kv_stride: 7,
        d_model: 32,
        n_heads: 2,
        q_offset: 0,
        causal: false,
    },
    AttentionShape {
        batch: 8,
        n_queries: 1,
        n_keys: 33,
        kv_stride: 33,
        d_model: 64,
        n_heads: 4,
        q_offset: 0,
        causal: false,
    },
    AttentionShape {
        batch: 4,
        n_queries: 1,
        n_keys: 5,
        kv_stride: 20,
        d_model: 32,
        n_heads: 2,
        q_offset: 4,
        causal: true,
    },
    AttentionShape {
        batch: 1,
        n_queries: 33,
        n_keys: 33,
        kv_stride: 33,
        d_model: 256,
        n_heads: 4,
        q_offset: 0,
        causal: true,
    },
    AttentionShape {
        batch: 1,
        n_queries: 3,
        n_keys: 149,
        kv_stride: 150,
        d_model: 512,
        n_heads: 8,
        q_offset: 0,
        causal: false,
    },
];

/// Shapes for `kv_cache`: (parents, d_model, capacity, t) — the first step (t = 0), a beam of
/// four reordered with repeats, a shrinking beam, and a long cache of the base model's width.
pub const KV_CACHE_SHAPES: &[(&[u32], usize, usize, usize)] = &[
    (&[0, 0, 0], 32, 8, 0),
    (&[2, 0, 0, 3], 64, 10, 5),
    (&[1, 3], 96, 6, 5),
    (&[0, 1], 512, 150, 149),
];

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
    checks.extend(check_add_layernorm(gpu, seed).await?);
    checks.extend(check_embed(gpu, seed).await?);
    checks.extend(check_logits_topk(gpu, seed).await?);
    checks.extend(check_attention(gpu, seed).await?);
    checks.extend(check_kv_cache(gpu, seed).await?);
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

/// `add_layernorm` against [`reference::add_layernorm`] on every shape of
/// [`ADD_LAYERNORM_SHAPES`], with inputs offset and scaled like real activations.
pub async fn check_add_layernorm(gpu: &Gpu, seed: u64) -> Result<Vec<KernelCheck>, GpuError> {
    let mut rng = SmallRng::seed_from_u64(seed ^ 0x4c4e);
    let mut checks = Vec::new();
    for &(rows, d) in ADD_LAYERNORM_SHAPES {
        let x: Vec<f32> = uniform(&mut rng, rows * d)
            .iter()
            .map(|v| 3.0 * v + 0.5)
            .collect();
        let residual = uniform(&mut rng, rows * d);
        let gamma: Vec<f32> = uniform(&mut rng, d).iter().map(|v| 1.0 + 0.5 * v).collect();
        let beta = uniform(&mut rng, d);
        let eps = 1e-5;
        let got = add_layernorm::add_layernorm(gpu, &x, &residual, &gamma, &beta, eps).await?;
        let want = reference::add_layernorm(&x, &residual, &gamma, &beta, eps);
        checks.push(KernelCheck {
            kernel: add_layernorm::NAME,
            shape: format!("rows={rows} d_model={d}"),
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
    for &(rows, vocab, k, window, penalty, ties) in LOGITS_TOPK_SHAPES {
        let logits: Vec<f32> = uniform(&mut rng, rows * vocab)
            .iter()
            .map(|v| if ties { (3.0 * v).round() } else { 6.0 * v })
            .collect();
        // Histories that repeat tokens and include each row's most likely token, so the
        // penalty changes the ranking.
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
                h.push(best as u32);
                h.push(best as u32);
                h
            })
            .collect();
        let got =
            logits_topk::logits_topk(gpu, &logits, vocab, &histories, k, penalty, window).await?;
        let table = reference::penalized_logprobs(&logits, vocab, &histories, penalty, window);
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
            shape: format!("rows={rows} vocab={vocab} k={k} window={window} penalty={penalty}"),
            comparison: reference::compare(&got_values, &want_values, ATOL, RTOL),
        });
    }
    Ok(checks)
}

/// `attention` against [`reference::attention`] on every shape of [`ATTENTION_SHAPES`]: one
/// check of the context and one of the weights per shape.
pub async fn check_attention(gpu: &Gpu, seed: u64) -> Result<Vec<KernelCheck>, GpuError> {
    let mut rng = SmallRng::seed_from_u64(seed ^ 0x4154);
    let mut checks = Vec::new();
    for s in ATTENTION_SHAPES {
        let q = uniform(&mut rng, s.batch * s.n_queries * s.d_model);
        let k: Vec<f32> = uniform(&mut rng, s.batch * s.kv_stride * s.d_model)
            .iter()
            .map(|x| 3.0 * x)
            .collect();
        let v = uniform(&mut rng, s.batch * s.kv_stride * s.d_model);
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
        let (context, weights) = attention::attention(gpu, s, &q, &k, &v, &key_len).await?;
        let (want_context, want_weights) = reference::attention(s, &q, &k, &v, &key_len);
        let name = format!(
            "batch={} queries={} keys={} d_model={} heads={}{}",
            s.batch,
            s.n_queries,
            s.n_keys,
            s.d_model,
            s.n_heads,
            if s.causal { " causal" } else { "" }
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

/// Runs `kv_cache` on every shape of [`KV_CACHE_SHAPES`]; keys and values are checked apart.
pub async fn check_kv_cache(gpu: &Gpu, seed: u64) -> Result<Vec<KernelCheck>, GpuError> {
    let mut rng = SmallRng::seed_from_u64(seed ^ 0x4b56);
    let mut checks = Vec::new();
    for &(parent, d, capacity, t) in KV_CACHE_SHAPES {
        let src_rows = parent.iter().max().map_or(1, |&p| p as usize + 1);
        let src = uniform(&mut rng, src_rows * capacity * d);
        let new = uniform(&mut rng, parent.len() * d);
        let (k, v) = kv_cache::kv_cache(gpu, parent, &new, &src, d, capacity, t).await?;
        let want_k = reference::kv_cache(parent, &new, &src, d, capacity, t);
        let shift = |x: &[f32]| x.iter().map(|v| v + 1000.0).collect::<Vec<_>>();
        let want_v = reference::kv_cache(parent, &shift(&new), &shift(&src), d, capacity, t);
        let name = format!(
            "rows={} d_model={d} capacity={capacity} t={t}",
            parent.len()
        );
        for (what, got, want) in [("keys", &k, &want_k), ("values", &v, &want_v)] {
            checks.push(KernelCheck {
                kernel: kv_cache::NAME,
                shape: format!("{name} {what}"),
                comparison: reference::compare(got, want, ATOL, RTOL),
            });
        }
    }
    Ok(checks)
}
