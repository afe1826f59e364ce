// matmul_q8: Y = X · Wᵀ + b with int8 weights and f32 activations, optionally followed by ReLU
// (the override constant `relu`: the FFN's first layer with its bias and activation fused).
//
// Weight layout (see `weights::QuantizedMatrix`): W is [n, k] int8, four consecutive values of
// a row packed little-endian into one u32 (byte j of word c in row r holds W[r, 4c + j] as two's
// complement), with one f32 scale per output row: W[r, i] ≈ scale[r] · q[r, i]. On the GPU the
// words are word-major and the features padded to `stride` = n rounded up to 4: word c of row r
// is w[c · stride + r], padding words, scales and biases are zero (`GpuQ8Matrix::upload`). Read
// as vec4<u32>, one load brings word c of four neighbouring features. k must be a multiple of 4;
// the Rust driver rejects other shapes before dispatch.
//
// One invocation computes four neighbouring output features for a block of `rows` rows of X
// (grid: x over the feature quads, y over the row blocks): it streams its four weight columns
// once and keeps 4 × rows accumulators in registers. No workgroup memory and no barriers, and
// each X value loaded is used four times: measured on lavapipe this is 2–3× faster than one
// feature per invocation and 6–10× faster than a 16 × 16 shared-memory tile, for one row as
// for 640. The sum runs over k in the same order for every row count, so a row's result does
// not depend on the batch it is in. The row scale is applied once, after the integer dot product.
//
// Y may sit inside a larger buffer: row r starts at y_offset + r · n.
//
// unpack_i8x4 is in int8.wgsl, which the driver appends to this file.

struct Params {
    m: u32,        // rows of X and Y
    n: u32,        // output features: rows of W, columns of Y
    k: u32,        // input features, a multiple of 4
    y_offset: u32, // where Y starts in `y`, in elements
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;  // [m, k/4]
@group(0) @binding(2) var<storage, read> w: array<vec4<u32>>;  // [k/4, stride/4] packed i8x4
@group(0) @binding(3) var<storage, read> scale: array<vec4<f32>>; // [stride/4]
@group(0) @binding(4) var<storage, read> bias: array<vec4<f32>>;  // [stride/4]
@group(0) @binding(5) var<storage, read_write> y: array<f32>;  // [y_offset + m · n]

// Sizes the accumulator array, so a compile-time constant; equals `ROWS_MAX` in matmul_q8.rs (a
// test there checks).
const ROWS_MAX: u32 = 8u;

// Apply max(0, y) to the output (set per pipeline by the Rust driver).
override relu: bool = false;
// Rows per block, 1..=ROWS_MAX: one pipeline per count, so the row loops have constant bounds
// and the accumulators stay in registers (a runtime bound makes CPU compilers spill them).
override rows: u32 = 1u;

// Invocations per workgroup: set by the Rust driver from its `WORKGROUP` constant. No default,
// so a pipeline created without it fails instead of running with a stale copy.
override WORKGROUP: u32;

@compute @workgroup_size(WORKGROUP)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let quad = gid.x;
    let quads = (params.n + 3u) / 4u;
    if (quad >= quads) {
        return;
    }
    let k_words = params.k / 4u;
    let block = min(rows, ROWS_MAX);
    let row0 = gid.y * block;
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
    for (var r = 0u; r < block; r++) {
        let row = row0 + r;
        if (row >= params.m) {
            break;
        }
        var value = acc[r] * s + b;
        if (relu) {
            value = max(value, vec4<f32>(0.0));
        }
        let base = params.y_offset + row * params.n + 4u * quad;
        for (var j = 0u; j < 4u; j++) {
            if (4u * quad + j < params.n) {
                y[base + j] = value[j];
            }
        }
    }
}
