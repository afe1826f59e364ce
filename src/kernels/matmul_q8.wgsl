// matmul_q8: Y = X · Wᵀ + b with int8 weights and f32 activations, optionally followed by ReLU
// (the override constant `relu`: the FFN's first layer with its bias and activation fused).
//
// Weight layout (see `weights::QuantizedMatrix`): W is [n, k] int8, four consecutive values of
// a row packed little-endian into one u32 (byte j of word c in row r holds W[r, 4c + j] as two's
// complement), with one f32 scale per output row: W[r, i] ≈ scale[r] · q[r, i]. On the GPU the
// words are word-major: word c of row r is w[c · n + r] (`GpuQ8Matrix::upload` transposes).
// k must be a multiple of 4; the Rust driver rejects other shapes before dispatch.
//
// One workgroup computes a 16 × 16 tile of Y (16 rows of X by 16 output features); one
// invocation computes one element. The k axis is walked in chunks of 16 packed words
// (64 values); each chunk of X and W is staged in workgroup memory, zero-padded past the edges
// so any m, n and k/4 work. The row scale is applied once, after the integer-weight dot product.

struct Params {
    m: u32, // rows of X and Y
    n: u32, // output features: rows of W, columns of Y
    k: u32, // input features, a multiple of 4
    _pad: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;       // [m, k]
@group(0) @binding(2) var<storage, read> w: array<u32>;       // [k/4, n] packed i8x4, word-major
@group(0) @binding(3) var<storage, read> scale: array<f32>;   // [n]
@group(0) @binding(4) var<storage, read> bias: array<f32>;    // [n]
@group(0) @binding(5) var<storage, read_write> y: array<f32>; // [m, n]

const TILE: u32 = 16u;

// Apply max(0, y) to the output (set per pipeline by the Rust driver).
override relu: bool = false;

var<workgroup> x_tile: array<array<vec4<f32>, TILE>, TILE>; // [row in tile][word in chunk]
var<workgroup> w_tile: array<array<u32, TILE>, TILE>;       // [feature in tile][word in chunk]

// The four signed bytes of `word`, lowest byte first, as f32.
fn unpack_i8x4(word: u32) -> vec4<f32> {
    let shifted = vec4<u32>(word << 24u, word << 16u, word << 8u, word);
    return vec4<f32>(bitcast<vec4<i32>>(shifted) >> vec4<u32>(24u));
}

@compute @workgroup_size(16, 16)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let row = wg.y * TILE + lid.y;
    let col = wg.x * TILE + lid.x;
    let k_words = params.k / 4u;
    // The W word this invocation stages: word (chunk + lid.y) of feature col, so neighbouring
    // invocations load neighbouring words of the word-major layout.

    var acc = 0.0;
    for (var chunk = 0u; chunk < k_words; chunk += TILE) {
        let word = chunk + lid.x;
        var xv = vec4<f32>(0.0);
        if (row < params.m && word < k_words) {
            let base = row * params.k + word * 4u;
            xv = vec4<f32>(x[base], x[base + 1u], x[base + 2u], x[base + 3u]);
        }
        x_tile[lid.y][lid.x] = xv;
        let w_word = chunk + lid.y;
        var wv = 0u;
        if (col < params.n && w_word < k_words) {
            wv = w[w_word * params.n + col];
        }
        w_tile[lid.x][lid.y] = wv;
        workgroupBarrier();

        for (var j = 0u; j < TILE; j++) {
            acc += dot(x_tile[lid.y][j], unpack_i8x4(w_tile[lid.x][j]));
        }
        workgroupBarrier();
    }

    if (row < params.m && col < params.n) {
        let value = acc * scale[col] + bias[col];
        y[row * params.n + col] = select(value, max(value, 0.0), relu);
    }
}
