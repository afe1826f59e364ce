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
//! simd128 kernel on wasm32 when compiled with `target_feature = "simd128"`. Kernels compute one row of `x` against four rows of `W` at
//! once, so `x` is loaded once per four outputs.
//!
//! Natively, large products split the rows of `W` (output features) across `threads` scoped
//! threads; every output is computed the same way whatever the split, so the thread count
//! never changes a result.

use crate::weights::QuantizedMatrix;

/// How [`matmul`] multiplies (see the module docs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MatmulKind {
    /// Activations widened to f32 against f32-converted weights, f32 accumulation: the burn
    /// model's numbers up to summation order (the engine tests compare tokens with it).
    F32,
    /// Activations quantized per row to int8, i32 accumulation. The default: with AVX2 about
    /// 1.6× the f32 variant's GFLOP/s at the shipped model's sizes (65 vs 40 GFLOP/s on one
    /// core for a beam-4 decoder step), and the smallest memory traffic.
    #[default]
    Int8,
}

/// Products below this many multiply-adds run on the calling thread: spawning scoped threads
/// costs tens of microseconds (far more when the other cores are busy), the time of about 2^21
/// multiply-adds. So a decoder step splits only its output projection, and only with beams.
const PARALLEL_MIN_MACS: usize = 1 << 21;

/// A linear layer for the CPU: int8 weights `[n, k]` row-major, one scale and one bias per row.
#[derive(Clone, Debug, PartialEq)]
pub struct Q8Linear {
    /// Output features.
    pub n: usize,
    /// Input features.
    pub k: usize,
    /// `[n, k]`: `W[r, c] ≈ w[r · k + c] · scale[r]`.
    pub w: Vec<i8>,
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
    /// (`[n]`; an empty slice means no bias).
    pub fn new(m: &QuantizedMatrix, bias: &[f32]) -> Self {
        let w: Vec<i8> = m
            .packed
            .iter()
            .flat_map(|word| word.to_le_bytes())
            .map(|b| b as i8)
            .collect();
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

    /// Bytes of weights, scales and biases.
    pub fn bytes(&self) -> usize {
        self.w.len() + 8 * self.n
    }
}

/// Each row's sum of `w` (`[n, k]`).
fn w_sums(w: &[i8], k: usize) -> Vec<i32> {
    w.chunks_exact(k.max(1))
        .map(|row| row.iter().map(|&v| i32::from(v)).sum())
        .collect()
}

/// Quantizes each row of `x` (`[m, k]`) to int8: `q = round(x / sx)`, `sx = max|x| / 127`
/// (0 for an all-zero row). Returns `q` `[m, k]` and `sx` `[m]`.
pub fn quantize_rows(x: &[f32], k: usize) -> (Vec<i8>, Vec<f32>) {
    let mut q = Vec::with_capacity(x.len());
    let mut scales = Vec::with_capacity(x.len() / k.max(1));
    for row in x.chunks_exact(k.max(1)) {
        let max = row.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let s = max / 127.0;
        let inv = if s > 0.0 { 1.0 / s } else { 0.0 };
        q.extend(
            row.iter()
                .map(|v| (v * inv).round().clamp(-127.0, 127.0) as i8),
        );
        scales.push(s);
    }
    (q, scales)
}

/// `y = x · Wᵀ + b` (then `max(0, y)` when `relu`), with `kind`, on up to `threads` threads.
///
/// # Shapes
/// `x`: `[m, k]`; returns `[m, n]`.
pub fn matmul(
    x: &[f32],
    m: usize,
    w: &Q8Linear,
    relu: bool,
    kind: MatmulKind,
    threads: usize,
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

/// The activations as a kernel reads them.
enum Input<'a> {
    F32(&'a [f32]),
    /// Quantized rows and their scales.
    Int8(&'a [i8], &'a [f32]),
}

/// Splits the output features across threads (natively) and runs [`block`] on each part.
fn run(m: usize, w: &Q8Linear, relu: bool, threads: usize, input: &Input<'_>) -> Vec<f32> {
    let n = w.n;
    let mut y = vec![0.0f32; m * n];
    let parts = if m * n * w.k < PARALLEL_MIN_MACS || cfg!(target_arch = "wasm32") {
        1
    } else {
        threads.clamp(1, n.div_ceil(4).max(1))
    };
    if parts <= 1 {
        block(m, w, relu, input, 0..n, &mut y, n);
        return y;
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        // Whole groups of four rows per part, so every output goes through the same kernel.
        let per = n.div_ceil(4).div_ceil(parts) * 4;
        let ranges: Vec<std::ops::Range<usize>> = (0..n)
            .step_by(per)
            .map(|start| start..(start + per).min(n))
            .collect();
        let mut locals: Vec<Vec<f32>> = ranges.iter().map(|r| vec![0.0; m * r.len()]).collect();
        std::thread::scope(|scope| {
            let (first, rest) = locals.split_first_mut().expect("at least one part");
            for (range, local) in ranges[1..].iter().zip(rest) {
                let range = range.clone();
                scope.spawn(move || block(m, w, relu, input, range.clone(), local, range.len()));
            }
            block(m, w, relu, input, ranges[0].clone(), first, ranges[0].len());
        });
        for (range, local) in ranges.iter().zip(&locals) {
            for (dst, src) in y.chunks_exact_mut(n).zip(local.chunks_exact(range.len())) {
                dst[range.clone()].copy_from_slice(src);
            }
        }
    }
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
    let k = w.k;
    let start = rows.start;
    for m0 in (0..m).step_by(M_TILE) {
        let m1 = (m0 + M_TILE).min(m);
        let mut r = rows.start;
        while r < rows.end {
            let group = (rows.end - r).min(4);
            // Fewer than four rows left: repeat the last one (its extra results are dropped).
            let ws: [&[i8]; 4] = std::array::from_fn(|j| w.row(r + j.min(group - 1)));
            let sums: [i32; 4] = std::array::from_fn(|j| w.sums[r + j.min(group - 1)]);
            for i in m0..m1 {
                let out: [f32; 4] = match input {
                    Input::F32(x) => {
                        let d = dot4_f32(&x[i * k..][..k], ws);
                        std::array::from_fn(|j| d[j] * w.scale[r + j.min(group - 1)])
                    }
                    Input::Int8(q, s) => {
                        let d = dot4_i8(&q[i * k..][..k], ws, sums);
                        std::array::from_fn(|j| d[j] as f32 * s[i] * w.scale[r + j.min(group - 1)])
                    }
                };
                for j in 0..group {
                    let v = out[j] + w.bias[r + j];
                    y[i * stride + r - start + j] = if relu { v.max(0.0) } else { v };
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
    // Only the AVX-512 VNNI kernel needs the sums; wrong ones would show only on CPUs with it.
    debug_assert!(
        (0..4).all(|j| sums[j] == w[j][..x.len()].iter().map(|&v| i32::from(v)).sum::<i32>()),
        "sums must be the rows' sums"
    );
    #[cfg(not(target_arch = "x86_64"))]
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
    return wasm::dot4_i8(x, w);
    #[allow(unreachable_code)]
    portable::dot4_i8(x, w)
}

/// Whether the AVX2 + FMA kernels may run (cached by std). `WEBNMT_NO_SIMD=1` forces the
/// portable kernels (for measurements).
#[cfg(target_arch = "x86_64")]
fn avx2() -> bool {
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
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    return "simd128";
    #[allow(unreachable_code)]
    "portable"
}

/// Plain Rust, shaped for auto-vectorization: 16 independent lanes per accumulator.
pub mod portable {
    const LANES: usize = 16;

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

    #[target_feature(enable = "avx2")]
    fn hsum_i32(v: __m256i) -> i32 {
        let lo = _mm256_castsi256_si128(v);
        let hi = _mm256_extracti128_si256::<1>(v);
        let s = _mm_add_epi32(lo, hi);
        let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b01_00_11_10>(s));
        let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b10_11_00_01>(s));
        _mm_cvtsi128_si32(s)
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

    /// See [`super::dot4_i8`]: 64 lanes per step with `vpdpbusd`, which multiplies unsigned
    /// by signed bytes: `x + 128` (a sign-bit flip) times `w`, summed in i32, minus
    /// `128 · Σ w`; exact (a lane adds four products of at most 255 · 127). The rest of `x`
    /// (`k` not a multiple of 64) goes through the AVX2 kernel.
    #[target_feature(enable = "avx2,avx512f,avx512bw,avx512vnni")]
    pub unsafe fn dot4_i8_vnni(x: &[i8], w: [&[i8]; 4], sums: [i32; 4]) -> [i32; 4] {
        let k = x.len();
        assert!(w.iter().all(|r| r.len() >= k));
        let body = k / 64 * 64;
        let flip = _mm512_set1_epi8(-128);
        let mut acc = [_mm512_setzero_si512(); 4];
        let mut c = 0;
        while c < body {
            // SAFETY: c + 64 ≤ k ≤ every row's length.
            unsafe {
                let xu = _mm512_xor_si512(_mm512_loadu_si512(x.as_ptr().add(c).cast()), flip);
                for j in 0..4 {
                    let wv = _mm512_loadu_si512(w[j].as_ptr().add(c).cast());
                    acc[j] = _mm512_dpbusd_epi32(acc[j], xu, wv);
                }
            }
            c += 64;
        }
        // Σ (x + 128) · w over the body, four sums at once: 512 → 256 → 128 bits, then two
        // horizontal adds of the four vectors.
        let half = |v: __m512i| {
            _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64::<1>(v))
        };
        let quarter =
            |v: __m256i| _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
        let q: [__m128i; 4] = std::array::from_fn(|j| quarter(half(acc[j])));
        let s = _mm_hadd_epi32(_mm_hadd_epi32(q[0], q[1]), _mm_hadd_epi32(q[2], q[3]));
        let mut out = [0i32; 4];
        // SAFETY: `out` holds four i32.
        unsafe { _mm_storeu_si128(out.as_mut_ptr().cast(), s) };
        let rest = if body < k {
            // SAFETY: AVX2 is enabled on this function.
            unsafe { dot4_i8(&x[body..], std::array::from_fn(|j| &w[j][body..k])) }
        } else {
            [0; 4]
        };
        std::array::from_fn(|j| {
            let body_sum: i32 = sums[j] - w[j][body..k].iter().map(|&v| i32::from(v)).sum::<i32>();
            out[j] - 128 * body_sum + rest[j]
        })
    }

    /// See [`super::dot4_i8`]: 32 lanes per step with `maddubs` on |x| and sign(x)·w (no
    /// saturation: values are in -127..=127, a pair sums to at most 2 · 127² < 2^15).
    #[target_feature(enable = "avx2")]
    pub unsafe fn dot4_i8(x: &[i8], w: [&[i8]; 4]) -> [i32; 4] {
        let k = x.len();
        assert!(w.iter().all(|r| r.len() >= k));
        let body = k / 32 * 32;
        let ones = _mm256_set1_epi16(1);
        let mut acc = [_mm256_setzero_si256(); 4];
        let mut c = 0;
        while c < body {
            // SAFETY: c + 32 ≤ k ≤ every row's length.
            unsafe {
                let xv = _mm256_loadu_si256(x.as_ptr().add(c).cast());
                let ax = _mm256_sign_epi8(xv, xv);
                for j in 0..4 {
                    let wv = _mm256_loadu_si256(w[j].as_ptr().add(c).cast());
                    let p16 = _mm256_maddubs_epi16(ax, _mm256_sign_epi8(wv, xv));
                    acc[j] = _mm256_add_epi32(acc[j], _mm256_madd_epi16(p16, ones));
                }
            }
            c += 32;
        }
        std::array::from_fn(|j| {
            let tail: i32 = (body..k)
                .map(|c| i32::from(x[c]) * i32::from(w[j][c]))
                .sum();
            hsum_i32(acc[j]) + tail
        })
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

    fn hsum_i32(v: v128) -> i32 {
        i32x4_extract_lane::<0>(v)
            + i32x4_extract_lane::<1>(v)
            + i32x4_extract_lane::<2>(v)
            + i32x4_extract_lane::<3>(v)
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

    /// See [`super::dot4_i8`]: i8 widened to i16, `i32x4.dot_i16x8`.
    pub fn dot4_i8(x: &[i8], w: [&[i8]; 4]) -> [i32; 4] {
        let k = x.len();
        assert!(w.iter().all(|r| r.len() >= k));
        let body = k / 8 * 8;
        let mut acc = [i32x4_splat(0); 4];
        let mut c = 0;
        while c < body {
            // SAFETY: c + 8 ≤ k ≤ every row's length.
            unsafe {
                let xv = i16x8_load_extend_i8x8(x.as_ptr().add(c));
                for j in 0..4 {
                    let wv = i16x8_load_extend_i8x8(w[j].as_ptr().add(c));
                    acc[j] = i32x4_add(acc[j], i32x4_dot_i16x8(xv, wv));
                }
            }
            c += 8;
        }
        std::array::from_fn(|j| {
            let tail: i32 = (body..k)
                .map(|c| i32::from(x[c]) * i32::from(w[j][c]))
                .sum();
            hsum_i32(acc[j]) + tail
        })
    }
}
