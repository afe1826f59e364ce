//! The GPU inference engine: a bundle's weights uploaded once, the encoder pass and the decoder
//! step composed from the WGSL kernels. Text in → text out is [`crate::translate::translate`],
//! for which [`Engine`] is a [`TranslationEngine`].
//!
//! - [`Engine::new`] uploads a validated [`Bundle`] and compiles every pipeline once.
//! - The encoder runs each encoder batch the pipeline hands it (at most
//!   [`ENCODER_BATCH`](crate::translate::ENCODER_BATCH) pieces, or one decoder batch) in one
//!   submit, and in the same submit projects every decoder layer's cross-attention keys and
//!   values (once per piece).
//! - A decoder step ([`session::Session`], the [`crate::search::StepModel`] of the GPU) records
//!   embedding, every layer and the logits top-k into one command encoder and submits it once;
//!   the only readback is `rows × k` (token, log-prob) pairs. Each step's fused QKV projection is
//!   written straight into a position-major KV cache and never moved: self-attention follows
//!   each beam's history of cache slots (uploaded with the step's tokens), so beam reordering
//!   costs no copies. Step buffers are allocated once per decoder batch (one session).
//! - [`Engine::teacher_forced`] runs the decoder over a whole target at once (causal mask): the
//!   cross-attention heatmap of the best hypothesis, and the logits the tests compare with burn.

mod session;
mod weights;

pub use session::Session;
pub use weights::UploadError;

use crate::config::{ModelConfig, PAD_ID};
use crate::gpu::{Gpu, GpuCounts, GpuError};
use crate::kernels::attention::{
    Ancestors, Attention, AttentionArgs, AttentionLayout, AttentionShape,
};
use crate::kernels::embed::{Embed, EmbedArgs};
use crate::kernels::logits_topk::{self, LogitsTopK};
use crate::kernels::matmul_q8::{Activation, GpuQ8Matrix, MatmulQ8};
use crate::kernels::matmul_q8_norm::{MatmulQ8Norm, MatmulQ8NormArgs};
use crate::search::{self, SearchError, SearchOptions, SearchResult};
use crate::tokenizer::Tokenizer;
use crate::translate::{
    DECODER_BATCH_BYTES, SearchStats, TranslationEngine, now_ms, split_decoder_batch,
};
use crate::weights::Bundle;
use weights::{DecoderLayer, GpuWeights, Norm};

/// Why the engine failed.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The bundle's weights could not be uploaded.
    #[error(transparent)]
    Upload(#[from] UploadError),
    /// A GPU failure: device loss, allocation, validation or readback (also inside a search).
    #[error(transparent)]
    Gpu(#[from] GpuError),
    /// Impossible search options.
    #[error(transparent)]
    Options(#[from] search::OptionsError),
    /// Options the GPU's top-k cannot serve.
    #[error(
        "beam {beam} with {groups} groups asks the GPU for {k} candidates per row; the top-k \
         kernel returns at most {max} (its limit, and at most the vocabulary less the \
         {block_repeats} tokens the repeat block may ban): use a beam of at most {max}"
    )]
    TooManyCandidates {
        beam: usize,
        groups: usize,
        k: usize,
        max: usize,
        block_repeats: usize,
    },
    /// The search refused the GPU's answer (a broken contract of the decoder step). Its
    /// `Model` and `Options` variants arrive as [`EngineError::Gpu`] and
    /// [`EngineError::Options`] instead.
    #[error("beam search failed: {0}")]
    Search(SearchError<GpuError>),
}

impl From<SearchError<GpuError>> for EngineError {
    fn from(e: SearchError<GpuError>) -> Self {
        match e {
            SearchError::Model { source, .. } => EngineError::Gpu(source),
            SearchError::Options(o) => EngineError::Options(o),
            other => EngineError::Search(other),
        }
    }
}

/// Every pipeline the engine uses, compiled once.
pub(crate) struct Kernels {
    matmul: MatmulQ8,
    matmul_relu: MatmulQ8,
    matmul_norm: MatmulQ8Norm,
    embed: Embed,
    attention: Attention,
    logits_topk: LogitsTopK,
}

/// Activations of one pass, `rows` rows each: allocated once per encoder pass or decoder batch.
pub(crate) struct Scratch {
    rows: usize,
    tokens: wgpu::Buffer,
    x: wgpu::Buffer,
    /// The fused self-attention projection, `[rows, 3 · d_model]` (unused by decoder steps,
    /// which project into their KV cache).
    qkv: wgpu::Buffer,
    /// Cross-attention queries.
    q: wgpu::Buffer,
    ctx: wgpu::Buffer,
    x1: wgpu::Buffer,
    x2: wgpu::Buffer,
    h: wgpu::Buffer,
}

impl Scratch {
    fn new(gpu: &Gpu, rows: usize, config: &ModelConfig, with_qkv: bool) -> Self {
        let (d, d_ff) = (config.d_model, config.d_ff);
        let buf = |label: &str, len: usize| gpu.storage_zeroed(label, rows.max(1) * len);
        Self {
            rows,
            tokens: buf("tokens", 1),
            x: buf("x", d),
            qkv: buf("qkv", if with_qkv { 3 * d } else { 1 }),
            q: buf("q", d),
            ctx: buf("ctx", d),
            x1: buf("x1", d),
            x2: buf("x2", d),
            h: buf("h", d_ff),
        }
    }
}

/// Where a decoder layer's self-attention keys and values come from.
enum SelfKv<'a> {
    /// A whole target at once (teacher forcing): this pass's own fused projection, causal.
    Full { key_len: &'a wgpu::Buffer },
    /// One step: the fused projection goes into the layer's KV cache at position `t`;
    /// attention follows each row's history of cache slots.
    Cache {
        cache: &'a wgpu::Buffer,
        ancestors: Ancestors<'a>,
        key_len: &'a wgpu::Buffer,
        /// Rows reserved per position in the cache.
        beams: usize,
        t: usize,
    },
}

/// The cross-attention inputs of one decoder layer.
struct Cross<'a> {
    /// The fused key/value projection of the encoder output.
    kv: &'a wgpu::Buffer,
    key_len: &'a wgpu::Buffer,
    /// For a batch of sentences: each row's sentence in the encoder batch.
    owners: Option<Ancestors<'a>>,
    shape: AttentionShape,
    layout: AttentionLayout,
    /// Where to store the attention weights (the heatmap), if wanted.
    weights: Option<&'a wgpu::Buffer>,
}

/// The encoder's output for a batch of sentences.
pub struct Encoded {
    /// Sentences in the batch.
    pub batch: usize,
    /// Padded source length.
    pub seq: usize,
    /// Source tokens per sentence.
    pub lengths: Vec<usize>,
    /// Per decoder layer: the fused cross-attention keys and values `[batch, seq, 2 · d_model]`.
    cross: Vec<wgpu::Buffer>,
}

/// The loaded model: tokenizers, weights on the GPU and compiled kernels.
pub struct Engine {
    gpu: Gpu,
    config: ModelConfig,
    source_tokenizer: Tokenizer,
    target_tokenizer: Tokenizer,
    kernels: Kernels,
    weights: GpuWeights,
    /// Milliseconds spent uploading weights and compiling pipelines.
    pub load_ms: f64,
}

impl Engine {
    /// Uploads `bundle` to `gpu` and compiles every kernel.
    pub async fn new(gpu: Gpu, bundle: Bundle) -> Result<Self, EngineError> {
        let start = now_ms();
        let config = bundle.config().clone();
        let kernels = Kernels {
            matmul: MatmulQ8::new(&gpu, Activation::None).await?,
            matmul_relu: MatmulQ8::new(&gpu, Activation::Relu).await?,
            matmul_norm: MatmulQ8Norm::new(&gpu, config.d_model).await?,
            embed: Embed::new(&gpu).await?,
            attention: Attention::new(&gpu, config.d_model / config.n_heads).await?,
            logits_topk: LogitsTopK::new(&gpu).await?,
        };
        let weights = gpu
            .checked("uploading the model", async {
                GpuWeights::upload(&gpu, &bundle)
            })
            .await??;
        Ok(Self {
            gpu,
            config,
            source_tokenizer: bundle.source_tokenizer,
            target_tokenizer: bundle.target_tokenizer,
            kernels,
            weights,
            load_ms: now_ms() - start,
        })
    }

    pub fn gpu(&self) -> &Gpu {
        &self.gpu
    }

    /// Checks that `options` are valid and that the GPU's top-k can serve them.
    pub fn check_options(&self, options: &SearchOptions) -> Result<(), EngineError> {
        options.validate()?;
        let k = options.candidates_per_beam();
        // The kernel keeps k others besides the banned tokens.
        let max = logits_topk::K_MAX.min(
            self.config
                .tgt_vocab_size
                .saturating_sub(options.block_repeats),
        );
        if k > max {
            return Err(EngineError::TooManyCandidates {
                beam: options.beam,
                groups: options.groups,
                k,
                max,
                block_repeats: options.block_repeats,
            });
        }
        Ok(())
    }

    fn matmul(
        &self,
        e: &mut wgpu::CommandEncoder,
        x: &wgpu::Buffer,
        w: &GpuQ8Matrix,
        y: &wgpu::Buffer,
        m: usize,
    ) -> Result<(), GpuError> {
        self.kernels.matmul.encode(&self.gpu, e, x, w, y, m)
    }

    /// `y = LayerNorm(x · Wᵀ + b + residual)`: a sublayer's output projection with the
    /// residual + post-LayerNorm that closes it.
    #[allow(clippy::too_many_arguments)]
    fn project_norm(
        &self,
        e: &mut wgpu::CommandEncoder,
        x: &wgpu::Buffer,
        w: &GpuQ8Matrix,
        residual: &wgpu::Buffer,
        norm: &Norm,
        y: &wgpu::Buffer,
        rows: usize,
    ) -> Result<(), GpuError> {
        self.kernels.matmul_norm.encode(
            &self.gpu,
            e,
            &MatmulQ8NormArgs {
                x,
                w,
                residual,
                gamma: &norm.gamma,
                beta: &norm.beta,
                y,
                m: rows,
                eps: self.config.layer_norm_eps as f32,
            },
        )
    }

    fn attention_shape(&self, batch: usize, n_queries: usize, n_keys: usize) -> AttentionShape {
        AttentionShape {
            batch,
            n_queries,
            n_keys,
            d_model: self.config.d_model,
            n_heads: self.config.n_heads,
            q_offset: 0,
            causal: false,
        }
    }

    /// Runs the encoder over `sources` (token ids, no BOS/EOS; each 1..=max_seq_len long) as one
    /// batch, and projects every decoder layer's cross-attention keys and values.
    pub async fn encode(&self, sources: &[Vec<u32>]) -> Result<Encoded, EngineError> {
        let batch = sources.len();
        let seq = sources.iter().map(Vec::len).max().unwrap_or(0);
        if batch == 0 || sources.iter().any(Vec::is_empty) || seq > self.config.max_seq_len {
            return Err(GpuError::shape(
                "encoder",
                format!(
                    "sources must be 1..={} tokens long and at least one; got lengths {:?}",
                    self.config.max_seq_len,
                    sources.iter().map(Vec::len).collect::<Vec<_>>()
                ),
            )
            .into());
        }
        let (gpu, c) = (&self.gpu, &self.config);
        let rows = batch * seq;
        let mut tokens = vec![PAD_ID; rows];
        for (i, src) in sources.iter().enumerate() {
            tokens[i * seq..][..src.len()].copy_from_slice(src);
        }
        let lengths: Vec<u32> = sources.iter().map(|s| s.len() as u32).collect();
        // Allocation errors (a batch beyond the adapter's limits) become errors, not panics.
        let (s, key_len, cross) = gpu
            .checked("allocating the encoder's buffers", async {
                let s = Scratch::new(gpu, rows, c, true);
                let key_len = gpu.storage_from("source lengths", &lengths);
                let cross: Vec<wgpu::Buffer> = (0..c.n_dec_layers)
                    .map(|_| gpu.storage_zeroed("cross kv", rows * 2 * c.d_model))
                    .collect();
                (s, key_len, cross)
            })
            .await?;
        gpu.queue
            .write_buffer(&s.tokens, 0, bytemuck::cast_slice(&tokens));
        let mut result = Ok(());
        gpu.submit("encoder", |e| {
            result = self.record_encoder(e, &s, batch, seq, &key_len, &cross);
        })
        .await?;
        result?;
        Ok(Encoded {
            batch,
            seq,
            lengths: sources.iter().map(Vec::len).collect(),
            cross,
        })
    }

    fn record_encoder(
        &self,
        e: &mut wgpu::CommandEncoder,
        s: &Scratch,
        batch: usize,
        seq: usize,
        key_len: &wgpu::Buffer,
        cross: &[wgpu::Buffer],
    ) -> Result<(), GpuError> {
        let (gpu, w, k) = (&self.gpu, &self.weights, &self.kernels);
        let rows = batch * seq;
        k.embed.encode(
            gpu,
            e,
            &EmbedArgs {
                tokens: &s.tokens,
                table: &w.src_embed,
                positions: &w.positions,
                x: &s.x,
                rows,
                seq_len: seq,
                start_pos: 0,
            },
        )?;
        let shape = self.attention_shape(batch, seq, seq);
        for layer in &w.encoder {
            let a = &layer.self_attn;
            self.fused_self_attention(e, a, s, &shape, key_len)?;
            self.project_norm(e, &s.ctx, &a.output, &s.x, &layer.norm1, &s.x1, rows)?;
            k.matmul_relu
                .encode(gpu, e, &s.x1, &layer.ffn.linear1, &s.h, rows)?;
            self.project_norm(e, &s.h, &layer.ffn.linear2, &s.x1, &layer.norm2, &s.x, rows)?;
        }
        for (layer, kv) in w.decoder.iter().zip(cross) {
            self.matmul(e, &s.x, &layer.cross_attn.kv, kv, rows)?;
        }
        Ok(())
    }

    /// Self-attention of whole sequences (`shape.batch` sequences of `shape.n_queries` tokens in
    /// `s.x`): the fused QKV projection into `s.qkv`, then attention into `s.ctx`.
    fn fused_self_attention(
        &self,
        e: &mut wgpu::CommandEncoder,
        a: &weights::SelfAttn,
        s: &Scratch,
        shape: &AttentionShape,
        key_len: &wgpu::Buffer,
    ) -> Result<(), GpuError> {
        self.matmul(e, &s.x, &a.qkv, &s.qkv, shape.batch * shape.n_queries)?;
        self.kernels.attention.encode(
            &self.gpu,
            e,
            shape,
            &AttentionLayout::fused_qkv(self.config.d_model, shape.n_queries),
            &AttentionArgs {
                q: &s.qkv,
                kv: &s.qkv,
                key_len,
                ancestors: None,
                weights: None,
                context: &s.ctx,
            },
        )
    }

    /// Records one decoder layer over the first `rows` rows of `s`, from `s.x` back into `s.x`.
    fn record_decoder_layer(
        &self,
        e: &mut wgpu::CommandEncoder,
        layer: &DecoderLayer,
        s: &Scratch,
        rows: usize,
        self_attn: SelfKv<'_>,
        cross: &Cross<'_>,
    ) -> Result<(), GpuError> {
        let (gpu, k, d) = (&self.gpu, &self.kernels, self.config.d_model);
        let a = &layer.self_attn;
        match self_attn {
            SelfKv::Full { key_len } => {
                let shape = AttentionShape {
                    causal: true,
                    ..self.attention_shape(1, rows, rows)
                };
                self.fused_self_attention(e, a, s, &shape, key_len)?;
            }
            SelfKv::Cache {
                cache,
                ancestors,
                key_len,
                beams,
                t,
            } => {
                let layout = AttentionLayout::kv_cache(d, beams, t);
                k.matmul
                    .encode_at(gpu, e, &s.x, &a.qkv, cache, layout.q_start, rows)?;
                let shape = AttentionShape {
                    q_offset: t,
                    ..self.attention_shape(rows, 1, t + 1)
                };
                k.attention.encode(
                    gpu,
                    e,
                    &shape,
                    &layout,
                    &AttentionArgs {
                        q: cache,
                        kv: cache,
                        key_len,
                        ancestors: Some(ancestors),
                        weights: None,
                        context: &s.ctx,
                    },
                )?;
            }
        }
        self.project_norm(e, &s.ctx, &a.output, &s.x, &layer.norm1, &s.x1, rows)?;
        let c = &layer.cross_attn;
        self.matmul(e, &s.x1, &c.query, &s.q, rows)?;
        k.attention.encode(
            gpu,
            e,
            &cross.shape,
            &cross.layout,
            &AttentionArgs {
                q: &s.q,
                kv: cross.kv,
                key_len: cross.key_len,
                ancestors: cross.owners,
                weights: cross.weights,
                context: &s.ctx,
            },
        )?;
        self.project_norm(e, &s.ctx, &c.output, &s.x1, &layer.norm2, &s.x2, rows)?;
        k.matmul_relu
            .encode(gpu, e, &s.x2, &layer.ffn.linear1, &s.h, rows)?;
        self.project_norm(e, &s.h, &layer.ffn.linear2, &s.x2, &layer.norm3, &s.x, rows)
    }

    /// The decoder over a whole target prefix at once for sentence `i` of `encoded`:
    /// `tgt_in` starts with BOS. Returns the logits `[T, tgt_vocab]` and the last layer's
    /// cross-attention weights `[n_heads, T, src_len]`.
    pub async fn teacher_forced(
        &self,
        encoded: &Encoded,
        i: usize,
        tgt_in: &[u32],
    ) -> Result<(Vec<f32>, Vec<f32>), EngineError> {
        let (gpu, c) = (&self.gpu, &self.config);
        let t = tgt_in.len();
        if i >= encoded.batch || t == 0 || t > c.max_seq_len {
            return Err(GpuError::shape(
                "decoder",
                format!(
                    "sentence {i} of {} with a target of {t} tokens (1..={})",
                    encoded.batch, c.max_seq_len
                ),
            )
            .into());
        }
        let src_len = encoded.lengths[i];
        let (s, self_len, cross_len, logits, weights) = gpu
            .checked("allocating the decoder's buffers", async {
                (
                    Scratch::new(gpu, t, c, true),
                    gpu.storage_from("target length", &[t as u32]),
                    gpu.storage_from("source length", &[src_len as u32]),
                    gpu.storage_zeroed("logits", t * c.tgt_vocab_size),
                    gpu.storage_zeroed("cross weights", c.n_heads * t * src_len),
                )
            })
            .await?;
        gpu.queue
            .write_buffer(&s.tokens, 0, bytemuck::cast_slice(tgt_in));
        let mut result = Ok(());
        gpu.submit("teacher-forced decoder", |e| {
            result = (|| {
                self.kernels.embed.encode(
                    gpu,
                    e,
                    &EmbedArgs {
                        tokens: &s.tokens,
                        table: &self.weights.tgt_embed,
                        positions: &self.weights.positions,
                        x: &s.x,
                        rows: t,
                        seq_len: t,
                        start_pos: 0,
                    },
                )?;
                let n = self.weights.decoder.len();
                for (l, (layer, kv)) in self.weights.decoder.iter().zip(&encoded.cross).enumerate()
                {
                    let cross = Cross {
                        kv,
                        key_len: &cross_len,
                        owners: None,
                        shape: self.attention_shape(1, t, src_len),
                        layout: AttentionLayout::cross(c.d_model, i * encoded.seq),
                        weights: (l + 1 == n).then_some(&weights),
                    };
                    let self_attn = SelfKv::Full { key_len: &self_len };
                    self.record_decoder_layer(e, layer, &s, t, self_attn, &cross)?;
                }
                self.matmul(e, &s.x, &self.weights.tgt_embed, &logits, t)
            })();
        })
        .await?;
        result?;
        Ok((gpu.read_f32(&logits).await?, gpu.read_f32(&weights).await?))
    }

    /// Beam search (greedy for beam 1) for `pieces` of `encoded`, decoded together: every
    /// live row of every sentence is a row of one decoder step (a sentence that finishes
    /// leaves). Each result equals the search of that piece alone. A batch whose buffers
    /// would pass the adapter's limits is decoded in parts that fit.
    pub async fn search(
        &self,
        encoded: &Encoded,
        pieces: &[usize],
        options: &SearchOptions,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<(Vec<SearchResult>, SearchStats), EngineError> {
        self.check_options(options)?;
        let before = self.gpu.counts();
        let start = now_ms();
        let mut results = Vec::with_capacity(pieces.len());
        let mut stats = SearchStats::default();
        for part in self.decoder_batches(encoded, pieces, options) {
            let mut session = Session::new(self, encoded, part, options).await?;
            let lens: Vec<usize> = part.iter().map(|&i| encoded.lengths[i]).collect();
            let part_start = now_ms();
            results
                .extend(search::beam_search_batch(&mut session, options, &lens, cancelled).await?);
            stats.steps += session.steps();
            stats.bookkeeping_ms += session.bookkeeping_ms(now_ms() - part_start);
        }
        stats.ms = now_ms() - start;
        stats.gpu = self.gpu.counts() - before;
        Ok((results, stats))
    }

    /// `pieces` cut into consecutive runs whose decoder buffers (the KV caches of every layer
    /// and the logits) fit [`DECODER_BATCH_BYTES`] in all, and each buffer the adapter's
    /// largest storage binding. A piece that does not fit alone is a run of its own, and its
    /// session reports the limit.
    fn decoder_batches<'p>(
        &self,
        encoded: &Encoded,
        pieces: &'p [usize],
        options: &SearchOptions,
    ) -> Vec<&'p [usize]> {
        let binding = self.gpu.device.limits().max_storage_buffer_binding_size;
        let c = &self.config;
        let bytes = |part: &[usize]| {
            let rows = (options.beam.max(1) * part.len()) as u64;
            let capacity = Session::capacity(self, encoded, part, options) as u64;
            let cache = 4 * rows * capacity * 3 * c.d_model as u64;
            let logits = 4 * rows * c.tgt_vocab_size as u64;
            if cache.max(logits) > binding {
                u64::MAX
            } else {
                c.n_dec_layers as u64 * cache + logits
            }
        };
        split_decoder_batch(pieces, DECODER_BATCH_BYTES, bytes)
    }
}

impl TranslationEngine for Engine {
    type Error = EngineError;
    type Encoded = Encoded;

    fn config(&self) -> &ModelConfig {
        &self.config
    }

    fn source_tokenizer(&self) -> &Tokenizer {
        &self.source_tokenizer
    }

    fn target_tokenizer(&self) -> &Tokenizer {
        &self.target_tokenizer
    }

    fn check_options(&self, options: &SearchOptions) -> Result<(), EngineError> {
        Engine::check_options(self, options)
    }

    async fn encode(&self, sources: &[Vec<u32>]) -> Result<Encoded, EngineError> {
        Engine::encode(self, sources).await
    }

    async fn search(
        &self,
        encoded: &Encoded,
        pieces: &[usize],
        options: &SearchOptions,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<(Vec<SearchResult>, SearchStats), EngineError> {
        Engine::search(self, encoded, pieces, options, cancelled).await
    }

    /// From [`Engine::teacher_forced`] (its logits are read back too, and dropped).
    async fn cross_attention(
        &self,
        encoded: &Encoded,
        i: usize,
        target_in: &[u32],
    ) -> Result<Vec<f32>, EngineError> {
        let (_, weights) = self.teacher_forced(encoded, i, target_in).await?;
        Ok(weights)
    }

    fn counts(&self) -> GpuCounts {
        self.gpu.counts()
    }
}

#[cfg(test)]
mod tests;
