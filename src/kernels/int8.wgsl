// int8: the WGSL functions shared by the kernels that read int8 weights (matmul_q8,
// matmul_q8_norm, embed). WGSL has no includes: each of those drivers appends this file to its
// kernel's source (`concat!` in its `SOURCE`), so the helper is written once. Not a kernel: no
// bindings, no entry point.

// The four signed bytes of `word`, lowest byte first, as f32 (the packing of
// `weights::QuantizedMatrix`: byte j of a word holds the value of feature 4c + j, two's
// complement).
fn unpack_i8x4(word: u32) -> vec4<f32> {
    let shifted = vec4<u32>(word << 24u, word << 16u, word << 8u, word);
    return vec4<f32>(bitcast<vec4<i32>>(shifted) >> vec4<u32>(24u));
}
