//! The Transformer of "Attention Is All You Need" in burn: the training truth that the WGSL
//! engine is tested against.
//!
//! Post-LayerNorm encoder-decoder: sinusoidal positions added to embeddings scaled by
//! √d_model, multi-head attention, ReLU feed-forward blocks, residual + LayerNorm after every
//! sublayer, separate source and target embeddings, and the target embedding reused (tied) as
//! the output projection. Parameter paths are the names in the weight bundle, e.g.
//! `decoder.layers.3.cross_attn.query.weight`; burn stores `Linear` weights as `[d_in, d_out]`.
//!
//! Masks are `Bool` tensors where `true` hides a position.

mod attention;
mod dropout;
mod greedy;
mod load;
mod step;
#[cfg(test)]
mod tests;

pub use attention::MultiHeadAttention;
use dropout::dropout;
pub use greedy::greedy_decode;
pub use step::{BurnEngine, BurnError, BurnSession, BurnStepError};

use crate::config::{ModelConfig, PAD_ID};
use crate::positions::positional_encoding;
use burn::module::{Module, ModuleVisitor, Param};
use burn::nn::{
    Dropout, DropoutConfig, Embedding, EmbeddingConfig, Initializer, LayerNorm, LayerNormConfig,
    Linear, LinearConfig,
};
use burn::tensor::activation::relu;
use burn::tensor::{Bool, DType, Device, FloatDType, Int, Tensor, TensorData};

/// The paper's initialisation for weight matrices.
fn xavier() -> Initializer {
    Initializer::XavierUniform { gain: 1.0 }
}

fn linear(d_in: usize, d_out: usize, device: &Device) -> Linear {
    LinearConfig::new(d_in, d_out)
        .with_initializer(xavier())
        .init(device)
}

/// `x · weight (+ bias)` on the rows of `x`, as one 2-D matrix product.
///
/// burn's linear on a 3-D input often runs as a batched product against the weight broadcast
/// over the batch (its tiling policy: for a 256-wide output and 4096-token batches, whenever the
/// padded length is 16 or more), and its backward pass then builds one weight gradient per
/// sentence and sums them: for `small` a `[batch, d_ff, d_model]` gradient of about 200 MB,
/// zero-filled, copied and reduced, per layer and batch. Folding the batch into the rows first
/// gives one product and one gradient, as torch does.
///
/// # Shapes
/// `x [batch, len, d_in]`, `weight [d_in, d_out]` → `[batch, len, d_out]`.
fn rows_linear(x: Tensor<3>, weight: Tensor<2>, bias: Option<Tensor<1>>) -> Tensor<3> {
    let [batch, len, d_in] = x.dims();
    let d_out = weight.dims()[1];
    burn::tensor::module::linear(x.reshape([batch * len, d_in]), weight, bias)
        .reshape([batch, len, d_out])
}

/// A [`Linear`] layer through [`rows_linear`].
fn apply(layer: &Linear, x: Tensor<3>) -> Tensor<3> {
    rows_linear(x, layer.weight.val(), layer.bias.as_ref().map(|b| b.val()))
}

/// `x` in `dtype` (a no-op when it already is). Mixed-precision training runs the model on
/// half-precision copies of the weights; softmax and the loss widen to f32, burn's LayerNorm
/// widens by itself.
pub fn cast_to<const D: usize>(x: Tensor<D>, dtype: DType) -> Tensor<D> {
    if x.dtype() == dtype {
        x
    } else {
        x.cast(FloatDType::from(dtype))
    }
}

fn layer_norm(config: &ModelConfig, device: &Device) -> LayerNorm {
    LayerNormConfig::new(config.d_model)
        .with_epsilon(config.layer_norm_eps)
        .init(device)
}

/// Position-wise feed-forward block: `linear2(dropout(relu(linear1(x))))`.
#[derive(Module, Debug)]
pub struct FeedForward {
    pub linear1: Linear,
    pub linear2: Linear,
    dropout: Dropout,
}

impl FeedForward {
    fn new(config: &ModelConfig, device: &Device) -> Self {
        Self {
            linear1: linear(config.d_model, config.d_ff, device),
            linear2: linear(config.d_ff, config.d_model, device),
            dropout: DropoutConfig::new(config.dropout).init(),
        }
    }

    /// # Shapes
    /// `[batch, seq_len, d_model]` → `[batch, seq_len, d_model]`.
    pub fn forward(&self, x: Tensor<3>) -> Tensor<3> {
        apply(
            &self.linear2,
            dropout(&self.dropout, relu(apply(&self.linear1, x))),
        )
    }
}

/// Token embedding × √d_model + sinusoidal positions, then dropout.
#[derive(Module, Debug)]
pub struct Embed {
    pub embedding: Embedding,
    dropout: Dropout,
    d_model: usize,
}

impl Embed {
    fn new(vocab: usize, config: &ModelConfig, device: &Device) -> Self {
        // Tied with the output projection, so logits start small: std d_model^-0.5.
        let std = (config.d_model as f64).powf(-0.5);
        Self {
            embedding: EmbeddingConfig::new(vocab, config.d_model)
                .with_initializer(Initializer::Normal { mean: 0.0, std })
                .init(device),
            dropout: DropoutConfig::new(config.dropout).init(),
            d_model: config.d_model,
        }
    }

    /// # Shapes
    /// `tokens [batch, seq_len]` starting at position `start` → `[batch, seq_len, d_model]`.
    fn forward(&self, tokens: Tensor<2, Int>, start: usize) -> Tensor<3> {
        let [_, seq_len] = tokens.dims();
        let device = tokens.device();
        let table = positional_encoding(start + seq_len, self.d_model);
        let pe = Tensor::<2>::from_data(
            TensorData::new(
                table[start * self.d_model..].to_vec(),
                [seq_len, self.d_model],
            ),
            &device,
        );
        let x = self
            .embedding
            .forward(tokens)
            .mul_scalar((self.d_model as f64).sqrt());
        let pe = cast_to(pe, x.dtype());
        let x = x.add(pe.unsqueeze_dim::<3>(0));
        dropout(&self.dropout, x)
    }
}

/// Self-attention and feed-forward, each followed by residual + LayerNorm.
#[derive(Module, Debug)]
pub struct EncoderLayer {
    pub self_attn: MultiHeadAttention,
    pub norm1: LayerNorm,
    pub ffn: FeedForward,
    pub norm2: LayerNorm,
    dropout: Dropout,
}

impl EncoderLayer {
    fn new(config: &ModelConfig, device: &Device) -> Self {
        Self {
            self_attn: MultiHeadAttention::new(config, device),
            norm1: layer_norm(config, device),
            ffn: FeedForward::new(config, device),
            norm2: layer_norm(config, device),
            dropout: DropoutConfig::new(config.dropout).init(),
        }
    }

    fn forward(&self, x: Tensor<3>, src_mask: &Tensor<4, Bool>) -> Tensor<3> {
        let (attn, _) = self
            .self_attn
            .forward(x.clone(), x.clone(), Some(src_mask.clone()));
        let x = self.norm1.forward(x + dropout(&self.dropout, attn));
        let ffn = self.ffn.forward(x.clone());
        self.norm2.forward(x + dropout(&self.dropout, ffn))
    }
}

/// Masked self-attention, cross-attention over the encoder output, feed-forward; each followed
/// by residual + LayerNorm.
#[derive(Module, Debug)]
pub struct DecoderLayer {
    pub self_attn: MultiHeadAttention,
    pub norm1: LayerNorm,
    pub cross_attn: MultiHeadAttention,
    pub norm2: LayerNorm,
    pub ffn: FeedForward,
    pub norm3: LayerNorm,
    dropout: Dropout,
}

impl DecoderLayer {
    fn new(config: &ModelConfig, device: &Device) -> Self {
        Self {
            self_attn: MultiHeadAttention::new(config, device),
            norm1: layer_norm(config, device),
            cross_attn: MultiHeadAttention::new(config, device),
            norm2: layer_norm(config, device),
            ffn: FeedForward::new(config, device),
            norm3: layer_norm(config, device),
            dropout: DropoutConfig::new(config.dropout).init(),
        }
    }

    /// The rest of the layer once self-attention is done; returns the output and the
    /// cross-attention weights `[batch, n_heads, tgt_len, src_len]`.
    fn after_self_attn(
        &self,
        x: Tensor<3>,
        attn: Tensor<3>,
        cross_k: Tensor<4>,
        cross_v: Tensor<4>,
        src_mask: &Tensor<4, Bool>,
    ) -> (Tensor<3>, Tensor<4>) {
        let x = self.norm1.forward(x + dropout(&self.dropout, attn));
        let q = self.cross_attn.project_query(x.clone());
        let (cross, weights) = self
            .cross_attn
            .attend(q, cross_k, cross_v, Some(src_mask.clone()));
        let x = self.norm2.forward(x + dropout(&self.dropout, cross));
        let ffn = self.ffn.forward(x.clone());
        (self.norm3.forward(x + dropout(&self.dropout, ffn)), weights)
    }
}

/// The encoder stack.
#[derive(Module, Debug)]
pub struct Encoder {
    pub embed: Embed,
    pub layers: Vec<EncoderLayer>,
}

/// The decoder stack; its embedding is also the output projection.
#[derive(Module, Debug)]
pub struct Decoder {
    pub embed: Embed,
    pub layers: Vec<DecoderLayer>,
}

/// The whole encoder-decoder.
#[derive(Module, Debug)]
pub struct Transformer {
    pub encoder: Encoder,
    pub decoder: Decoder,
}

/// What incremental decoding keeps between steps: per decoder layer, the self-attention keys
/// and values so far and the cross-attention keys and values (computed once per sentence).
#[derive(Clone, Debug)]
pub struct DecoderCache {
    /// Per layer, `[batch, n_heads, steps so far, d_head]`.
    self_kv: Vec<Option<(Tensor<4>, Tensor<4>)>>,
    /// Per layer, `[batch, n_heads, src_len, d_head]`.
    cross_kv: Vec<(Tensor<4>, Tensor<4>)>,
    src_mask: Tensor<4, Bool>,
    /// Position of the next token.
    pos: usize,
}

impl Transformer {
    /// A freshly initialised model on `device` (seed the device first for reproducibility).
    /// burn initialises parameters lazily, on first use; this initialises them all here, in
    /// module order, so the weights depend only on the seed set before the call (not on what
    /// runs first, nor on the RNG draws in between, such as dropout).
    pub fn new(config: &ModelConfig, device: &Device) -> Self {
        struct Initialise;
        impl ModuleVisitor for Initialise {
            fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
                let _ = param.val();
            }
        }
        let model = Self::uninitialised(config, device);
        model.visit(&mut Initialise);
        model
    }

    fn uninitialised(config: &ModelConfig, device: &Device) -> Self {
        Self {
            encoder: Encoder {
                embed: Embed::new(config.src_vocab_size, config, device),
                layers: (0..config.n_enc_layers)
                    .map(|_| EncoderLayer::new(config, device))
                    .collect(),
            },
            decoder: Decoder {
                embed: Embed::new(config.tgt_vocab_size, config, device),
                layers: (0..config.n_dec_layers)
                    .map(|_| DecoderLayer::new(config, device))
                    .collect(),
            },
        }
    }

    /// `true` at source padding, shaped to broadcast over heads and queries.
    ///
    /// # Shapes
    /// `src [batch, src_len]` → `[batch, 1, 1, src_len]`.
    pub fn source_mask(src: &Tensor<2, Int>) -> Tensor<4, Bool> {
        let [batch, src_len] = src.dims();
        src.clone()
            .equal_elem(PAD_ID as i64)
            .reshape([batch, 1, 1, src_len])
    }

    /// Runs the encoder.
    ///
    /// # Shapes
    /// `src [batch, src_len]` → memory `[batch, src_len, d_model]` and the source mask.
    pub fn encode(&self, src: Tensor<2, Int>) -> (Tensor<3>, Tensor<4, Bool>) {
        let mask = Self::source_mask(&src);
        let mut x = self.encoder.embed.forward(src, 0);
        for layer in &self.encoder.layers {
            x = layer.forward(x, &mask);
        }
        (x, mask)
    }

    /// Teacher-forced decoding of whole target prefixes (training and the full-forward oracle).
    /// Returns logits and the last layer's cross-attention weights.
    ///
    /// # Shapes
    /// `tgt_in [batch, tgt_len]`, `memory [batch, src_len, d_model]` →
    /// logits `[batch, tgt_len, tgt_vocab]`, weights `[batch, n_heads, tgt_len, src_len]`.
    pub fn decode(
        &self,
        tgt_in: Tensor<2, Int>,
        memory: Tensor<3>,
        src_mask: &Tensor<4, Bool>,
    ) -> (Tensor<3>, Tensor<4>) {
        let [_, tgt_len] = tgt_in.dims();
        let device = tgt_in.device();
        let causal = Tensor::<2, Bool>::tril_mask([tgt_len, tgt_len], 0, &device)
            .reshape([1, 1, tgt_len, tgt_len]);
        let mut x = self.decoder.embed.forward(tgt_in, 0);
        let mut weights = None;
        for layer in &self.decoder.layers {
            let (attn, _) = layer
                .self_attn
                .forward(x.clone(), x.clone(), Some(causal.clone()));
            let (k, v) = layer.cross_attn.project_key_value(memory.clone());
            let (out, w) = layer.after_self_attn(x, attn, k, v, src_mask);
            x = out;
            weights = Some(w);
        }
        (
            self.project(x),
            weights.unwrap_or_else(|| Tensor::zeros([1, 1, 1, 1], &device)),
        )
    }

    /// Logits of the full teacher-forced forward pass.
    ///
    /// # Shapes
    /// `src [batch, src_len]`, `tgt_in [batch, tgt_len]` → `[batch, tgt_len, tgt_vocab]`.
    pub fn forward(&self, src: Tensor<2, Int>, tgt_in: Tensor<2, Int>) -> Tensor<3> {
        let (memory, mask) = self.encode(src);
        self.decode(tgt_in, memory, &mask).0
    }

    /// Starts incremental decoding: computes every layer's cross-attention keys and values once.
    pub fn start_decoding(&self, memory: Tensor<3>, src_mask: Tensor<4, Bool>) -> DecoderCache {
        DecoderCache {
            self_kv: vec![None; self.decoder.layers.len()],
            cross_kv: self
                .decoder
                .layers
                .iter()
                .map(|layer| layer.cross_attn.project_key_value(memory.clone()))
                .collect(),
            src_mask,
            pos: 0,
        }
    }

    /// One incremental decoder step: feeds `tokens` at the cache's next position and returns the
    /// next-token logits and the last layer's cross-attention weights.
    ///
    /// # Shapes
    /// `tokens [batch]` → logits `[batch, tgt_vocab]`, weights `[batch, n_heads, src_len]`.
    pub fn decode_step(
        &self,
        tokens: Tensor<1, Int>,
        cache: &mut DecoderCache,
    ) -> (Tensor<2>, Tensor<3>) {
        let [batch] = tokens.dims();
        let mut x = self
            .decoder
            .embed
            .forward(tokens.reshape([batch, 1]), cache.pos);
        let mut weights = None;
        for (i, layer) in self.decoder.layers.iter().enumerate() {
            let attn = layer
                .self_attn
                .forward_incremental(x.clone(), &mut cache.self_kv[i]);
            let (k, v) = cache.cross_kv[i].clone();
            let (out, w) = layer.after_self_attn(x, attn, k, v, &cache.src_mask);
            x = out;
            weights = Some(w);
        }
        cache.pos += 1;
        let logits = self.project(x);
        let [_, _, vocab] = logits.dims();
        let weights = weights.unwrap_or_else(|| Tensor::zeros([batch, 1, 1, 1], &logits.device()));
        let [_, heads, _, src_len] = weights.dims();
        (
            logits.reshape([batch, vocab]),
            weights.reshape([batch, heads, src_len]),
        )
    }

    /// Keeps the cache rows `rows` (in that order): beam reordering.
    pub fn reorder_cache(cache: &mut DecoderCache, rows: Tensor<1, Int>) {
        let pick4 = |t: Tensor<4>| t.select(0, rows.clone());
        for kv in cache.self_kv.iter_mut().flatten() {
            *kv = (pick4(kv.0.clone()), pick4(kv.1.clone()));
        }
        for kv in cache.cross_kv.iter_mut() {
            *kv = (pick4(kv.0.clone()), pick4(kv.1.clone()));
        }
        cache.src_mask = cache.src_mask.clone().select(0, rows);
    }

    /// The tied output projection: `x · E_tgtᵀ`.
    fn project(&self, x: Tensor<3>) -> Tensor<3> {
        let embedding = self.decoder.embed.embedding.weight.val(); // [tgt_vocab, d_model]
        rows_linear(x, embedding.transpose(), None)
    }
}
