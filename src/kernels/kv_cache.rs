//! Driver for `kv_cache.wgsl`: reorders a decoder layer's self-attention cache by parent row
//! and appends this step's keys and values, from one cache buffer pair into the other.

use crate::gpu::{Gpu, GpuError, PipelineKey};
use std::sync::Arc;

/// The kernel's name: its pipeline-cache key and debug label.
pub const NAME: &str = "kv_cache";
/// The WGSL source.
pub const SOURCE: &str = include_str!("kv_cache.wgsl");
/// Invocations per workgroup along the feature axis (`@workgroup_size` in the shader).
const WORKGROUP: u32 = 64;

/// Mirrors `struct Params` in `kv_cache.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    rows: u32,
    d_model: u32,
    capacity: u32,
    t: u32,
}
const _: () = assert!(size_of::<Params>() == 16);

/// The buffers and sizes of one dispatch.
pub struct KvCacheArgs<'a> {
    /// `[rows]` u32: the row of the previous step each row extends.
    pub parent: &'a wgpu::Buffer,
    /// `[rows, d_model]` this step's keys and values.
    pub k_new: &'a wgpu::Buffer,
    pub v_new: &'a wgpu::Buffer,
    /// The previous step's caches `[rows', capacity, d_model]`.
    pub k_src: &'a wgpu::Buffer,
    pub v_src: &'a wgpu::Buffer,
    /// The caches written, `[rows, capacity, d_model]`; other buffers than the sources.
    pub k_dst: &'a wgpu::Buffer,
    pub v_dst: &'a wgpu::Buffer,
    pub rows: usize,
    pub d_model: usize,
    pub capacity: usize,
    /// This step's position: positions `< t` are copied from the parents, `t` is appended.
    pub t: usize,
}

/// The compiled kernel.
pub struct KvCache {
    pipeline: Arc<wgpu::ComputePipeline>,
}

impl KvCache {
    /// Compiles the kernel (or takes it from the device's pipeline cache).
    pub async fn new(gpu: &Gpu) -> Result<Self, GpuError> {
        let pipeline = gpu.pipeline(&PipelineKey::new(NAME), SOURCE).await?;
        Ok(Self { pipeline })
    }

    /// Records one dispatch into `encoder`.
    pub fn encode(
        &self,
        gpu: &Gpu,
        encoder: &mut wgpu::CommandEncoder,
        args: &KvCacheArgs<'_>,
    ) -> Result<(), GpuError> {
        let a = args;
        let max = gpu.device.limits().max_compute_workgroups_per_dimension as usize;
        if a.rows == 0 || a.d_model == 0 || a.t >= a.capacity || 2 * a.rows > max || a.t >= max {
            return Err(GpuError::shape(
                NAME,
                format!(
                    "rows = {}, d_model = {}, t = {}, capacity = {}: need rows, d_model ≥ 1, \
                     t < capacity, 2·rows and t < {max}",
                    a.rows, a.d_model, a.t, a.capacity
                ),
            ));
        }
        let need = |len: usize| (len * 4) as u64;
        let cache = need(a.rows * a.capacity * a.d_model);
        if a.parent.size() < need(a.rows)
            || [a.k_new, a.v_new]
                .iter()
                .any(|b| b.size() < need(a.rows * a.d_model))
            || [a.k_dst, a.v_dst].iter().any(|b| b.size() < cache)
            || [a.k_src, a.v_src]
                .iter()
                .any(|b| b.size() < need(a.capacity * a.d_model))
        {
            return Err(GpuError::shape(
                NAME,
                format!(
                    "buffers too small for rows = {}, capacity = {}, d_model = {}",
                    a.rows, a.capacity, a.d_model
                ),
            ));
        }
        let params = gpu.uniform(
            "kv_cache params",
            &Params {
                rows: a.rows as u32,
                d_model: a.d_model as u32,
                capacity: a.capacity as u32,
                t: a.t as u32,
            },
        );
        gpu.dispatch(
            encoder,
            NAME,
            &self.pipeline,
            &[
                &params, a.parent, a.k_new, a.v_new, a.k_src, a.v_src, a.k_dst, a.v_dst,
            ],
            [
                (a.d_model as u32).div_ceil(WORKGROUP),
                a.t as u32 + 1,
                2 * a.rows as u32,
            ],
        );
        Ok(())
    }
}

/// Runs the kernel once on host data: `src` holds the previous step's keys (the values are a
/// copy shifted by 1000, so both halves are checked), `new` this step's. Returns the written
/// key and value caches `[rows, capacity, d_model]` (positions past `t` are zero).
pub async fn kv_cache(
    gpu: &Gpu,
    parent: &[u32],
    new: &[f32],
    src: &[f32],
    d_model: usize,
    capacity: usize,
    t: usize,
) -> Result<(Vec<f32>, Vec<f32>), GpuError> {
    let rows = parent.len();
    if new.len() != rows * d_model || !src.len().is_multiple_of(capacity * d_model.max(1)) {
        return Err(GpuError::shape(
            NAME,
            format!(
                "new has {} values, src {}: expected rows·d_model = {} and a whole number of \
                 capacity·d_model rows",
                new.len(),
                src.len(),
                rows * d_model
            ),
        ));
    }
    let src_rows = src.len() / (capacity * d_model).max(1);
    if parent.iter().any(|&p| p as usize >= src_rows) {
        return Err(GpuError::shape(
            NAME,
            format!("a parent index in {parent:?} is ≥ the {src_rows} source rows"),
        ));
    }
    let kernel = KvCache::new(gpu).await?;
    let shift = |x: &[f32]| x.iter().map(|v| v + 1000.0).collect::<Vec<_>>();
    let (k, v) = gpu
        .checked(NAME, async {
            let parent_buf = gpu.storage_from("kv_cache parent", parent);
            let k_new = gpu.storage_from("kv_cache k_new", new);
            let v_new = gpu.storage_from("kv_cache v_new", &shift(new));
            let k_src = gpu.storage_from("kv_cache k_src", src);
            let v_src = gpu.storage_from("kv_cache v_src", &shift(src));
            let k_dst = gpu.storage_zeroed("kv_cache k_dst", rows * capacity * d_model);
            let v_dst = gpu.storage_zeroed("kv_cache v_dst", rows * capacity * d_model);
            let mut encoder = gpu.device.create_command_encoder(&Default::default());
            let args = KvCacheArgs {
                parent: &parent_buf,
                k_new: &k_new,
                v_new: &v_new,
                k_src: &k_src,
                v_src: &v_src,
                k_dst: &k_dst,
                v_dst: &v_dst,
                rows,
                d_model,
                capacity,
                t,
            };
            kernel.encode(gpu, &mut encoder, &args)?;
            gpu.queue.submit([encoder.finish()]);
            Ok::<_, GpuError>((k_dst, v_dst))
        })
        .await??;
    Ok((gpu.read_f32(&k).await?, gpu.read_f32(&v).await?))
}

#[cfg(test)]
mod tests {
    use crate::gpu::testing::gpu_or_skip;
    use crate::selfcheck;

    #[test]
    fn kv_cache_matches_reference() {
        let Some(gpu) = gpu_or_skip("kv_cache_matches_reference") else {
            return;
        };
        let checks = pollster::block_on(selfcheck::check_kv_cache(&gpu, 11));
        selfcheck::assert_all_match(checks, 2 * selfcheck::KV_CACHE_SHAPES.len());
    }
}
