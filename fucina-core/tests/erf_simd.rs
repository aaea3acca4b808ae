//! The vectorised erf (`kernels::simd::erf_in_place`, and each of its AVX-512 / AVX2 loops
//! the CPU has) against
//! `libm::erf`, the scalar function it replaces, compared bit for bit (`to_bits`; a NaN must
//! give a NaN): strided sweeps of every f32 and f64 bit pattern range, msun's region
//! boundaries and their neighbours, the specials, and millions of random values. An
//! `#[ignore]`d test runs all 2^32 f32 inputs (`cargo test --release -p fucina-core --test
//! erf_simd -- --ignored`).
//!
//! The `gelu_erf` kernels that use it (forward and backward, f32 and f64, 1 and 2 threads,
//! contiguous and strided inputs) against the formula they had before, written out here
//! with the scalar `libm::erf` and the std `exp`, and against the table's per-element
//! `GeluErf.f` / `df`: every output bit equal.

use fucina_core::kernels::elementwise::{GeluErf, Pointwise, UnaryOp};
use fucina_core::kernels::simd::{erf_in_place, erf_in_place_variants, ErfSliceFn};
use fucina_core::testing::TestCtx;
use fucina_core::{Element, Float};

/// Runs `erf_in_place` and each of its vector loops this CPU runs on `xs` (in slices of
/// odd lengths too, so the padded tail is covered) and counts the values whose bits differ
/// from `libm::erf` (none, or it panics naming the first few); returns how many values each
/// loop checked. (The `"scalar"` variant is `libm::erf` itself.)
fn compare(xs: &[f64]) -> usize {
    let mut kernels: Vec<(&str, ErfSliceFn)> = vec![("dispatched", erf_in_place)];
    let variants = erf_in_place_variants();
    if !variants.iter().any(|v| v.0 == "avx512") {
        // Once per test binary, not once per compared block.
        static SKIP: std::sync::Once = std::sync::Once::new();
        SKIP.call_once(|| {
            println!("skip: no AVX-512 F/BW/VL/DQ on this CPU; its erf loop is not checked")
        });
    }
    kernels.extend(variants.into_iter().filter(|v| v.0 != "scalar"));
    let want: Vec<f64> = xs.iter().map(|&x| libm::erf(x)).collect();
    for (name, kernel) in kernels {
        compare_one(name, kernel, xs, &want);
    }
    xs.len()
}

/// [`compare`] for one loop, against `want = libm::erf(xs)`.
fn compare_one(name: &str, kernel: ErfSliceFn, xs: &[f64], want: &[f64]) {
    let mut got = xs.to_vec();
    // Uneven slices: the vector body and the padded tail both run.
    let mut start = 0;
    let mut len = 1;
    while start < got.len() {
        let end = (start + len).min(got.len());
        kernel(&mut got[start..end]);
        start = end;
        len = len % 37 + 1;
    }
    let mut bad = Vec::new();
    for ((&x, &g), &want) in xs.iter().zip(&got).zip(want) {
        let same = if want.is_nan() {
            g.is_nan()
        } else {
            g.to_bits() == want.to_bits()
        };
        if !same && bad.len() < 8 {
            bad.push(format!(
                "erf({x:e} = {:#018x}) = {g:e} ({:#018x}), libm {want:e} ({:#018x})",
                x.to_bits(),
                g.to_bits(),
                want.to_bits()
            ));
        }
    }
    assert!(
        bad.is_empty(),
        "{name} erf differs from libm::erf:\n{}",
        bad.join("\n")
    );
}

/// The next f64 up (toward +inf) by bits; `f64::next_up` needs Rust 1.86.
fn next_up(x: f64) -> f64 {
    if x.is_nan() || x == f64::INFINITY {
        return x;
    }
    if x == 0.0 {
        return f64::from_bits(1);
    }
    let b = x.to_bits();
    f64::from_bits(if x > 0.0 { b + 1 } else { b - 1 })
}

/// The next f64 down.
fn next_down(x: f64) -> f64 {
    -next_up(-x)
}

/// SplitMix64.
fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Each f64 in `v`, its negation, and `k` neighbours on each side of both.
fn with_neighbours(v: &[f64], k: usize) -> Vec<f64> {
    let mut out = Vec::new();
    for &c in v {
        for s in [c, -c] {
            out.push(s);
            let (mut up, mut down) = (s, s);
            for _ in 0..k {
                up = next_up(up);
                down = next_down(down);
                out.push(up);
                out.push(down);
            }
        }
    }
    out
}

#[test]
fn specials_and_region_boundaries_match_libm_bitwise() {
    let hw = |h: u64| f64::from_bits(h << 32);
    let mut v = vec![
        0.0,
        f64::INFINITY,
        f64::NAN,
        f64::from_bits(0x7ff0_0000_0000_0001), // a signalling NaN payload
        f64::from_bits(0x7ff8_dead_beef_0000), // a quiet NaN with a payload
        f64::MIN_POSITIVE,
        f64::from_bits(1), // the smallest subnormal
        f64::from_bits(0x000f_ffff_ffff_ffff),
        f64::MAX,
        f32::MIN_POSITIVE as f64,
        f32::from_bits(1) as f64,
        f32::MAX as f64,
        1.0,
        0.5,
        2.0,
        28.0,
        1.0 / 0.35,
    ];
    // msun's erf regions (high-word thresholds) and exp's (for its arguments).
    for h in [
        0x3e30_0000u64, // 2^-28
        0x3feb_0000,    // 0.84375
        0x3ff4_0000,    // 1.25
        0x4006_db6d,    // 1/0.35
        0x4018_0000,    // 6
        0x3fd6_2e42,
        0x3fd6_2e43,
        0x3ff0_a2b2,
        0x3e30_0001,
    ] {
        v.push(hw(h));
        v.push(f64::from_bits(((h + 1) << 32) - 1)); // the same high word, the top low word
    }
    let xs = with_neighbours(&v, 2000);
    let n = compare(&xs);
    println!("erf: {n} special and boundary values bitwise equal to libm::erf");
}

#[test]
fn strided_f32_sweep_matches_libm_bitwise() {
    // 2^24 evenly spaced f32 bit patterns (both signs, every exponent), widened to f64.
    let xs: Vec<f64> = (0..1u64 << 24)
        .map(|i| f32::from_bits((i << 8) as u32 | (i & 0xff) as u32) as f64)
        .collect();
    let n = compare(&xs);
    println!("erf: {n} strided f32 values bitwise equal to libm::erf");
}

#[test]
fn dense_erf_range_sweeps_match_libm_bitwise() {
    // Every f32 in [-8, 8] with a stride of 16 ulps (where erf is not ±1 or ±x), and 2^24
    // evenly spaced f64 bit patterns over the whole range.
    let lo = 0u32;
    let hi = 8.0f32.to_bits();
    let mut xs: Vec<f64> = (lo..hi)
        .step_by(16)
        .flat_map(|b| {
            let v = f32::from_bits(b) as f64;
            [v, -v]
        })
        .collect();
    xs.extend((0..1u64 << 24).map(|i| f64::from_bits(i.wrapping_mul(0x0000_1000_0000_0ffd))));
    let n = compare(&xs);
    println!("erf: {n} dense-sweep values bitwise equal to libm::erf");
}

#[test]
fn random_f64_match_libm_bitwise() {
    let mut s = 0x5eed_u64;
    let mut xs = Vec::with_capacity(6 << 20);
    for _ in 0..(2 << 20) {
        // Random bit patterns: every exponent equally often.
        xs.push(f64::from_bits(splitmix(&mut s)));
    }
    for _ in 0..(4 << 20) {
        // Uniform on (-7, 7): every region of erf, full 53-bit mantissas.
        let u = (splitmix(&mut s) >> 11) as f64 / (1u64 << 53) as f64;
        xs.push(14.0 * u - 7.0);
    }
    let n = compare(&xs);
    println!("erf: {n} random f64 values bitwise equal to libm::erf");
}

#[test]
#[ignore = "all 2^32 f32 inputs: minutes; run with --ignored"]
fn exhaustive_f32_matches_libm_bitwise() {
    let mut total = 0usize;
    let block = 1u64 << 24;
    for b in 0..(1u64 << 32) / block {
        let xs: Vec<f64> = (b * block..(b + 1) * block)
            .map(|i| f32::from_bits(i as u32) as f64)
            .collect();
        total += compare(&xs);
    }
    assert_eq!(total, 1usize << 32);
    println!("erf: all {total} f32 values bitwise equal to libm::erf");
}

/// The gelu_erf forward and derivative as written before the vectorised erf (scalar
/// `libm::erf` on the argument widened to f64, std `exp`), for f32 and f64.
trait OldGelu: Float {
    fn old_f(self) -> Self;
    fn old_df(self) -> Self;
}
macro_rules! old_gelu {
    ($t:ty) => {
        impl OldGelu for $t {
            fn old_f(self) -> $t {
                let x = self;
                let u = x * (std::f64::consts::FRAC_1_SQRT_2 as $t);
                0.5 * x * (1.0 + libm::erf(u as f64) as $t)
            }
            fn old_df(self) -> $t {
                let x = self;
                let u = x * (std::f64::consts::FRAC_1_SQRT_2 as $t);
                let cdf = 0.5 * (1.0 + libm::erf(u as f64) as $t);
                let pdf = (0.398_942_280_401_432_7f64 as $t) * (-0.5 * x * x).exp();
                cdf + x * pdf
            }
        }
    };
}
old_gelu!(f32);
old_gelu!(f64);

/// An FNV-1a-style hash over the outputs' bits (printed so runs on different builds can be compared).
fn hash<T: Element>(v: &[T]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for x in v {
        h = (h ^ x.to_f64().to_bits()).wrapping_mul(0x0000_0100_0000_01b3);
        h ^= h >> 29; // f32 values widen with 29 zero low bits: fold the high ones down
    }
    h
}

/// Inputs: N(0, 2²) (every erf region is hit), with specials sprinkled in.
fn inputs<T: Float>(n: usize, seed: u64) -> Vec<T> {
    let mut s = seed;
    (0..n)
        .map(|i| {
            let r = splitmix(&mut s);
            let v = match i % 997 {
                0 => f64::NAN,
                1 => f64::INFINITY,
                2 => f64::NEG_INFINITY,
                3 => 0.0,
                4 => -0.0,
                5 => 1e-300,
                6 => 40.0,
                _ => {
                    // Box–Muller from two 53-bit uniforms.
                    let u1 = ((r >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
                    let u2 = (splitmix(&mut s) >> 11) as f64 / (1u64 << 53) as f64;
                    2.0 * (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
                }
            };
            T::from_f64(v)
        })
        .collect()
}

/// Bitwise equality (NaN == NaN).
fn same<T: Float>(a: T, b: T) -> bool {
    if b.is_nan() {
        a.is_nan()
    } else {
        a.to_f64().to_bits() == b.to_f64().to_bits()
    }
}

fn check_kernels<T: Float + OldGelu>(threads: usize) -> usize {
    let ctx = TestCtx::with_threads(threads).unwrap();
    let (rows, cols) = (1024, 1536);
    let xv = inputs::<T>(rows * cols, 11);
    let gv = inputs::<T>(rows * cols, 12);
    let x = ctx.from_slice(&xv, &[rows, cols]).unwrap();
    let g = ctx.from_slice(&gv, &[rows, cols]).unwrap();
    let mut compared = 0;
    // Contiguous, and transposed (strided: the per-element path), and a view with odd
    // row lengths (the vector tail).
    let xt = x.transpose(0, 1).unwrap();
    let gt = g.transpose(0, 1).unwrap();
    let xo = x.narrow(1, 3, 1001).unwrap();
    let go = g.narrow(1, 3, 1001).unwrap();
    for (xi, gi) in [(&x, &g), (&xt, &gt), (&xo, &go)] {
        let xs: Vec<T> = xi.to_vec::<T>().unwrap();
        let gs: Vec<T> = gi.to_vec::<T>().unwrap();
        let y = ctx
            .unary(xi, UnaryOp::GeluErf)
            .unwrap()
            .to_vec::<T>()
            .unwrap();
        let gx = ctx
            .unary_backward(xi, gi, UnaryOp::GeluErf)
            .unwrap()
            .to_vec::<T>()
            .unwrap();
        for i in 0..xs.len() {
            let (v, gg) = (xs[i], gs[i]);
            assert!(
                same(y[i], v.old_f()) && same(y[i], GeluErf.f(v)),
                "gelu_erf({:e}) = {:e}, before {:e}",
                v.to_f64(),
                y[i].to_f64(),
                v.old_f().to_f64()
            );
            let want = gg * v.old_df();
            assert!(
                same(gx[i], want) && same(gx[i], gg * GeluErf.df(v)),
                "gelu_erf backward({:e}, {:e}) = {:e}, before {:e}",
                v.to_f64(),
                gg.to_f64(),
                gx[i].to_f64(),
                want.to_f64()
            );
        }
        println!(
            "gelu_erf {:?} {} threads {:?}: forward {:016x}, backward {:016x}",
            T::DTYPE,
            threads,
            xi.shape(),
            hash(&y),
            hash(&gx)
        );
        compared += 2 * xs.len();
    }
    drop((x, g, xt, gt, xo, go));
    assert_eq!(ctx.stats().outstanding, 0);
    compared
}

#[test]
fn gelu_erf_kernels_match_the_scalar_formula_bitwise() {
    let mut n = 0;
    for threads in [1, 2] {
        n += check_kernels::<f32>(threads);
        n += check_kernels::<f64>(threads);
    }
    println!("gelu_erf: {n} forward and backward outputs bitwise equal to the scalar formula");
}
