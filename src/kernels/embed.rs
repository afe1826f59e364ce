//! Driver for `embed.wgsl`: int8 token embedding × √d_model + sinusoidal positions.

use super::matmul_q8::GpuQ8Matrix;
use crate::gpu::{Gpu, GpuError, PipelineKey};
use crate::positions::positional_encoding;
use crate::weights::QuantizedMatrix;
use std::sync::Arc;

/// The kernel's name: its pipeline-cache key and debug label.
pub const NAME: &str = "embed";
/// The WGSL source: the kernel, then the shared int8 helpers.
pub const SOURCE: &str = concat!(include_str!("embed.wgsl"), "\n", include_str!("int8.wgsl"));
/// Invocations per workgroup along the feature axis: the shader's `WORKGROUP` override, set
/// from here.
const WORKGROUP: u32 = 64;

/// Mirrors `struct Params` in `embed.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    rows: u32,
    d_model: u32,
    seq_len: u32,
    start_pos: u32,
    scale: f32,
    vocab: u32,
    stride: u32,
    _pad: u32,
}
const _: () = assert!(size_of::<Params>() == 32);

/// The compiled kernel.
pub struct Embed {
    pipeline: Arc<wgpu::ComputePipeline>,
}

/// The buffers and sizes of one dispatch.
pub struct EmbedArgs<'a> {
    /// `[rows]` token ids (u32).
    pub tokens: &'a wgpu::Buffer,
    /// The int8 embedding table `[vocab, d_model]` (its bias is unused).
    pub table: &'a GpuQ8Matrix,
    /// `[max_pos, d_model]` positional table ([`positional_encoding`]).
    pub positions: &'a wgpu::Buffer,
    /// `[rows, d_model]` output.
    pub x: &'a wgpu::Buffer,
    pub rows: usize,
    /// Tokens per sentence: row `r` is at position `start_pos + r % seq_len`.
    pub seq_len: usize,
    pub start_pos: usize,
}

impl Embed {
    /// Compiles the kernel (or takes it from the device's pipeline cache).
    pub async fn new(gpu: &Gpu) -> Result<Self, GpuError> {
        let key = PipelineKey::new(NAME).with("WORKGROUP", f64::from(WORKGROUP));
        let pipeline = gpu.pipeline(&key, SOURCE).await?;
        Ok(Self { pipeline })
    }

    /// Records one dispatch into `encoder`.
    pub fn encode(
        &self,
        gpu: &Gpu,
        encoder: &mut wgpu::CommandEncoder,
        args: &EmbedArgs<'_>,
    ) -> Result<(), GpuError> {
        let d = args.table.k;
        let max_pos = args.positions.size() as usize / (4 * d);
        let last_pos = args.start_pos + args.seq_len.min(args.rows);
        let max = gpu.device.limits().max_compute_workgroups_per_dimension as usize;
        if args.rows == 0 || args.seq_len == 0 || args.rows > max || last_pos > max_pos {
            return Err(GpuError::shape(
                NAME,
                format!(
                    "rows = {}, seq_len = {}, start_pos = {}: need rows and seq_len ≥ 1, rows ≤ {max} \
                 and positions < {max_pos} (the positional table's length)",
                    args.rows, args.seq_len, args.start_pos
                ),
            ));
        }
        if args.tokens.size() < args.rows as u64 * 4
            || args.x.size() < args.rows as u64 * d as u64 * 4
        {
            return Err(GpuError::shape(
                NAME,
                format!("buffers too small for {} rows of d_model = {d}", args.rows),
            ));
        }
        let params = gpu.uniform(
            "embed params",
            &Params {
                rows: args.rows as u32,
                d_model: d as u32,
                seq_len: args.seq_len as u32,
                start_pos: args.start_pos as u32,
                scale: (d as f32).sqrt(),
                vocab: args.table.n as u32,
                stride: args.table.stride as u32,
                _pad: 0,
            },
        );
        gpu.dispatch(
            encoder,
            NAME,
            &self.pipeline,
            &[
                &params,
                args.tokens,
                &args.table.packed,
                &args.table.scale,
                args.positions,
                args.x,
            ],
            [(d as u32 / 4).div_ceil(WORKGROUP), args.rows as u32, 1],
        );
        Ok(())
    }
}

/// Runs the kernel once on host data and reads the result back.
///
/// # Shapes
/// `tokens`: `[rows]` (sentences of `seq_len` tokens); returns `[rows, table.k]`.
pub async fn embed(
    gpu: &Gpu,
    tokens: &[u32],
    table: &QuantizedMatrix,
    seq_len: usize,
    start_pos: usize,
) -> Result<Vec<f32>, GpuError> {
    let d = table.k;
    let kernel = Embed::new(gpu).await?;
    let x = gpu
        .checked(NAME, async {
            let table = GpuQ8Matrix::upload(gpu, table, &vec![0.0; table.n])?;
            let positions = gpu.storage_from(
                "embed positions",
                &positional_encoding(start_pos + seq_len.max(1), d),
            );
            let token_buf = gpu.storage_from("embed tokens", tokens);
            let x = gpu.storage_zeroed("embed x", tokens.len() * d);
            let mut encoder = gpu.device.create_command_encoder(&Default::default());
            kernel.encode(
                gpu,
                &mut encoder,
                &EmbedArgs {
                    tokens: &token_buf,
                    table: &table,
                    positions: &positions,
                    x: &x,
                    rows: tokens.len(),
                    seq_len,
                    start_pos,
                },
            )?;
            gpu.queue.submit([encoder.finish()]);
            Ok::<_, GpuError>(x)
        })
        .await??;
    gpu.read_f32(&x).await
}

#[cfg(test)]
mod tests {
    use crate::gpu::testing::gpu_or_skip;
    use crate::selfcheck;

    #[test]
    fn embed_matches_reference() {
        let Some(gpu) = gpu_or_skip("embed_matches_reference") else {
            return;
        };
        let checks = pollster::block_on(selfcheck::check_embed(&gpu, 5));
        selfcheck::assert_all_match(checks, selfcheck::EMBED_SHAPES.len());
    }
}
