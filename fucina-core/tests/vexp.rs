//! `kernels::simd::exp_f32_in_place` (the vector loop where it is enabled: glibc, AVX2 and
//! FMA) returns `f32::exp`'s bits: over a strided sweep of all f32 bit patterns, every
//! region edge of glibc's `expf` with its neighbours, the specials, and slices of every
//! length 0..=40 (the scalar tail). The exhaustive run over all 2^32 inputs is
//! `cargo test --release -p fucina-core --test vexp -- --ignored`.
//!
//! fixture-exempt: pure scalar math, no context or pool involved.

use fucina_core::kernels::simd::{exp_f32_in_place, exp_f32_vectorised};

/// Compares the slice kernel with `f32::exp` on the bit patterns `start, start+step, ..`
/// below `end` (u64 so the last step cannot wrap), in blocks; returns how many were checked.
fn sweep(start: u64, end: u64, step: u64) -> u64 {
    let mut buf = Vec::with_capacity(1 << 16);
    let mut n = 0;
    let mut b = start;
    while b < end {
        buf.clear();
        while b < end && buf.len() < 1 << 16 {
            buf.push(f32::from_bits(b as u32));
            b += step;
        }
        let mut got = buf.clone();
        exp_f32_in_place(&mut got);
        for (x, y) in buf.iter().zip(&got) {
            let want = x.exp();
            assert_eq!(
                y.to_bits(),
                want.to_bits(),
                "exp({x:e}) [bits {:#010x}]: got {y:e}, expf gives {want:e}",
                x.to_bits()
            );
        }
        n += buf.len() as u64;
    }
    n
}

fn report() {
    if exp_f32_vectorised() {
        eprintln!("vexp: the AVX2+FMA loop is enabled on this machine");
    } else {
        eprintln!("skip: vexp's vector loop is not enabled here (needs x86_64 glibc with AVX2+FMA); checking the scalar path");
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
    let mut v = vec![
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
    exp_f32_in_place(&mut v);
    for (y, w) in v.iter().zip(&want) {
        assert!(y.to_bits() == w.to_bits() || (y.is_nan() && w.is_nan()));
    }
}

#[test]
fn every_slice_length_matches_expf() {
    for len in 0..=40usize {
        let x: Vec<f32> = (0..len).map(|i| (i as f32 - 20.0) * 0.731).collect();
        let mut got = x.clone();
        exp_f32_in_place(&mut got);
        for (a, b) in x.iter().zip(&got) {
            assert_eq!(a.exp().to_bits(), b.to_bits(), "len {len}, x {a}");
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
