//! The CPU engine: the bundle's int8 weights kept as int8 in memory (one f32 scale per output
//! row; LayerNorm and bias vectors f32), int8 matrix products with SIMD kernels
//! ([`matmul`]: AVX2 natively, simd128 on wasm, portable otherwise), and the same
//! [`TranslationEngine`] contract as the GPU engine and the burn model. No burn, no wgpu: it
//! compiles for wasm32 as it does natively.
//!
//! - [`CpuEngine::encode`] runs the encoder over a batch of pieces packed without padding
//!   (`[Σ lengths, d_model]`: matrix products are row-wise, only attention needs the piece
//!   boundaries), then projects every decoder layer's cross-attention keys and values once.
//! - A search runs a [`CpuSession`], the [`StepModel`]: each step embeds the rows' last tokens,
//!   runs every decoder layer and the tied output projection, then log-softmax, the request's
//!   penalties and top-k with the shared helpers of [`crate::search`]. The self-attention KV
//!   cache is position-major like the GPU engine's, `[capacity, beams, 2 · d_model]` per layer
//!   (the GPU's rows hold the fused projection's queries too, `3 · d_model`):
//!   a step writes each row's key and value at `(t, row)` and never moves them; each row keeps
//!   the slots of its ancestors (its parent's list + its own), so beam reordering copies no
//!   keys, only one short list of slot indices per row.
//! - [`CpuEngine::teacher_forced`] feeds a whole target one step at a time (the cached decoder
//!   equals the full causal forward) and returns the logits and the last layer's
//!   cross-attention weights: the heatmap and the tests' comparison with burn.

pub mod matmul;
pub mod ops;
pub mod pool;
#[cfg(test)]
mod tests;

use crate::config::ModelConfig;
use crate::positions::positional_encoding;
use crate::search::{
    Candidate, OptionsError, SearchError, SearchOptions, SearchResult, StepModel, StepRequest,
    beam_search_batch, top_k,
};
use crate::tokenizer::Tokenizer;
use crate::translate::{
    DECODER_BATCH_BYTES, RequestError, SearchStats, TranslationEngine, now_ms, split_decoder_batch,
};
use crate::weights::names::{self, AttentionNames, Stack};
use crate::weights::{Bundle, BundleError};
pub use matmul::{MatmulKind, Q8Linear};
use std::sync::Arc;

/// Why a decoder step of the CPU engine failed: the search asked for more rows or positions
/// than the session holds, rows of sentences it does not have, or rows whose parents are not
/// rows of the step before (a broken contract; the search never does).
#[derive(Debug, thiserror::Error)]
#[error(
    "CPU decoder step {step} with {rows} rows; this session holds {beams} rows, {capacity} \
     positions, and takes one sentence index per row below its number of pieces (one piece \
     with cross-attention weights) and one parent per row among the previous step's rows"
)]
pub struct CpuStepError {
    pub step: usize,
    pub rows: usize,
    pub beams: usize,
    pub capacity: usize,
}

/// Why the CPU engine failed.
#[derive(Debug, thiserror::Error)]
pub enum CpuError {
    /// A weight is missing or has the wrong shape in the bundle.
    #[error(transparent)]
    Bundle(#[from] BundleError),
    /// Two matrices fused into one projection do not share their input size.
    #[error("{name} has {k} input features, {first} has {first_k}: the bundle is inconsistent")]
    Fuse {
        name: String,
        k: usize,
        first: String,
        first_k: usize,
    },
    /// The pool threads would not start.
    #[error(transparent)]
    Threads(#[from] pool::PoolError),
    /// Impossible search options.
    #[error(transparent)]
    Options(#[from] OptionsError),
    /// A request the pipeline never makes: bad sources, piece or target length.
    #[error(transparent)]
    Request(#[from] RequestError),
    /// The search failed, or the model inside it.
    #[error(transparent)]
    Search(#[from] SearchError<CpuStepError>),
    /// A step failed outside a search.
    #[error(transparent)]
    Step(#[from] CpuStepError),
}

/// How the engine computes: the matrix product variant and the threads of large products.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CpuOptions {
    pub matmul: MatmulKind,
    /// Threads for large matrix products (natively; 1 on wasm).
    pub threads: usize,
}

impl Default for CpuOptions {
    fn default() -> Self {
        Self {
            matmul: MatmulKind::default(),
            threads: 1,
        }
    }
}

/// A LayerNorm's scale and shift.
struct Norm {
    gamma: Vec<f32>,
    beta: Vec<f32>,
}

/// Queries, keys and values as one fused projection (`[3 · d_model, d_model]`, queries first),
/// and the output projection.
struct SelfAttn {
    qkv: Q8Linear,
    output: Q8Linear,
}

/// The query projection, keys and values fused (`[2 · d_model, d_model]`, keys first) for the
/// encoder output, and the output projection.
struct CrossAttn {
    query: Q8Linear,
    kv: Q8Linear,
    output: Q8Linear,
}

struct EncoderLayer {
    self_attn: SelfAttn,
    norm1: Norm,
    linear1: Q8Linear,
    linear2: Q8Linear,
    norm2: Norm,
}

struct DecoderLayer {
    self_attn: SelfAttn,
    norm1: Norm,
    cross_attn: CrossAttn,
    norm2: Norm,
    linear1: Q8Linear,
    linear2: Q8Linear,
    norm3: Norm,
}

/// The encoder's output for a batch of pieces.
pub struct CpuEncoded {
    /// Source tokens per piece.
    pub lengths: Vec<usize>,
    /// First row of each piece in `cross`.
    offsets: Vec<usize>,
    /// Per decoder layer: the fused cross-attention keys and values `[Σ lengths, 2 · d_model]`.
    cross: Vec<Vec<f32>>,
}

/// The loaded model: tokenizers and int8 weights in memory.
pub struct CpuEngine {
    config: ModelConfig,
    options: CpuOptions,
    /// The threads of large products (`options.threads` of them).
    threads: pool::Pool,
    source_tokenizer: Tokenizer,
    target_tokenizer: Tokenizer,
    /// `[src_vocab, d_model]`, no bias.
    src_embed: Q8Linear,
    /// `[tgt_vocab, d_model]`, zero bias: also the tied output projection.
    tgt_embed: Q8Linear,
    /// `[max_seq_len + 1, d_model]`.
    positions: Vec<f32>,
    encoder: Vec<EncoderLayer>,
    decoder: Vec<DecoderLayer>,
    /// Milliseconds spent converting the bundle.
    pub load_ms: f64,
    /// Awaited between decoder steps at most every so many milliseconds ([`Self::set_pause`]).
    pause: Option<(Pause, f64)>,
}

/// Lets the host's event loop run (the page: a `setTimeout(0)` task). The CPU engine computes
/// without awaiting anything; a search awaits this between decoder steps, at most every
/// [`CpuEngine::set_pause`] milliseconds, so that a newer request can reach the host and make
/// the search's `cancelled` answer true.
pub type Pause = fn() -> std::pin::Pin<Box<dyn Future<Output = ()>>>;

impl CpuEngine {
    /// The engine over `bundle` with the default [`CpuOptions`] (one thread).
    pub fn new(bundle: Bundle) -> Result<Self, CpuError> {
        Self::with_options(bundle, CpuOptions::default())
    }

    /// The engine over `bundle` computing as `options` say.
    pub fn with_options(bundle: Bundle, options: CpuOptions) -> Result<Self, CpuError> {
        let start = now_ms();
        let config = bundle.config().clone();
        let stacked = |modules: &[&str]| -> Result<Q8Linear, CpuError> {
            let first = modules[0];
            let mut w = bundle.matrix(first)?;
            let mut bias = bundle.vector(&names::bias(first))?;
            for name in &modules[1..] {
                let next = bundle.matrix(name)?;
                if next.k != w.k {
                    return Err(CpuError::Fuse {
                        name: name.to_string(),
                        k: next.k,
                        first: first.to_string(),
                        first_k: w.k,
                    });
                }
                w.n += next.n;
                w.packed.extend(next.packed);
                w.scale.extend(next.scale);
                bias.extend(bundle.vector(&names::bias(name))?);
            }
            Ok(Q8Linear::new(&w, &bias))
        };
        let linear = |module: &str| stacked(&[module]);
        let embedding = |stack: Stack| -> Result<Q8Linear, CpuError> {
            Ok(Q8Linear::new(
                &bundle.matrix(&names::embedding(stack))?,
                &[],
            ))
        };
        let norm = |norm: &str| -> Result<Norm, CpuError> {
            Ok(Norm {
                gamma: bundle.vector(&names::gamma(norm))?,
                beta: bundle.vector(&names::beta(norm))?,
            })
        };
        let self_attn = |block: &AttentionNames| -> Result<SelfAttn, CpuError> {
            Ok(SelfAttn {
                qkv: stacked(&[&block.query, &block.key, &block.value])?,
                output: linear(&block.output)?,
            })
        };
        let encoder = (0..config.n_enc_layers)
            .map(|l| {
                let layer = names::layer(Stack::Encoder, l);
                Ok(EncoderLayer {
                    self_attn: self_attn(&layer.self_attn)?,
                    norm1: norm(&layer.self_attn_norm)?,
                    linear1: linear(&layer.ffn_linear1)?,
                    linear2: linear(&layer.ffn_linear2)?,
                    norm2: norm(&layer.ffn_norm)?,
                })
            })
            .collect::<Result<_, CpuError>>()?;
        let decoder = (0..config.n_dec_layers)
            .map(|l| {
                let layer = names::layer(Stack::Decoder, l);
                let (cross, cross_norm) = layer
                    .cross_attn
                    .as_ref()
                    .expect("decoder layers have cross-attention");
                Ok(DecoderLayer {
                    self_attn: self_attn(&layer.self_attn)?,
                    norm1: norm(&layer.self_attn_norm)?,
                    cross_attn: CrossAttn {
                        query: linear(&cross.query)?,
                        kv: stacked(&[&cross.key, &cross.value])?,
                        output: linear(&cross.output)?,
                    },
                    norm2: norm(cross_norm)?,
                    linear1: linear(&layer.ffn_linear1)?,
                    linear2: linear(&layer.ffn_linear2)?,
                    norm3: norm(&layer.ffn_norm)?,
                })
            })
            .collect::<Result<_, CpuError>>()?;
        Ok(Self {
            positions: positional_encoding(config.max_seq_len + 1, config.d_model),
            src_embed: embedding(Stack::Encoder)?,
            tgt_embed: embedding(Stack::Decoder)?,
            config,
            options,
            threads: pool::Pool::new(options.threads)?,
            source_tokenizer: bundle.source_tokenizer,
            target_tokenizer: bundle.target_tokenizer,
            encoder,
            decoder,
            load_ms: now_ms() - start,
            pause: None,
        })
    }

    fn matmul(&self, x: &[f32], m: usize, w: &Q8Linear, relu: bool) -> Vec<f32> {
        matmul::matmul(x, m, w, relu, self.options.matmul, &self.threads)
    }

    fn eps(&self) -> f32 {
        self.config.layer_norm_eps as f32
    }

    /// Runs the encoder over `sources` (token ids, no BOS/EOS; each 1..=max_seq_len long) and
    /// projects every decoder layer's cross-attention keys and values.
    pub fn encode_pieces(&self, sources: &[Vec<u32>]) -> Result<CpuEncoded, CpuError> {
        RequestError::check_sources(sources, self.config.max_seq_len)?;
        let (d, heads) = (self.config.d_model, self.config.n_heads);
        let dh = d / heads;
        let lengths: Vec<usize> = sources.iter().map(Vec::len).collect();
        let offsets: Vec<usize> = lengths
            .iter()
            .scan(0, |acc, &l| {
                let o = *acc;
                *acc += l;
                Some(o)
            })
            .collect();
        let rows: usize = lengths.iter().sum();
        let tokens: Vec<u32> = sources.concat();
        let positions: Vec<usize> = lengths.iter().flat_map(|&l| 0..l).collect();
        let mut x = ops::embed(&tokens, &positions, &self.src_embed, &self.positions);
        let mut weights = vec![0.0; self.config.max_seq_len];
        for layer in &self.encoder {
            let qkv = self.matmul(&x, rows, &layer.self_attn.qkv, false);
            let mut ctx = vec![0.0; rows * d];
            for (&off, &len) in offsets.iter().zip(&lengths) {
                for i in off..off + len {
                    for h in 0..heads {
                        ops::attend(
                            &qkv[i * 3 * d + h * dh..][..dh],
                            &qkv,
                            len,
                            |j| (off + j) * 3 * d,
                            d + h * dh,
                            2 * d + h * dh,
                            &mut weights,
                            &mut ctx[i * d + h * dh..][..dh],
                        );
                    }
                }
            }
            let mut x1 = self.matmul(&ctx, rows, &layer.self_attn.output, false);
            ops::add_layernorm(
                &mut x1,
                &x,
                &layer.norm1.gamma,
                &layer.norm1.beta,
                self.eps(),
            );
            let h = self.matmul(&x1, rows, &layer.linear1, true);
            x = self.matmul(&h, rows, &layer.linear2, false);
            ops::add_layernorm(
                &mut x,
                &x1,
                &layer.norm2.gamma,
                &layer.norm2.beta,
                self.eps(),
            );
        }
        let cross = self
            .decoder
            .iter()
            .map(|layer| self.matmul(&x, rows, &layer.cross_attn.kv, false))
            .collect();
        Ok(CpuEncoded {
            lengths,
            offsets,
            cross,
        })
    }

    /// Piece `i` of `encoded`, checked for a target of `target_len` tokens (`None`: a search).
    fn check_piece(
        &self,
        encoded: &CpuEncoded,
        i: usize,
        target_len: Option<usize>,
    ) -> Result<(), CpuError> {
        let batch = encoded.lengths.len();
        Ok(RequestError::check_piece(
            i,
            batch,
            target_len,
            self.config.max_seq_len,
        )?)
    }

    /// `pieces` cut into consecutive runs whose decoder buffers (every layer's KV cache and
    /// the logits) fit [`DECODER_BATCH_BYTES`]: decode each run with its own [`Self::session`].
    pub fn decoder_batches<'p>(
        &self,
        encoded: &CpuEncoded,
        pieces: &'p [usize],
        options: &SearchOptions,
    ) -> Vec<&'p [usize]> {
        let c = &self.config;
        let bytes = |part: &[usize]| {
            let rows = (options.beam.max(1) * part.len()) as u64;
            let lens = part.iter().filter_map(|&i| encoded.lengths.get(i).copied());
            let capacity = options.batch_target_len(lens, c.max_seq_len) as u64;
            let cache = 4 * capacity * rows * 2 * c.d_model as u64;
            c.n_dec_layers as u64 * cache + 4 * rows * c.tgt_vocab_size as u64
        };
        split_decoder_batch(pieces, DECODER_BATCH_BYTES, bytes)
    }

    /// Has every search await `pause` before a decoder step once `every_ms` have passed since
    /// it last did (natively nothing needs it: `translate` runs on its own thread).
    pub fn set_pause(&mut self, pause: Pause, every_ms: f64) {
        self.pause = Some((pause, every_ms));
    }

    /// The session that decodes `pieces` of `encoded` together with `options`, and the
    /// pieces' source lengths (what [`beam_search_batch`] needs besides the session).
    pub fn session<'a>(
        &'a self,
        encoded: &'a CpuEncoded,
        pieces: &[usize],
        options: &SearchOptions,
    ) -> Result<(CpuSession<'a>, Vec<usize>), CpuError> {
        for &i in pieces {
            self.check_piece(encoded, i, None)?;
        }
        options.validate()?;
        let lens: Vec<usize> = pieces.iter().map(|&i| encoded.lengths[i]).collect();
        let capacity = options.batch_target_len(lens.iter().copied(), self.config.max_seq_len);
        let session = CpuSession::new(self, encoded, pieces, options.beam, capacity);
        Ok((session, lens))
    }

    /// The decoder over `target_in` (BOS first, `T` tokens) for piece `i` of `encoded`, one
    /// cached step per token: logits `[T, tgt_vocab]` and the last layer's cross-attention
    /// weights `[n_heads, T, source_len]`.
    pub fn teacher_forced(
        &self,
        encoded: &CpuEncoded,
        i: usize,
        target_in: &[u32],
    ) -> Result<(Vec<f32>, Vec<f32>), CpuError> {
        self.check_piece(encoded, i, Some(target_in.len()))?;
        let (t_len, s_len, heads) = (target_in.len(), encoded.lengths[i], self.config.n_heads);
        let mut session = CpuSession::new(self, encoded, &[i], 1, t_len);
        let mut logits = Vec::with_capacity(t_len * self.config.tgt_vocab_size);
        let mut weights = vec![0.0; heads * t_len * s_len];
        let mut step_weights = Vec::new();
        for (t, &token) in target_in.iter().enumerate() {
            logits.extend(session.forward(t, &[token], &[0], &[0], Some(&mut step_weights))?);
            for h in 0..heads {
                weights[(h * t_len + t) * s_len..][..s_len]
                    .copy_from_slice(&step_weights[h * s_len..][..s_len]);
            }
        }
        Ok((logits, weights))
    }
}

/// A batch of pieces decoded with a KV cache: the [`StepModel`] of the CPU engine. Every live
/// row of every piece is a row of one step; a row attends to its own piece's source, and
/// every product is row by row, so batching changes no translation.
pub struct CpuSession<'a> {
    engine: &'a CpuEngine,
    /// Per piece (`StepRow::sentence`), per decoder layer: its cross-attention keys and
    /// values `[src_len, 2 · d_model]`.
    cross: Vec<Vec<&'a [f32]>>,
    /// Source tokens per piece.
    src_lens: Vec<usize>,
    /// Rows per step at most.
    beams: usize,
    /// Positions (steps) at most.
    capacity: usize,
    /// Per decoder layer: keys and values `[positions so far, beams, 2 · d_model]`,
    /// position-major (room reserved for `capacity` positions).
    cache: Vec<Vec<f32>>,
    /// Per row of the last step: the cache slot (row) of its ancestor at every position.
    slots: Vec<Vec<usize>>,
    /// Time inside [`StepModel::step`].
    step_ms: f64,
    /// Steps run.
    steps: usize,
    /// When the session last awaited the engine's [`Pause`].
    last_pause: f64,
}

impl<'a> CpuSession<'a> {
    /// A session for `pieces` of `encoded` (valid indices) with up to `beams` rows per piece
    /// and `capacity` steps.
    pub fn new(
        engine: &'a CpuEngine,
        encoded: &'a CpuEncoded,
        pieces: &[usize],
        beams: usize,
        capacity: usize,
    ) -> Self {
        let d = engine.config.d_model;
        let (beams, capacity) = (beams.max(1) * pieces.len().max(1), capacity.max(1));
        Self {
            engine,
            cross: pieces
                .iter()
                .map(|&i| {
                    let (off, len) = (encoded.offsets[i], encoded.lengths[i]);
                    encoded
                        .cross
                        .iter()
                        .map(|kv| &kv[off * 2 * d..(off + len) * 2 * d])
                        .collect()
                })
                .collect(),
            src_lens: pieces.iter().map(|&i| encoded.lengths[i]).collect(),
            beams,
            capacity,
            // Reserved, not zeroed: each step extends it by one position (in wasm, zeroing all
            // of it up front was a memset of megabytes per sentence).
            cache: (0..engine.decoder.len())
                .map(|_| Vec::with_capacity(capacity * beams * 2 * d))
                .collect(),
            slots: Vec::new(),
            step_ms: 0.0,
            steps: 0,
            last_pause: now_ms(),
        }
    }

    /// One decoder step at position `t`: row `r` of piece `sentences[r]` (an index into the
    /// session's pieces) feeds `tokens[r]` and extends the history of row `parents[r]` of the
    /// previous step. Returns the logits `[rows, tgt_vocab]`; with `cross_weights` (one
    /// piece), also the last layer's cross-attention weights `[rows, n_heads, src_len]`.
    pub fn forward(
        &mut self,
        t: usize,
        tokens: &[u32],
        parents: &[usize],
        sentences: &[usize],
        mut cross_weights: Option<&mut Vec<f32>>,
    ) -> Result<Vec<f32>, CpuStepError> {
        let rows = tokens.len();
        let known = sentences.len() == rows && sentences.iter().all(|&s| s < self.cross.len());
        let one_piece = cross_weights.is_none() || sentences.iter().all(|&s| s == sentences[0]);
        // After step t − 1 every row's history holds t slots; step 0 has no parents to follow.
        let follows = |&p: &usize| t == 0 || self.slots.get(p).is_some_and(|s| s.len() == t);
        let parents_ok = parents.len() == rows && parents.iter().all(follows);
        if rows == 0
            || rows > self.beams
            || t >= self.capacity
            || !known
            || !one_piece
            || !parents_ok
        {
            return Err(CpuStepError {
                step: t,
                rows,
                beams: self.beams,
                capacity: self.capacity,
            });
        }
        let e = self.engine;
        let (d, heads) = (e.config.d_model, e.config.n_heads);
        let dh = d / heads;
        self.slots = parents
            .iter()
            .enumerate()
            .map(|(r, &parent)| {
                let mut slots = self.slots.get(parent).cloned().unwrap_or_default();
                slots.truncate(t);
                slots.push(r);
                slots
            })
            .collect();
        let mut x = ops::embed(tokens, &vec![t; rows], &e.tgt_embed, &e.positions);
        let src_max = self.src_lens.iter().copied().max().unwrap_or(0);
        let mut scores = vec![0.0; self.capacity.max(src_max)];
        let last = e.decoder.len().saturating_sub(1);
        if let Some(w) = cross_weights.as_deref_mut() {
            w.clear();
            w.resize(rows * heads * self.src_lens[sentences[0]], 0.0);
        }
        for (l, layer) in e.decoder.iter().enumerate() {
            // Self-attention: this step's keys and values into the cache at (t, r).
            let qkv = e.matmul(&x, rows, &layer.self_attn.qkv, false);
            let cache = &mut self.cache[l];
            let filled = (t + 1) * self.beams * 2 * d;
            if cache.len() < filled {
                cache.resize(filled, 0.0);
            }
            for r in 0..rows {
                cache[(t * self.beams + r) * 2 * d..][..2 * d]
                    .copy_from_slice(&qkv[r * 3 * d + d..][..2 * d]);
            }
            let mut ctx = vec![0.0; rows * d];
            for (r, slots) in self.slots.iter().enumerate() {
                for h in 0..heads {
                    ops::attend(
                        &qkv[r * 3 * d + h * dh..][..dh],
                        cache,
                        t + 1,
                        |j| (j * self.beams + slots[j]) * 2 * d,
                        h * dh,
                        d + h * dh,
                        &mut scores,
                        &mut ctx[r * d + h * dh..][..dh],
                    );
                }
            }
            let mut x1 = e.matmul(&ctx, rows, &layer.self_attn.output, false);
            ops::add_layernorm(&mut x1, &x, &layer.norm1.gamma, &layer.norm1.beta, e.eps());
            // Cross-attention over each row's piece's encoder output.
            let q = e.matmul(&x1, rows, &layer.cross_attn.query, false);
            for (r, &sentence) in sentences.iter().enumerate() {
                let (kv, src_len) = (self.cross[sentence][l], self.src_lens[sentence]);
                for h in 0..heads {
                    ops::attend(
                        &q[r * d + h * dh..][..dh],
                        kv,
                        src_len,
                        |j| j * 2 * d,
                        h * dh,
                        d + h * dh,
                        &mut scores,
                        &mut ctx[r * d + h * dh..][..dh],
                    );
                    if let (true, Some(w)) = (l == last, cross_weights.as_deref_mut()) {
                        w[(r * heads + h) * src_len..][..src_len]
                            .copy_from_slice(&scores[..src_len]);
                    }
                }
            }
            let mut x2 = e.matmul(&ctx, rows, &layer.cross_attn.output, false);
            ops::add_layernorm(&mut x2, &x1, &layer.norm2.gamma, &layer.norm2.beta, e.eps());
            let hidden = e.matmul(&x2, rows, &layer.linear1, true);
            x = e.matmul(&hidden, rows, &layer.linear2, false);
            ops::add_layernorm(&mut x, &x2, &layer.norm3.gamma, &layer.norm3.beta, e.eps());
        }
        Ok(e.matmul(&x, rows, &e.tgt_embed, false))
    }
}

impl StepModel for CpuSession<'_> {
    type Error = CpuStepError;

    fn max_len_cap(&self) -> usize {
        self.capacity
    }

    fn repeatable(&self) -> Arc<[bool]> {
        self.engine.target_tokenizer.repeatable()
    }

    async fn step(
        &mut self,
        request: &StepRequest<'_>,
    ) -> Result<Vec<Vec<Candidate>>, CpuStepError> {
        if let Some((pause, every_ms)) = self.engine.pause
            && now_ms() - self.last_pause >= every_ms
        {
            pause().await;
            self.last_pause = now_ms();
        }
        let start = now_ms();
        let tokens: Vec<u32> = request.rows.iter().map(|r| r.last_token).collect();
        let parents: Vec<usize> = request.rows.iter().map(|r| r.parent).collect();
        let sentences: Vec<usize> = request.rows.iter().map(|r| r.sentence).collect();
        let mut logits = self.forward(request.step, &tokens, &parents, &sentences, None)?;
        let vocab = self.engine.config.tgt_vocab_size;
        let candidates = logits
            .chunks_exact_mut(vocab)
            .zip(&request.rows)
            .map(|(lp, r)| {
                ops::log_softmax(lp);
                request.penalize(lp, r.history);
                top_k(lp, request.k)
            })
            .collect();
        self.step_ms += now_ms() - start;
        self.steps += 1;
        Ok(candidates)
    }
}

impl TranslationEngine for CpuEngine {
    type Error = CpuError;
    type Encoded = CpuEncoded;

    fn config(&self) -> &ModelConfig {
        &self.config
    }

    fn source_tokenizer(&self) -> &Tokenizer {
        &self.source_tokenizer
    }

    fn target_tokenizer(&self) -> &Tokenizer {
        &self.target_tokenizer
    }

    fn check_options(&self, options: &SearchOptions) -> Result<(), CpuError> {
        Ok(options.validate()?)
    }

    async fn encode(&self, sources: &[Vec<u32>]) -> Result<CpuEncoded, CpuError> {
        self.encode_pieces(sources)
    }

    /// All `pieces` decoded together (see [`CpuSession`]).
    async fn search(
        &self,
        encoded: &CpuEncoded,
        pieces: &[usize],
        options: &SearchOptions,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<(Vec<SearchResult>, SearchStats), CpuError> {
        let start = now_ms();
        let mut results = Vec::with_capacity(pieces.len());
        let (mut stats, mut step_ms) = (SearchStats::default(), 0.0);
        for part in self.decoder_batches(encoded, pieces, options) {
            let (mut session, lens) = self.session(encoded, part, options)?;
            results.extend(beam_search_batch(&mut session, options, &lens, cancelled).await?);
            stats.steps += session.steps;
            step_ms += session.step_ms;
        }
        stats.ms = now_ms() - start;
        stats.bookkeeping_ms = (stats.ms - step_ms).max(0.0);
        Ok((results, stats))
    }

    async fn cross_attention(
        &self,
        encoded: &CpuEncoded,
        i: usize,
        target_in: &[u32],
    ) -> Result<Vec<f32>, CpuError> {
        Ok(self.teacher_forced(encoded, i, target_in)?.1)
    }
}
