//! `y = x · Wᵀ + b` with `W` int8 `[n, k]` and one f32 scale per row: the hot spot of the CPU
//! engine, in two variants ([`MatmulKind`]):
//!
//! - [`MatmulKind::Int8`]: each row of `x` is quantized symmetrically to int8
//!   (`sx = max|x| / 127`), products accumulate in i32 and `y = acc · sx · sw + b` (as
//!   CTranslate2 / intgemm do). Adds the activations' rounding error (about 0.4 % of a row's
//!   largest value per element).
//! - [`MatmulKind::F32`]: the weights are widened to f32 on the fly and accumulate in f32 with
//!   `x` as is, `y = (Σ x · q) · sw + b`: the burn model's numbers up to summation order.
//!
//! Each variant has a portable kernel written for auto-vectorization (16 independent lanes, i8
//! widened to i32 / f32), an AVX2 kernel natively (chosen at run time with
//! `is_x86_feature_detected!`; for int8, an AVX-512 VNNI kernel where the CPU has it) and a
//! simd128 kernel on wasm32 when compiled with `target_feature = "simd128"` (for int8, a relaxed
//! SIMD kernel in the page's second build, feature `relaxed-simd`, in the form the browser's dot
//! product allows: `RelaxedDot`). Kernels compute one row of
//! `x` against four rows of `W` at once, so `x` is loaded once per four outputs.
//!
//! Natively, large products split the rows of `W` (output features) across the threads of a
//! [`Pool`] (started once: starting threads per product cost more than it saved); every output
//! is computed the same way whatever the split, so the thread count never changes a result.

use super::pool::Pool;
use crate::weights::QuantizedMatrix;

/// How [`matmul`] multiplies (see the module docs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MatmulKind {
    /// Activations widened to f32 against f32-converted weights, f32 accumulation: the burn
    /// model's numbers up to summation order (the engine tests compare tokens with it).
    F32,
    /// Activations quantized per row to int8, i32 accumulation. The default: 2.0–5.2× the f32
    /// variant's GFLOP/s on one core at the shipped model's sizes with AVX-512 VNNI (the
    /// `matmul_timing` test), 1.6× with the first, untiled AVX2 kernel, and the smallest
    /// memory traffic.
    #[default]
    Int8,
}

/// Products below this many multiply-adds (a few µs) run on the calling thread alone. A round
/// trip to a spinning worker costs about 60 ns on the 2-vCPU machine this was tuned on
/// (`pool::tests::round_trip_timing`); the parts' buffers and the copy back into `y` cost more,
/// and a small product split in two gained nothing there.
const PARALLEL_MIN_MACS: usize = 1 << 18;

/// A linear layer for the CPU: int8 weights `[n, k]` row-major, one scale and one bias per row.
#[derive(Clone, Debug, PartialEq)]
pub struct Q8Linear {
    /// Output features.
    pub n: usize,
    /// Input features.
    pub k: usize,
    /// `[n, k]`: `W[r, c] ≈ w[r · k + c] · scale[r]`; 64-byte aligned, so rows of a multiple
    /// of 64 bytes never straddle cache lines.
    pub w: Aligned,
    /// `[n]`.
    pub scale: Vec<f32>,
    /// `[n]`.
    pub bias: Vec<f32>,
    /// `[n]`: each row's sum of int8 weights (the AVX-512 VNNI kernel multiplies `x + 128`,
    /// unsigned, and subtracts `128 · sum`).
    pub sums: Vec<i32>,
}

impl Q8Linear {
    /// The bundle's packed matrix (four int8 values per little-endian `u32`) with `bias`
    /// (`[n]`; an empty slice means no bias). Weights must be in −127..=127, as quantizing
    /// gives and `Bundle` checks: the AVX2 and wasm 7-bit kernels negate them, and −128 has no
    /// negation in `i8`.
    pub fn new(m: &QuantizedMatrix, bias: &[f32]) -> Self {
        let bytes = m.packed.iter().flat_map(|word| word.to_le_bytes());
        let w = Aligned::from_bytes(bytes, m.packed.len() * 4);
        debug_assert!(!w.contains(&i8::MIN), "an int8 weight of -128");
        let sums = w_sums(&w, m.k);
        Self {
            n: m.n,
            k: m.k,
            w,
            sums,
            scale: m.scale.clone(),
            bias: if bias.is_empty() {
                vec![0.0; m.n]
            } else {
                bias.to_vec()
            },
        }
    }

    /// Row `r` of the int8 weights.
    pub fn row(&self, r: usize) -> &[i8] {
        &self.w[r * self.k..][..self.k]
    }
}

/// 64 bytes aligned to 64: one cache line, one AVX-512 vector.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C, align(64))]
struct Line([i8; 64]);

// SAFETY: 64 i8 with the alignment of 64 and no padding (size 64).
unsafe impl bytemuck::Zeroable for Line {}
// SAFETY: as above; every bit pattern is a valid [i8; 64].
unsafe impl bytemuck::Pod for Line {}

/// Bytes in a 64-byte-aligned buffer: a 64-byte load of a weight row (a multiple of 64 bytes
/// long) never straddles two cache lines (3–7% on the beam-4 products here).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Aligned {
    lines: Vec<Line>,
    len: usize,
}

impl Aligned {
    /// `len` zero bytes.
    pub fn zeroed(len: usize) -> Self {
        Self {
            lines: vec![Line([0; 64]); len.div_ceil(64)],
            len,
        }
    }

    /// The first `len` of `bytes` (u8 reinterpreted as i8; zeros past their end).
    fn from_bytes(bytes: impl Iterator<Item = u8>, len: usize) -> Self {
        let mut out = Self::zeroed(len);
        for (o, b) in out.iter_mut().zip(bytes) {
            *o = b as i8;
        }
        out
    }
}

impl std::ops::Deref for Aligned {
    type Target = [i8];
    fn deref(&self) -> &[i8] {
        &bytemuck::cast_slice(&self.lines)[..self.len]
    }
}

impl std::ops::DerefMut for Aligned {
    fn deref_mut(&mut self) -> &mut [i8] {
        &mut bytemuck::cast_slice_mut(&mut self.lines)[..self.len]
    }
}

/// Each row's sum of `w` (`[n, k]`).
fn w_sums(w: &[i8], k: usize) -> Vec<i32> {
    w.chunks_exact(k.max(1))
        .map(|row| row.iter().map(|&v| i32::from(v)).sum())
        .collect()
}

/// Quantizes each row of `x` (`[m, k]`) to int8: `q = round(x / sx)` (ties to even),
/// `sx = max|x| / 127` (0 for an all-zero row). Returns `q` `[m, k]` and `sx` `[m]`. Every
/// build computes the same values: the AVX2 path is the portable code compiled with AVX2,
/// wasm's the same code with simd128 (rounding by [`portable::round_i8`], plain lane ops).
pub fn quantize_rows(x: &[f32], k: usize) -> (Vec<i8>, Vec<f32>) {
    let mut q = vec![0i8; x.len()];
    let mut scales = vec![0.0f32; x.len() / k.max(1)];
    #[cfg(target_arch = "x86_64")]
    if avx2() {
        // SAFETY: AVX2 and FMA were detected at run time.
        unsafe { x86::quantize_rows(x, k, &mut q, &mut scales) };
        return (q, scales);
    }
    portable::quantize_rows(x, k, &mut q, &mut scales);
    (q, scales)
}

/// `y = x · Wᵀ + b` (then `max(0, y)` when `relu`), with `kind`, on up to `threads.threads()`
/// threads.
///
/// # Shapes
/// `x`: `[m, k]`; returns `[m, n]`.
pub fn matmul(
    x: &[f32],
    m: usize,
    w: &Q8Linear,
    relu: bool,
    kind: MatmulKind,
    threads: &Pool,
) -> Vec<f32> {
    assert_eq!(x.len(), m * w.k, "x must be [m, k] = [{m}, {}]", w.k);
    match kind {
        MatmulKind::F32 => run(m, w, relu, threads, &Input::F32(x)),
        MatmulKind::Int8 => {
            let (q, s) = quantize_rows(x, w.k);
            run(m, w, relu, threads, &Input::Int8(&q, &s))
        }
    }
}

/// A fixed int8 product for timing this build's kernels: `[8, 512] · [1024, 512]ᵀ` (4M
/// multiply-adds, as much as two of a shipped model's decoder-step FFN products for a beam of
/// 8, `[8, 256] · [1024, 256]ᵀ` each) on made-up data.
/// The page runs it in each of its two wasm builds and loads the faster (`web/worker.js`).
pub struct Int8Probe {
    x: Vec<f32>,
    w: Q8Linear,
}

impl Int8Probe {
    const ROWS: usize = 8;
    const K: usize = 512;
    const N: usize = 1024;

    /// The data: a fixed pseudo-random sequence (the same in every build); weights in
    /// −127..=127, as in every bundle (the kernels rely on it).
    pub fn new() -> Self {
        let mut state = 0x9e37_79b9_u32;
        let mut next = move || {
            state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            state
        };
        let x = (0..Self::ROWS * Self::K)
            .map(|_| (next() >> 8) as f32 / (1u32 << 24) as f32 - 0.5)
            .collect();
        let m = QuantizedMatrix {
            n: Self::N,
            k: Self::K,
            packed: (0..Self::N * Self::K / 4)
                .map(|_| {
                    let byte = |_| (((next() >> 8) % 255) as i32 - 127) as i8 as u8;
                    u32::from_le_bytes(std::array::from_fn(byte))
                })
                .collect(),
            scale: vec![1.0 / 127.0; Self::N],
        };
        Self {
            x,
            w: Q8Linear::new(&m, &[]),
        }
    }

    /// The activations `[8, 512]` and the weights (for the test of its product).
    #[cfg(test)]
    pub(crate) fn parts(&self) -> (&[f32], &Q8Linear) {
        (&self.x, &self.w)
    }

    /// Runs the product `reps` times on one thread; returns the sum of the last result, so
    /// that no run can be skipped.
    pub fn run(&self, reps: usize) -> f32 {
        let mut sum = 0.0;
        let one = Pool::new(1).expect("no threads to start");
        for _ in 0..reps {
            sum = matmul(&self.x, Self::ROWS, &self.w, false, MatmulKind::Int8, &one)
                .iter()
                .sum();
        }
        sum
    }
}

impl Default for Int8Probe {
    fn default() -> Self {
        Self::new()
    }
}

/// The activations as a kernel reads them.
enum Input<'a> {
    F32(&'a [f32]),
    /// Quantized rows and their scales.
    Int8(&'a [i8], &'a [f32]),
}

/// Splits the output features across threads (natively) and runs [`block`] on each part.
fn run(m: usize, w: &Q8Linear, relu: bool, threads: &Pool, input: &Input<'_>) -> Vec<f32> {
    let n = w.n;
    let mut y = vec![0.0f32; m * n];
    let parts = threads.threads().min(n.div_ceil(4));
    if parts > 1 && m * n * w.k >= PARALLEL_MIN_MACS {
        // Whole groups of four rows per part, so every output goes through the same kernel.
        let per = n.div_ceil(4).div_ceil(parts) * 4;
        let mut parts: Vec<(std::ops::Range<usize>, Vec<f32>)> = (0..n)
            .step_by(per)
            .map(|start| {
                let range = start..(start + per).min(n);
                let local = vec![0.0; m * range.len()];
                (range, local)
            })
            .collect();
        threads.for_each_mut(&mut parts, |_, (range, local)| {
            block(m, w, relu, input, range.clone(), local, range.len())
        });
        for (range, local) in &parts {
            for (dst, src) in y.chunks_exact_mut(n).zip(local.chunks_exact(range.len())) {
                dst[range.clone()].copy_from_slice(src);
            }
        }
        return y;
    }
    block(m, w, relu, input, 0..n, &mut y, n);
    y
}

/// Rows of `x` per tile: `x` tiles stay in L1/L2 while the weight rows stream past.
const M_TILE: usize = 32;

/// Outputs `rows` of `W` for all `m` rows of `x` into `y` (`[m, stride]`, column `r - start`).
fn block(
    m: usize,
    w: &Q8Linear,
    relu: bool,
    input: &Input<'_>,
    rows: std::ops::Range<usize>,
    y: &mut [f32],
    stride: usize,
) {
    let args = (m, w, relu, rows, y, stride);
    match *input {
        Input::F32(x) => {
            let k = w.k;
            block_with(args, |m0, m1, ws, _sums, scale, out| {
                for i in m0..m1 {
                    let d = dot4_f32(&x[i * k..][..k], ws);
                    out[i - m0] = std::array::from_fn(|j| d[j] * scale[j]);
                }
            })
        }
        Input::Int8(q, s) => {
            #[cfg(target_arch = "x86_64")]
            if vnni512() {
                // SAFETY: AVX-512 F, BW and VNNI were detected at run time.
                return unsafe { x86::block_i8_vnni(args, q, s) };
            }
            #[cfg(target_arch = "x86_64")]
            if avx2() {
                // SAFETY: AVX2 was detected at run time.
                return unsafe { x86::block_i8(args, q, s) };
            }
            #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
            return wasm::block_i8(args, q, s);
            #[allow(unreachable_code)]
            block_i8(args, q, s, dot_panel_i8)
        }
    }
}

/// [`block`]'s arguments: `m`, `W`, `relu`, the rows of `W`, `y` and its stride.
type BlockArgs<'a, 'y> = (
    usize,
    &'a Q8Linear,
    bool,
    std::ops::Range<usize>,
    &'y mut [f32],
    usize,
);

/// [`block`] for int8 activations `q` with scales `sx`, `panel` computing the dot products
/// of a tile of rows of `q` against four rows of `W` (see [`dot_panel_i8`]). Inlined into
/// each kernel's target-feature wrapper, so the scaling is vectorized with the same
/// instructions as the products.
#[inline(always)]
fn block_i8(
    args: BlockArgs<'_, '_>,
    q: &[i8],
    sx: &[f32],
    mut panel: impl FnMut(&[i8], [&[i8]; 4], [i32; 4], &mut [[i32; 4]]),
) {
    let k = args.1.k;
    let mut dots = [[0i32; 4]; M_TILE];
    block_with(args, |m0, m1, ws, sums, scale, out| {
        let dots = &mut dots[..m1 - m0];
        panel(&q[m0 * k..m1 * k], ws, sums, dots);
        for ((o, d), s) in out.iter_mut().zip(dots.iter()).zip(&sx[m0..m1]) {
            *o = std::array::from_fn(|j| d[j] as f32 * s * scale[j]);
        }
    })
}

/// The loops of [`block`]: tiles of [`M_TILE`] rows of `x` by groups of four rows of `W`.
/// `tile(m0, m1, w_rows, w_sums, w_scales, out)` writes the scaled products of rows
/// `m0..m1` of `x` into `out[..m1 - m0]`; this adds the bias, applies `relu` and stores.
#[inline(always)]
fn block_with(
    (m, w, relu, rows, y, stride): BlockArgs<'_, '_>,
    mut tile: impl FnMut(usize, usize, [&[i8]; 4], [i32; 4], [f32; 4], &mut [[f32; 4]]),
) {
    let start = rows.start;
    let mut out = [[0.0f32; 4]; M_TILE];
    for m0 in (0..m).step_by(M_TILE) {
        let m1 = (m0 + M_TILE).min(m);
        let mut r = rows.start;
        while r < rows.end {
            let group = (rows.end - r).min(4);
            // Fewer than four rows left: repeat the last one (its extra results are dropped).
            let pick = |j: usize| r + j.min(group - 1);
            let ws: [&[i8]; 4] = std::array::from_fn(|j| w.row(pick(j)));
            let sums: [i32; 4] = std::array::from_fn(|j| w.sums[pick(j)]);
            let scale: [f32; 4] = std::array::from_fn(|j| w.scale[pick(j)]);
            let bias: [f32; 4] = std::array::from_fn(|j| w.bias[pick(j)]);
            let out = &mut out[..m1 - m0];
            tile(m0, m1, ws, sums, scale, out);
            for (i, v) in (m0..m1).zip(out.iter()) {
                let dst = &mut y[i * stride + r - start..][..group];
                for (o, (v, b)) in dst.iter_mut().zip(v.iter().zip(bias)) {
                    let v = v + b;
                    *o = if relu { portable::fmax(v, 0.0) } else { v };
                }
            }
            r += group;
        }
    }
}

/// Four dot products of f32 `x` with int8 rows `w` (unscaled).
pub fn dot4_f32(x: &[f32], w: [&[i8]; 4]) -> [f32; 4] {
    #[cfg(target_arch = "x86_64")]
    if avx2() {
        // SAFETY: AVX2 and FMA were detected at run time.
        return unsafe { x86::dot4_f32(x, w) };
    }
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    return wasm::dot4_f32(x, w);
    #[allow(unreachable_code)]
    portable::dot4_f32(x, w)
}

/// Four dot products of int8 `x` with int8 rows `w`, exact in i32. `sums[j]` must be the sum
/// of `w[j]` (over the first `x.len()` entries).
pub fn dot4_i8(x: &[i8], w: [&[i8]; 4], sums: [i32; 4]) -> [i32; 4] {
    // Only the AVX-512 VNNI kernel and the relaxed-SIMD one where the dot is unsigned
    // ([`RelaxedDot::Unsigned`]) need the sums; wrong ones would show only on those CPUs.
    debug_assert!(
        (0..4).all(|j| sums[j] == w[j][..x.len()].iter().map(|&v| i32::from(v)).sum::<i32>()),
        "sums must be the rows' sums"
    );
    #[cfg(not(any(target_arch = "x86_64", target_arch = "wasm32")))]
    let _ = sums;
    #[cfg(target_arch = "x86_64")]
    if vnni512() {
        // SAFETY: AVX-512 F, BW and VNNI were detected at run time.
        return unsafe { x86::dot4_i8_vnni(x, w, sums) };
    }
    #[cfg(target_arch = "x86_64")]
    if avx2() {
        // SAFETY: AVX2 was detected at run time.
        return unsafe { x86::dot4_i8(x, w) };
    }
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    return wasm::dot4_i8(x, w, sums);
    #[allow(unreachable_code)]
    portable::dot4_i8(x, w)
}

/// `out[i] = dot4_i8(row i of x, w)` for every row of `x` (`[out.len(), k]`, `k = x.len() /
/// out.len()`): the kernels keep several rows of `x` against the four rows of `w` in registers
/// at once, so each weight vector is loaded once per tile of rows.
pub fn dot_panel_i8(x: &[i8], w: [&[i8]; 4], sums: [i32; 4], out: &mut [[i32; 4]]) {
    if out.is_empty() {
        return;
    }
    assert_eq!(x.len() % out.len(), 0, "x must hold out.len() rows");
    #[cfg(not(any(target_arch = "x86_64", target_arch = "wasm32")))]
    let _ = sums;
    #[cfg(target_arch = "x86_64")]
    if vnni512() {
        // SAFETY: AVX-512 F, BW and VNNI were detected at run time.
        return unsafe { x86::panel_i8_vnni(x, w, sums, out) };
    }
    #[cfg(target_arch = "x86_64")]
    if avx2() {
        // SAFETY: AVX2 was detected at run time.
        return unsafe { x86::panel_i8(x, w, out) };
    }
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    return wasm::panel_i8(x, w, sums, out);
    #[allow(unreachable_code)]
    {
        let k = x.len() / out.len();
        for (o, row) in out.iter_mut().zip(x.chunks_exact(k)) {
            *o = portable::dot4_i8(row, w);
        }
    }
}

/// Whether the AVX2 + FMA kernels may run (cached by std). `WEBNMT_NO_SIMD=1` forces the
/// portable kernels (for measurements).
#[cfg(target_arch = "x86_64")]
pub(crate) fn avx2() -> bool {
    use std::sync::OnceLock;
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| {
        std::env::var_os("WEBNMT_NO_SIMD").is_none()
            && is_x86_feature_detected!("avx2")
            && is_x86_feature_detected!("fma")
    })
}

/// Whether the AVX-512 VNNI int8 kernel may run (cached). `WEBNMT_NO_SIMD=1` or
/// `WEBNMT_NO_VNNI=1` turn it off (for measurements).
#[cfg(target_arch = "x86_64")]
pub(crate) fn vnni512() -> bool {
    use std::sync::OnceLock;
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| {
        std::env::var_os("WEBNMT_NO_VNNI").is_none()
            && avx2()
            && is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("avx512bw")
            && is_x86_feature_detected!("avx512vnni")
    })
}

/// What the browser makes of `i32x4.relaxed_dot_i8x16_i7x16_add(a, b, c)` when a byte of `b`
/// has its top bit set: the relaxed SIMD proposal leaves that to the implementation (`b` is only
/// defined for 0..=127), fixed for a given engine and CPU. The relaxed build finds out once, with
/// [`RelaxedDot::classify`] on two fixed products, and picks its kernel by it: where `b` is read
/// as signed bytes or as exact unsigned ones, `b` is `x` (flipped); otherwise `b` is `|x|` and
/// the sign of `x` moves onto the weights. One dot product covers 16 columns in every mode, and
/// every mode gives the exact products.
#[cfg(any(test, all(target_arch = "wasm32", feature = "relaxed-simd")))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RelaxedDot {
    /// `b` read as signed bytes (ARM's `sdot`): `b = x` as it is. Exact for our operands even
    /// where pairs of products are summed in i16 first (`2 · 128 · 127 < 2^15`).
    Signed,
    /// `b` read as unsigned bytes, exact in i32 (x86's `vpdpbusd` with AVX-VNNI): `b = x + 128`
    /// (each byte XOR `0x80`), then `128 · Σw` is subtracted, as in the AVX-512 VNNI kernel.
    Unsigned,
    /// Anything else, e.g. x86 without AVX-VNNI, where `pmaddubsw` reads `b` as unsigned but
    /// saturates pairs of products in i16: only `b` in 0..=127 is read alike everywhere, so
    /// `x · w = |x| · (sign(x) · w)`, two more operations per weight vector.
    SevenBit,
}

#[cfg(any(test, all(target_arch = "wasm32", feature = "relaxed-simd")))]
impl RelaxedDot {
    /// The two probes `(a, b)`, each byte of a vector equal: 127 · 200 (200 is −56 as a signed
    /// byte; 2 · 127 · 200 saturates i16) and −128 · 255 (255 is −1).
    pub const PROBES: [(i8, u8); 2] = [(127, 200), (-128, 255)];

    /// The mode from the probes' results (each lane: four products of [`Self::PROBES`] summed
    /// onto 0). Anything but all lanes of both probes signed, or all exact unsigned, is
    /// `SevenBit`.
    pub fn classify(results: [[i32; 4]; 2]) -> Self {
        let expect = |f: fn(i8, u8) -> i32| Self::PROBES.map(|(a, b)| [4 * f(a, b); 4]);
        if results == expect(|a, b| i32::from(a) * i32::from(b as i8)) {
            Self::Signed
        } else if results == expect(|a, b| i32::from(a) * i32::from(b)) {
            Self::Unsigned
        } else {
            Self::SevenBit
        }
    }

    /// What each byte of `x` is XORed with to form the second operand (`Signed`, `Unsigned`).
    pub const fn flip(self) -> i8 {
        match self {
            Self::Unsigned => i8::MIN,
            Self::Signed | Self::SevenBit => 0,
        }
    }

    /// What is subtracted from a dot product whose weights sum to `w_sum` (`Signed`, `Unsigned`).
    pub const fn offset(self, w_sum: i32) -> i32 {
        match self {
            Self::Unsigned => 128 * w_sum,
            Self::Signed | Self::SevenBit => 0,
        }
    }
}

/// Which kernels [`dot4_f32`] and [`dot4_i8`] use on this machine.
pub fn simd_name() -> &'static str {
    #[cfg(target_arch = "x86_64")]
    if vnni512() {
        return "avx2 + avx512-vnni";
    }
    #[cfg(target_arch = "x86_64")]
    if avx2() {
        return "avx2";
    }
    #[cfg(all(
        target_arch = "wasm32",
        target_feature = "simd128",
        feature = "relaxed-simd"
    ))]
    return match wasm::relaxed_dot() {
        RelaxedDot::Signed => "simd128 + relaxed-simd (signed int8 dot)",
        RelaxedDot::Unsigned => "simd128 + relaxed-simd (unsigned int8 dot)",
        RelaxedDot::SevenBit => "simd128 + relaxed-simd (7-bit int8 dot)",
    };
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    #[allow(unreachable_code)]
    return "simd128";
    #[allow(unreachable_code)]
    "portable"
}

/// Plain Rust, shaped for auto-vectorization: 16 independent lanes per accumulator.
pub mod portable {
    const LANES: usize = 16;

    /// See [`super::quantize_rows`]: `q` `[m, k]` and `scales` `[m]` for `x` `[m, k]`. Inlined
    /// into the AVX2 wrapper, so both builds run this code.
    #[inline(always)]
    pub fn quantize_rows(x: &[f32], k: usize, q: &mut [i8], scales: &mut [f32]) {
        let k = k.max(1);
        for ((row, out), scale) in x.chunks_exact(k).zip(q.chunks_exact_mut(k)).zip(scales) {
            // max is exact in any order: 16 lanes, then across them.
            let mut lanes = [0.0f32; LANES];
            let chunks = row.chunks_exact(LANES);
            let mut max = chunks
                .remainder()
                .iter()
                .fold(0.0f32, |m, v| fmax(m, v.abs()));
            for c in chunks {
                for l in 0..LANES {
                    lanes[l] = fmax(lanes[l], c[l].abs());
                }
            }
            max = lanes.iter().fold(max, |m, &v| fmax(m, v));
            let s = max / 127.0;
            let inv = if s > 0.0 { 1.0 / s } else { 0.0 };
            for (o, v) in out.iter_mut().zip(row) {
                *o = round_i8(v * inv);
            }
            *scale = s;
        }
    }

    /// The larger of `a` and `b` (`b` when either is NaN): a compare and select, which vectorizes
    /// on every target. `f32::max` follows IEEE maxNum, which wasm has no instruction for: it
    /// compiles to a call to libm's `fmaxf` per element there.
    #[inline(always)]
    pub fn fmax(a: f32, b: f32) -> f32 {
        if a > b { a } else { b }
    }

    /// `v` rounded to the nearest integer (ties to even) and clamped to -127..=127 (NaN:
    /// -127). Adding 1.5 · 2^23 leaves a float whose unit is 1, so the addition itself
    /// rounds, and the integer is in the low mantissa bits: plain float and integer lane
    /// operations, which vectorize on every target (a float-to-int cast does not).
    #[inline(always)]
    pub fn round_i8(v: f32) -> i8 {
        const MAGIC: f32 = 12_582_912.0;
        // Not `clamp`, which keeps NaN (this makes it -127), nor `max`/`min`: wasm has no
        // instruction for their NaN rules and calls libm's fmaxf per element.
        let v = if v > -127.0 { v } else { -127.0 };
        let v = if v < 127.0 { v } else { 127.0 };
        ((v + MAGIC).to_bits() as i32 - MAGIC.to_bits() as i32) as i8
    }

    /// See [`super::dot4_f32`].
    pub fn dot4_f32(x: &[f32], w: [&[i8]; 4]) -> [f32; 4] {
        let k = x.len();
        let body = k / LANES * LANES;
        let mut acc = [[0.0f32; LANES]; 4];
        for c in (0..body).step_by(LANES) {
            let xs: &[f32; LANES] = x[c..c + LANES].try_into().expect("16 lanes");
            for (a, row) in acc.iter_mut().zip(w) {
                let ws: &[i8; LANES] = row[c..c + LANES].try_into().expect("16 lanes");
                for l in 0..LANES {
                    a[l] += xs[l] * f32::from(ws[l]);
                }
            }
        }
        std::array::from_fn(|j| {
            let tail: f32 = (body..k).map(|c| x[c] * f32::from(w[j][c])).sum();
            acc[j].iter().sum::<f32>() + tail
        })
    }

    /// See [`super::dot4_i8`].
    pub fn dot4_i8(x: &[i8], w: [&[i8]; 4]) -> [i32; 4] {
        let k = x.len();
        let body = k / LANES * LANES;
        let mut acc = [[0i32; LANES]; 4];
        for c in (0..body).step_by(LANES) {
            let xs: &[i8; LANES] = x[c..c + LANES].try_into().expect("16 lanes");
            for (a, row) in acc.iter_mut().zip(w) {
                let ws: &[i8; LANES] = row[c..c + LANES].try_into().expect("16 lanes");
                for l in 0..LANES {
                    a[l] += i32::from(i16::from(xs[l]) * i16::from(ws[l]));
                }
            }
        }
        std::array::from_fn(|j| {
            let tail: i32 = (body..k)
                .map(|c| i32::from(x[c]) * i32::from(w[j][c]))
                .sum();
            acc[j].iter().sum::<i32>() + tail
        })
    }
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod x86 {
    use std::arch::x86_64::*;

    #[target_feature(enable = "avx2,fma")]
    fn hsum(v: __m256) -> f32 {
        let lo = _mm256_castps256_ps128(v);
        let hi = _mm256_extractf128_ps::<1>(v);
        let s = _mm_add_ps(lo, hi);
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_movehdup_ps(s));
        _mm_cvtss_f32(s)
    }

    /// 8 int8 weights at `p` as f32.
    #[target_feature(enable = "avx2,fma")]
    unsafe fn load8(p: *const i8) -> __m256 {
        // SAFETY: the caller guarantees 8 readable bytes at `p`.
        let b = unsafe { _mm_loadl_epi64(p.cast()) };
        _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b))
    }

    /// See [`super::dot4_f32`]; 8 lanes per step, one FMA chain per weight row.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn dot4_f32(x: &[f32], w: [&[i8]; 4]) -> [f32; 4] {
        let k = x.len();
        assert!(w.iter().all(|r| r.len() >= k));
        let body = k / 8 * 8;
        let mut acc = [_mm256_setzero_ps(); 4];
        let mut c = 0;
        while c < body {
            // SAFETY: c + 8 ≤ k ≤ every row's length.
            unsafe {
                let xv = _mm256_loadu_ps(x.as_ptr().add(c));
                for j in 0..4 {
                    acc[j] = _mm256_fmadd_ps(xv, load8(w[j].as_ptr().add(c)), acc[j]);
                }
            }
            c += 8;
        }
        std::array::from_fn(|j| {
            let tail: f32 = (body..k).map(|c| x[c] * f32::from(w[j][c])).sum();
            hsum(acc[j]) + tail
        })
    }

    /// See [`super::quantize_rows`]: the portable code compiled with AVX2.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn quantize_rows(x: &[f32], k: usize, q: &mut [i8], scales: &mut [f32]) {
        super::portable::quantize_rows(x, k, q, scales);
    }

    /// A kernel's int8 tiles, for [`fused_block`]: rows `rows` of `x` (`[_, k]`, as the
    /// kernel's wrapper prepared it) against four rows of `w` (row sums `sums`); `each(i, d)`
    /// gets row `i`'s four dot products.
    trait Tiles {
        /// # Safety
        /// The kernel's target features must be available.
        unsafe fn tiles(
            x: &[i8],
            k: usize,
            rows: std::ops::Range<usize>,
            w: [&[i8]; 4],
            sums: [i32; 4],
            each: impl FnMut(usize, __m128i),
        );
    }

    /// The AVX-512 VNNI tiles: rows of `xu` (`x + 128`, see [`flip`]) in tiles of four rows,
    /// then two, then one ([`tile_i8_vnni`]).
    struct Vnni;

    impl Tiles for Vnni {
        #[target_feature(enable = "avx2,avx512f,avx512bw,avx512vnni")]
        #[inline]
        unsafe fn tiles(
            xu: &[i8],
            k: usize,
            rows: std::ops::Range<usize>,
            w: [&[i8]; 4],
            sums: [i32; 4],
            mut each: impl FnMut(usize, __m128i),
        ) {
            let row = |i: usize| &xu[i * k..][..k];
            let mut i = rows.start;
            // SAFETY (each call): the same features are enabled here.
            while i + 4 <= rows.end {
                let t = unsafe {
                    tile_i8_vnni(std::array::from_fn::<_, 4, _>(|a| row(i + a)), w, sums)
                };
                for (a, s) in t.into_iter().enumerate() {
                    each(i + a, s);
                }
                i += 4;
            }
            if i + 2 <= rows.end {
                let t = unsafe { tile_i8_vnni([row(i), row(i + 1)], w, sums) };
                each(i, t[0]);
                each(i + 1, t[1]);
                i += 2;
            }
            if i < rows.end {
                each(i, unsafe { tile_i8_vnni([row(i)], w, sums)[0] });
            }
        }
    }

    /// The AVX2 tiles: rows of `x` as it is, in tiles of two rows, then one ([`tile_i8`]).
    struct Avx2;

    impl Tiles for Avx2 {
        #[target_feature(enable = "avx2")]
        #[inline]
        unsafe fn tiles(
            x: &[i8],
            k: usize,
            rows: std::ops::Range<usize>,
            w: [&[i8]; 4],
            _sums: [i32; 4],
            mut each: impl FnMut(usize, __m128i),
        ) {
            let row = |i: usize| &x[i * k..][..k];
            let mut i = rows.start;
            // SAFETY (each call): AVX2 is enabled here.
            while i + 2 <= rows.end {
                let t = unsafe { tile_i8([row(i), row(i + 1)], w) };
                each(i, t[0]);
                each(i + 1, t[1]);
                i += 2;
            }
            if i < rows.end {
                each(i, unsafe { tile_i8([row(i)], w)[0] });
            }
        }
    }

    /// [`super::block`] for int8 activations `q` (prepared for the kernel `T`) with scales
    /// `sx`: `T`'s tiles, with the scaling, bias and ReLU in SSE registers: the same
    /// operations in the same order as [`super::block_with`] (`d · sx · sw + b`, then
    /// `max(0, ·)`), so the same results. Inlined into each kernel's target-feature wrapper.
    #[inline(always)]
    unsafe fn fused_block<T: Tiles>(
        (m, w, relu, rows, y, stride): super::BlockArgs<'_, '_>,
        q: &[i8],
        sx: &[f32],
    ) {
        let (k, start) = (w.k, rows.start);
        // One row (a greedy step): the generic loop around the tiles was measured faster with
        // AVX-512 VNNI (46 against 84 µs for the de→en logits): the fused loop below only pays
        // with tiles.
        if m == 1 {
            return super::block_i8((m, w, relu, rows, y, stride), q, sx, |x, w, sums, out| {
                // SAFETY: the caller guarantees `T`'s features.
                unsafe { panel::<T>(x, w, sums, out) }
            });
        }
        // The loops of `super::block_with`, written again: sharing them through a helper (an
        // iterator or a struct of the group's rows) made this path 5% slower at beam 4 and
        // greedy steps 35% slower (measured twice, alternating binaries).
        // SAFETY: SSE is part of x86_64.
        let zero = unsafe { _mm_setzero_ps() };
        for m0 in (0..m).step_by(super::M_TILE) {
            let m1 = (m0 + super::M_TILE).min(m);
            let mut r = rows.start;
            while r < rows.end {
                let group = (rows.end - r).min(4);
                // Fewer than four rows left: repeat the last one (its results are dropped).
                let pick = |j: usize| r + j.min(group - 1);
                let ws: [&[i8]; 4] = std::array::from_fn(|j| w.row(pick(j)));
                let sums: [i32; 4] = std::array::from_fn(|j| w.sums[pick(j)]);
                let (scale, bias) = if group == 4 {
                    let (scale, bias) = (&w.scale[r..r + 4], &w.bias[r..r + 4]);
                    // SAFETY: both slices hold four f32.
                    unsafe { (_mm_loadu_ps(scale.as_ptr()), _mm_loadu_ps(bias.as_ptr())) }
                } else {
                    let s: [f32; 4] = std::array::from_fn(|j| w.scale[pick(j)]);
                    let b: [f32; 4] = std::array::from_fn(|j| w.bias[pick(j)]);
                    // SAFETY: SSE is part of x86_64.
                    unsafe {
                        (
                            _mm_setr_ps(s[0], s[1], s[2], s[3]),
                            _mm_setr_ps(b[0], b[1], b[2], b[3]),
                        )
                    }
                };
                // The weights of the group after next, while this one computes: 14% of a de→en
                // beam-4 translation with AVX-512 VNNI (the weights stream from L3; the
                // hardware prefetcher alone kept the loads waiting).
                let next = &w.w[((r + 8) * k).min(w.w.len())..((r + 12) * k).min(w.w.len())];
                for line in next.chunks(64) {
                    // SAFETY: SSE is part of x86_64; a prefetch never faults.
                    unsafe { _mm_prefetch::<_MM_HINT_T0>(line.as_ptr()) };
                }
                // SAFETY: the caller guarantees `T`'s features (SSE is part of x86_64).
                unsafe {
                    T::tiles(q, k, m0..m1, ws, sums, |i, d| {
                        let v =
                            _mm_mul_ps(_mm_mul_ps(_mm_cvtepi32_ps(d), _mm_set1_ps(sx[i])), scale);
                        let v = _mm_add_ps(v, bias);
                        let v = if relu { _mm_max_ps(v, zero) } else { v };
                        let dst = &mut y[i * stride + r - start..][..group];
                        if group == 4 {
                            // SAFETY: `dst` holds four f32.
                            _mm_storeu_ps(dst.as_mut_ptr(), v);
                        } else {
                            let mut all = [0.0f32; 4];
                            // SAFETY: `all` holds four f32.
                            _mm_storeu_ps(all.as_mut_ptr(), v);
                            dst.copy_from_slice(&all[..group]);
                        }
                    })
                }
                r += group;
            }
        }
    }

    /// [`super::block`] for int8 activations with the AVX-512 VNNI tiles ([`fused_block`]).
    #[target_feature(enable = "avx2,fma,avx512f,avx512bw,avx512vnni")]
    pub(super) unsafe fn block_i8_vnni(args: super::BlockArgs<'_, '_>, q: &[i8], sx: &[f32]) {
        // `x + 128` once per product, in aligned rows, not once per group of four outputs.
        let q = &flip(q);
        // SAFETY: the features of `Vnni` are enabled here.
        unsafe { fused_block::<Vnni>(args, q, sx) }
    }

    /// [`super::block`] for int8 activations with the AVX2 tiles ([`fused_block`]).
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn block_i8(args: super::BlockArgs<'_, '_>, q: &[i8], sx: &[f32]) {
        // SAFETY: the features of `Avx2` are enabled here.
        unsafe { fused_block::<Avx2>(args, q, sx) }
    }

    /// See [`super::dot4_i8`], with the AVX-512 VNNI kernel.
    #[target_feature(enable = "avx2,avx512f,avx512bw,avx512vnni")]
    pub unsafe fn dot4_i8_vnni(x: &[i8], w: [&[i8]; 4], sums: [i32; 4]) -> [i32; 4] {
        let mut out = [0i32; 4];
        let x = flip(x);
        // SAFETY: the same features are enabled here; `out` holds four i32.
        unsafe { _mm_storeu_si128(out.as_mut_ptr().cast(), tile_i8_vnni([&x], w, sums)[0]) };
        out
    }

    /// See [`super::dot_panel_i8`]: tiles of four rows of `x`, then two, then one.
    #[target_feature(enable = "avx2,avx512f,avx512bw,avx512vnni")]
    pub unsafe fn panel_i8_vnni(x: &[i8], w: [&[i8]; 4], sums: [i32; 4], out: &mut [[i32; 4]]) {
        // SAFETY: the features of `Vnni` are enabled here.
        unsafe { panel::<Vnni>(&flip(x), w, sums, out) }
    }

    /// `out[i]`: row `i` of `x` (`[out.len(), _]`, prepared for `T`) against the four rows of
    /// `w`, with `T`'s tiles.
    ///
    /// # Safety
    /// `T`'s target features must be available.
    #[inline(always)]
    unsafe fn panel<T: Tiles>(x: &[i8], w: [&[i8]; 4], sums: [i32; 4], out: &mut [[i32; 4]]) {
        let k = x.len() / out.len();
        // SAFETY: the caller guarantees `T`'s features; `out[i]` holds four i32.
        unsafe {
            T::tiles(x, k, 0..out.len(), w, sums, |i, s| {
                _mm_storeu_si128(out[i].as_mut_ptr().cast(), s)
            })
        }
    }

    /// `x + 128` (a sign-bit flip: the unsigned operand of `vpdpbusd`), 64-byte aligned.
    fn flip(x: &[i8]) -> super::Aligned {
        let mut out = super::Aligned::zeroed(x.len());
        for (o, &v) in out.iter_mut().zip(x) {
            *o = v ^ i8::MIN;
        }
        out
    }

    /// `R` rows of `x`, given as `xu = x + 128` (each `k` long), against four rows of `w`: 64
    /// lanes per step with `vpdpbusd`, which multiplies unsigned by signed bytes: `x + 128`
    /// times `w`, summed in i32, minus `128 · Σ w`; exact (a lane adds four products of at
    /// most 255 · 127). The `4 · R` accumulators stay in registers (R ≤ 4: 16 of 32), so each
    /// vector of `w` is loaded once per `R` rows. The rest of `k` (not a multiple of 64) is
    /// summed plainly.
    #[target_feature(enable = "avx2,avx512f,avx512bw,avx512vnni")]
    #[inline]
    unsafe fn tile_i8_vnni<const R: usize>(
        xu: [&[i8]; R],
        w: [&[i8]; 4],
        sums: [i32; 4],
    ) -> [__m128i; R] {
        let k = xu[0].len();
        assert!(xu.iter().all(|r| r.len() == k) && w.iter().all(|r| r.len() >= k));
        let body = k / 64 * 64;
        let mut acc = [[_mm512_setzero_si512(); 4]; R];
        let mut c = 0;
        while c < body {
            // SAFETY: c + 64 ≤ k ≤ every row's length.
            unsafe {
                let wv: [__m512i; 4] =
                    std::array::from_fn(|j| _mm512_loadu_si512(w[j].as_ptr().add(c).cast()));
                for a in 0..R {
                    let xv = _mm512_loadu_si512(xu[a].as_ptr().add(c).cast());
                    for j in 0..4 {
                        acc[a][j] = _mm512_dpbusd_epi32(acc[a][j], xv, wv[j]);
                    }
                }
            }
            c += 64;
        }
        // Σ w over the body, per row of w: what the `+ 128` added, divided by 128.
        let body_sums: [i32; 4] = std::array::from_fn(|j| {
            sums[j] - w[j][body..k].iter().map(|&v| i32::from(v)).sum::<i32>()
        });
        // Σ (x + 128) · w over the body, per row of x its four sums at once (plain loops, no
        // closure over `acc`: that made LLVM keep the accumulators in memory in the loop).
        let shift = _mm_mullo_epi32(
            _mm_set1_epi32(128),
            _mm_setr_epi32(body_sums[0], body_sums[1], body_sums[2], body_sums[3]),
        );
        let mut out = [_mm_setzero_si128(); R];
        for a in 0..R {
            out[a] = _mm_sub_epi32(reduce4_512(acc[a]), shift);
            if body < k {
                let rest = tail4(xu[a], w, body, |v| i32::from(v as u8) - 128);
                out[a] = _mm_add_epi32(out[a], rest);
            }
        }
        out
    }

    /// The products of columns `from..` of `x` with the four rows of `w`, as one vector;
    /// `value` reads an entry of `x` (the VNNI kernel's are `x + 128`).
    #[inline(always)]
    fn tail4(x: &[i8], w: [&[i8]; 4], from: usize, value: impl Fn(i8) -> i32) -> __m128i {
        let t: [i32; 4] = std::array::from_fn(|j| {
            (from..x.len())
                .map(|c| value(x[c]) * i32::from(w[j][c]))
                .sum()
        });
        // SAFETY: SSE2 is part of x86_64.
        unsafe { _mm_setr_epi32(t[0], t[1], t[2], t[3]) }
    }

    /// The four horizontal sums of `v` (i32 lanes), in order: each vector's halves added,
    /// then [`reduce4_256`].
    #[target_feature(enable = "avx2,avx512f,avx512bw,avx512vnni")]
    fn reduce4_512(v: [__m512i; 4]) -> __m128i {
        reduce4_256(v.map(|v| {
            _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64::<1>(v))
        }))
    }

    /// See [`super::dot_panel_i8`]: tiles of two rows of `x`, then one.
    #[target_feature(enable = "avx2")]
    pub unsafe fn panel_i8(x: &[i8], w: [&[i8]; 4], out: &mut [[i32; 4]]) {
        // SAFETY: the features of `Avx2` are enabled here (it reads no sums).
        unsafe { panel::<Avx2>(x, w, [0; 4], out) }
    }

    /// See [`super::dot4_i8`].
    #[target_feature(enable = "avx2")]
    pub unsafe fn dot4_i8(x: &[i8], w: [&[i8]; 4]) -> [i32; 4] {
        let mut out = [0i32; 4];
        // SAFETY: AVX2 is enabled here; `out` holds four i32.
        unsafe { _mm_storeu_si128(out.as_mut_ptr().cast(), tile_i8([x], w)[0]) };
        out
    }

    /// `R` rows of `x` against four rows of `w`: 32 lanes per step with `maddubs` on |x| and
    /// sign(x)·w (no saturation: values are in -127..=127, a pair sums to at most
    /// 2 · 127² < 2^15). R ≤ 2 keeps the accumulators in the 16 registers. Each row's four
    /// sums come back in one vector.
    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn tile_i8<const R: usize>(x: [&[i8]; R], w: [&[i8]; 4]) -> [__m128i; R] {
        let k = x[0].len();
        assert!(x.iter().all(|r| r.len() == k) && w.iter().all(|r| r.len() >= k));
        let body = k / 32 * 32;
        let ones = _mm256_set1_epi16(1);
        let mut acc = [[_mm256_setzero_si256(); 4]; R];
        let mut c = 0;
        while c < body {
            // SAFETY: c + 32 ≤ k ≤ every row's length.
            unsafe {
                let wv: [__m256i; 4] =
                    std::array::from_fn(|j| _mm256_loadu_si256(w[j].as_ptr().add(c).cast()));
                for a in 0..R {
                    let xv = _mm256_loadu_si256(x[a].as_ptr().add(c).cast());
                    let ax = _mm256_sign_epi8(xv, xv);
                    for j in 0..4 {
                        let p16 = _mm256_maddubs_epi16(ax, _mm256_sign_epi8(wv[j], xv));
                        acc[a][j] = _mm256_add_epi32(acc[a][j], _mm256_madd_epi16(p16, ones));
                    }
                }
            }
            c += 32;
        }
        // Plain loops, no closure over `acc` (that made LLVM keep the accumulators in memory).
        let mut out = [_mm_setzero_si128(); R];
        for a in 0..R {
            out[a] = reduce4_256(acc[a]);
            if body < k {
                out[a] = _mm_add_epi32(out[a], tail4(x[a], w, body, i32::from));
            }
        }
        out
    }

    /// The four horizontal sums of `v` (i32 lanes), in order: adjacent pairs interleaved and
    /// added within 128-bit lanes (`[a, b, c, d]` per lane), then the two lanes added.
    #[target_feature(enable = "avx2")]
    fn reduce4_256(v: [__m256i; 4]) -> __m128i {
        let ab = _mm256_add_epi32(
            _mm256_unpacklo_epi32(v[0], v[1]),
            _mm256_unpackhi_epi32(v[0], v[1]),
        );
        let cd = _mm256_add_epi32(
            _mm256_unpacklo_epi32(v[2], v[3]),
            _mm256_unpackhi_epi32(v[2], v[3]),
        );
        let abcd = _mm256_add_epi32(_mm256_unpacklo_epi64(ab, cd), _mm256_unpackhi_epi64(ab, cd));
        _mm_add_epi32(
            _mm256_castsi256_si128(abcd),
            _mm256_extracti128_si256::<1>(abcd),
        )
    }
}

#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
mod wasm {
    use core::arch::wasm32::*;

    fn hsum(v: v128) -> f32 {
        f32x4_extract_lane::<0>(v)
            + f32x4_extract_lane::<1>(v)
            + f32x4_extract_lane::<2>(v)
            + f32x4_extract_lane::<3>(v)
    }

    /// See [`super::dot4_f32`]; 8 lanes per step (two f32x4 halves).
    pub fn dot4_f32(x: &[f32], w: [&[i8]; 4]) -> [f32; 4] {
        let k = x.len();
        assert!(w.iter().all(|r| r.len() >= k));
        let body = k / 8 * 8;
        let mut acc = [f32x4_splat(0.0); 4];
        let mut c = 0;
        while c < body {
            // SAFETY: c + 8 ≤ k ≤ every row's length; v128 loads are unaligned.
            unsafe {
                let x0 = v128_load(x.as_ptr().add(c).cast());
                let x1 = v128_load(x.as_ptr().add(c + 4).cast());
                for j in 0..4 {
                    let w16 = i16x8_load_extend_i8x8(w[j].as_ptr().add(c));
                    let w0 = f32x4_convert_i32x4(i32x4_extend_low_i16x8(w16));
                    let w1 = f32x4_convert_i32x4(i32x4_extend_high_i16x8(w16));
                    acc[j] = f32x4_add(acc[j], f32x4_add(f32x4_mul(x0, w0), f32x4_mul(x1, w1)));
                }
            }
            c += 8;
        }
        std::array::from_fn(|j| {
            let tail: f32 = (body..k).map(|c| x[c] * f32::from(w[j][c])).sum();
            hsum(acc[j]) + tail
        })
    }

    /// See [`super::dot_panel_i8`]. Widens `x` into a new buffer on every call ([`lanes`]):
    /// for tests; the engine goes through [`block_i8`], which widens once per tile of rows.
    pub fn panel_i8(x: &[i8], w: [&[i8]; 4], sums: [i32; 4], out: &mut [[i32; 4]]) {
        let k = x.len() / out.len();
        panel(&lanes(x), k, w, sums, |i, d| {
            out[i] = [
                i32x4_extract_lane::<0>(d),
                i32x4_extract_lane::<1>(d),
                i32x4_extract_lane::<2>(d),
                i32x4_extract_lane::<3>(d),
            ]
        });
    }

    /// See [`super::dot4_i8`].
    pub fn dot4_i8(x: &[i8], w: [&[i8]; 4], sums: [i32; 4]) -> [i32; 4] {
        let mut out = [[0; 4]];
        panel_i8(x, w, sums, &mut out);
        out[0]
    }

    /// [`super::block`] for int8 activations `q` with scales `sx`: [`super::block_i8`] with each
    /// row's four products kept as one vector, scaled, biased, ReLU'd and stored with vector
    /// operations; the same operations in the same order per element, so the same results.
    /// In the relaxed build it is compiled with relaxed SIMD, so its kernel inlines into it.
    #[cfg_attr(feature = "relaxed-simd", target_feature(enable = "relaxed-simd"))]
    pub(super) fn block_i8(
        (m, w, relu, rows, y, stride): super::BlockArgs<'_, '_>,
        q: &[i8],
        sx: &[f32],
    ) {
        let (k, start) = (w.k, rows.start);
        for m0 in (0..m).step_by(super::M_TILE) {
            let m1 = (m0 + super::M_TILE).min(m);
            let x = lanes(&q[m0 * k..m1 * k]);
            let mut r = rows.start;
            while r < rows.end {
                let group = (rows.end - r).min(4);
                // Fewer than four rows left: repeat the last one (its extra results are dropped).
                let pick = |j: usize| r + j.min(group - 1);
                let ws: [&[i8]; 4] = std::array::from_fn(|j| w.row(pick(j)));
                let sums: [i32; 4] = std::array::from_fn(|j| w.sums[pick(j)]);
                let four = |v: &[f32]| f32x4(v[pick(0)], v[pick(1)], v[pick(2)], v[pick(3)]);
                let (scale, bias) = (four(&w.scale), four(&w.bias));
                panel(&x, k, ws, sums, |i, d| {
                    let i = m0 + i;
                    let v = f32x4_mul(f32x4_convert_i32x4(d), f32x4_splat(sx[i]));
                    let mut v = f32x4_add(f32x4_mul(v, scale), bias);
                    if relu {
                        // `fmax(v, 0)`: 0 < v ? v : 0.
                        v = f32x4_pmax(f32x4_splat(0.0), v);
                    }
                    let dst = &mut y[i * stride + r - start..][..group];
                    if group == 4 {
                        // SAFETY: `dst` holds four f32; v128 stores are unaligned.
                        unsafe { v128_store(dst.as_mut_ptr().cast(), v) };
                    } else {
                        let v = [
                            f32x4_extract_lane::<0>(v),
                            f32x4_extract_lane::<1>(v),
                            f32x4_extract_lane::<2>(v),
                            f32x4_extract_lane::<3>(v),
                        ];
                        dst.copy_from_slice(&v[..group]);
                    }
                });
                r += group;
            }
        }
    }

    /// `f(i, dots)` for every row `i` of `x` (`[rows, k]`, see [`lanes`]), `dots` its four
    /// products with `w` (whose rows sum to `sums`) as one vector, in tiles of two rows, then
    /// one. The relaxed build uses the kernel of the browser's [`super::RelaxedDot`] mode. (It
    /// is only loaded where the browser validated relaxed SIMD, web/worker.js; elsewhere the
    /// module would not compile at all.)
    #[inline(always)]
    fn panel(x: &[Lane], k: usize, w: [&[i8]; 4], sums: [i32; 4], mut f: impl FnMut(usize, v128)) {
        let n = x.len() / k.max(1);
        let row = |i: usize| &x[i * k..][..k];
        #[cfg(feature = "relaxed-simd")]
        let mode = relaxed_dot();
        // Tiles of `R` rows of `x` against the four rows of `w`.
        #[cfg(feature = "relaxed-simd")]
        let tile = |x, w| tile_relaxed(x, w, sums, mode);
        #[cfg(feature = "relaxed-simd")]
        let tile1 = |x, w| tile_relaxed(x, w, sums, mode);
        #[cfg(not(feature = "relaxed-simd"))]
        let (tile, tile1) = {
            let _ = sums;
            (tile_i8::<2>, tile_i8::<1>)
        };
        let mut i = 0;
        while i + 2 <= n {
            let [a, b] = tile([row(i), row(i + 1)], w);
            f(i, a);
            f(i + 1, b);
            i += 2;
        }
        if i < n {
            f(i, tile1([row(i)], w)[0]);
        }
    }

    /// An element of `x` as the kernels read it: widened to i16 in the simd128 build, so that
    /// each row is widened once per product, not once per group of four rows of `W`.
    #[cfg(not(feature = "relaxed-simd"))]
    type Lane = i16;
    /// An element of `x` as the kernels read it: int8, as the relaxed dot products take it.
    #[cfg(feature = "relaxed-simd")]
    type Lane = i8;

    /// `x` as the kernels read it ([`Lane`]).
    fn lanes(x: &[i8]) -> std::borrow::Cow<'_, [Lane]> {
        #[cfg(not(feature = "relaxed-simd"))]
        return std::borrow::Cow::Owned(x.iter().map(|&v| i16::from(v)).collect());
        #[cfg(feature = "relaxed-simd")]
        std::borrow::Cow::Borrowed(x)
    }

    /// The four horizontal sums of `acc` as one vector (lane `j`: the sum of `acc[j]`'s lanes).
    fn reduce4(acc: [v128; 4]) -> v128 {
        let pairs = |a: v128, b: v128| {
            i32x4_add(
                i32x4_shuffle::<0, 4, 1, 5>(a, b),
                i32x4_shuffle::<2, 6, 3, 7>(a, b),
            )
        };
        let (ab, cd) = (pairs(acc[0], acc[1]), pairs(acc[2], acc[3]));
        i32x4_add(
            i32x4_shuffle::<0, 1, 4, 5>(ab, cd),
            i32x4_shuffle::<2, 3, 6, 7>(ab, cd),
        )
    }

    /// The products of columns `from..` of `x` with the four rows of `w`, as one vector.
    #[inline(always)]
    fn tail4<T: Copy + Into<i32>>(x: &[T], w: [&[i8]; 4], from: usize) -> v128 {
        if from >= x.len() {
            return i32x4_splat(0);
        }
        let t: [i32; 4] = std::array::from_fn(|j| {
            (from..x.len())
                .map(|c| x[c].into() * i32::from(w[j][c]))
                .sum()
        });
        i32x4(t[0], t[1], t[2], t[3])
    }

    /// `R` rows of `x` (widened to i16 already) against four rows of `w`: `w` widened to i16,
    /// `i32x4.dot_i16x8`; each widened vector of `w` serves `R` rows.
    #[cfg(not(feature = "relaxed-simd"))]
    #[inline(always)]
    fn tile_i8<const R: usize>(x: [&[i16]; R], w: [&[i8]; 4]) -> [v128; R] {
        let k = x[0].len();
        assert!(x.iter().all(|r| r.len() == k) && w.iter().all(|r| r.len() >= k));
        let body = k / 8 * 8;
        let mut acc = [[i32x4_splat(0); 4]; R];
        let mut c = 0;
        while c < body {
            // SAFETY: c + 8 ≤ k ≤ every row's length, in elements; v128 loads are unaligned.
            unsafe {
                let wv: [v128; 4] =
                    std::array::from_fn(|j| i16x8_load_extend_i8x8(w[j].as_ptr().add(c)));
                for a in 0..R {
                    let xv = v128_load(x[a].as_ptr().add(c).cast());
                    for j in 0..4 {
                        acc[a][j] = i32x4_add(acc[a][j], i32x4_dot_i16x8(xv, wv[j]));
                    }
                }
            }
            c += 8;
        }
        std::array::from_fn(|a| i32x4_add(reduce4(acc[a]), tail4(x[a], w, body)))
    }

    /// This browser's [`super::RelaxedDot`], found on first use: the dot product of the
    /// probes, its operands hidden from the optimizer so that the browser computes it.
    #[cfg(feature = "relaxed-simd")]
    pub fn relaxed_dot() -> super::RelaxedDot {
        static MODE: std::sync::OnceLock<super::RelaxedDot> = std::sync::OnceLock::new();
        *MODE.get_or_init(|| {
            let results = super::RelaxedDot::PROBES.map(|(a, b)| {
                let (a, b) = std::hint::black_box((a, b as i8));
                let d = probe_dot(i8x16_splat(a), i8x16_splat(b));
                [
                    i32x4_extract_lane::<0>(d),
                    i32x4_extract_lane::<1>(d),
                    i32x4_extract_lane::<2>(d),
                    i32x4_extract_lane::<3>(d),
                ]
            });
            super::RelaxedDot::classify(std::hint::black_box(results))
        })
    }

    /// `a · b` per group of four bytes, onto 0, by the instruction the kernels use.
    #[cfg(feature = "relaxed-simd")]
    #[target_feature(enable = "relaxed-simd")]
    #[inline(never)]
    fn probe_dot(a: v128, b: v128) -> v128 {
        i32x4_relaxed_dot_i8x16_i7x16_add(a, b, i32x4_splat(0))
    }

    /// `R` rows of `x` against four rows of `w` (summing to `sums`) with one
    /// `i32x4.relaxed_dot_i8x16_i7x16_add` per 16 columns, where the browser's dot reads its
    /// second operand as signed or as exact unsigned bytes: the operand is `x` XOR
    /// [`super::RelaxedDot::flip`], and [`super::RelaxedDot::offset`] of the body's weight sums
    /// comes off each result. [`super::RelaxedDot::SevenBit`] goes to [`tile_sign`].
    #[cfg(feature = "relaxed-simd")]
    #[target_feature(enable = "relaxed-simd")]
    #[inline]
    fn tile_relaxed<const R: usize>(
        x: [&[i8]; R],
        w: [&[i8]; 4],
        sums: [i32; 4],
        mode: super::RelaxedDot,
    ) -> [v128; R] {
        if mode == super::RelaxedDot::SevenBit {
            return tile_sign(x, w);
        }
        let k = x[0].len();
        assert!(x.iter().all(|r| r.len() == k) && w.iter().all(|r| r.len() >= k));
        let body = k / 16 * 16;
        let flip = i8x16_splat(mode.flip());
        let mut acc = [[i32x4_splat(0); 4]; R];
        let mut c = 0;
        while c < body {
            // SAFETY: c + 16 ≤ k ≤ every row's length; v128 loads are unaligned.
            unsafe {
                let wv: [v128; 4] = std::array::from_fn(|j| v128_load(w[j].as_ptr().add(c).cast()));
                for a in 0..R {
                    let xv = v128_xor(v128_load(x[a].as_ptr().add(c).cast()), flip);
                    for j in 0..4 {
                        acc[a][j] = i32x4_relaxed_dot_i8x16_i7x16_add(wv[j], xv, acc[a][j]);
                    }
                }
            }
            c += 16;
        }
        // `sums` cover whole rows; the offset is for the body's columns only.
        let offset: [i32; 4] = std::array::from_fn(|j| {
            let tail: i32 = w[j][body..k].iter().map(|&v| i32::from(v)).sum();
            mode.offset(sums[j] - tail)
        });
        let offset = i32x4(offset[0], offset[1], offset[2], offset[3]);
        std::array::from_fn(|a| i32x4_add(i32x4_sub(reduce4(acc[a]), offset), tail4(x[a], w, body)))
    }

    /// `R` rows of `x` against four rows of `w` where the browser's dot product reads only a
    /// second operand in 0..=127 alike on every CPU ([`super::RelaxedDot::SevenBit`]):
    /// `x · w = |x| · (sign(x) · w)`. The second operand `|x|` is 0..=127 (`x` is −127..=127,
    /// see [`super::quantize_rows`]) and the first, `sign(x) · w` (`w` XOR m − m, m = −1 where
    /// `x < 0`), is −127..=127, as bundles hold no −128 ([`crate::weights::BundleError`]'s
    /// `Int8Range`). So every product is defined, and a pair of them is at most
    /// `2 · 127² < 2^15`, so `i16x8.relaxed_dot_i8x16_i7x16_s` (pairs summed in i16: x86's
    /// `pmaddubsw`) is exact on any CPU; `i32x4.dot_i16x8_s` with ones widens its pairs
    /// (`pmaddwd`). The native AVX2 kernel's `sign` trick in wasm. Written as these two
    /// operations, beam 4 ran about 10% faster on an AVX2-only EPYC than with the fused
    /// `i32x4.relaxed_dot_i8x16_i7x16_add` (five alternating page runs each; runs there vary
    /// by 30%).
    #[cfg(feature = "relaxed-simd")]
    #[target_feature(enable = "relaxed-simd")]
    #[inline]
    fn tile_sign<const R: usize>(x: [&[i8]; R], w: [&[i8]; 4]) -> [v128; R] {
        let k = x[0].len();
        assert!(x.iter().all(|r| r.len() == k) && w.iter().all(|r| r.len() >= k));
        let body = k / 16 * 16;
        let (zero, ones) = (i8x16_splat(0), i16x8_splat(1));
        let mut acc = [[i32x4_splat(0); 4]; R];
        let mut c = 0;
        while c < body {
            // SAFETY: c + 16 ≤ k ≤ every row's length; v128 loads are unaligned.
            unsafe {
                let wv: [v128; 4] = std::array::from_fn(|j| v128_load(w[j].as_ptr().add(c).cast()));
                for a in 0..R {
                    let xv = v128_load(x[a].as_ptr().add(c).cast());
                    let (minus, abs) = (i8x16_lt(xv, zero), i8x16_abs(xv));
                    for j in 0..4 {
                        let signed = i8x16_sub(v128_xor(wv[j], minus), minus);
                        let pairs = i16x8_relaxed_dot_i8x16_i7x16(signed, abs);
                        acc[a][j] = i32x4_add(acc[a][j], i32x4_dot_i16x8(pairs, ones));
                    }
                }
            }
            c += 16;
        }
        std::array::from_fn(|a| i32x4_add(reduce4(acc[a]), tail4(x[a], w, body)))
    }
}
