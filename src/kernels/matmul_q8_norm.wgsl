// matmul_q8_norm: Y = LayerNorm(X · Wᵀ + b + residual) · gamma + beta — a sublayer's output
// projection (attention output, or the FFN's second layer) with the "residual + post-LayerNorm"
// that closes it, in one dispatch. Mean and (biased) variance as burn's LayerNorm:
// y = (v − mean) / sqrt(var + eps), two passes over the row for accuracy.
//
// W, scale and bias are matmul_q8's int8 layout (word-major, read as vec4<u32>: one word of
// four neighbouring features); here n must be a multiple of 4, so the layout has no padding.
//
// One workgroup computes whole rows: one invocation per quad of features (`quads` = n / 4, at
// most 256), for a block of `rows` rows of X (the grid's y axis covers the row blocks). The
// product is matmul_q8's (same accumulation order); each invocation then adds bias and
// residual, and the row sums for the mean and the variance are reduced in workgroup memory
// (invocation q adds up the partial sums of rows q, q + quads, …, so a workgroup narrower than
// the block, n < 32, still covers every row: four barriers in all).
//
// unpack_i8x4 is in int8.wgsl, which the driver appends to this file.

struct Params {
    m: u32,   // rows of X, residual and Y
    n: u32,   // output features (= d_model), 4 · quads
    k: u32,   // input features, a multiple of 4
    eps: f32, // LayerNorm epsilon
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;        // [m, k/4]
@group(0) @binding(2) var<storage, read> w: array<vec4<u32>>;        // [k/4, n/4] packed i8x4
@group(0) @binding(3) var<storage, read> scale: array<vec4<f32>>;    // [n/4]
@group(0) @binding(4) var<storage, read> bias: array<vec4<f32>>;     // [n/4]
@group(0) @binding(5) var<storage, read> residual: array<vec4<f32>>; // [m, n/4]
@group(0) @binding(6) var<storage, read> gamma: array<vec4<f32>>;    // [n/4]
@group(0) @binding(7) var<storage, read> beta: array<vec4<f32>>;     // [n/4]
@group(0) @binding(8) var<storage, read_write> y: array<vec4<f32>>;  // [m, n/4]

// Array sizes, so compile-time constants; tests in matmul_q8_norm.rs check them against the
// Rust driver (ROWS_MAX = matmul_q8's `ROWS_MAX`, 4 · QUADS_MAX = `N_MAX`).
const ROWS_MAX: u32 = 8u;
const QUADS_MAX: u32 = 256u;

// Rows per block, 1..=ROWS_MAX (one pipeline per count: constant loop bounds).
override rows: u32 = 1u;
// n / 4: the workgroup size (one pipeline per model width).
override quads: u32 = 64u;

var<workgroup> partial: array<array<f32, QUADS_MAX>, ROWS_MAX>;
var<workgroup> row_total: array<f32, ROWS_MAX>;

// Sums partial[r][0..quads] into row_total[r] for the block's rows, visible to every invocation.
fn total_rows(quad: u32, block: u32) {
    workgroupBarrier();
    for (var r = quad; r < block; r += quads) {
        var sum = 0.0;
        for (var i = 0u; i < quads; i++) {
            sum += partial[r][i];
        }
        row_total[r] = sum;
    }
    workgroupBarrier();
}

@compute @workgroup_size(quads)
fn main(@builtin(local_invocation_id) local: vec3<u32>, @builtin(workgroup_id) wg: vec3<u32>) {
    let quad = local.x;
    let k_words = params.k / 4u;
    let block = min(rows, ROWS_MAX);
    let row0 = wg.y * block;
    var acc: array<vec4<f32>, ROWS_MAX>;
    for (var word = 0u; word < k_words; word++) {
        let packed = w[word * quads + quad];
        let w0 = unpack_i8x4(packed.x);
        let w1 = unpack_i8x4(packed.y);
        let w2 = unpack_i8x4(packed.z);
        let w3 = unpack_i8x4(packed.w);
        for (var r = 0u; r < block; r++) {
            // Rows past m (the last block) recompute row m − 1 and are not stored.
            let xv = x[min(row0 + r, params.m - 1u) * k_words + word];
            acc[r] += vec4<f32>(dot(xv, w0), dot(xv, w1), dot(xv, w2), dot(xv, w3));
        }
    }

    let s = scale[quad];
    let b = bias[quad];
    var v: array<vec4<f32>, ROWS_MAX>;
    for (var r = 0u; r < block; r++) {
        let row = min(row0 + r, params.m - 1u);
        v[r] = acc[r] * s + b + residual[row * quads + quad];
        partial[r][quad] = v[r].x + v[r].y + v[r].z + v[r].w;
    }
    total_rows(quad, block);
    let n = f32(params.n);
    var mean: array<f32, ROWS_MAX>;
    for (var r = 0u; r < block; r++) {
        mean[r] = row_total[r] / n;
        let d = v[r] - mean[r];
        partial[r][quad] = dot(d, d);
    }
    total_rows(quad, block);
    for (var r = 0u; r < block; r++) {
        let row = row0 + r;
        if (row < params.m) {
            let inv_std = inverseSqrt(row_total[r] / n + params.eps);
            y[row * quads + quad] = (v[r] - mean[r]) * inv_std * gamma[quad] + beta[quad];
        }
    }
}
