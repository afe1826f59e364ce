//! Driver for `logits_topk.wgsl`: log-softmax, repetition penalty, repeat block and top-k per
//! beam, read back as `(token, log-prob)` candidates for [`crate::search`].

use crate::gpu::{Gpu, GpuError, PipelineKey};
use crate::search::{Candidate, StepRequest, repeat_bans};
use std::sync::Arc;

/// The kernel's name: its pipeline-cache key and debug label.
pub const NAME: &str = "logits_topk";
/// The WGSL source.
pub const SOURCE: &str = include_str!("logits_topk.wgsl");
/// The largest `k` the kernel supports (`K_MAX` in the shader, which sizes arrays with it; a
/// test checks the two agree).
pub const K_MAX: usize = 8;

/// Mirrors `struct Params` in `logits_topk.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    rows: u32,
    vocab: u32,
    k: u32,
    window: u32,
    penalty: f32,
    history_cap: u32,
    ban_cap: u32,
    _pad1: u32,
}
const _: () = assert!(size_of::<Params>() == 32);

/// The compiled kernel.
pub struct LogitsTopK {
    pipeline: Arc<wgpu::ComputePipeline>,
}

/// The buffers and sizes of one dispatch.
pub struct LogitsTopKArgs<'a> {
    /// `[rows, vocab]` f32.
    pub logits: &'a wgpu::Buffer,
    /// `[rows, history_cap]` u32: each row's generated tokens so far.
    pub history: &'a wgpu::Buffer,
    /// `[rows]` u32: how many of a row's history slots are filled.
    pub history_len: &'a wgpu::Buffer,
    /// `[rows, k, 2]` u32 output: token id, then the log-prob's bits.
    pub top: &'a wgpu::Buffer,
    /// `[rows, ban_cap]` u32: each row's banned tokens ([`ban_table`]); at least 4 bytes.
    pub bans: &'a wgpu::Buffer,
    pub rows: usize,
    pub vocab: usize,
    pub k: usize,
    pub history_cap: usize,
    pub penalty: f32,
    pub window: usize,
    /// Banned-token slots per row (the search's `block_repeats`; 0: off).
    pub ban_cap: usize,
}

/// Marks an empty slot of the ban table (no token has this id).
const NONE: u32 = u32::MAX;

/// The kernel's ban table for the rows of `request`: `[rows, span]`, row `r` holding
/// [`repeat_bans`]`(history of r, span, request.repeatable)` and `NONE` after them; at least
/// one entry, so the buffer is never empty.
pub fn ban_table(request: &StepRequest<'_>, span: usize) -> Vec<u32> {
    let mut table = Vec::new();
    for row in &request.rows {
        let bans = repeat_bans(row.history, span, request.repeatable);
        table.extend(
            bans.iter()
                .copied()
                .chain(std::iter::repeat(NONE))
                .take(span),
        );
    }
    if table.is_empty() {
        table.push(NONE);
    }
    table
}

impl LogitsTopK {
    /// Compiles the kernel (or takes it from the device's pipeline cache).
    pub async fn new(gpu: &Gpu) -> Result<Self, GpuError> {
        let pipeline = gpu.pipeline(&PipelineKey::new(NAME), SOURCE).await?;
        Ok(Self { pipeline })
    }

    /// Records one dispatch into `encoder`.
    pub fn encode(
        &self,
        gpu: &Gpu,
        encoder: &mut wgpu::CommandEncoder,
        args: &LogitsTopKArgs<'_>,
    ) -> Result<(), GpuError> {
        let max = gpu.device.limits().max_compute_workgroups_per_dimension as usize;
        if args.rows == 0
            || args.rows > max
            || args.k == 0
            || args.k > K_MAX
            || args.k + args.ban_cap > args.vocab
        {
            return Err(GpuError::shape(
                NAME,
                format!(
                    "rows = {}, k = {}, ban_cap = {}, vocab = {}: need 1 ≤ rows ≤ {max}, \
                     1 ≤ k ≤ {K_MAX} and k + ban_cap ≤ vocab",
                    args.rows, args.k, args.ban_cap, args.vocab
                ),
            ));
        }
        let need = |len: usize| len.max(1) as u64 * 4;
        if args.logits.size() < need(args.rows * args.vocab)
            || args.history.size() < need(args.rows * args.history_cap)
            || args.history_len.size() < need(args.rows)
            || args.top.size() < need(args.rows * args.k * 2)
            || args.bans.size() < need(args.rows * args.ban_cap)
        {
            return Err(GpuError::shape(
                NAME,
                format!(
                    "buffers too small for rows = {}, vocab = {}, k = {}, history_cap = {}",
                    args.rows, args.vocab, args.k, args.history_cap
                ),
            ));
        }
        let params = gpu.uniform(
            "logits_topk params",
            &Params {
                rows: args.rows as u32,
                vocab: args.vocab as u32,
                k: args.k as u32,
                window: args.window as u32,
                penalty: args.penalty,
                history_cap: args.history_cap as u32,
                ban_cap: args.ban_cap as u32,
                _pad1: 0,
            },
        );
        gpu.dispatch(
            encoder,
            NAME,
            &self.pipeline,
            &[
                &params,
                args.logits,
                args.history,
                args.history_len,
                args.top,
                args.bans,
            ],
            [args.rows as u32, 1, 1],
        );
        Ok(())
    }
}

/// Runs the kernel once on host data, as a decoder step would for `request` (its `k`, penalties
/// and rows' histories): `logits` is `[request.rows.len(), vocab]`; returns each row's top `k`
/// candidates, best first.
pub async fn logits_topk(
    gpu: &Gpu,
    logits: &[f32],
    vocab: usize,
    request: &StepRequest<'_>,
) -> Result<Vec<Vec<Candidate>>, GpuError> {
    let histories: Vec<&[u32]> = request.rows.iter().map(|r| r.history).collect();
    let (k, rows) = (request.k, histories.len());
    if vocab == 0 || logits.len() != rows * vocab {
        return Err(GpuError::shape(
            NAME,
            format!(
                "logits has {} values, expected rows · vocab = {rows} · {vocab}",
                logits.len()
            ),
        ));
    }
    let cap = histories.iter().map(|h| h.len()).max().unwrap_or(0).max(1);
    let mut history = vec![0u32; rows * cap];
    for (r, h) in histories.iter().enumerate() {
        history[r * cap..r * cap + h.len()].copy_from_slice(h);
    }
    let lens: Vec<u32> = histories.iter().map(|h| h.len() as u32).collect();
    let block = request.block_repeats;
    let bans = ban_table(request, block);
    let kernel = LogitsTopK::new(gpu).await?;
    let top = gpu
        .checked(NAME, async {
            let logits = gpu.storage_from("logits_topk logits", logits);
            let history = gpu.storage_from("logits_topk history", &history);
            let history_len = gpu.storage_from("logits_topk history_len", &lens);
            let top = gpu.storage_zeroed("logits_topk top", rows * k * 2);
            let bans = gpu.storage_from("logits_topk bans", &bans);
            let mut encoder = gpu.device.create_command_encoder(&Default::default());
            kernel.encode(
                gpu,
                &mut encoder,
                &LogitsTopKArgs {
                    logits: &logits,
                    history: &history,
                    history_len: &history_len,
                    top: &top,
                    bans: &bans,
                    rows,
                    vocab,
                    k,
                    history_cap: cap,
                    penalty: request.repetition_penalty,
                    window: request.repetition_window,
                    ban_cap: block,
                },
            )?;
            gpu.queue.submit([encoder.finish()]);
            Ok::<_, GpuError>(top)
        })
        .await??;
    let words: Vec<u32> = bytemuck::pod_collect_to_vec(&gpu.read_bytes(&top).await?);
    Ok(words
        .chunks_exact(2 * k)
        .map(|row| {
            row.chunks_exact(2)
                .map(|c| Candidate {
                    token: c[0],
                    logprob: f32::from_bits(c[1]),
                })
                .collect()
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::{K_MAX, SOURCE};
    use crate::gpu::testing::gpu_or_skip;
    use crate::kernels::wgsl_const;
    use crate::selfcheck;

    #[test]
    fn wgsl_constants_match_the_driver() {
        assert_eq!(wgsl_const(SOURCE, "K_MAX"), Some(K_MAX));
    }

    #[test]
    fn logits_topk_matches_reference() {
        let Some(gpu) = gpu_or_skip("logits_topk_matches_reference") else {
            return;
        };
        let checks = pollster::block_on(selfcheck::check_logits_topk(&gpu, 3));
        selfcheck::assert_all_match(checks, selfcheck::LOGITS_TOPK_SHAPES.len());
    }

    #[test]
    fn k_above_the_kernel_limit_is_rejected() {
        let Some(gpu) = gpu_or_skip("k_above_the_kernel_limit_is_rejected") else {
            return;
        };
        let histories = [vec![]];
        let request = crate::reference::step_request(&histories, 9, 1.0, 0, 0, &[]);
        let err = pollster::block_on(super::logits_topk(&gpu, &[0.0; 20], 20, &request))
            .expect_err("k = 9 > K_MAX");
        assert!(err.to_string().contains("k = 9"), "{err}");
    }
}
