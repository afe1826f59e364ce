// matmul_q8_rows: Y = X · Wᵀ + b with int8 weights, optionally followed by ReLU: the same
// product, layout and bindings as matmul_q8, for the few rows of a decoder step (m ≤ 8, one
// row per beam). One invocation computes one output feature for every row: it streams its
// weight row once, four int8 values per word, into m accumulators; with the word-major layout
// neighbouring invocations load neighbouring words. No workgroup memory and no
// barriers: with few rows the tiled kernel's barriers cost more than its arithmetic, most of
// all on CPU implementations (lavapipe, SwiftShader). The sum runs over k in the same order as
// matmul_q8's, so both kernels give the same result for the same row.

struct Params {
    m: u32, // rows of X and Y: equal to the override `rows` (the Rust driver checks)
    n: u32, // output features: rows of W, columns of Y
    k: u32, // input features, a multiple of 4
    _pad: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>; // [m, k/4]
@group(0) @binding(2) var<storage, read> w: array<u32>;       // [k/4, n] packed i8x4, word-major
@group(0) @binding(3) var<storage, read> scale: array<f32>;   // [n]
@group(0) @binding(4) var<storage, read> bias: array<f32>;    // [n]
@group(0) @binding(5) var<storage, read_write> y: array<f32>; // [m, n]

const ROWS_MAX: u32 = 8u;

// Apply max(0, y) to the output (set per pipeline by the Rust driver).
override relu: bool = false;
// Rows of X, 1..=ROWS_MAX: one pipeline per count, so the row loops have constant bounds and
// the accumulators stay in registers (a runtime bound makes CPU compilers spill them).
override rows: u32 = 1u;

// The four signed bytes of `word`, lowest byte first, as f32.
fn unpack_i8x4(word: u32) -> vec4<f32> {
    let shifted = vec4<u32>(word << 24u, word << 16u, word << 8u, word);
    return vec4<f32>(bitcast<vec4<i32>>(shifted) >> vec4<u32>(24u));
}

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let col = gid.x;
    if (col >= params.n) {
        return;
    }
    let k_words = params.k / 4u;
    let m = min(rows, ROWS_MAX);
    var acc: array<f32, ROWS_MAX>;
    for (var word = 0u; word < k_words; word++) {
        let wv = unpack_i8x4(w[word * params.n + col]);
        for (var r = 0u; r < m; r++) {
            acc[r] += dot(x[r * k_words + word], wv);
        }
    }
    let s = scale[col];
    let b = bias[col];
    for (var r = 0u; r < m; r++) {
        let value = acc[r] * s + b;
        y[r * params.n + col] = select(value, max(value, 0.0), relu);
    }
}
