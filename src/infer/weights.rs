//! A bundle's weights on the GPU: uploaded once per engine, in the layout the kernels read.

use crate::config::ModelConfig;
use crate::gpu::{Gpu, GpuError};
use crate::kernels::matmul_q8::GpuQ8Matrix;
use crate::positions::positional_encoding;
use crate::weights::names::{self, AttentionNames, Stack};
use crate::weights::{Bundle, BundleError};

/// Why a bundle could not be put on the GPU.
#[derive(Debug, thiserror::Error)]
pub enum UploadError {
    #[error(transparent)]
    Bundle(#[from] BundleError),
    #[error(transparent)]
    Gpu(#[from] GpuError),
}

/// A LayerNorm's scale and shift.
pub(crate) struct Norm {
    pub gamma: wgpu::Buffer,
    pub beta: wgpu::Buffer,
}

/// A self-attention block: queries, keys and values as one fused projection (`[3 · d_model,
/// d_model]`, queries first), and the output projection.
pub(crate) struct SelfAttn {
    pub qkv: GpuQ8Matrix,
    pub output: GpuQ8Matrix,
}

/// A cross-attention block: the query projection, keys and values as one fused projection of
/// the encoder output (`[2 · d_model, d_model]`, keys first), and the output projection.
pub(crate) struct CrossAttn {
    pub query: GpuQ8Matrix,
    pub kv: GpuQ8Matrix,
    pub output: GpuQ8Matrix,
}

/// The feed-forward block.
pub(crate) struct Ffn {
    pub linear1: GpuQ8Matrix,
    pub linear2: GpuQ8Matrix,
}

pub(crate) struct EncoderLayer {
    pub self_attn: SelfAttn,
    pub norm1: Norm,
    pub ffn: Ffn,
    pub norm2: Norm,
}

pub(crate) struct DecoderLayer {
    pub self_attn: SelfAttn,
    pub norm1: Norm,
    pub cross_attn: CrossAttn,
    pub norm2: Norm,
    pub ffn: Ffn,
    pub norm3: Norm,
}

/// Every weight of the model, on the GPU.
pub(crate) struct GpuWeights {
    /// `[src_vocab, d_model]` int8 source embedding (zero bias, unused by `embed`).
    pub src_embed: GpuQ8Matrix,
    /// `[tgt_vocab, d_model]` int8 target embedding; with its zero bias it is also the tied
    /// output projection `x · Eᵀ`.
    pub tgt_embed: GpuQ8Matrix,
    /// `[max_seq_len + 1, d_model]` sinusoidal positions.
    pub positions: wgpu::Buffer,
    pub encoder: Vec<EncoderLayer>,
    pub decoder: Vec<DecoderLayer>,
}

impl GpuWeights {
    /// Uploads `bundle` (already validated against its config by [`Bundle::from_files`]).
    pub fn upload(gpu: &Gpu, bundle: &Bundle) -> Result<Self, UploadError> {
        let config: &ModelConfig = bundle.config();
        // One GPU matrix with the rows of the bundle's matrices of `modules`, in order.
        let stacked = |modules: &[&str]| -> Result<GpuQ8Matrix, UploadError> {
            let mut parts = modules.iter();
            let first = parts.next().copied().unwrap_or_default();
            let mut w = bundle.matrix(first)?;
            let mut bias = bundle.vector(&names::bias(first))?;
            for name in parts {
                let next = bundle.matrix(name)?;
                if next.k != w.k {
                    return Err(GpuError::shape(
                        "matmul_q8",
                        format!("{name} has {} input features, {first} has {}", next.k, w.k),
                    )
                    .into());
                }
                w.n += next.n;
                w.packed.extend(next.packed);
                w.scale.extend(next.scale);
                bias.extend(bundle.vector(&names::bias(name))?);
            }
            Ok(GpuQ8Matrix::upload(gpu, &w, &bias)?)
        };
        let linear = |module: &str| stacked(&[module]);
        let embedding = |stack: Stack| -> Result<GpuQ8Matrix, UploadError> {
            let w = bundle.matrix(&names::embedding(stack))?;
            Ok(GpuQ8Matrix::upload(gpu, &w, &vec![0.0; w.n])?)
        };
        let norm = |norm: &str| -> Result<Norm, UploadError> {
            Ok(Norm {
                gamma: gpu.storage_from(norm, &bundle.vector(&names::gamma(norm))?),
                beta: gpu.storage_from(norm, &bundle.vector(&names::beta(norm))?),
            })
        };
        let self_attn = |block: &AttentionNames| -> Result<SelfAttn, UploadError> {
            Ok(SelfAttn {
                qkv: stacked(&[&block.query, &block.key, &block.value])?,
                output: linear(&block.output)?,
            })
        };
        let cross_attn = |block: &AttentionNames| -> Result<CrossAttn, UploadError> {
            Ok(CrossAttn {
                query: linear(&block.query)?,
                kv: stacked(&[&block.key, &block.value])?,
                output: linear(&block.output)?,
            })
        };
        let ffn = |layer: &names::LayerNames| -> Result<Ffn, UploadError> {
            Ok(Ffn {
                linear1: linear(&layer.ffn_linear1)?,
                linear2: linear(&layer.ffn_linear2)?,
            })
        };
        let encoder = (0..config.n_enc_layers)
            .map(|l| {
                let layer = names::layer(Stack::Encoder, l);
                Ok(EncoderLayer {
                    self_attn: self_attn(&layer.self_attn)?,
                    norm1: norm(&layer.self_attn_norm)?,
                    ffn: ffn(&layer)?,
                    norm2: norm(&layer.ffn_norm)?,
                })
            })
            .collect::<Result<_, UploadError>>()?;
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
                    cross_attn: cross_attn(cross)?,
                    norm2: norm(cross_norm)?,
                    ffn: ffn(&layer)?,
                    norm3: norm(&layer.ffn_norm)?,
                })
            })
            .collect::<Result<_, UploadError>>()?;
        Ok(Self {
            src_embed: embedding(Stack::Encoder)?,
            tgt_embed: embedding(Stack::Decoder)?,
            positions: gpu.storage_from(
                "positions",
                &positional_encoding(config.max_seq_len + 1, config.d_model),
            ),
            encoder,
            decoder,
        })
    }
}
