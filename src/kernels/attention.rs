//! Driver for `attention.wgsl`: softmax(q kᵀ / √d_head + mask) v over all heads, with padding and
//! causal masks, queries, keys and values read in place from fused projections or the decoder's
//! KV cache ([`AttentionLayout`]), weights optionally stored.

use crate::gpu::{Gpu, GpuError, PipelineKey};
pub use crate::layout::{AttentionLayout, AttentionShape};
use std::sync::Arc;

/// The kernel's name: its pipeline-cache key and debug label.
pub const NAME: &str = "attention";
/// The WGSL source.
pub const SOURCE: &str = include_str!("attention.wgsl");
/// The largest head width the kernel accumulates (`D_HEAD_MAX` in the shader, which sizes an
/// array with it; a test checks the two agree).
pub const D_HEAD_MAX: usize = 128;
/// Invocations per workgroup: the shader's `WORKGROUP` override, set from here.
const WORKGROUP: u32 = 64;

/// Mirrors `struct Params` in `attention.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    batch: u32,
    n_queries: u32,
    n_keys: u32,
    d_model: u32,
    n_heads: u32,
    q_offset: u32,
    causal: u32,
    store_weights: u32,
    q_start: u32,
    q_stride: u32,
    kv_start: u32,
    kv_stride: u32,
    k_col: u32,
    v_col: u32,
    pos_rows: u32,
    batch_rows: u32,
    indirect: u32,
    anc_stride: u32,
    _pad: [u32; 2],
}
const _: () = assert!(size_of::<Params>() == 80);

/// A beam history for [`AttentionLayout::kv_cache`]: `[batch, stride]` slot indices below `slots`
/// (or the owner table of [`AttentionLayout::batch_cross`]).
#[derive(Clone, Copy)]
pub struct Ancestors<'a> {
    pub buffer: &'a wgpu::Buffer,
    pub stride: usize,
    /// Slots per position (the beams of the cache); every entry must be below it.
    pub slots: usize,
}

/// The buffers of one dispatch.
pub struct AttentionArgs<'a> {
    /// Queries, laid out as [`AttentionLayout`] says.
    pub q: &'a wgpu::Buffer,
    /// Keys and values (may be the same buffer as `q`).
    pub kv: &'a wgpu::Buffer,
    /// `[batch]` u32: keys at or past `key_len[b]` are masked.
    pub key_len: &'a wgpu::Buffer,
    pub ancestors: Option<Ancestors<'a>>,
    /// `[batch, n_heads, n_queries, n_keys]` f32, when the weights are wanted.
    pub weights: Option<&'a wgpu::Buffer>,
    /// `[batch, n_queries, d_model]` f32 output.
    pub context: &'a wgpu::Buffer,
}

/// The compiled kernel for one head width.
pub struct Attention {
    pipeline: Arc<wgpu::ComputePipeline>,
    d_head: usize,
    /// Bound in place of `ancestors` and `weights` when a call has none (two: one binding is
    /// read-only, the other writable, and a dispatch cannot use one buffer both ways).
    no_ancestors: wgpu::Buffer,
    no_weights: wgpu::Buffer,
}

impl Attention {
    /// Compiles the kernel for heads of `d_head` features (a multiple of 4, at most
    /// [`D_HEAD_MAX`]), or takes it from the device's pipeline cache.
    pub async fn new(gpu: &Gpu, d_head: usize) -> Result<Self, GpuError> {
        if d_head == 0 || !d_head.is_multiple_of(4) || d_head > D_HEAD_MAX {
            return Err(GpuError::shape(
                NAME,
                format!(
                    "heads of {d_head} features: the kernel needs a multiple of 4, at most \
                     {D_HEAD_MAX} (choose d_model and n_heads accordingly)"
                ),
            ));
        }
        let key = PipelineKey::new(NAME)
            .with("WORKGROUP", f64::from(WORKGROUP))
            .with("d_head", d_head as f64);
        let pipeline = gpu.pipeline(&key, SOURCE).await?;
        Ok(Self {
            pipeline,
            d_head,
            no_ancestors: gpu.storage_zeroed("attention: no ancestors", 1),
            no_weights: gpu.storage_zeroed("attention: no weights", 1),
        })
    }

    /// Records one dispatch into `encoder`.
    pub fn encode(
        &self,
        gpu: &Gpu,
        encoder: &mut wgpu::CommandEncoder,
        shape: &AttentionShape,
        layout: &AttentionLayout,
        args: &AttentionArgs<'_>,
    ) -> Result<(), GpuError> {
        let (s, l) = (shape, layout);
        let invocations = s.batch * s.n_queries * s.n_heads;
        let max = gpu.device.limits().max_compute_workgroups_per_dimension as usize;
        let aligned = [
            l.q_start,
            l.q_stride,
            l.kv_start,
            l.kv_stride,
            l.k_col,
            l.v_col,
        ]
        .iter()
        .all(|v| v.is_multiple_of(4));
        let bad = s.batch == 0
            || s.n_queries == 0
            || s.n_keys == 0
            || s.n_heads == 0
            || s.d_model != s.n_heads * self.d_head
            || !aligned
            || invocations.div_ceil(WORKGROUP as usize) > max
            || args.ancestors.as_ref().is_some_and(|a| a.stride < s.n_keys);
        if bad {
            return Err(GpuError::shape(
                NAME,
                format!(
                    "{s:?} with {l:?}: need at least one query and key, d_model = n_heads · {} \
                     (this pipeline's head width), offsets and strides that are multiples of 4, \
                     ancestors for every key, and at most {} invocations",
                    self.d_head,
                    max * WORKGROUP as usize
                ),
            ));
        }
        let slots = args.ancestors.as_ref().map(|a| a.slots);
        let need = |len: usize| len as u64 * 4;
        let small = args.q.size() < need(l.q_end(s))
            || args.kv.size() < need(l.kv_end(s, slots))
            || args.context.size() < need(s.batch * s.n_queries * s.d_model)
            || args.key_len.size() < need(s.batch)
            || args
                .ancestors
                .as_ref()
                .is_some_and(|a| a.buffer.size() < need(s.batch * a.stride))
            || args
                .weights
                .is_some_and(|w| w.size() < need(s.batch * s.n_heads * s.n_queries * s.n_keys));
        if small {
            return Err(GpuError::shape(
                NAME,
                format!("buffers too small for {s:?} with {l:?}"),
            ));
        }
        let u = |v: usize| v as u32;
        let params = gpu.uniform(
            "attention params",
            &Params {
                batch: u(s.batch),
                n_queries: u(s.n_queries),
                n_keys: u(s.n_keys),
                d_model: u(s.d_model),
                n_heads: u(s.n_heads),
                q_offset: u(s.q_offset),
                causal: u32::from(s.causal),
                store_weights: u32::from(args.weights.is_some()),
                q_start: u(l.q_start),
                q_stride: u(l.q_stride),
                kv_start: u(l.kv_start),
                kv_stride: u(l.kv_stride),
                k_col: u(l.k_col),
                v_col: u(l.v_col),
                pos_rows: u(l.pos_rows),
                batch_rows: u(l.batch_rows),
                indirect: u32::from(args.ancestors.is_some()),
                anc_stride: args.ancestors.as_ref().map_or(0, |a| u(a.stride)),
                _pad: [0; 2],
            },
        );
        let ancestors = args
            .ancestors
            .as_ref()
            .map_or(&self.no_ancestors, |a| a.buffer);
        let weights = args.weights.unwrap_or(&self.no_weights);
        gpu.dispatch(
            encoder,
            NAME,
            &self.pipeline,
            &[
                &params,
                args.q,
                args.kv,
                args.key_len,
                ancestors,
                weights,
                args.context,
            ],
            [u(invocations).div_ceil(WORKGROUP), 1, 1],
        );
        Ok(())
    }
}

/// Runs the kernel once on host data (`ancestors`: `[batch, stride]` slots below `slots`, as
/// `(data, stride, slots)`); returns the context `[batch, n_queries, d_model]` and the weights
/// `[batch, n_heads, n_queries, n_keys]`.
pub async fn attention(
    gpu: &Gpu,
    shape: &AttentionShape,
    layout: &AttentionLayout,
    q: &[f32],
    kv: &[f32],
    key_len: &[u32],
    ancestors: Option<(&[u32], usize, usize)>,
) -> Result<(Vec<f32>, Vec<f32>), GpuError> {
    let s = shape;
    if key_len.len() != s.batch
        || ancestors.is_some_and(|(a, stride, _)| a.len() != s.batch * stride)
    {
        return Err(GpuError::shape(
            NAME,
            format!(
                "key_len has {} values and ancestors {:?}: not the sizes of {s:?}",
                key_len.len(),
                ancestors.map(|(a, stride, _)| (a.len(), stride))
            ),
        ));
    }
    let kernel = Attention::new(gpu, s.d_head()).await?;
    let (context, weights) = gpu
        .checked(NAME, async {
            let q = gpu.storage_from("attention q", q);
            let kv = gpu.storage_from("attention kv", kv);
            let key_len = gpu.storage_from("attention key_len", key_len);
            let history = ancestors.map(|(a, _, _)| gpu.storage_from("attention ancestors", a));
            let weights = gpu.storage_zeroed(
                "attention weights",
                s.batch * s.n_heads * s.n_queries * s.n_keys,
            );
            let context =
                gpu.storage_zeroed("attention context", s.batch * s.n_queries * s.d_model);
            let mut encoder = gpu.device.create_command_encoder(&Default::default());
            let args = AttentionArgs {
                q: &q,
                kv: &kv,
                key_len: &key_len,
                ancestors: history
                    .as_ref()
                    .zip(ancestors)
                    .map(|(buffer, (_, stride, slots))| Ancestors {
                        buffer,
                        stride,
                        slots,
                    }),
                weights: Some(&weights),
                context: &context,
            };
            kernel.encode(gpu, &mut encoder, s, layout, &args)?;
            gpu.queue.submit([encoder.finish()]);
            Ok::<_, GpuError>((context, weights))
        })
        .await??;
    Ok((gpu.read_f32(&context).await?, gpu.read_f32(&weights).await?))
}

#[cfg(test)]
mod tests {
    use super::{D_HEAD_MAX, SOURCE};
    use crate::gpu::testing::gpu_or_skip;
    use crate::kernels::wgsl_const;
    use crate::selfcheck;

    #[test]
    fn wgsl_constants_match_the_driver() {
        assert_eq!(wgsl_const(SOURCE, "D_HEAD_MAX"), Some(D_HEAD_MAX));
    }

    #[test]
    fn attention_matches_reference() {
        let Some(gpu) = gpu_or_skip("attention_matches_reference") else {
            return;
        };
        let checks = pollster::block_on(selfcheck::check_attention(&gpu, 9));
        selfcheck::assert_all_match(checks, 2 * selfcheck::ATTENTION_CASES.len());
    }
}
