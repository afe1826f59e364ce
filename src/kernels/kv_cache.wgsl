// kv_cache: beam reordering plus append for the decoder's self-attention KV cache. For every
// row r of the new step and every position s ≤ t, for keys and values alike:
//   dst[r, s, :] = src[parent[r], s, :]   when s < t   (the history of the row it extends)
//   dst[r, t, :] = new[r, :]                            (this step's projected key / value)
// The engine keeps two caches per layer and swaps them every step (src and dst must differ:
// WebGPU forbids aliasing a writable binding), so reordering by parent index costs one
// dispatch per layer and no readback.
//
// Dispatch: x covers d_model in chunks of 64, y is the position s (t + 1 of them), z is
// 2·row + (0 for keys, 1 for values).

struct Params {
    rows: u32,     // rows of this step (parent has this many entries)
    d_model: u32,  // features per key / value
    capacity: u32, // positions reserved per row in every cache buffer
    t: u32,        // the position written from `new` (this step's index)
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> parent: array<u32>;           // [rows]
@group(0) @binding(2) var<storage, read> k_new: array<f32>;            // [rows, d_model]
@group(0) @binding(3) var<storage, read> v_new: array<f32>;            // [rows, d_model]
@group(0) @binding(4) var<storage, read> k_src: array<f32>;            // [rows', capacity, d_model]
@group(0) @binding(5) var<storage, read> v_src: array<f32>;            // [rows', capacity, d_model]
@group(0) @binding(6) var<storage, read_write> k_dst: array<f32>;      // [rows, capacity, d_model]
@group(0) @binding(7) var<storage, read_write> v_dst: array<f32>;      // [rows, capacity, d_model]

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let d = params.d_model;
    let i = gid.x;
    let s = gid.y;
    let r = gid.z / 2u;
    if (i >= d || s > params.t || r >= params.rows) {
        return;
    }
    let dst = (r * params.capacity + s) * d + i;
    let keys = gid.z % 2u == 0u;
    if (s == params.t) {
        if (keys) {
            k_dst[dst] = k_new[r * d + i];
        } else {
            v_dst[dst] = v_new[r * d + i];
        }
        return;
    }
    let src = (parent[r] * params.capacity + s) * d + i;
    if (keys) {
        k_dst[dst] = k_src[src];
    } else {
        v_dst[dst] = v_src[src];
    }
}
