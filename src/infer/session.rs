//! The decoder of a batch of sentences on the GPU: the [`StepModel`] that beam search drives.
//! Every live row of every sentence is a row of one step; a row attends to its own sentence's
//! source (through a table of owners, as the KV cache follows beam histories), so a row's
//! numbers do not depend on the other rows: batching changes no translation.

use super::{Cross, Encoded, Engine, EngineError, Scratch, SelfKv};
use crate::gpu::{DispatchPool, GpuError};
use crate::kernels::attention::{Ancestors, AttentionLayout};
use crate::kernels::embed::EmbedArgs;
use crate::kernels::logits_topk::{K_MAX, LogitsTopKArgs, ban_table};
use crate::search::{Candidate, SearchOptions, StepModel, StepRequest};
use crate::translate::now_ms;
use std::sync::Arc;

/// Buffers of a batch's decoding, allocated once: step activations for up to `beam` rows per
/// sentence, one KV cache per layer (`[capacity, rows, 3 · d_model]`: every step's fused QKV
/// projection of every row, position-major, never moved), and the step inputs the CPU writes
/// (tokens, each row's history of cache slots, its sentence, repetition histories).
/// Cross-attention reads each sentence's keys and values in place, in the encoder's batch.
pub struct Session<'e> {
    engine: &'e Engine,
    scratch: Scratch,
    /// Positions reserved per row in the caches: the longest target of the batch.
    capacity: usize,
    /// The sentences' pieces in the encoder's batch (`StepRow::sentence` indexes this).
    pieces: Vec<usize>,
    /// Source tokens of the longest sentence: the cross-attention's keys per row.
    src_max: usize,
    /// Sentences in the encoder's batch.
    encoded_batch: usize,
    /// Padded source length of the encoder's batch: rows per sentence in `cross`.
    encoded_seq: usize,
    /// Source lengths of the whole encoder batch.
    encoded_lengths: Vec<usize>,
    /// Per decoder layer: the encoder batch's fused cross-attention keys and values.
    cross: Vec<wgpu::Buffer>,
    /// Per row: its sentence's source length.
    cross_len: wgpu::Buffer,
    /// Per row, `[rows, src_max]`: its sentence's piece in the encoder batch, repeated for
    /// every key (the attention kernel's owner table).
    cross_owner: wgpu::Buffer,
    self_len: wgpu::Buffer,
    caches: Vec<wgpu::Buffer>,
    /// Per row of the last step: the cache slot (row) of its ancestor at every position.
    slots: Vec<Vec<u32>>,
    /// `slots` on the GPU, `[rows, capacity]` (rows: beam × pieces).
    ancestors: wgpu::Buffer,
    history: wgpu::Buffer,
    history_len: wgpu::Buffer,
    history_cap: usize,
    /// Each row's banned tokens (`logits_topk::ban_table`), `[rows, ban_cap]`.
    bans: wgpu::Buffer,
    ban_cap: usize,
    logits: wgpu::Buffer,
    top: wgpu::Buffer,
    /// Time inside [`StepModel::step`], to tell GPU time from the search's own.
    step_ms: f64,
    /// Steps run.
    steps: usize,
    /// Uniforms and bind groups reused from step to step.
    pool: DispatchPool,
}

impl<'e> Session<'e> {
    /// The positions a session for `pieces` of `encoded` reserves per row.
    pub fn capacity(
        engine: &Engine,
        encoded: &Encoded,
        pieces: &[usize],
        options: &SearchOptions,
    ) -> usize {
        let lens = pieces
            .iter()
            .filter_map(|&i| encoded.lengths.get(i).copied());
        options.batch_target_len(lens, engine.config.max_seq_len)
    }

    /// Prepares `pieces` of `encoded` (1 or more) for a search with `options`.
    pub async fn new(
        engine: &'e Engine,
        encoded: &Encoded,
        pieces: &[usize],
        options: &SearchOptions,
    ) -> Result<Self, EngineError> {
        let (gpu, c) = (&engine.gpu, &engine.config);
        if pieces.is_empty() || pieces.iter().any(|&i| i >= encoded.batch) {
            return Err(GpuError::shape(
                "decoder",
                format!("sentences {pieces:?} of a batch of {}", encoded.batch),
            )
            .into());
        }
        let rows = options.beam.max(1) * pieces.len();
        let src_max = pieces
            .iter()
            .map(|&i| encoded.lengths[i])
            .max()
            .unwrap_or(1);
        let capacity = Self::capacity(engine, encoded, pieces, options);
        // A window longer than the tokens a row can generate sees no more of them.
        let history_cap = options.repetition_window.min(capacity).max(1);
        let ban_cap = options.block_repeats;
        let cache = || gpu.storage_zeroed("kv cache", capacity * rows * 3 * c.d_model);
        // Allocation errors (a model or beam beyond the adapter's limits) become errors.
        let session = gpu
            .checked("allocating the decoder's buffers", async {
                Self {
                    engine,
                    scratch: Scratch::new(gpu, rows, c, false),
                    capacity,
                    pieces: pieces.to_vec(),
                    src_max,
                    encoded_batch: encoded.batch,
                    encoded_seq: encoded.seq,
                    encoded_lengths: encoded.lengths.clone(),
                    cross: encoded.cross.clone(),
                    cross_len: gpu.storage_zeroed("source lengths", rows),
                    cross_owner: gpu.storage_zeroed("source owners", rows * src_max),
                    self_len: gpu.storage_from("cache length", &vec![capacity as u32; rows]),
                    caches: (0..c.n_dec_layers).map(|_| cache()).collect(),
                    slots: Vec::new(),
                    ancestors: gpu.storage_zeroed("beam histories", rows * capacity),
                    history: gpu.storage_zeroed("history", rows * history_cap),
                    history_len: gpu.storage_zeroed("history length", rows),
                    history_cap,
                    bans: gpu.storage_zeroed("banned tokens", (rows * ban_cap).max(1)),
                    ban_cap,
                    logits: gpu.storage_zeroed("logits", rows * c.tgt_vocab_size),
                    top: gpu.storage_zeroed("top-k", rows * K_MAX * 2),
                    step_ms: 0.0,
                    steps: 0,
                    pool: DispatchPool::default(),
                }
            })
            .await?;
        Ok(session)
    }

    /// Decoder steps run so far.
    pub fn steps(&self) -> usize {
        self.steps
    }

    /// Of `total_ms` spent searching, the part outside the model's steps.
    pub fn bookkeeping_ms(&self, total_ms: f64) -> f64 {
        (total_ms - self.step_ms).max(0.0)
    }

    /// Writes the step's inputs and records every dispatch of the step.
    fn record(
        &mut self,
        e: &mut wgpu::CommandEncoder,
        request: &StepRequest<'_>,
    ) -> Result<(), GpuError> {
        let engine = self.engine;
        let (gpu, c, w) = (&engine.gpu, &engine.config, &engine.weights);
        let rows = request.rows.len();
        let t = request.step;
        let s = &self.scratch;
        let write = |buffer: &wgpu::Buffer, data: &[u32]| {
            gpu.queue
                .write_buffer(buffer, 0, bytemuck::cast_slice(data))
        };
        write(
            &s.tokens,
            &request
                .rows
                .iter()
                .map(|r| r.last_token)
                .collect::<Vec<_>>(),
        );
        // Each row extends its parent's history of cache slots by its own slot at position t.
        self.slots = request
            .rows
            .iter()
            .enumerate()
            .map(|(r, row)| {
                let mut slots = self.slots.get(row.parent).cloned().unwrap_or_default();
                slots.truncate(t);
                slots.push(r as u32);
                slots
            })
            .collect();
        let mut ancestors = vec![0u32; rows * self.capacity];
        for (r, slots) in self.slots.iter().enumerate() {
            ancestors[r * self.capacity..][..slots.len()].copy_from_slice(slots);
        }
        write(&self.ancestors, &ancestors);
        let window = request.repetition_window.min(self.history_cap);
        let mut history = vec![0u32; rows * self.history_cap];
        let mut history_len = vec![0u32; rows];
        for (r, row) in request.rows.iter().enumerate() {
            let recent = &row.history[row.history.len().saturating_sub(window)..];
            history[r * self.history_cap..][..recent.len()].copy_from_slice(recent);
            history_len[r] = recent.len() as u32;
        }
        write(&self.history, &history);
        write(&self.history_len, &history_len);
        let ban_cap = request.block_repeats.min(self.ban_cap);
        if ban_cap > 0 {
            write(&self.bans, &ban_table(request, ban_cap));
        }
        // Each row reads its own sentence's source.
        let mut cross_len = vec![0u32; rows];
        let mut cross_owner = vec![0u32; rows * self.src_max];
        for (r, row) in request.rows.iter().enumerate() {
            let piece = *self.pieces.get(row.sentence).ok_or_else(|| {
                GpuError::shape(
                    "decoder",
                    format!(
                        "row {r} of sentence {} in a session of {} sentences",
                        row.sentence,
                        self.pieces.len()
                    ),
                )
            })?;
            cross_len[r] = self.encoded_lengths[piece] as u32;
            cross_owner[r * self.src_max..][..self.src_max].fill(piece as u32);
        }
        write(&self.cross_len, &cross_len);
        write(&self.cross_owner, &cross_owner);

        // The scratch buffers hold the session's capacity; this step uses `rows` of them.
        let s = &self.scratch;
        engine.kernels.embed.encode(
            gpu,
            e,
            &EmbedArgs {
                tokens: &s.tokens,
                table: &w.tgt_embed,
                positions: &w.positions,
                x: &s.x,
                rows,
                seq_len: 1,
                start_pos: t,
            },
        )?;
        let beams = self.scratch.rows;
        for ((layer, cache), kv) in w.decoder.iter().zip(&self.caches).zip(&self.cross) {
            let cross = Cross {
                kv,
                key_len: &self.cross_len,
                owners: Some(Ancestors {
                    buffer: &self.cross_owner,
                    stride: self.src_max,
                    slots: self.encoded_batch,
                }),
                shape: engine.attention_shape(rows, 1, self.src_max),
                layout: AttentionLayout::batch_cross(c.d_model, self.encoded_seq),
                weights: None,
            };
            let self_attn = SelfKv::Cache {
                cache,
                ancestors: Ancestors {
                    buffer: &self.ancestors,
                    stride: self.capacity,
                    slots: beams,
                },
                key_len: &self.self_len,
                beams,
                t,
            };
            engine.record_decoder_layer(e, layer, s, rows, self_attn, &cross)?;
        }
        engine.matmul(e, &s.x, &w.tgt_embed, &self.logits, rows)?;
        engine.kernels.logits_topk.encode(
            gpu,
            e,
            &LogitsTopKArgs {
                logits: &self.logits,
                history: &self.history,
                history_len: &self.history_len,
                top: &self.top,
                bans: &self.bans,
                rows,
                vocab: c.tgt_vocab_size,
                k: request.k,
                history_cap: self.history_cap,
                penalty: request.repetition_penalty,
                window,
                ban_cap,
            },
        )
    }
}

impl StepModel for Session<'_> {
    type Error = GpuError;

    fn max_len_cap(&self) -> usize {
        self.capacity
    }

    fn repeatable(&self) -> Arc<[bool]> {
        self.engine.target_tokenizer.repeatable()
    }

    async fn step(&mut self, request: &StepRequest<'_>) -> Result<Vec<Vec<Candidate>>, GpuError> {
        let start = now_ms();
        let rows = request.rows.len();
        if rows == 0 || rows > self.scratch.rows || request.step >= self.capacity {
            return Err(GpuError::shape(
                "decoder",
                format!(
                    "step {} with {rows} rows; this session holds {} rows and {} positions",
                    request.step, self.scratch.rows, self.capacity
                ),
            ));
        }
        let k = request.k;
        let mut result = Ok(());
        let bytes = {
            let top = self.top.clone();
            let gpu = &self.engine.gpu;
            gpu.submit_and_read(
                "decoder step",
                |e| {
                    let mut pool = std::mem::take(&mut self.pool);
                    result = gpu.pooled(&mut pool, || self.record(e, request));
                    self.pool = pool;
                },
                &top,
                rows as u64 * k as u64 * 8,
            )
            .await?
        };
        result?;
        let words: Vec<u32> = bytemuck::pod_collect_to_vec(&bytes);
        let candidates = words
            .chunks(2 * k)
            .map(|row| {
                row.chunks(2)
                    .map(|pair| Candidate {
                        token: pair[0],
                        logprob: f32::from_bits(pair[1]),
                    })
                    .collect()
            })
            .collect();
        self.step_ms += now_ms() - start;
        self.steps += 1;
        Ok(candidates)
    }
}
