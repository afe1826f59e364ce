//! One sentence's decoder on the GPU: the [`StepModel`] that beam search drives.

use super::{Cross, CrossCopy, Encoded, Engine, EngineError, Scratch, SelfAttn, SelfKv, now_ms};
use crate::config::{BOS_ID, EOS_ID};
use crate::gpu::{DispatchPool, GpuError};
use crate::kernels::attention::AttentionShape;
use crate::kernels::embed::EmbedArgs;
use crate::kernels::logits_topk::{K_MAX, LogitsTopKArgs};
use crate::search::{Candidate, SearchOptions, StepModel, StepRequest};

/// Buffers of one sentence's decoding, allocated once: step activations for up to `beam` rows,
/// two KV caches per layer (read one, write the other, swap), the sentence's cross-attention
/// keys and values, and the step inputs the CPU writes (tokens, parents, histories).
pub struct Session<'e> {
    engine: &'e Engine,
    scratch: Scratch,
    /// Positions reserved per row in the caches: the longest target.
    capacity: usize,
    src_len: usize,
    /// The sentence's cross-attention keys and values, copied out of the batch in step 0.
    cross: CrossCopy,
    cross_len: wgpu::Buffer,
    self_len: wgpu::Buffer,
    caches: Vec<[(wgpu::Buffer, wgpu::Buffer); 2]>,
    /// Which of each layer's two caches holds the previous step.
    current: usize,
    parents: wgpu::Buffer,
    history: wgpu::Buffer,
    history_len: wgpu::Buffer,
    history_cap: usize,
    logits: wgpu::Buffer,
    top: wgpu::Buffer,
    /// Time inside [`StepModel::step`], to tell GPU time from the search's own.
    step_ms: f64,
    /// Uniforms and bind groups reused from step to step.
    pool: DispatchPool,
}

impl<'e> Session<'e> {
    /// Prepares sentence `i` of `encoded` for a search with `options`.
    pub async fn new(
        engine: &'e Engine,
        encoded: &Encoded,
        i: usize,
        options: &SearchOptions,
    ) -> Result<Self, EngineError> {
        let (gpu, c) = (&engine.gpu, &engine.config);
        if i >= encoded.batch {
            return Err(GpuError::shape(
                "decoder",
                format!("sentence {i} of a batch of {}", encoded.batch),
            )
            .into());
        }
        let rows = options.beam.max(1);
        let src_len = encoded.lengths[i];
        let capacity = options.max_target_len(src_len, c.max_seq_len).max(1);
        let history_cap = options.repetition_window.max(1);
        let cache = |label| gpu.storage_zeroed(label, rows * capacity * c.d_model);
        // Allocation errors (a model or beam beyond the adapter's limits) become errors.
        let session = gpu
            .checked("allocating the decoder's buffers", async {
                Self {
                    engine,
                    scratch: Scratch::new(gpu, rows, c),
                    capacity,
                    src_len,
                    cross: engine.sentence_cross(encoded, i),
                    cross_len: gpu.storage_from("source length", &[src_len as u32]),
                    self_len: gpu.storage_from("cache length", &vec![capacity as u32; rows]),
                    caches: (0..c.n_dec_layers)
                        .map(|_| {
                            [
                                (cache("cache k"), cache("cache v")),
                                (cache("cache k'"), cache("cache v'")),
                            ]
                        })
                        .collect(),
                    current: 0,
                    parents: gpu.storage_zeroed("parents", rows),
                    history: gpu.storage_zeroed("history", rows * history_cap),
                    history_len: gpu.storage_zeroed("history length", rows),
                    history_cap,
                    logits: gpu.storage_zeroed("logits", rows * c.tgt_vocab_size),
                    top: gpu.storage_zeroed("top-k", rows * K_MAX * 2),
                    step_ms: 0.0,
                    pool: DispatchPool::default(),
                }
            })
            .await?;
        Ok(session)
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
        write(
            &self.parents,
            &request
                .rows
                .iter()
                .map(|r| r.parent as u32)
                .collect::<Vec<_>>(),
        );
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

        if t == 0 {
            self.cross.record(e);
        }
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
        let self_shape = AttentionShape {
            batch: rows,
            n_queries: 1,
            n_keys: t + 1,
            kv_stride: self.capacity,
            d_model: c.d_model,
            n_heads: c.n_heads,
            q_offset: t,
            causal: false,
        };
        let (src, dst) = (self.current, 1 - self.current);
        for ((layer, caches), (ck, cv)) in
            w.decoder.iter().zip(&self.caches).zip(self.cross.layers())
        {
            let cross = Cross {
                k: ck,
                v: cv,
                key_len: &self.cross_len,
                shape: engine.attention_shape(1, rows, self.src_len),
                weights: None,
            };
            let kv = SelfKv::Cache {
                parent: &self.parents,
                src: (&caches[src].0, &caches[src].1),
                dst: (&caches[dst].0, &caches[dst].1),
                capacity: self.capacity,
                t,
            };
            let self_attn = SelfAttn {
                shape: self_shape,
                key_len: &self.self_len,
                kv,
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
                rows,
                vocab: c.tgt_vocab_size,
                k: request.k,
                history_cap: self.history_cap,
                penalty: request.repetition_penalty,
                window,
            },
        )
    }
}

impl StepModel for Session<'_> {
    type Error = GpuError;

    fn bos(&self) -> u32 {
        BOS_ID
    }

    fn eos(&self) -> u32 {
        EOS_ID
    }

    fn max_len_cap(&self) -> usize {
        self.capacity
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
                (rows * k * 8) as u64,
            )
            .await?
        };
        result?;
        self.current = 1 - self.current;
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
        Ok(candidates)
    }
}
