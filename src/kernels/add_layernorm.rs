//! Driver for `add_layernorm.wgsl`: `y = LayerNorm(x + residual) · gamma + beta`, row by row.

use crate::gpu::{Gpu, GpuError, PipelineKey};
use std::sync::Arc;

/// The kernel's name: its pipeline-cache key and debug label.
pub const NAME: &str = "add_layernorm";
/// The WGSL source.
pub const SOURCE: &str = include_str!("add_layernorm.wgsl");

/// Mirrors `struct Params` in `add_layernorm.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    rows: u32,
    d_model: u32,
    eps: f32,
    _pad: u32,
}
const _: () = assert!(size_of::<Params>() == 16);

/// The compiled kernel.
pub struct AddLayerNorm {
    pipeline: Arc<wgpu::ComputePipeline>,
}

/// The buffers of one dispatch.
pub struct AddLayerNormArgs<'a> {
    /// `[rows, d_model]`.
    pub x: &'a wgpu::Buffer,
    /// `[rows, d_model]`.
    pub residual: &'a wgpu::Buffer,
    /// `[d_model]`.
    pub gamma: &'a wgpu::Buffer,
    /// `[d_model]`.
    pub beta: &'a wgpu::Buffer,
    /// `[rows, d_model]`, a buffer other than `x` and `residual`.
    pub y: &'a wgpu::Buffer,
    pub rows: usize,
    pub d_model: usize,
    pub eps: f32,
}

impl AddLayerNorm {
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
        args: &AddLayerNormArgs<'_>,
    ) -> Result<(), GpuError> {
        let (rows, d) = (args.rows, args.d_model);
        let need = |len: usize| (len * 4) as u64;
        let max = gpu.device.limits().max_compute_workgroups_per_dimension as usize;
        if rows == 0 || d == 0 || rows > max {
            return Err(GpuError::shape(
                NAME,
                format!(
                    "rows = {rows}, d_model = {d}: both must be at least 1 and rows at most {max}"
                ),
            ));
        }
        let small = [args.x, args.residual, args.y]
            .iter()
            .any(|b| b.size() < need(rows * d))
            || [args.gamma, args.beta].iter().any(|b| b.size() < need(d));
        if small {
            return Err(GpuError::shape(
                NAME,
                format!("buffers too small for rows = {rows}, d_model = {d}"),
            ));
        }
        let params = gpu.uniform(
            "add_layernorm params",
            &Params {
                rows: rows as u32,
                d_model: d as u32,
                eps: args.eps,
                _pad: 0,
            },
        );
        gpu.dispatch(
            encoder,
            NAME,
            &self.pipeline,
            &[
                &params,
                args.x,
                args.residual,
                args.gamma,
                args.beta,
                args.y,
            ],
            [rows as u32, 1, 1],
        );
        Ok(())
    }
}

/// Runs the kernel once on host data and reads the result back.
///
/// # Shapes
/// `x`, `residual`: `[rows, d_model]`; `gamma`, `beta`: `[d_model]`; returns `[rows, d_model]`.
pub async fn add_layernorm(
    gpu: &Gpu,
    x: &[f32],
    residual: &[f32],
    gamma: &[f32],
    beta: &[f32],
    eps: f32,
) -> Result<Vec<f32>, GpuError> {
    let d = gamma.len();
    if d == 0 || beta.len() != d || x.len() != residual.len() || !x.len().is_multiple_of(d) {
        return Err(GpuError::shape(
            NAME,
            format!(
                "x has {} values, residual {}, gamma {}, beta {}: x and residual must be \
             [rows, d_model] with d_model = gamma.len() = beta.len()",
                x.len(),
                residual.len(),
                gamma.len(),
                beta.len()
            ),
        ));
    }
    let kernel = AddLayerNorm::new(gpu).await?;
    let y = gpu
        .checked(NAME, async {
            let bufs = [x, residual, gamma, beta].map(|v| gpu.storage_from("add_layernorm in", v));
            let y = gpu.storage_zeroed("add_layernorm y", x.len());
            let mut encoder = gpu.device.create_command_encoder(&Default::default());
            kernel.encode(
                gpu,
                &mut encoder,
                &AddLayerNormArgs {
                    x: &bufs[0],
                    residual: &bufs[1],
                    gamma: &bufs[2],
                    beta: &bufs[3],
                    y: &y,
                    rows: x.len() / d,
                    d_model: d,
                    eps,
                },
            )?;
            gpu.queue.submit([encoder.finish()]);
            Ok::<_, GpuError>(y)
        })
        .await??;
    gpu.read_f32(&y).await
}

#[cfg(test)]
mod tests {
    use crate::gpu::testing::gpu_or_skip;
    use crate::selfcheck;

    #[test]
    fn add_layernorm_matches_reference() {
        let Some(gpu) = gpu_or_skip("add_layernorm_matches_reference") else {
            return;
        };
        let checks = pollster::block_on(selfcheck::check_add_layernorm(&gpu, 11));
        selfcheck::assert_all_match(checks, selfcheck::ADD_LAYERNORM_SHAPES.len());
    }

    #[test]
    fn mismatched_shapes_are_rejected() {
        let Some(gpu) = gpu_or_skip("add_layernorm mismatched_shapes_are_rejected") else {
            return;
        };
        let err = pollster::block_on(super::add_layernorm(
            &gpu, &[0.0; 6], &[0.0; 6], &[1.0; 4], &[0.0; 4], 1e-5,
        ))
        .expect_err("6 values are not rows of 4");
        assert!(err.to_string().contains("d_model = gamma.len()"), "{err}");
    }
}
