// attention: scaled dot-product attention of projected queries over projected keys and values,
// all heads at once: context = softmax(q kᵀ / √d_head + mask) v, per batch row and head. The
// projections before and after are matmul_q8 dispatches.
//
// Heads are interleaved in the model dimension (head h owns features h·d_head … (h+1)·d_head),
// as burn's reshape [batch, len, n_heads, d_head] lays them out. Masked keys get a score of
// −1e9, as the burn model: keys at or past key_len[b] (source padding), and with `causal`,
// keys after the query's position q_offset + i. Keys and values may be a KV cache with room for
// kv_stride positions per batch row, of which the first n_keys are used.
//
// One workgroup of 64 invocations computes one (query, head, batch row): the scores go to
// workgroup memory (n_keys ≤ MAX_KEYS), two reductions give the softmax, then the invocations
// share the d_head output features. With `store_weights` = 1, the attention weights are written
// out too (for the cross-attention heatmap).

struct Params {
    batch: u32,
    n_queries: u32, // queries per batch row
    n_keys: u32,    // keys in use per batch row, ≤ MAX_KEYS
    kv_stride: u32, // key/value rows reserved per batch row (≥ n_keys)
    d_model: u32,
    n_heads: u32,
    q_offset: u32,  // position of query 0 (decoder steps: the step index)
    causal: u32,    // 1: hide keys after the query's position
    store_weights: u32, // 1: write the attention weights
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> q: array<f32>;        // [batch, n_queries, d_model]
@group(0) @binding(2) var<storage, read> k: array<f32>;        // [batch, kv_stride, d_model]
@group(0) @binding(3) var<storage, read> v: array<f32>;        // [batch, kv_stride, d_model]
@group(0) @binding(4) var<storage, read> key_len: array<u32>;  // [batch]
@group(0) @binding(5) var<storage, read_write> weights: array<f32>; // [batch, n_heads, n_queries, n_keys]; ≥ 1 element
@group(0) @binding(6) var<storage, read_write> context: array<f32>; // [batch, n_queries, d_model]

const WG: u32 = 64u;
const MAX_KEYS: u32 = 512u;
const MASKED: f32 = -1.0e9;

var<workgroup> scores: array<f32, MAX_KEYS>;
var<workgroup> reduce_buf: array<f32, WG>;

fn reduce(lid: u32, value: f32, is_max: bool) -> f32 {
    reduce_buf[lid] = value;
    workgroupBarrier();
    for (var stride = WG / 2u; stride > 0u; stride >>= 1u) {
        if (lid < stride) {
            let other = reduce_buf[lid + stride];
            reduce_buf[lid] = select(reduce_buf[lid] + other, max(reduce_buf[lid], other), is_max);
        }
        workgroupBarrier();
    }
    let result = reduce_buf[0];
    workgroupBarrier();
    return result;
}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) local: vec3<u32>) {
    let i = wg.x;
    let h = wg.y;
    let b = wg.z;
    let lid = local.x;
    let d = params.d_model;
    let d_head = d / params.n_heads;
    let q_base = (b * params.n_queries + i) * d + h * d_head;
    let scale = inverseSqrt(f32(d_head));
    let n = params.n_keys;

    var local_max = -3.0e38;
    for (var j = lid; j < n; j += WG) {
        var s = MASKED;
        let hidden = j >= key_len[b] || (params.causal == 1u && j > params.q_offset + i);
        if (!hidden) {
            let k_base = (b * params.kv_stride + j) * d + h * d_head;
            var dot = 0.0;
            for (var c = 0u; c < d_head; c++) {
                dot += q[q_base + c] * k[k_base + c];
            }
            s = dot * scale;
        }
        scores[j] = s;
        local_max = max(local_max, s);
    }
    let row_max = reduce(lid, local_max, true);
    var local_sum = 0.0;
    for (var j = lid; j < n; j += WG) {
        let e = exp(scores[j] - row_max);
        scores[j] = e;
        local_sum += e;
    }
    let inv_sum = 1.0 / reduce(lid, local_sum, false);
    for (var j = lid; j < n; j += WG) {
        scores[j] *= inv_sum;
        if (params.store_weights == 1u) {
            weights[((b * params.n_heads + h) * params.n_queries + i) * n + j] = scores[j];
        }
    }
    workgroupBarrier();

    for (var c = lid; c < d_head; c += WG) {
        var acc = 0.0;
        for (var j = 0u; j < n; j++) {
            acc += scores[j] * v[(b * params.kv_stride + j) * d + h * d_head + c];
        }
        context[q_base + c] = acc;
    }
}
