//! The CPU matrix products against `reference::matmul_q8`, kernel by kernel, and a timing of
//! both variants (`cargo test --release --lib cpu::tests::matmul_timing -- --ignored
//! --nocapture`).

use super::matmul::{self, MatmulKind, Q8Linear, portable, quantize_rows};
use super::pool::Pool;
use crate::reference::{self, compare};
use crate::weights::QuantizedMatrix;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

fn random(rng: &mut SmallRng, len: usize) -> Vec<f32> {
    (0..len).map(|_| rng.random_range(-1.0..1.0)).collect()
}

fn pool(threads: usize) -> Pool {
    Pool::new(threads).expect("the pool's threads start")
}

fn problem(
    rng: &mut SmallRng,
    m: usize,
    n: usize,
    k: usize,
) -> (Vec<f32>, QuantizedMatrix, Vec<f32>) {
    let x = random(rng, m * k);
    let w = QuantizedMatrix::quantize(&random(rng, n * k), n, k).expect("k multiple of 4");
    (x, w, random(rng, n))
}

/// Awkward sizes: one row, rows not a multiple of the tile, n not a multiple of 4, k with tails
/// after the 8/16/32-lane bodies.
const SHAPES: [(usize, usize, usize); 6] = [
    (1, 1, 4),
    (1, 7, 12),
    (7, 33, 36),
    (33, 5, 100),
    (3, 64, 256),
    (40, 130, 1024),
];

#[test]
fn matmul_f32_matches_reference() {
    let mut rng = SmallRng::seed_from_u64(7);
    for (m, n, k) in SHAPES {
        let (x, w, b) = problem(&mut rng, m, n, k);
        for relu in [false, true] {
            let want = reference::matmul_q8(&x, m, &w, &b, relu);
            for threads in [1, 3] {
                let got = matmul::matmul(
                    &x,
                    m,
                    &Q8Linear::new(&w, &b),
                    relu,
                    MatmulKind::F32,
                    &pool(threads),
                );
                let c = compare(&got, &want, 1e-4, 1e-4);
                assert!(
                    c.passed(),
                    "[{m}, {n}, {k}] relu {relu} threads {threads}: {c:?}"
                );
            }
        }
    }
}

/// The int8 variant equals the reference fed the quantized activations (exact integer sums),
/// and differs from the f32 product by no more than the activations' rounding allows:
/// |Δy| ≤ Σ |w| · sx / 2 per output.
#[test]
fn matmul_int8_matches_reference_on_quantized_activations() {
    let mut rng = SmallRng::seed_from_u64(8);
    for (m, n, k) in SHAPES {
        let (x, w, b) = problem(&mut rng, m, n, k);
        let (q, sx) = quantize_rows(&x, k);
        let xq: Vec<f32> = q
            .iter()
            .enumerate()
            .map(|(i, &v)| f32::from(v) * sx[i / k])
            .collect();
        let want = reference::matmul_q8(&xq, m, &w, &b, false);
        let got = matmul::matmul(
            &x,
            m,
            &Q8Linear::new(&w, &b),
            false,
            MatmulKind::Int8,
            &pool(2),
        );
        let c = compare(&got, &want, 1e-4, 1e-4);
        assert!(c.passed(), "[{m}, {n}, {k}]: {c:?}");
        let exact = reference::matmul_q8(&x, m, &w, &b, false);
        let wd = w.dequantize();
        for i in 0..m {
            for r in 0..n {
                let bound: f32 =
                    wd[r * k..][..k].iter().map(|v| v.abs()).sum::<f32>() * sx[i] / 2.0;
                let err = (got[i * n + r] - exact[i * n + r]).abs();
                assert!(
                    err <= bound + 1e-4,
                    "[{i}, {r}] error {err} > bound {bound}"
                );
            }
        }
    }
}

/// The SIMD kernels (where this machine has them) equal the portable ones: exactly for int8,
/// to rounding for f32.
#[test]
fn simd_kernels_match_portable_kernels() {
    let mut rng = SmallRng::seed_from_u64(9);
    for k in [4, 8, 12, 32, 36, 64, 100, 128, 200, 256, 1024] {
        let x = random(&mut rng, k);
        let (xq, _) = quantize_rows(&x, k);
        let rows: Vec<Vec<i8>> = (0..4)
            .map(|_| (0..k).map(|_| rng.random_range(-127..=127i8)).collect())
            .collect();
        let w: [&[i8]; 4] = std::array::from_fn(|j| rows[j].as_slice());
        let sums: [i32; 4] = std::array::from_fn(|j| rows[j].iter().map(|&v| i32::from(v)).sum());
        let want = portable::dot4_i8(&xq, w);
        assert_eq!(matmul::dot4_i8(&xq, w, sums), want, "k {k}");
        // Each x86 kernel this machine has, whichever `dot4_i8` chose.
        #[cfg(target_arch = "x86_64")]
        {
            if is_x86_feature_detected!("avx2") {
                // SAFETY: AVX2 is present.
                assert_eq!(unsafe { matmul::x86::dot4_i8(&xq, w) }, want, "avx2, k {k}");
            }
            if matmul::vnni512() {
                // SAFETY: AVX-512 F, BW and VNNI are present.
                let got = unsafe { matmul::x86::dot4_i8_vnni(&xq, w, sums) };
                assert_eq!(got, want, "avx512-vnni, k {k}");
            }
        }
        let (got, want) = (matmul::dot4_f32(&x, w), portable::dot4_f32(&x, w));
        let c = compare(&got, &want, 1e-3, 1e-5);
        assert!(c.passed(), "k {k} ({}): {c:?}", matmul::simd_name());
    }
}

/// The int8 product, whichever kernels this machine runs (tiles of rows, the fused scaling of
/// the AVX-512 path), equals the portable dot products scaled in the documented order, bit
/// for bit, with and without ReLU; and the tiled panels equal one row at a time.
#[test]
fn matmul_int8_equals_portable_kernels_exactly() {
    let mut rng = SmallRng::seed_from_u64(11);
    for (m, n, k) in SHAPES.into_iter().chain([(4, 64, 256), (9, 12, 64)]) {
        let (x, w, b) = problem(&mut rng, m, n, k);
        let lin = Q8Linear::new(&w, &b);
        let (q, sx) = quantize_rows(&x, k);
        for relu in [false, true] {
            let got = matmul::matmul(&x, m, &lin, relu, MatmulKind::Int8, &pool(1));
            for i in 0..m {
                for r in 0..n {
                    let d = portable::dot4_i8(&q[i * k..][..k], [lin.row(r); 4])[0];
                    let v = d as f32 * sx[i] * lin.scale[r] + lin.bias[r];
                    let want = if relu { v.max(0.0) } else { v };
                    assert_eq!(
                        got[i * n + r],
                        want,
                        "[{m}, {n}, {k}] relu {relu} at ({i}, {r})"
                    );
                }
            }
        }
        if n >= 4 {
            let ws: [&[i8]; 4] = std::array::from_fn(|j| lin.row(j));
            let sums: [i32; 4] = std::array::from_fn(|j| lin.sums[j]);
            let mut out = vec![[0i32; 4]; m];
            matmul::dot_panel_i8(&q, ws, sums, &mut out);
            for (i, o) in out.iter().enumerate() {
                assert_eq!(
                    *o,
                    portable::dot4_i8(&q[i * k..][..k], ws),
                    "panel row {i}, k {k}"
                );
            }
        }
    }
}

/// Quantization rounds half to even and clamps, as `round_ties_even` would.
#[test]
fn round_i8_rounds_half_to_even() {
    for v in [
        -200.0f32, -127.5, -126.5, -2.5, -1.5, -0.5, -0.49, 0.0, 0.5, 1.5, 2.5, 126.5, 127.4, 1e9,
    ] {
        let want = v.round_ties_even().clamp(-127.0, 127.0) as i8;
        assert_eq!(portable::round_i8(v), want, "{v}");
    }
    assert_eq!(portable::round_i8(f32::NAN), -127);
}

/// GFLOP/s of both variants at the decoder's and encoder's shapes of the shipped model
/// (d_model 256, d_ff 1024, vocabulary 7820), SIMD and portable, 1 and 2 threads.
#[test]
#[ignore = "timing, not a test: run with --ignored --nocapture"]
fn matmul_timing() {
    let mut rng = SmallRng::seed_from_u64(10);
    let shapes = [
        ("decoder step, beam 4: FFN up", 4, 1024, 256),
        ("decoder step, beam 4: logits", 4, 7820, 256),
        ("decoder step, greedy: logits", 1, 7820, 256),
        ("encoder, 30 tokens: FFN down", 30, 256, 1024),
        ("encoder, 30 tokens: QKV", 30, 768, 256),
    ];
    eprintln!("kernels: {}", matmul::simd_name());
    for (name, m, n, k) in shapes {
        let (x, w, b) = problem(&mut rng, m, n, k);
        let w = Q8Linear::new(&w, &b);
        for threads in [1, 2] {
            for kind in [MatmulKind::F32, MatmulKind::Int8] {
                let flops = 2.0 * (m * n * k) as f64;
                let reps = ((2e9 / flops) as usize).clamp(3, 20_000);
                let pool = pool(threads);
                let mut y = matmul::matmul(&x, m, &w, false, kind, &pool);
                let start = std::time::Instant::now();
                for _ in 0..reps {
                    y = matmul::matmul(&x, m, &w, false, kind, &pool);
                }
                let secs = start.elapsed().as_secs_f64();
                std::hint::black_box(&y);
                eprintln!(
                    "{name:<32} [{m}×{k}]·[{n}×{k}]ᵀ {kind:?} {threads} thr: {:7.2} GFLOP/s, {:8.1} µs",
                    flops * reps as f64 / secs / 1e9,
                    secs / reps as f64 * 1e6
                );
            }
        }
    }
}

#[test]
fn the_kernel_probe_computes_its_product() {
    // The page's timing probe (`KernelProbe` in web.rs) must do the real product: its result
    // against one from the quantized values in plain Rust.
    let probe = matmul::Int8Probe::new();
    let got = probe.run(2);
    assert_eq!(got, probe.run(1), "the same product every run");
    let (x, w) = probe.parts();
    let (q, s) = quantize_rows(x, w.k);
    let mut want = 0.0f64;
    for (i, row) in q.chunks_exact(w.k).enumerate() {
        for r in 0..w.n {
            let dot: i32 = row
                .iter()
                .zip(w.row(r))
                .map(|(&a, &b)| i32::from(a) * i32::from(b))
                .sum();
            want += f64::from(dot as f32 * s[i] * w.scale[r]);
        }
    }
    assert!(
        want.abs() > 1.0,
        "made-up data with a nonzero product: {want}"
    );
    assert!(
        (f64::from(got) - want).abs() <= 1e-3 * want.abs().max(1.0),
        "probe {got}, plain Rust {want}"
    );
}

/// `i32x4.relaxed_dot_i8x16_i7x16_add` as three kinds of CPU compute it, per output lane (four
/// products of `a[i]` with `b[i]`, summed onto `c`): `b` as signed bytes (ARM's `sdot`), as
/// unsigned bytes exactly (x86's `vpdpbusd`), or as unsigned bytes with pairs of products
/// saturated to i16 (x86's `pmaddubsw` then `pmaddwd`, without AVX-VNNI).
#[derive(Clone, Copy, Debug)]
enum DotCpu {
    Sdot,
    Vnni,
    Pmaddubsw,
}

impl DotCpu {
    fn dot(self, a: &[i8; 16], b: &[i8; 16], c: [i32; 4]) -> [i32; 4] {
        std::array::from_fn(|lane| {
            let (a, b) = (&a[4 * lane..][..4], &b[4 * lane..][..4]);
            let product = |i: usize| match self {
                DotCpu::Sdot => i32::from(a[i]) * i32::from(b[i]),
                DotCpu::Vnni | DotCpu::Pmaddubsw => i32::from(a[i]) * i32::from(b[i] as u8),
            };
            let pairs = [product(0) + product(1), product(2) + product(3)];
            let pairs = match self {
                DotCpu::Pmaddubsw => {
                    pairs.map(|p| p.clamp(i32::from(i16::MIN), i32::from(i16::MAX)))
                }
                _ => pairs,
            };
            c[lane] + pairs[0] + pairs[1]
        })
    }
}

/// The relaxed build's choice of int8 kernel from its two probes (`RelaxedDot::classify`), and
/// the arithmetic of each choice, on each kind of CPU: the chosen mode's operands (`flip` and
/// `offset`, or `|x|` and `sign(x) · w`) give the exact dot products for activations −127..=127
/// and weights −128..=127 (−127..=127 for `SevenBit`: bundles hold no −128); and the modes not
/// chosen would not have (so the probes tell them apart).
#[test]
fn the_relaxed_dot_mode_is_exact_where_it_is_chosen() {
    use matmul::RelaxedDot;
    let mut rng = SmallRng::seed_from_u64(17);
    for (cpu, want) in [
        (DotCpu::Sdot, RelaxedDot::Signed),
        (DotCpu::Vnni, RelaxedDot::Unsigned),
        (DotCpu::Pmaddubsw, RelaxedDot::SevenBit),
    ] {
        let results = RelaxedDot::PROBES.map(|(a, b)| cpu.dot(&[a; 16], &[b as i8; 16], [0; 4]));
        assert_eq!(
            RelaxedDot::classify(results),
            want,
            "{cpu:?}: probes {results:?}"
        );
        // A dot product of 64 columns, 16 at a time, as the kernel does it in each mode.
        let exact = |mode: RelaxedDot, x: &[i8], w: &[i8]| -> bool {
            let want: i32 = x
                .iter()
                .zip(w)
                .map(|(&a, &b)| i32::from(a) * i32::from(b))
                .sum();
            let mut acc = [0i32; 4];
            for (xc, wc) in x.chunks_exact(16).zip(w.chunks_exact(16)) {
                let wv: [i8; 16] = wc.try_into().expect("16");
                if mode == RelaxedDot::SevenBit {
                    let abs: [i8; 16] = std::array::from_fn(|i| xc[i].abs());
                    let signed: [i8; 16] =
                        std::array::from_fn(|i| if xc[i] < 0 { -wv[i] } else { wv[i] });
                    acc = cpu.dot(&signed, &abs, acc);
                } else {
                    let xv: [i8; 16] = std::array::from_fn(|i| xc[i] ^ mode.flip());
                    acc = cpu.dot(&wv, &xv, acc);
                }
            }
            let w_sum: i32 = w.iter().map(|&v| i32::from(v)).sum();
            acc.iter().sum::<i32>() - mode.offset(w_sum) == want
        };
        // Extreme operands (where i16 pairs saturate) and random ones.
        let mut cases = vec![
            (vec![127i8; 64], vec![127i8; 64]),
            (vec![-127; 64], vec![-127; 64]),
            (vec![-127; 64], vec![127; 64]),
        ];
        if want != RelaxedDot::SevenBit {
            cases.push((vec![-127; 64], vec![-128; 64]));
        }
        cases.extend((0..200).map(|_| {
            let x: Vec<i8> = (0..64).map(|_| rng.random_range(-127..=127)).collect();
            let least = if want == RelaxedDot::SevenBit {
                -127
            } else {
                -128
            };
            let w: Vec<i8> = (0..64).map(|_| rng.random_range(least..=127)).collect();
            (x, w)
        }));
        for (x, w) in &cases {
            assert!(
                exact(want, x, w),
                "{cpu:?} in mode {want:?}: x {x:?}, w {w:?}"
            );
        }
        for other in [RelaxedDot::Signed, RelaxedDot::Unsigned] {
            if other != want {
                assert!(
                    !cases.iter().all(|(x, w)| exact(other, x, w)),
                    "{cpu:?}: {other:?} would be exact too, so the probes need not tell it apart"
                );
            }
        }
    }
}
