//! Driver for `attention.wgsl`: softmax(q kᵀ / √d_head + mask) v over all heads, with padding and
//! causal masks, keys and values optionally in a KV cache, weights optionally stored.

use crate::gpu::{Gpu, GpuError, PipelineKey};
use std::sync::Arc;

/// The kernel's name: its pipeline-cache key and debug label.
pub const NAME: &str = "attention";
/// The WGSL source.
pub const SOURCE: &str = include_str!("attention.wgsl");
/// The most keys one call attends over (`MAX_KEYS` in the shader).
pub const MAX_KEYS: usize = 512;

/// Mirrors `struct Params` in `attention.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    batch: u32,
    n_queries: u32,
    n_keys: u32,
    kv_stride: u32,
    d_model: u32,
    n_heads: u32,
    q_offset: u32,
    causal: u32,
    store_weights: u32,
    _pad: [u32; 3],
}
const _: () = assert!(size_of::<Params>() == 48);

/// Sizes and masks of one attention call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttentionShape {
    pub batch: usize,
    pub n_queries: usize,
    /// Keys (and values) in use per batch row.
    pub n_keys: usize,
    /// Key/value rows reserved per batch row in the buffers (a KV cache's capacity).
    pub kv_stride: usize,
    pub d_model: usize,
    pub n_heads: usize,
    /// Position of query 0, for the causal mask (a decoder step's index).
    pub q_offset: usize,
    /// Hide keys after each query's position.
    pub causal: bool,
}

/// The buffers of one dispatch.
pub struct AttentionArgs<'a> {
    /// `[batch, n_queries, d_model]` projected queries.
    pub q: &'a wgpu::Buffer,
    /// `[batch, kv_stride, d_model]` projected keys.
    pub k: &'a wgpu::Buffer,
    /// `[batch, kv_stride, d_model]` projected values.
    pub v: &'a wgpu::Buffer,
    /// `[batch]` u32: keys at or past this index are padding.
    pub key_len: &'a wgpu::Buffer,
    /// `[batch, n_heads, n_queries, n_keys]` attention weights, written when given.
    pub weights: Option<&'a wgpu::Buffer>,
    /// `[batch, n_queries, d_model]` output.
    pub context: &'a wgpu::Buffer,
}

/// The compiled kernel.
pub struct Attention {
    pipeline: Arc<wgpu::ComputePipeline>,
    /// Bound as `weights` when the caller wants none.
    no_weights: wgpu::Buffer,
}

impl Attention {
    /// Compiles the kernel (or takes it from the device's pipeline cache).
    pub async fn new(gpu: &Gpu) -> Result<Self, GpuError> {
        let pipeline = gpu.pipeline(&PipelineKey::new(NAME), SOURCE).await?;
        Ok(Self {
            pipeline,
            no_weights: gpu.storage_zeroed("attention no weights", 1),
        })
    }

    /// Records one dispatch into `encoder`.
    pub fn encode(
        &self,
        gpu: &Gpu,
        encoder: &mut wgpu::CommandEncoder,
        shape: &AttentionShape,
        args: &AttentionArgs<'_>,
    ) -> Result<(), GpuError> {
        let s = shape;
        let max = gpu.device.limits().max_compute_workgroups_per_dimension as usize;
        let bad = s.batch == 0
            || s.n_queries == 0
            || s.n_keys == 0
            || s.n_keys > MAX_KEYS
            || s.kv_stride < s.n_keys
            || s.n_heads == 0
            || !s.d_model.is_multiple_of(s.n_heads)
            || [s.batch, s.n_queries, s.n_heads].iter().any(|&n| n > max);
        if bad {
            return Err(GpuError::shape(
                NAME,
                format!(
                    "{s:?}: need at least one query and key, n_keys ≤ {MAX_KEYS} and ≤ kv_stride, \
                 d_model divisible by n_heads, and batch, n_queries, n_heads ≤ {max}"
                ),
            ));
        }
        let need = |len: usize| (len * 4) as u64;
        let small = args.q.size() < need(s.batch * s.n_queries * s.d_model)
            || args.context.size() < need(s.batch * s.n_queries * s.d_model)
            || [args.k, args.v]
                .iter()
                .any(|b| b.size() < need(s.batch * s.kv_stride * s.d_model))
            || args.key_len.size() < need(s.batch)
            || args
                .weights
                .is_some_and(|w| w.size() < need(s.batch * s.n_heads * s.n_queries * s.n_keys));
        if small {
            return Err(GpuError::shape(
                NAME,
                format!("buffers too small for {s:?}"),
            ));
        }
        let params = gpu.uniform(
            "attention params",
            &Params {
                batch: s.batch as u32,
                n_queries: s.n_queries as u32,
                n_keys: s.n_keys as u32,
                kv_stride: s.kv_stride as u32,
                d_model: s.d_model as u32,
                n_heads: s.n_heads as u32,
                q_offset: s.q_offset as u32,
                causal: u32::from(s.causal),
                store_weights: u32::from(args.weights.is_some()),
                _pad: [0; 3],
            },
        );
        let weights = args.weights.unwrap_or(&self.no_weights);
        gpu.dispatch(
            encoder,
            NAME,
            &self.pipeline,
            &[
                &params,
                args.q,
                args.k,
                args.v,
                args.key_len,
                weights,
                args.context,
            ],
            [s.n_queries as u32, s.n_heads as u32, s.batch as u32],
        );
        Ok(())
    }
}

/// Runs the kernel once on host data; returns the context `[batch, n_queries, d_model]` and the
/// weights `[batch, n_heads, n_queries, n_keys]`.
pub async fn attention(
    gpu: &Gpu,
    shape: &AttentionShape,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    key_len: &[u32],
) -> Result<(Vec<f32>, Vec<f32>), GpuError> {
    let s = shape;
    if q.len() != s.batch * s.n_queries * s.d_model
        || k.len() != s.batch * s.kv_stride * s.d_model
        || v.len() != k.len()
        || key_len.len() != s.batch
    {
        return Err(GpuError::shape(
            NAME,
            format!(
                "q has {}, k {}, v {}, key_len {} values: not the sizes of {s:?}",
                q.len(),
                k.len(),
                v.len(),
                key_len.len()
            ),
        ));
    }
    let kernel = Attention::new(gpu).await?;
    let (context, weights) = gpu
        .checked(NAME, async {
            let [q, k, v] = [q, k, v].map(|x| gpu.storage_from("attention in", x));
            let key_len = gpu.storage_from("attention key_len", key_len);
            let weights = gpu.storage_zeroed(
                "attention weights",
                s.batch * s.n_heads * s.n_queries * s.n_keys,
            );
            let context =
                gpu.storage_zeroed("attention context", s.batch * s.n_queries * s.d_model);
            let mut encoder = gpu.device.create_command_encoder(&Default::default());
            let args = AttentionArgs {
                q: &q,
                k: &k,
                v: &v,
                key_len: &key_len,
                weights: Some(&weights),
                context: &context,
            };
            kernel.encode(gpu, &mut encoder, s, &args)?;
            gpu.queue.submit([encoder.finish()]);
            Ok::<_, GpuError>((context, weights))
        })
        .await??;
    Ok((gpu.read_f32(&context).await?, gpu.read_f32(&weights).await?))
}

#[cfg(test)]
mod tests {
    use crate::gpu::testing::gpu_or_skip;
    use crate::selfcheck;

    #[test]
    fn attention_matches_reference() {
        let Some(gpu) = gpu_or_skip("attention_matches_reference") else {
            return;
        };
        let checks = pollster::block_on(selfcheck::check_attention(&gpu, 9));
        selfcheck::assert_all_match(checks, 2 * selfcheck::ATTENTION_SHAPES.len());
    }
}
