// add_layernorm: y = LayerNorm(x + residual) · gamma + beta over the last dimension: the
// "residual + post-LayerNorm" that closes every Transformer sublayer, fused into one pass over
// memory. Mean and (biased) variance as burn's LayerNorm: y = (v − mean) / sqrt(var + eps).
//
// One workgroup normalises one row of d_model values; its 64 invocations stride over the row
// and reduce the sum, then the sum of squared deviations (two passes, for accuracy), in
// workgroup memory. Any d_model works; rows ≤ the adapter's workgroups-per-dimension limit
// (the Rust driver checks).

struct Params {
    rows: u32,    // rows of x, residual and y
    d_model: u32, // row length
    eps: f32,     // LayerNorm epsilon
    _pad: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;        // [rows, d_model]
@group(0) @binding(2) var<storage, read> residual: array<f32>; // [rows, d_model]
@group(0) @binding(3) var<storage, read> gamma: array<f32>;    // [d_model]
@group(0) @binding(4) var<storage, read> beta: array<f32>;     // [d_model]
@group(0) @binding(5) var<storage, read_write> y: array<f32>;  // [rows, d_model]

const WG: u32 = 64u;

var<workgroup> partial: array<f32, WG>;

// The sum of `value` over the workgroup, returned to every invocation.
fn workgroup_sum(lid: u32, value: f32) -> f32 {
    partial[lid] = value;
    workgroupBarrier();
    for (var stride = WG / 2u; stride > 0u; stride >>= 1u) {
        if (lid < stride) {
            partial[lid] += partial[lid + stride];
        }
        workgroupBarrier();
    }
    let total = partial[0];
    workgroupBarrier();
    return total;
}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) local: vec3<u32>) {
    let lid = local.x;
    let d = params.d_model;
    let base = wg.x * d;

    var sum = 0.0;
    for (var i = lid; i < d; i += WG) {
        sum += x[base + i] + residual[base + i];
    }
    let mean = workgroup_sum(lid, sum) / f32(d);

    var squares = 0.0;
    for (var i = lid; i < d; i += WG) {
        let v = x[base + i] + residual[base + i] - mean;
        squares += v * v;
    }
    let inv_std = inverseSqrt(workgroup_sum(lid, squares) / f32(d) + params.eps);

    for (var i = lid; i < d; i += WG) {
        let v = x[base + i] + residual[base + i] - mean;
        y[base + i] = v * inv_std * gamma[i] + beta[i];
    }
}
