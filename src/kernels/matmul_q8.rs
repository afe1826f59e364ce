//! Driver for `matmul_q8.wgsl`: `Y = X · Wᵀ + b` with int8 weights (layout in [`crate::weights`]).
//!
//! One shader serves every row count: an invocation computes four output features for a block
//! of up to [`ROWS_MAX`] rows, with no workgroup memory and no barriers. There is one pipeline
//! per block size (1..=[`ROWS_MAX`]), so a decoder step with `m ≤ 8` beams runs one block of
//! exactly `m` rows and the encoder runs blocks of 8.
//!
//! `k` must be a multiple of 4 (the packed layout); other shapes are rejected with
//! [`GpuError::Shape`] before anything is dispatched. Any `m ≥ 1` and `n ≥ 1` work.

use crate::gpu::{Gpu, GpuError, PipelineKey};
use crate::weights::QuantizedMatrix;
use std::sync::Arc;

/// The kernel's name: its pipeline-cache key and debug label.
pub const NAME: &str = "matmul_q8";
/// The WGSL source: the kernel, then the shared int8 helpers.
pub const SOURCE: &str = concat!(
    include_str!("matmul_q8.wgsl"),
    "\n",
    include_str!("int8.wgsl")
);
/// The most rows one invocation computes (`ROWS_MAX` in the shader, which sizes an array with
/// it; a test checks the two agree).
pub const ROWS_MAX: usize = 8;
/// Invocations per workgroup: the shader's `WORKGROUP` override, set from here.
const WORKGROUP: u32 = 64;

/// Mirrors `struct Params` in `matmul_q8.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    m: u32,
    n: u32,
    k: u32,
    y_offset: u32,
}
const _: () = assert!(size_of::<Params>() == 16);

/// An int8 weight matrix and its bias, resident on the GPU. The packed words are stored
/// word-major, `[k/4, stride]` (the transpose of [`QuantizedMatrix::packed`]'s `[n, k/4]`, with
/// the features padded with zeros to `stride`, a multiple of 4), so that one `vec4<u32>` load
/// brings the same word of four neighbouring features and neighbouring invocations load
/// neighbouring vectors. Scale and bias are padded alike.
pub struct GpuQ8Matrix {
    /// Output features.
    pub n: usize,
    /// Input features (a multiple of 4).
    pub k: usize,
    /// `n` rounded up to a multiple of 4: the row length of the word-major layout.
    pub stride: usize,
    pub(crate) packed: wgpu::Buffer,
    pub(crate) scale: wgpu::Buffer,
    pub(crate) bias: wgpu::Buffer,
}

impl GpuQ8Matrix {
    /// Uploads `w` (`[n, k]`) and `bias` (`[n]`).
    pub fn upload(gpu: &Gpu, w: &QuantizedMatrix, bias: &[f32]) -> Result<Self, GpuError> {
        if bias.len() != w.n {
            return Err(GpuError::shape(
                NAME,
                format!(
                    "bias has {} values but the weight has {} output features",
                    bias.len(),
                    w.n
                ),
            ));
        }
        if w.n == 0 || w.k == 0 || !w.k.is_multiple_of(4) || w.packed.len() != w.n * w.k / 4 {
            return Err(GpuError::shape(
                NAME,
                format!(
                    "weight [{}, {}] with {} packed words: need n, k ≥ 1, k a multiple of 4 \
                     and n · k / 4 words",
                    w.n,
                    w.k,
                    w.packed.len()
                ),
            ));
        }
        // Word-major on the GPU: word c of every row, then word c + 1, … so that neighbouring
        // invocations (neighbouring output features) read neighbouring words.
        let words = w.k / 4;
        let stride = w.n.next_multiple_of(4);
        let mut word_major = vec![0u32; words * stride];
        for (row, chunk) in w.packed.chunks_exact(words).enumerate() {
            for (c, &word) in chunk.iter().enumerate() {
                word_major[c * stride + row] = word;
            }
        }
        let padded = |values: &[f32]| {
            let mut v = values.to_vec();
            v.resize(stride, 0.0);
            v
        };
        Ok(Self {
            n: w.n,
            k: w.k,
            stride,
            packed: gpu.storage_from("matmul_q8 weight", &word_major),
            scale: gpu.storage_from("matmul_q8 scale", &padded(&w.scale)),
            bias: gpu.storage_from("matmul_q8 bias", &padded(bias)),
        })
    }
}

/// What follows the matrix product and bias.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activation {
    /// Nothing: `y = x · Wᵀ + b`.
    None,
    /// `y = max(0, x · Wᵀ + b)` (the feed-forward block's first layer).
    Relu,
}

/// The compiled kernel.
pub struct MatmulQ8 {
    /// One pipeline per row-block size 1, 2, …, `ROWS_MAX`.
    pipelines: Vec<Arc<wgpu::ComputePipeline>>,
}

impl MatmulQ8 {
    /// Compiles the kernel for `activation` (or takes it from the device's pipeline cache).
    pub async fn new(gpu: &Gpu, activation: Activation) -> Result<Self, GpuError> {
        let relu = f64::from(u8::from(activation == Activation::Relu));
        let mut pipelines = Vec::with_capacity(ROWS_MAX);
        for rows in 1..=ROWS_MAX {
            let key = PipelineKey::new(NAME)
                .with("WORKGROUP", f64::from(WORKGROUP))
                .with("relu", relu)
                .with("rows", rows as f64);
            pipelines.push(gpu.pipeline(&key, SOURCE).await?);
        }
        Ok(Self { pipelines })
    }

    /// Records one dispatch computing `y[m, n] = x[m, k] · Wᵀ + b` into `encoder`.
    ///
    /// # Shapes
    /// - `x`: at least `m · k` f32, `y`: at least `m · n` f32.
    pub fn encode(
        &self,
        gpu: &Gpu,
        encoder: &mut wgpu::CommandEncoder,
        x: &wgpu::Buffer,
        w: &GpuQ8Matrix,
        y: &wgpu::Buffer,
        m: usize,
    ) -> Result<(), GpuError> {
        self.encode_at(gpu, encoder, x, w, y, 0, m)
    }

    /// [`MatmulQ8::encode`] with `Y` starting `y_offset` elements into `y`.
    #[allow(clippy::too_many_arguments)]
    pub fn encode_at(
        &self,
        gpu: &Gpu,
        encoder: &mut wgpu::CommandEncoder,
        x: &wgpu::Buffer,
        w: &GpuQ8Matrix,
        y: &wgpu::Buffer,
        y_offset: usize,
        m: usize,
    ) -> Result<(), GpuError> {
        check_shape(m, w.n, w.k)?;
        let need = |len: usize| len as u64 * 4;
        if x.size() < need(m * w.k) || y.size() < need(y_offset + m * w.n) {
            return Err(GpuError::shape(
                NAME,
                format!(
                    "buffers too small for m={m}, n={}, k={} at offset {y_offset}: x has {} \
                     bytes, y has {} bytes",
                    w.n,
                    w.k,
                    x.size(),
                    y.size()
                ),
            ));
        }
        let block = m.min(ROWS_MAX);
        let groups = [
            (w.stride as u32 / 4).div_ceil(WORKGROUP),
            m.div_ceil(block) as u32,
        ];
        let max = gpu.device.limits().max_compute_workgroups_per_dimension;
        if groups.iter().any(|&g| g > max) || y_offset > u32::MAX as usize {
            return Err(GpuError::shape(
                NAME,
                format!(
                    "m={m}, n={} needs {groups:?} workgroups; this adapter allows {max} per dimension",
                    w.n
                ),
            ));
        }
        let params = gpu.uniform(
            "matmul_q8 params",
            &Params {
                m: m as u32,
                n: w.n as u32,
                k: w.k as u32,
                y_offset: y_offset as u32,
            },
        );
        gpu.dispatch(
            encoder,
            NAME,
            &self.pipelines[block - 1],
            &[&params, x, &w.packed, &w.scale, &w.bias, y],
            [groups[0], groups[1], 1],
        );
        Ok(())
    }
}

/// Runs the kernel once on host data and reads the result back: `x[m, k] · Wᵀ + bias`, then
/// `activation`.
pub async fn matmul_q8(
    gpu: &Gpu,
    x: &[f32],
    m: usize,
    w: &QuantizedMatrix,
    bias: &[f32],
    activation: Activation,
) -> Result<Vec<f32>, GpuError> {
    check_shape(m, w.n, w.k)?;
    if x.len() != m * w.k {
        return Err(GpuError::shape(
            NAME,
            format!(
                "x has {} values, expected m·k = {m}·{} = {}",
                x.len(),
                w.k,
                m * w.k
            ),
        ));
    }
    let kernel = MatmulQ8::new(gpu, activation).await?;
    let y = gpu
        .checked(NAME, async {
            let weights = GpuQ8Matrix::upload(gpu, w, bias)?;
            let x = gpu.storage_from("matmul_q8 x", x);
            let y = gpu.storage_zeroed("matmul_q8 y", m * w.n);
            let mut encoder = gpu.device.create_command_encoder(&Default::default());
            kernel.encode(gpu, &mut encoder, &x, &weights, &y, m)?;
            gpu.queue.submit([encoder.finish()]);
            Ok::<_, GpuError>(y)
        })
        .await??;
    gpu.read_f32(&y).await
}

pub(crate) fn check_shape(m: usize, n: usize, k: usize) -> Result<(), GpuError> {
    if !k.is_multiple_of(4) {
        return Err(GpuError::shape(
            NAME,
            format!(
                "k = {k} is not a multiple of 4; int8 weights are packed four per u32 \
             (pad the input features to a multiple of 4)"
            ),
        ));
    }
    if m == 0 || n == 0 || k == 0 {
        return Err(GpuError::shape(
            NAME,
            format!("empty problem m={m}, n={n}, k={k}"),
        ));
    }
    if [m, n, k].iter().any(|&d| d > u32::MAX as usize / 4) {
        return Err(GpuError::shape(
            NAME,
            format!("m={m}, n={n}, k={k} is too large"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::testing::gpu_or_skip;
    use crate::kernels::wgsl_const;
    use crate::selfcheck;

    #[test]
    fn wgsl_constants_match_the_driver() {
        assert_eq!(wgsl_const(SOURCE, "ROWS_MAX"), Some(ROWS_MAX));
    }

    #[test]
    fn matmul_q8_matches_reference() {
        let Some(gpu) = gpu_or_skip("matmul_q8_matches_reference") else {
            return;
        };
        let checks = pollster::block_on(selfcheck::check_matmul_q8(&gpu, 7));
        selfcheck::assert_all_match(checks, selfcheck::MATMUL_Q8_SHAPES.len());
    }

    #[test]
    fn k_not_multiple_of_4_is_rejected() {
        let Some(gpu) = gpu_or_skip("k_not_multiple_of_4_is_rejected") else {
            return;
        };
        // A hand-built matrix: `QuantizedMatrix::quantize` already refuses such shapes.
        let w = QuantizedMatrix {
            n: 2,
            k: 6,
            packed: vec![0; 3],
            scale: vec![1.0; 2],
        };
        let err = pollster::block_on(matmul_q8(
            &gpu,
            &[0.0; 6],
            1,
            &w,
            &[0.0; 2],
            Activation::None,
        ))
        .expect_err("k = 6 must be rejected");
        assert!(err.to_string().contains("not a multiple of 4"), "{err}");
        let err = pollster::block_on(matmul_q8(
            &gpu,
            &[0.0; 3],
            1,
            &QuantizedMatrix::quantize(&[0.0; 8], 2, 4).expect("valid shape"),
            &[0.0; 2],
            Activation::None,
        ))
        .expect_err("x of the wrong length must be rejected");
        assert!(err.to_string().contains("x has 3 values"), "{err}");
    }

    #[test]
    fn pipeline_is_compiled_once_per_constant() {
        let Some(gpu) = gpu_or_skip("pipeline_is_compiled_once_per_constant") else {
            return;
        };
        pollster::block_on(async {
            let a = MatmulQ8::new(&gpu, Activation::None)
                .await
                .expect("compiles");
            let b = MatmulQ8::new(&gpu, Activation::None)
                .await
                .expect("compiles");
            let relu = MatmulQ8::new(&gpu, Activation::Relu)
                .await
                .expect("compiles");
            assert!(Arc::ptr_eq(&a.pipelines[0], &b.pipelines[0]));
            assert!(!Arc::ptr_eq(&a.pipelines[0], &relu.pipelines[0]));
        });
        // One pipeline per row-block size, each without and with ReLU.
        assert_eq!(gpu.pipelines().len(), 2 * ROWS_MAX);
    }
}
