//! A bundle's weights on the GPU: uploaded once per engine, in the layout the kernels read.

use crate::config::ModelConfig;
use crate::gpu::{Gpu, GpuError};
use crate::kernels::matmul_q8::GpuQ8Matrix;
use crate::reference::positional_encoding;
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
        // One GPU matrix with the rows of the bundle's matrices `names`, in order.
        let stacked = |names: &[String]| -> Result<GpuQ8Matrix, UploadError> {
            let mut parts = names.iter();
            let first = parts.next().map(String::as_str).unwrap_or_default();
            let mut w = bundle.matrix(first)?;
            let mut bias = bundle.vector(&format!("{first}.bias"))?;
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
                bias.extend(bundle.vector(&format!("{name}.bias"))?);
            }
            Ok(GpuQ8Matrix::upload(gpu, &w, &bias)?)
        };
        let linear = |name: &str| stacked(&[name.to_string()]);
        let embedding = |stack: &str| -> Result<GpuQ8Matrix, UploadError> {
            let w = bundle.matrix(&format!("{stack}.embed.embedding"))?;
            Ok(GpuQ8Matrix::upload(gpu, &w, &vec![0.0; w.n])?)
        };
        let norm = |name: &str| -> Result<Norm, UploadError> {
            Ok(Norm {
                gamma: gpu.storage_from(name, &bundle.vector(&format!("{name}.gamma"))?),
                beta: gpu.storage_from(name, &bundle.vector(&format!("{name}.beta"))?),
            })
        };
        let self_attn = |name: &str| -> Result<SelfAttn, UploadError> {
            Ok(SelfAttn {
                qkv: stacked(&["query", "key", "value"].map(|p| format!("{name}.{p}")))?,
                output: linear(&format!("{name}.output"))?,
            })
        };
        let cross_attn = |name: &str| -> Result<CrossAttn, UploadError> {
            Ok(CrossAttn {
                query: linear(&format!("{name}.query"))?,
                kv: stacked(&["key", "value"].map(|p| format!("{name}.{p}")))?,
                output: linear(&format!("{name}.output"))?,
            })
        };
        let ffn = |p: &str| -> Result<Ffn, UploadError> {
            Ok(Ffn {
                linear1: linear(&format!("{p}.ffn.linear1"))?,
                linear2: linear(&format!("{p}.ffn.linear2"))?,
            })
        };
        let encoder = (0..config.n_enc_layers)
            .map(|l| {
                let p = format!("encoder.layers.{l}");
                Ok(EncoderLayer {
                    self_attn: self_attn(&format!("{p}.self_attn"))?,
                    norm1: norm(&format!("{p}.norm1"))?,
                    ffn: ffn(&p)?,
                    norm2: norm(&format!("{p}.norm2"))?,
                })
            })
            .collect::<Result<_, UploadError>>()?;
        let decoder = (0..config.n_dec_layers)
            .map(|l| {
                let p = format!("decoder.layers.{l}");
                Ok(DecoderLayer {
                    self_attn: self_attn(&format!("{p}.self_attn"))?,
                    norm1: norm(&format!("{p}.norm1"))?,
                    cross_attn: cross_attn(&format!("{p}.cross_attn"))?,
                    norm2: norm(&format!("{p}.norm2"))?,
                    ffn: ffn(&p)?,
                    norm3: norm(&format!("{p}.norm3"))?,
                })
            })
            .collect::<Result<_, UploadError>>()?;
        Ok(Self {
            src_embed: embedding("encoder")?,
            tgt_embed: embedding("decoder")?,
            positions: gpu.storage_from(
                "positions",
                &positional_encoding(config.max_seq_len + 1, config.d_model),
            ),
            encoder,
            decoder,
        })
    }
}
