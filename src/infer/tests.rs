//! Engine infrastructure tests (the engine against the burn model is `tests/engine.rs`).

use crate::gpu::DispatchPool;
use crate::gpu::testing::gpu_or_skip;
use crate::kernels::matmul_q8::{Activation, GpuQ8Matrix, MatmulQ8};
use crate::weights::QuantizedMatrix;

/// Recording the same dispatches again inside a pool allocates nothing new and still computes
/// with the new uniform values.
#[test]
fn pooled_dispatches_reuse_uniforms_and_bind_groups() {
    let Some(gpu) = gpu_or_skip("pooled_dispatches_reuse_uniforms_and_bind_groups") else {
        return;
    };
    pollster::block_on(async {
        let kernel = MatmulQ8::new(&gpu, Activation::None)
            .await
            .expect("compiles");
        let w = QuantizedMatrix::quantize(&[1.0; 16], 4, 4).expect("shape");
        let w = GpuQ8Matrix::upload(&gpu, &w, &[0.0; 4]).expect("upload");
        let x = gpu.storage_from("x", &[1.0f32; 8]);
        let y = gpu.storage_zeroed("y", 8);
        let mut pool = DispatchPool::default();
        for m in [2usize, 1, 2, 1] {
            // Zeroed first: a stale uniform (the previous m) would write row 1 when m is 1.
            gpu.queue
                .write_buffer(&y, 0, bytemuck::cast_slice(&[0.0f32; 8]));
            gpu.submit("pooled", |e| {
                gpu.pooled(&mut pool, || {
                    kernel.encode(&gpu, e, &x, &w, &y, m).expect("encodes");
                })
            })
            .await
            .expect("submits");
            let out = gpu.read_f32(&y).await.expect("reads");
            let row1 = if m == 2 { 4.0 } else { 0.0 };
            assert_eq!(out, [[4.0; 4], [row1; 4]].concat(), "m = {m}");
        }
        // One uniform slot; one bind group per pipeline (the rows variant has one per m).
        assert_eq!(pool.uniforms(), 1);
        assert_eq!(pool.bind_groups(), 2);
    });
}
