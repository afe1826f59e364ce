// embed: x[r, :] = dequant(E[token[r], :]) · √d_model + PE[position[r], :] — token embedding from
// the int8 table, scaled as in the paper, plus the sinusoidal positional encoding.
//
// The embedding table uses the int8 layout of matmul_q8 (rows = vocabulary, four values per
// u32, word-major on the GPU: word c of row t is table[c · stride + t], stride = vocab rounded
// up to 4; one f32 scale per row), so the same buffer is the tied output projection. The
// positional table comes from the CPU (positions::positional_encoding), so the GPU and the
// reference add identical values. Row r of the output sits at position start_pos + r % seq_len:
// a batch of sentences of seq_len tokens for the encoder, or one token per beam at decoder step
// start_pos (seq_len = 1).
//
// One invocation writes four consecutive features of one row; the grid is
// (d_model/4 / WORKGROUP workgroups, rows).
//
// unpack_i8x4 is in int8.wgsl, which the driver appends to this file.

struct Params {
    rows: u32,      // output rows (tokens)
    d_model: u32,   // a multiple of 4
    seq_len: u32,   // tokens per sentence in this call
    start_pos: u32, // position of the first token of each sentence
    scale: f32,     // √d_model
    vocab: u32,     // rows of the table; larger token ids read row 1 (<unk>)
    stride: u32,    // vocab rounded up to 4: the table's row length on the GPU
    _pad: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> tokens: array<u32>;     // [rows]
@group(0) @binding(2) var<storage, read> table: array<u32>;      // [d_model/4, stride] packed i8x4
@group(0) @binding(3) var<storage, read> row_scale: array<f32>;  // [vocab]
@group(0) @binding(4) var<storage, read> pe: array<vec4<f32>>;   // [max_pos, d_model/4]
@group(0) @binding(5) var<storage, read_write> x: array<vec4<f32>>; // [rows, d_model/4]

// Invocations per workgroup: set by the Rust driver from its `WORKGROUP` constant. No default,
// so a pipeline created without it fails instead of running with a stale copy.
override WORKGROUP: u32;

@compute @workgroup_size(WORKGROUP)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    let words = params.d_model / 4u;
    let c = id.x;
    let r = id.y;
    if (c >= words || r >= params.rows) {
        return;
    }
    var token = tokens[r];
    if (token >= params.vocab) {
        token = 1u;
    }
    let pos = params.start_pos + r % params.seq_len;
    let value = unpack_i8x4(table[c * params.stride + token]) * (row_scale[token] * params.scale);
    x[r * words + c] = value + pe[pos * words + c];
}
