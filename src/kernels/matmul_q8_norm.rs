//! Driver for `matmul_q8_norm.wgsl`: `Y = LayerNorm(X · Wᵀ + b + residual) · gamma + beta`, the
//! output projection of a sublayer and the residual + post-LayerNorm that closes it, in one
//! dispatch. The weights are a [`GpuQ8Matrix`] as for `matmul_q8`; `n` (the model width) must be
//! a multiple of 4 and at most [`N_MAX`].

use super::matmul_q8::{GpuQ8Matrix, ROWS_MAX, check_shape};
use crate::gpu::{Gpu, GpuError, PipelineKey};
use crate::weights::QuantizedMatrix;
use std::sync::Arc;

/// The kernel's name: its pipeline-cache key and debug label.
pub const NAME: &str = "matmul_q8_norm";
/// The WGSL source: the kernel, then the shared int8 helpers.
pub const SOURCE: &str = concat!(
    include_str!("matmul_q8_norm.wgsl"),
    "\n",
    include_str!("int8.wgsl")
);
/// The widest row one workgroup normalises (4 × `QUADS_MAX` in the shader, which sizes an array
/// with it; a test checks the two agree), so the widest `d_model` a config may have. The
/// shader's `ROWS_MAX` is matmul_q8's [`ROWS_MAX`].
pub const N_MAX: usize = crate::config::MAX_D_MODEL;

/// Mirrors `struct Params` in `matmul_q8_norm.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    m: u32,
    n: u32,
    k: u32,
    eps: f32,
}
const _: () = assert!(size_of::<Params>() == 16);

/// The compiled kernel for one output width.
pub struct MatmulQ8Norm {
    n: usize,
    /// One pipeline per row-block size 1, 2, …, `ROWS_MAX`.
    pipelines: Vec<Arc<wgpu::ComputePipeline>>,
}

/// The buffers and sizes of one dispatch.
pub struct MatmulQ8NormArgs<'a> {
    /// `[m, k]`.
    pub x: &'a wgpu::Buffer,
    /// `[n, k]` int8 weights and their bias.
    pub w: &'a GpuQ8Matrix,
    /// `[m, n]`.
    pub residual: &'a wgpu::Buffer,
    /// `[n]`.
    pub gamma: &'a wgpu::Buffer,
    /// `[n]`.
    pub beta: &'a wgpu::Buffer,
    /// `[m, n]` output, a buffer other than `x` and `residual`.
    pub y: &'a wgpu::Buffer,
    pub m: usize,
    pub eps: f32,
}

impl MatmulQ8Norm {
    /// Compiles the kernel for rows of `n` features (or takes it from the device's cache).
    pub async fn new(gpu: &Gpu, n: usize) -> Result<Self, GpuError> {
        if n == 0 || !n.is_multiple_of(4) || n > N_MAX {
            return Err(GpuError::shape(
                NAME,
                format!(
                    "rows of {n} features: the kernel needs a multiple of 4, at most {N_MAX} \
                     (choose d_model accordingly)"
                ),
            ));
        }
        let mut pipelines = Vec::with_capacity(ROWS_MAX);
        for rows in 1..=ROWS_MAX {
            let key = PipelineKey::new(NAME)
                .with("quads", (n / 4) as f64)
                .with("rows", rows as f64);
            pipelines.push(gpu.pipeline(&key, SOURCE).await?);
        }
        Ok(Self { n, pipelines })
    }

    /// Records one dispatch into `encoder`.
    pub fn encode(
        &self,
        gpu: &Gpu,
        encoder: &mut wgpu::CommandEncoder,
        args: &MatmulQ8NormArgs<'_>,
    ) -> Result<(), GpuError> {
        let (m, w) = (args.m, args.w);
        check_shape(m, w.n, w.k)?;
        if w.n != self.n {
            return Err(GpuError::shape(
                NAME,
                format!(
                    "a weight with {} output features; this pipeline normalises rows of {}",
                    w.n, self.n
                ),
            ));
        }
        let need = |len: usize| len as u64 * 4;
        let small = args.x.size() < need(m * w.k)
            || [args.residual, args.y]
                .iter()
                .any(|b| b.size() < need(m * w.n))
            || [args.gamma, args.beta].iter().any(|b| b.size() < need(w.n));
        let block = m.min(ROWS_MAX);
        let groups = m.div_ceil(block) as u32;
        let max = gpu.device.limits().max_compute_workgroups_per_dimension;
        if small || groups > max {
            return Err(GpuError::shape(
                NAME,
                format!(
                    "m={m}, n={}, k={}: buffers too small or more than {max} row blocks",
                    w.n, w.k
                ),
            ));
        }
        let params = gpu.uniform(
            "matmul_q8_norm params",
            &Params {
                m: m as u32,
                n: w.n as u32,
                k: w.k as u32,
                eps: args.eps,
            },
        );
        gpu.dispatch(
            encoder,
            NAME,
            &self.pipelines[block - 1],
            &[
                &params,
                args.x,
                &w.packed,
                &w.scale,
                &w.bias,
                args.residual,
                args.gamma,
                args.beta,
                args.y,
            ],
            [1, groups, 1],
        );
        Ok(())
    }
}

/// Runs the kernel once on host data: `LayerNorm(x[m, k] · Wᵀ + bias + residual) · gamma + beta`.
#[allow(clippy::too_many_arguments)]
pub async fn matmul_q8_norm(
    gpu: &Gpu,
    x: &[f32],
    m: usize,
    w: &QuantizedMatrix,
    bias: &[f32],
    residual: &[f32],
    gamma: &[f32],
    beta: &[f32],
    eps: f32,
) -> Result<Vec<f32>, GpuError> {
    check_shape(m, w.n, w.k)?;
    if x.len() != m * w.k || residual.len() != m * w.n || gamma.len() != w.n || beta.len() != w.n {
        return Err(GpuError::shape(
            NAME,
            format!(
                "x has {} values, residual {}, gamma {}, beta {}: need [m, k], [m, n], [n], [n] \
                 with m={m}, n={}, k={}",
                x.len(),
                residual.len(),
                gamma.len(),
                beta.len(),
                w.n,
                w.k
            ),
        ));
    }
    let kernel = MatmulQ8Norm::new(gpu, w.n).await?;
    let y = gpu
        .checked(NAME, async {
            let weights = GpuQ8Matrix::upload(gpu, w, bias)?;
            let [x, residual, gamma, beta] =
                [x, residual, gamma, beta].map(|v| gpu.storage_from("matmul_q8_norm in", v));
            let y = gpu.storage_zeroed("matmul_q8_norm y", m * w.n);
            let mut encoder = gpu.device.create_command_encoder(&Default::default());
            kernel.encode(
                gpu,
                &mut encoder,
                &MatmulQ8NormArgs {
                    x: &x,
                    w: &weights,
                    residual: &residual,
                    gamma: &gamma,
                    beta: &beta,
                    y: &y,
                    m,
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
    use super::{N_MAX, ROWS_MAX, SOURCE};
    use crate::gpu::testing::gpu_or_skip;
    use crate::kernels::wgsl_const;
    use crate::selfcheck;

    #[test]
    fn wgsl_constants_match_the_driver() {
        assert_eq!(wgsl_const(SOURCE, "ROWS_MAX"), Some(ROWS_MAX));
        assert_eq!(wgsl_const(SOURCE, "QUADS_MAX").map(|q| 4 * q), Some(N_MAX));
    }

    #[test]
    fn matmul_q8_norm_matches_reference() {
        let Some(gpu) = gpu_or_skip("matmul_q8_norm_matches_reference") else {
            return;
        };
        let checks = pollster::block_on(selfcheck::check_matmul_q8_norm(&gpu, 11));
        selfcheck::assert_all_match(checks, selfcheck::MATMUL_Q8_NORM_SHAPES.len());
    }

    #[test]
    fn widths_the_kernel_cannot_normalise_are_rejected() {
        let Some(gpu) = gpu_or_skip("matmul_q8_norm widths") else {
            return;
        };
        for n in [6, 2048] {
            let err = pollster::block_on(super::MatmulQ8Norm::new(&gpu, n))
                .err()
                .expect("must be rejected");
            assert!(err.to_string().contains("multiple of 4, at most"), "{err}");
        }
    }
}
