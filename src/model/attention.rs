//! Multi-head scaled dot-product attention, with the projections split out so the decoder can
//! compute cross-attention keys and values once per sentence and self-attention incrementally.

use super::{apply, cast_to, dropout, linear};
use crate::config::ModelConfig;
use burn::module::Module;
use burn::nn::{Dropout, DropoutConfig, Linear};
use burn::tensor::activation::softmax;
use burn::tensor::{Bool, DType, Device, Tensor};

/// Added to the scores of hidden positions. Finite, so a fully hidden row (only padding, which
/// never reaches the loss) gives a uniform distribution instead of NaN.
const MASKED: f32 = -1e9;

/// `output(softmax(q kᵀ / √d_head + mask) v)` over `n_heads` heads.
#[derive(Module, Debug)]
pub struct MultiHeadAttention {
    pub query: Linear,
    pub key: Linear,
    pub value: Linear,
    pub output: Linear,
    dropout: Dropout,
    n_heads: usize,
}

impl MultiHeadAttention {
    pub(super) fn new(config: &ModelConfig, device: &Device) -> Self {
        let d = config.d_model;
        Self {
            query: linear(d, d, device),
            key: linear(d, d, device),
            value: linear(d, d, device),
            output: linear(d, d, device),
            dropout: DropoutConfig::new(config.dropout).init(),
            n_heads: config.n_heads,
        }
    }

    /// Attention of `query` over `key_value`; returns the output and the attention weights.
    ///
    /// # Shapes
    /// `query [batch, q_len, d_model]`, `key_value [batch, kv_len, d_model]`, `mask`
    /// broadcastable to `[batch, n_heads, q_len, kv_len]` → `[batch, q_len, d_model]` and
    /// `[batch, n_heads, q_len, kv_len]`.
    pub fn forward(
        &self,
        query: Tensor<3>,
        key_value: Tensor<3>,
        mask: Option<Tensor<4, Bool>>,
    ) -> (Tensor<3>, Tensor<4>) {
        let q = self.project_query(query);
        let (k, v) = self.project_key_value(key_value);
        self.attend(q, k, v, mask)
    }

    /// # Shapes
    /// `[batch, len, d_model]` → `[batch, n_heads, len, d_head]`.
    pub(super) fn project_query(&self, x: Tensor<3>) -> Tensor<4> {
        self.split_heads(apply(&self.query, x))
    }

    /// # Shapes
    /// `[batch, len, d_model]` → keys and values `[batch, n_heads, len, d_head]`.
    pub(super) fn project_key_value(&self, x: Tensor<3>) -> (Tensor<4>, Tensor<4>) {
        (
            self.split_heads(apply(&self.key, x.clone())),
            self.split_heads(apply(&self.value, x)),
        )
    }

    /// Self-attention of one new position over every earlier one: appends its key and value to
    /// `cache` (no mask needed: the cache holds only the past).
    ///
    /// # Shapes
    /// `x [batch, 1, d_model]` → `[batch, 1, d_model]`.
    pub(super) fn forward_incremental(
        &self,
        x: Tensor<3>,
        cache: &mut Option<(Tensor<4>, Tensor<4>)>,
    ) -> Tensor<3> {
        let q = self.project_query(x.clone());
        let (k, v) = self.project_key_value(x);
        let (k, v) = match cache.take() {
            Some((past_k, past_v)) => (
                Tensor::cat(vec![past_k, k], 2),
                Tensor::cat(vec![past_v, v], 2),
            ),
            None => (k, v),
        };
        *cache = Some((k.clone(), v.clone()));
        self.attend(q, k, v, None).0
    }

    /// Scaled dot-product attention on projected heads, then the output projection.
    pub(super) fn attend(
        &self,
        q: Tensor<4>,
        k: Tensor<4>,
        v: Tensor<4>,
        mask: Option<Tensor<4, Bool>>,
    ) -> (Tensor<3>, Tensor<4>) {
        let [batch, heads, q_len, d_head] = q.dims();
        let kv_len = k.dims()[2];
        let dtype = q.dtype();
        // Scores, mask and softmax in f32 (also when training in half precision).
        let mut scores = cast_to(
            q.matmul(k.swap_dims(2, 3))
                .div_scalar((d_head as f64).sqrt()),
            DType::F32,
        );
        if let Some(mask) = mask {
            scores = scores.mask_fill(mask.expand([batch, heads, q_len, kv_len]), MASKED);
        }
        let weights = softmax(scores, 3);
        let context = cast_to(dropout(&self.dropout, weights.clone()), dtype)
            .matmul(v)
            .swap_dims(1, 2)
            .reshape([batch, q_len, heads * d_head]);
        (apply(&self.output, context), weights)
    }

    fn split_heads(&self, x: Tensor<3>) -> Tensor<4> {
        let [batch, len, d_model] = x.dims();
        x.reshape([batch, len, self.n_heads, d_model / self.n_heads])
            .swap_dims(1, 2)
    }
}
