//! `kernels::simd::exp_f32_in_place` and each of its loops this CPU runs (AVX-512, AVX2:
//! enabled on glibc with FMA; the scalar one everywhere) return `f32::exp`'s bits: over a
//! strided sweep of all f32 bit patterns, every region edge of glibc's `expf` with its
//! neighbours, the specials, and slices of every length 0..=40 (the vector tails). The
//! exhaustive run over all 2^32 inputs is
//! `cargo test --release -p fucina-core --test vexp -- --ignored`.
//!
//! fixture-exempt: pure scalar math, no context or pool involved.

use fucina_core::kernels::simd::{
    exp_f32_in_place, exp_f32_in_place_variants, exp_f32_vectorised, ExpSliceFn,
};

/// The dispatched slice kernel, then every loop this CPU runs.
fn kernels() -> Vec<(&'static str, ExpSliceFn)> {
    let mut v: Vec<(&'static str, ExpSliceFn)> = vec![("dispatched", exp_f32_in_place)];
    v.extend(exp_f32_in_place_variants());
    v
}

/// Compares each slice kernel with `f32::exp` on the bit patterns `start, start+step, ..`
/// below `end` (u64 so the last step cannot wrap), in blocks; returns how many were checked.
fn sweep(start: u64, end: u64, step: u64) -> u64 {
    let kernels = kernels();
    let mut buf = Vec::with_capacity(1 << 16);
    let mut n = 0;
    let mut b = start;
    while b < end {
        buf.clear();
        while b < end && buf.len() < 1 << 16 {
            buf.push(f32::from_bits(b as u32));
            b += step;
        }
        let want: Vec<f32> = buf.iter().map(|x| x.exp()).collect();
        for (name, kernel) in &kernels {
            let mut got = buf.clone();
            kernel(&mut got);
            for ((x, y), w) in buf.iter().zip(&got).zip(&want) {
                assert_eq!(
                    y.to_bits(),
                    w.to_bits(),
                    "{name}: exp({x:e}) [bits {:#010x}]: got {y:e}, expf gives {w:e}",
                    x.to_bits()
                );
            }
        }
        n += buf.len() as u64;
    }
    n
}

fn report() {
    let names: Vec<&str> = exp_f32_in_place_variants().iter().map(|v| v.0).collect();
    if exp_f32_vectorised() {
        eprintln!("vexp: loops enabled on this machine: {names:?}");
    } else {
        eprintln!("skip: vexp's vector loops are not enabled here (need x86_64 glibc with AVX2+FMA); checking the scalar path");
    }
    if !names.contains(&"avx512") {
        eprintln!("skip: no AVX-512F (or its probe failed) on this machine: the avx512 loop is not checked");
    }
}

#[test]
fn strided_sweep_of_all_f32_matches_expf() {
    report();
    // A step coprime to 2^32 visits every exponent and many mantissas.
    let n = sweep(0, 1 << 32, 61);
    assert!(n > 70_000_000);
}

#[test]
fn every_region_edge_and_special_matches_expf() {
    report();
    let edges: [u32; 9] = [
        0x42b0_0000, // 88: the slow path starts at |x| ≥ 88
        0xc2b0_0000,
        0x42b1_7217, // overflow threshold
        0xc2cf_f1b4, // underflow to 0
        0xc2ce_8ecf, // may-underflow (the smallest subnormal)
        0x0000_0000,
        0x8000_0000,
        0x3f80_0000,
        0x7f80_0000, // +inf; the loop below also covers NaNs and -inf
    ];
    for e in edges {
        sweep(e.saturating_sub(300) as u64, e as u64 + 300, 1);
    }
    let v = vec![
        f32::NAN,
        -f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::MIN_POSITIVE,
        -f32::MIN_POSITIVE,
        f32::MAX,
        f32::MIN,
        f32::from_bits(1),
        f32::from_bits(0x8000_0001),
        1e-8,
        -1e-8,
        0.5,
        -0.5,
    ];
    let want: Vec<f32> = v.iter().map(|x| x.exp()).collect();
    for (name, kernel) in kernels() {
        let mut got = v.clone();
        kernel(&mut got);
        for (y, w) in got.iter().zip(&want) {
            assert!(
                y.to_bits() == w.to_bits() || (y.is_nan() && w.is_nan()),
                "{name}: {y:e} against expf's {w:e}"
            );
        }
    }
}

#[test]
fn every_slice_length_matches_expf() {
    for (name, kernel) in kernels() {
        for len in 0..=40usize {
            let x: Vec<f32> = (0..len).map(|i| (i as f32 - 20.0) * 0.731).collect();
            let mut got = x.clone();
            kernel(&mut got);
            for (a, b) in x.iter().zip(&got) {
                assert_eq!(a.exp().to_bits(), b.to_bits(), "{name}: len {len}, x {a}");
            }
        }
    }
}

#[test]
#[ignore = "exhaustive: all 2^32 inputs (about a minute on one core)"]
fn all_f32_inputs_match_expf() {
    report();
    let n = sweep(0, 1 << 32, 1);
    eprintln!("all {n} inputs equal");
}
