// attention: scaled dot-product attention of projected queries over projected keys and values,
// all heads at once: context = softmax(q kᵀ / √d_head + mask) v, per batch row and head. The
// projections before and after are matmul_q8 dispatches.
//
// Heads are interleaved in the model dimension (head h owns features h·d_head … (h+1)·d_head),
// as burn's reshape [batch, len, n_heads, d_head] lays them out. Masked keys get a score of
// −1e9 in the burn model; here they are skipped, which gives the same softmax (exp(−1e9 − max)
// is 0 in f32) because at least one key is always visible. Masked: keys at or past key_len[b]
// (source padding), and with `causal`, keys after the query's position q_offset + i.
//
// Layout, so that the engine needs no copies (see `AttentionLayout` in layout.rs):
// - query (b, i) starts at q[q_start + (b · n_queries + i) · q_stride];
// - key j of batch row b is row  j · pos_rows + b' · batch_rows  of kv, where b' = b, or with
//   `indirect` = 1 the beam history ancestors[b · anc_stride + j] (the decoder's KV cache:
//   position-major, one row per beam per step, never reordered); the key starts at
//   kv[kv_start + row · kv_stride + k_col], the value at … + v_col.
// q and kv may be bound to the same buffer (a fused QKV projection).
//
// One invocation computes one (batch row, query, head) with no workgroup memory and no
// barriers: a single pass over the keys with an online softmax (running max and sum, the
// accumulated values rescaled when the max grows). With `store_weights` = 1 a second pass
// writes the normalised attention weights (the cross-attention heatmap).

struct Params {
    batch: u32,
    n_queries: u32,     // queries per batch row
    n_keys: u32,        // keys per batch row
    d_model: u32,
    n_heads: u32,
    q_offset: u32,      // position of query 0 (decoder steps: the step index)
    causal: u32,        // 1: hide keys after the query's position
    store_weights: u32, // 1: write the attention weights
    q_start: u32,
    q_stride: u32,
    kv_start: u32,
    kv_stride: u32,
    k_col: u32,
    v_col: u32,
    pos_rows: u32,
    batch_rows: u32,
    indirect: u32,
    anc_stride: u32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> q: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> kv: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> key_len: array<u32>;   // [batch]
@group(0) @binding(4) var<storage, read> ancestors: array<u32>; // [batch, anc_stride]; ≥ 1 element
@group(0) @binding(5) var<storage, read_write> weights: array<f32>; // [batch, n_heads, n_queries, n_keys]; ≥ 1 element
@group(0) @binding(6) var<storage, read_write> context: array<vec4<f32>>; // [batch, n_queries, d_model]

// The largest d_head: the accumulator lives in registers (or the CPU's stack), so its size is a
// compile-time constant; equals `D_HEAD_MAX` in attention.rs (a test there checks).
const D_HEAD_MAX: u32 = 128u;

// Features per head, a multiple of 4 and ≤ D_HEAD_MAX (set per pipeline: constant loop bounds).
// Every offset and stride is a multiple of 4 (the Rust driver checks), so the kernel reads and
// writes whole vec4s; the indices below count vec4s.
override d_head: u32 = 64u;
const QUADS_MAX: u32 = D_HEAD_MAX / 4u;

fn key_base(b: u32, j: u32) -> u32 {
    var owner = b;
    if (params.indirect == 1u) {
        owner = ancestors[b * params.anc_stride + j];
    }
    return (params.kv_start + (j * params.pos_rows + owner * params.batch_rows) * params.kv_stride) / 4u;
}

fn visible(b: u32, i: u32, j: u32) -> bool {
    return j < key_len[b] && !(params.causal == 1u && j > params.q_offset + i);
}

fn score(q_base: u32, k_base: u32) -> f32 {
    var acc = vec4<f32>(0.0);
    for (var c = 0u; c < d_head / 4u; c++) {
        acc += q[q_base + c] * kv[k_base + c];
    }
    return (acc.x + acc.y + acc.z + acc.w) * inverseSqrt(f32(d_head));
}

// Invocations per workgroup: set by the Rust driver from its `WORKGROUP` constant. No default,
// so a pipeline created without it fails instead of running with a stale copy.
override WORKGROUP: u32;

@compute @workgroup_size(WORKGROUP)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let h = gid.x % params.n_heads;
    let bi = gid.x / params.n_heads; // b · n_queries + i
    if (bi >= params.batch * params.n_queries) {
        return;
    }
    let b = bi / params.n_queries;
    let i = bi % params.n_queries;
    let quads = d_head / 4u;
    let q_base = (params.q_start + bi * params.q_stride + h * d_head) / 4u;
    let k_col = (params.k_col + h * d_head) / 4u;
    let v_col = (params.v_col + h * d_head) / 4u;

    var acc: array<vec4<f32>, QUADS_MAX>;
    var row_max = -3.0e38;
    var sum = 0.0;
    for (var j = 0u; j < params.n_keys; j++) {
        if (!visible(b, i, j)) {
            continue;
        }
        let base = key_base(b, j);
        let s = score(q_base, base + k_col);
        let new_max = max(row_max, s);
        let rescale = exp(row_max - new_max);
        let p = exp(s - new_max);
        sum = sum * rescale + p;
        let v_base = base + v_col;
        for (var c = 0u; c < quads; c++) {
            acc[c] = acc[c] * rescale + p * kv[v_base + c];
        }
        row_max = new_max;
    }
    let inv_sum = 1.0 / sum;
    let out = (bi * params.d_model + h * d_head) / 4u;
    for (var c = 0u; c < quads; c++) {
        context[out + c] = acc[c] * inv_sum;
    }

    if (params.store_weights == 1u) {
        let w_base = ((b * params.n_heads + h) * params.n_queries + i) * params.n_keys;
        for (var j = 0u; j < params.n_keys; j++) {
            var w = 0.0;
            if (visible(b, i, j)) {
                w = exp(score(q_base, key_base(b, j) + k_col) - row_max) * inv_sum;
            }
            weights[w_base + j] = w;
        }
    }
}
