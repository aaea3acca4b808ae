//! The branch-free ports in `fucina_core::vmath` give the bits of the scalar routines they
//! replace: checked against a plain transcription of each routine (fdlibm's branches, as
//! written) over a sweep of the f32 bit patterns and every special value, and on glibc
//! against the platform libm that `f32::tanh` calls. The exhaustive run over all 2^32 inputs
//! is `cargo test --release -p fucina-core --test vmath -- --ignored`.
//!
//! fixture-exempt: pure scalar math, no context or pool involved.

use fucina_core::kernels::simd::{tanh_f32_slice, tanh_f32_slice_variants};
use fucina_core::vmath::tanh_f32;

/// fdlibm's `expm1f` (glibc `sysdeps/ieee754/flt-32/s_expm1f.c`), branches as written.
fn expm1f_ref(x0: f32) -> f32 {
    const LN2_HI: f32 = f32::from_bits(0x3f31_7180);
    const LN2_LO: f32 = f32::from_bits(0x3717_f7d1);
    const INVLN2: f32 = f32::from_bits(0x3fb8_aa3b);
    const Q: [f32; 5] = [
        f32::from_bits(0xbd08_8889),
        f32::from_bits(0x3ad0_0d01),
        f32::from_bits(0xb8a6_70cd),
        f32::from_bits(0x3686_7e54),
        f32::from_bits(0xb457_edbb),
    ];
    let mut x = x0;
    let bits = x.to_bits();
    let xsb = bits & 0x8000_0000;
    let hx = bits & 0x7fff_ffff;
    if hx >= 0x4195_b844 {
        if hx >= 0x42b1_7218 {
            if hx > 0x7f80_0000 {
                return x + x;
            }
            if hx == 0x7f80_0000 {
                return if xsb == 0 { x } else { -1.0 };
            }
            if x > f32::from_bits(0x42b1_7180) {
                return f32::INFINITY;
            }
        }
        if xsb != 0 {
            return 1.0e-30 - 1.0;
        }
    }
    let (k, c);
    if hx > 0x3eb1_7218 {
        let (hi, lo);
        if hx < 0x3f85_1592 {
            if xsb == 0 {
                hi = x - LN2_HI;
                lo = LN2_LO;
                k = 1;
            } else {
                hi = x + LN2_HI;
                lo = -LN2_LO;
                k = -1;
            }
        } else {
            k = (INVLN2 * x + if xsb == 0 { 0.5 } else { -0.5 }) as i32;
            let t = k as f32;
            hi = x - t * LN2_HI;
            lo = t * LN2_LO;
        }
        x = hi - lo;
        c = (hi - x) - lo;
    } else if hx < 0x3300_0000 {
        let t = 1.0e30 + x;
        return x - (t - (1.0e30 + x));
    } else {
        k = 0;
        c = 0.0;
    }
    let hfx = 0.5 * x;
    let hxs = x * hfx;
    let r1 = 1.0 + hxs * (Q[0] + hxs * (Q[1] + hxs * (Q[2] + hxs * (Q[3] + hxs * Q[4]))));
    let t = 3.0 - r1 * hfx;
    let mut e = hxs * ((r1 - t) / (6.0 - x * t));
    if k == 0 {
        return x - (x * e - hxs);
    }
    e = x * (e - c) - c;
    e -= hxs;
    if k == -1 {
        return 0.5 * (x - e) - 0.5;
    }
    if k == 1 {
        return if x < -0.25 {
            -2.0 * (e - (x + 0.5))
        } else {
            1.0 + 2.0 * (x - e)
        };
    }
    let add_k = |y: f32| f32::from_bits(y.to_bits().wrapping_add((k as u32) << 23));
    if k <= -2 || k > 56 {
        return add_k(1.0 - (e - x)) - 1.0;
    }
    if k < 23 {
        let t = f32::from_bits(0x3f80_0000 - (0x0100_0000 >> k));
        add_k(t - (e - x))
    } else {
        let t = f32::from_bits(((0x7f - k) as u32) << 23);
        add_k((x - (e + t)) + 1.0)
    }
}

/// fdlibm's `tanhf` (glibc `sysdeps/ieee754/flt-32/s_tanhf.c`), branches as written.
fn tanhf_ref(x: f32) -> f32 {
    let jx = x.to_bits();
    let ix = jx & 0x7fff_ffff;
    if ix >= 0x7f80_0000 {
        return if jx >> 31 == 0 {
            1.0 / x + 1.0
        } else {
            1.0 / x - 1.0
        };
    }
    let z = if ix < 0x41b0_0000 {
        if ix == 0 {
            return x;
        }
        if ix < 0x2400_0000 {
            return x * (1.0 + x);
        }
        if ix >= 0x3f80_0000 {
            let t = expm1f_ref(2.0 * x.abs());
            1.0 - 2.0 / (t + 2.0)
        } else {
            let t = expm1f_ref(-2.0 * x.abs());
            -t / (t + 2.0)
        }
    } else {
        1.0 - 1.0e-30
    };
    if jx >> 31 == 0 {
        z
    } else {
        -z
    }
}

fn same(a: f32, b: f32) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

/// Every bit pattern `b` with `b % stride == phase`, plus the specials and each range
/// boundary with its neighbours; returns the number checked. Runs the vector path over a
/// whole batch (so the loop is the vectorised one the kernels run).
fn sweep(stride: u64, phase: u64, check: impl Fn(f32, f32)) -> u64 {
    let mut xs: Vec<f32> = Vec::with_capacity(1 << 16);
    let mut n = 0u64;
    let mut flush = |xs: &mut Vec<f32>| {
        let ys: Vec<f32> = xs.iter().map(|&x| tanh_f32(x)).collect();
        // The dispatched slice loop, and each variant this CPU runs (AVX-512, AVX2, the
        // baseline), give the same bits.
        let mut vs = vec![0.0f32; xs.len()];
        tanh_f32_slice(xs, &mut vs);
        for ((&x, &y), &v) in xs.iter().zip(&ys).zip(&vs) {
            assert!(same(v, y), "tanh_f32_slice({x:e}) = {v:e}, tanh_f32 {y:e}");
            check(x, y);
        }
        for (name, variant) in tanh_f32_slice_variants() {
            variant(xs, &mut vs);
            for ((&x, &y), &v) in xs.iter().zip(&ys).zip(&vs) {
                assert!(
                    same(v, y),
                    "tanh {name} variant({x:e}) = {v:e}, tanh_f32 {y:e}"
                );
            }
        }
        n += xs.len() as u64;
        xs.clear();
    };
    let mut b = phase;
    while b <= u32::MAX as u64 {
        xs.push(f32::from_bits(b as u32));
        if xs.len() == 1 << 16 {
            flush(&mut xs);
        }
        b += stride;
    }
    let edges: [u32; 10] = [
        0x0000_0000,
        0x0000_0001,
        0x0080_0000,
        0x2400_0000,
        0x3300_0000,
        0x3eb1_7218,
        0x3f80_0000,
        0x3f85_1592,
        0x41b0_0000,
        0x7f80_0000,
    ];
    for e in edges {
        for d in -3i64..=3 {
            let v = (e as i64 + d).clamp(0, 0x7fff_ffff) as u32;
            xs.push(f32::from_bits(v));
            xs.push(f32::from_bits(v | 0x8000_0000));
        }
    }
    // Arguments that land on each expm1 reduction boundary from inside tanh (2|x|, −2|x|).
    for a in [
        0.5f32 * std::f32::consts::LN_2,
        1.5 * std::f32::consts::LN_2,
        27.0 * std::f32::consts::LN_2,
    ] {
        let mut v = a / 2.0;
        for _ in 0..4 {
            v = f32::from_bits(v.to_bits() - 1);
        }
        for _ in 0..8 {
            xs.push(v);
            xs.push(-v);
            v = f32::from_bits(v.to_bits() + 1);
        }
    }
    xs.extend([
        f32::NAN,
        -f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::MIN,
        f32::MAX,
    ]);
    flush(&mut xs);
    n
}

/// Asserts that `y = tanh_f32(x)` is fdlibm's tanhf of `x`, bit for bit.
fn assert_fdlibm(x: f32, y: f32) {
    let r = tanhf_ref(x);
    assert!(
        same(y, r),
        "tanh_f32({x:e} = {:#010x}) = {y:e}, fdlibm {r:e}",
        x.to_bits()
    );
}

#[test]
fn tanh_f32_matches_fdlibm_over_a_sweep_of_every_bit_pattern() {
    let n = sweep(61, 17, assert_fdlibm);
    assert!(n > 70_000_000, "{n} values checked");
    let names: Vec<&str> = tanh_f32_slice_variants().iter().map(|v| v.0).collect();
    for isa in ["avx512", "avx2"] {
        if !names.contains(&isa) {
            println!("skip: no {isa} on this CPU, its tanh variant was not run");
        }
    }
    println!("tanh variants compared with tanh_f32: {names:?}");
    println!("tanh_f32: {n} inputs equal to fdlibm's tanhf, bit for bit");
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[test]
fn tanh_f32_matches_the_glibc_routine_it_replaces() {
    let n = sweep(97, 5, |x, y| {
        let g = x.tanh();
        assert!(same(y, g), "tanh_f32({x:e}) = {y:e}, glibc tanhf {g:e}");
    });
    println!("tanh_f32: {n} inputs equal to glibc's tanhf, bit for bit");
}

#[test]
#[ignore = "exhaustive: all 2^32 inputs, ~10 minutes in release"]
fn tanh_f32_matches_fdlibm_on_every_f32() {
    let n = sweep(1, 0, |x, y| {
        assert_fdlibm(x, y);
        #[cfg(all(target_os = "linux", target_env = "gnu"))]
        assert!(same(y, x.tanh()), "tanh_f32({x:e}) vs glibc");
    });
    println!("tanh_f32: all {n} inputs equal");
}
