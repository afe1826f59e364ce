// logits_topk: for every row (beam) of output logits — log-softmax, the repetition penalty, and
// the k best (token, log-prob) pairs: the only data a decoder step reads back (8 bytes per
// candidate, 64 bytes per beam at k = 8).
//
// Penalty (as search::apply_repetition_penalty): every distinct token among the row's last
// `window` generated tokens has its log-prob multiplied by `penalty`. Repeat block (as
// StepRequest::penalize): the row's banned tokens (search::repeat_bans, computed on the host,
// up to `ban_cap` per row) get -inf, so they never enter the top k (the driver requires
// k + ban_cap ≤ vocab, so k others are always there). Order: descending log-prob, ties by
// ascending token id (as search::top_k).
//
// One workgroup of WG = 128 invocations handles one row: one pass keeps each invocation's
// running max and sum of exponentials, one reduction of those pairs gives the log-sum-exp, each
// invocation keeps the top k of its strided share of the vocabulary, and seven rounds of
// pairwise merges in workgroup memory reduce the 128 short lists to one. k ≤ K_MAX. The row's
// history is first marked in a bitmap in workgroup memory (token ids below BITMAP_TOKENS), so
// the penalty costs one bit test per token instead of a pass over the window; larger ids fall
// back to that pass.

struct Params {
    rows: u32,        // rows (beams) of logits
    vocab: u32,       // logits per row
    k: u32,           // candidates per row, 1..=K_MAX
    window: u32,      // repetition window in tokens (0: off)
    penalty: f32,     // repetition penalty (1: off)
    history_cap: u32, // history slots per row
    ban_cap: u32,     // banned-token slots per row (0: no repeat block)
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> logits: array<f32>;         // [rows, vocab]
@group(0) @binding(2) var<storage, read> history: array<u32>;        // [rows, history_cap]
@group(0) @binding(3) var<storage, read> history_len: array<u32>;    // [rows]
@group(0) @binding(4) var<storage, read_write> top: array<u32>;      // [rows, k, 2]: id, bitcast<u32>(log-prob)
@group(0) @binding(5) var<storage, read> bans: array<u32>;           // [rows, ban_cap]: banned ids, NONE-padded

// Invocations per workgroup, a power of two (the reductions halve it); the driver only needs
// one workgroup per row, so this lives here alone.
const WG: u32 = 128u;
// Sizes the per-invocation top-k arrays, so a compile-time constant; equals `K_MAX` in
// logits_topk.rs (a test there checks).
const K_MAX: u32 = 8u;
const NONE: u32 = 0xffffffffu;

var<workgroup> max_buf: array<f32, WG>;
var<workgroup> sum_buf: array<f32, WG>;
var<workgroup> cand_score: array<f32, WG * K_MAX>;
var<workgroup> cand_id: array<u32, WG * K_MAX>;
const BITMAP_TOKENS: u32 = 32768u;
// Bit t set: token t is in the row's repetition window. Zero-initialised, as all workgroup memory.
var<workgroup> history_bits: array<atomic<u32>, BITMAP_TOKENS / 32u>;

// True when (sa, ia) ranks before (sb, ib).
fn before(sa: f32, ia: u32, sb: f32, ib: u32) -> bool {
    return sa > sb || (sa == sb && ia < ib);
}

// The row's log-sum-exp from every invocation's (max m, sum of exp(v − m)) over its share.
fn log_sum_exp(lid: u32, m: f32, sum: f32) -> f32 {
    max_buf[lid] = m;
    sum_buf[lid] = sum;
    workgroupBarrier();
    for (var stride = WG / 2u; stride > 0u; stride >>= 1u) {
        if (lid < stride) {
            let m1 = max_buf[lid];
            let m2 = max_buf[lid + stride];
            let top = max(m1, m2);
            sum_buf[lid] = sum_buf[lid] * exp(m1 - top) + sum_buf[lid + stride] * exp(m2 - top);
            max_buf[lid] = top;
        }
        workgroupBarrier();
    }
    return max_buf[0] + log(sum_buf[0]);
}

// Token `token` of `row` is in the repetition window: one bit test for ids in the bitmap.
fn penalized(row: u32, token: u32) -> bool {
    if (token < BITMAP_TOKENS) {
        return ((atomicLoad(&history_bits[token >> 5u]) >> (token & 31u)) & 1u) == 1u;
    }
    return in_window(row, token);
}

// Token `token` may not come next in `row` (a repeat loop).
fn banned(row: u32, token: u32) -> bool {
    for (var j = 0u; j < params.ban_cap; j++) {
        if (bans[row * params.ban_cap + j] == token) {
            return true;
        }
    }
    return false;
}

fn in_window(row: u32, token: u32) -> bool {
    let len = min(history_len[row], params.history_cap);
    let start = len - min(len, params.window);
    for (var j = start; j < len; j++) {
        if (history[row * params.history_cap + j] == token) {
            return true;
        }
    }
    return false;
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) local: vec3<u32>) {
    let row = wg.x;
    let lid = local.x;
    let base = row * params.vocab;

    if (params.penalty != 1.0) {
        let len = min(history_len[row], params.history_cap);
        for (var j = len - min(len, params.window) + lid; j < len; j += WG) {
            let token = history[row * params.history_cap + j];
            if (token < BITMAP_TOKENS) {
                atomicOr(&history_bits[token >> 5u], 1u << (token & 31u));
            }
        }
        // (The reduction below starts with a barrier: the bitmap is complete before it is read.)
    }

    var local_max = -3.0e38;
    var local_sum = 0.0;
    for (var t = lid; t < params.vocab; t += WG) {
        let v = logits[base + t];
        if (v > local_max) {
            local_sum = local_sum * exp(local_max - v) + 1.0;
            local_max = v;
        } else {
            local_sum += exp(v - local_max);
        }
    }
    let log_sum = log_sum_exp(lid, local_max, local_sum);

    // This invocation's top k, best first.
    var best_score: array<f32, K_MAX>;
    var best_id: array<u32, K_MAX>;
    for (var i = 0u; i < K_MAX; i++) {
        best_score[i] = -3.0e38;
        best_id[i] = NONE;
    }
    let k = params.k;
    for (var t = lid; t < params.vocab; t += WG) {
        var lp = logits[base + t] - log_sum;
        if (params.penalty != 1.0 && penalized(row, t)) {
            lp *= params.penalty;
        }
        // A banned token's -inf would never beat the initial -3e38: skipping it is the same.
        if (params.ban_cap != 0u && banned(row, t)) {
            continue;
        }
        if (!before(lp, t, best_score[k - 1u], best_id[k - 1u])) {
            continue;
        }
        var i = k - 1u;
        while (i > 0u && before(lp, t, best_score[i - 1u], best_id[i - 1u])) {
            best_score[i] = best_score[i - 1u];
            best_id[i] = best_id[i - 1u];
            i--;
        }
        best_score[i] = lp;
        best_id[i] = t;
    }
    for (var i = 0u; i < K_MAX; i++) {
        cand_score[lid * K_MAX + i] = best_score[i];
        cand_id[lid * K_MAX + i] = best_id[i];
    }
    workgroupBarrier();

    // Merge list lid + stride into list lid, halving the lists every round.
    for (var stride = WG / 2u; stride > 0u; stride >>= 1u) {
        if (lid < stride) {
            var merged_score: array<f32, K_MAX>;
            var merged_id: array<u32, K_MAX>;
            let a = lid * K_MAX;
            let b = (lid + stride) * K_MAX;
            var i = 0u;
            var j = 0u;
            // i + j = out < k, so neither list is read past its k entries.
            for (var out = 0u; out < k; out++) {
                if (before(cand_score[a + i], cand_id[a + i], cand_score[b + j], cand_id[b + j])) {
                    merged_score[out] = cand_score[a + i];
                    merged_id[out] = cand_id[a + i];
                    i++;
                } else {
                    merged_score[out] = cand_score[b + j];
                    merged_id[out] = cand_id[b + j];
                    j++;
                }
            }
            for (var out = 0u; out < k; out++) {
                cand_score[a + out] = merged_score[out];
                cand_id[a + out] = merged_id[out];
            }
        }
        workgroupBarrier();
    }

    if (lid < k) {
        top[(row * k + lid) * 2u] = cand_id[lid];
        top[(row * k + lid) * 2u + 1u] = bitcast<u32>(cand_score[lid]);
    }
}
