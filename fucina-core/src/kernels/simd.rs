//! The one SIMD home: CPU feature detection (probed once, cached), the vectorisable exp,
//! the fixed-order lane sums, the runtime ISA dispatch (`simd_dispatch!`) every kernel
//! uses, (submodule `erf`) an AVX2 and an AVX-512 erf bitwise identical to `libm::erf`, and (submodule
//! `tanh`) the AVX2 and AVX-512 loops over `vmath::tanh_f32`, (submodule `exp`) an AVX2 and
//! an AVX-512 f32 exp bitwise identical to glibc's `expf`. No other
//! module calls `is_x86_feature_detected!`; fucina-optim asks [`update_isa`].
//!
//! Invariant: every dispatched variant computes the same bits — the row kernels use no FMA
//! and fixed reduction orders, and rustc never contracts or reassociates float math.

use std::sync::OnceLock;

use crate::dtype::Float;

mod erf;
mod exp;
mod tanh;
pub use erf::{erf_in_place, erf_in_place_variants, ErfSliceFn};
pub use exp::{exp_f32_in_place, exp_f32_in_place_variants, exp_f32_vectorised, ExpSliceFn};
pub use tanh::{tanh_f32_slice, tanh_f32_slice_variants, TanhSliceFn};

// ------------------------------------------------------------ lane sums

/// Accumulator lanes of the row sums (a fixed order, so vectorisable and deterministic).
const LANES: usize = 8;

#[inline(always)]
fn fold_lanes<T: Float>(acc: [T; LANES]) -> T {
    ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]))
}

/// Σ f(i) for i in 0..n, in 8 interleaved lanes folded pairwise, then the tail
/// in order: a fixed order that the compiler can vectorise.
#[inline(always)]
pub(crate) fn lane_sum<T: Float>(n: usize, f: impl Fn(usize) -> T) -> T {
    let mut acc = [T::ZERO; LANES];
    let full = n / LANES * LANES;
    let mut i = 0;
    while i < full {
        for (l, a) in acc.iter_mut().enumerate() {
            *a += f(i + l);
        }
        i += LANES;
    }
    let mut s = fold_lanes(acc);
    for k in full..n {
        s += f(k);
    }
    s
}

/// Σ f(x_i), in the lane order of [`lane_sum`] (bounds-check free, so it vectorises).
#[inline(always)]
pub(crate) fn lane_map_sum<T: Float>(x: &[T], f: impl Fn(T) -> T) -> T {
    let mut acc = [T::ZERO; LANES];
    let mut chunks = x.chunks_exact(LANES);
    for c in &mut chunks {
        for l in 0..LANES {
            acc[l] += f(c[l]);
        }
    }
    let mut s = fold_lanes(acc);
    for &v in chunks.remainder() {
        s += f(v);
    }
    s
}

/// Σ f(a_i, b_i) over the length of `a`, in the lane order of [`lane_sum`].
#[inline(always)]
pub(crate) fn lane_map_sum2<T: Float>(a: &[T], b: &[T], f: impl Fn(T, T) -> T) -> T {
    let b = &b[..a.len()];
    let mut acc = [T::ZERO; LANES];
    let mut ca = a.chunks_exact(LANES);
    let mut cb = b.chunks_exact(LANES);
    for (x, y) in (&mut ca).zip(&mut cb) {
        for l in 0..LANES {
            acc[l] += f(x[l], y[l]);
        }
    }
    let mut s = fold_lanes(acc);
    for (&x, &y) in ca.remainder().iter().zip(cb.remainder()) {
        s += f(x, y);
    }
    s
}

/// Σ x.
#[inline(always)]
pub(crate) fn sum<T: Float>(x: &[T]) -> T {
    lane_map_sum(x, |v| v)
}

/// Σ a·b (same lengths).
#[inline(always)]
pub(crate) fn dot<T: Float>(a: &[T], b: &[T]) -> T {
    lane_map_sum2(a, b, |x, y| x * y)
}

/// max x (−∞ for an empty row; a NaN is skipped here but propagates through `exp`).
#[inline(always)]
pub(crate) fn max<T: Float>(x: &[T]) -> T {
    let mut acc = [T::NEG_INFINITY; LANES];
    let mut chunks = x.chunks_exact(LANES);
    for c in &mut chunks {
        for l in 0..LANES {
            acc[l] = acc[l].max(c[l]);
        }
    }
    let mut m = T::NEG_INFINITY;
    for a in acc {
        m = m.max(a);
    }
    for &v in chunks.remainder() {
        m = m.max(v);
    }
    m
}

/// Σ exp(x − m) (the vectorisable exp).
#[inline(always)]
pub(crate) fn sum_exp_impl<T: RowFloat>(x: &[T], m: T) -> T {
    lane_map_sum(x, |v| (v - m).vexp())
}

// ------------------------------------------------------------ exp

/// e^x for f32 in plain arithmetic (no libm call, no FMA), so loops over it
/// vectorise and give the same bits on every SIMD width: Cody–Waite reduction
/// `x = n·ln2 + r`, Cephes' degree-7 polynomial for e^r (≈1–2 ulp), then
/// `2^n` applied as two exact power-of-two factors (covers the subnormal range).
/// exp(−∞) = 0, exp(+∞) = +∞, NaN propagates.
#[inline(always)]
pub fn exp_f32(x: f32) -> f32 {
    const MAGIC: f32 = 12_582_912.0; // 1.5·2^23: adding it rounds to an integer
    const C1: f32 = 0.693_359_4; // ln 2 high part (exact, few bits): n·C1 is exact
    const C2: f32 = -2.121_944_4e-4; // ln 2 − C1
    let xc = x.clamp(-104.0, 89.0);
    let t = xc * std::f32::consts::LOG2_E + MAGIC;
    let n = t - MAGIC;
    let r = (xc - n * C1) - n * C2;
    let p = ((((1.987_569_2e-4 * r + 1.398_199_9e-3) * r + 8.333_452e-3) * r + 4.166_579_6e-2) * r
        + 1.666_666_5e-1)
        * r
        + 0.5;
    let e = p * (r * r) + r + 1.0;
    let ni = t.to_bits() as i32 - MAGIC.to_bits() as i32;
    let n1 = ni >> 1;
    let n2 = ni - n1;
    let s1 = f32::from_bits(((n1 + 127) as u32) << 23);
    let s2 = f32::from_bits(((n2 + 127) as u32) << 23);
    let y = e * s1 * s2;
    if x < -104.0 {
        0.0
    } else {
        y
    }
}

/// e^x for f64 in plain arithmetic (see [`exp_f32`]): Cody–Waite reduction and
/// the degree-13 Taylor polynomial of e^r on |r| ≤ ln2/2 (≈1–2 ulp).
#[inline(always)]
pub fn exp_f64(x: f64) -> f64 {
    const MAGIC: f64 = 6_755_399_441_055_744.0; // 1.5·2^52
    const C1: f64 = 6.931_457_519_531_25e-1;
    const C2: f64 = 1.428_606_820_309_417_2e-6;
    let xc = x.clamp(-746.0, 710.0);
    let t = xc * std::f64::consts::LOG2_E + MAGIC;
    let n = t - MAGIC;
    let r = (xc - n * C1) - n * C2;
    // 1/k! for k = 13 down to 2.
    const INV_FACT: [f64; 12] = [
        1.0 / 6_227_020_800.0,
        1.0 / 479_001_600.0,
        1.0 / 39_916_800.0,
        1.0 / 3_628_800.0,
        1.0 / 362_880.0,
        1.0 / 40_320.0,
        1.0 / 5_040.0,
        1.0 / 720.0,
        1.0 / 120.0,
        1.0 / 24.0,
        1.0 / 6.0,
        0.5,
    ];
    let mut p = INV_FACT[0];
    for &c in &INV_FACT[1..] {
        p = p * r + c;
    }
    let e = p * (r * r) + r + 1.0;
    let ni = t.to_bits() as i64 - MAGIC.to_bits() as i64;
    let n1 = ni >> 1;
    let n2 = ni - n1;
    let s1 = f64::from_bits(((n1 + 1023) as u64) << 52);
    let s2 = f64::from_bits(((n2 + 1023) as u64) << 52);
    let y = e * s1 * s2;
    if x < -746.0 {
        0.0
    } else {
        y
    }
}

/// A compute float (f32, f64) with the vectorisable exp the row kernels use.
pub trait RowFloat: Float {
    /// e^x by [`exp_f32`] / [`exp_f64`].
    fn vexp(self) -> Self;
}
impl RowFloat for f32 {
    #[inline(always)]
    fn vexp(self) -> f32 {
        exp_f32(self)
    }
}
impl RowFloat for f64 {
    #[inline(always)]
    fn vexp(self) -> f64 {
        exp_f64(self)
    }
}

/// The widest SIMD level of this CPU that the row kernels are compiled for.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum SimdLevel {
    /// No runtime-detected extension (the baseline build).
    Base,
    /// AVX2.
    Avx2,
    /// AVX-512 (F, BW, VL, DQ).
    Avx512,
}

/// The CPU features the kernels dispatch on, probed once per process.
#[derive(Clone, Copy, Debug)]
struct Features {
    avx2: bool,
    fma: bool,
    avx512f: bool,
    /// AVX-512 F, BW, VL and DQ together (the row kernels' widest level).
    avx512_rows: bool,
    /// AVX-512 F and VL (the fused optimizer updates' widest level).
    avx512_vl: bool,
}

/// The features of this CPU, detected on first use and cached (the only place the crate
/// probes CPUID).
fn features() -> Features {
    static FEATURES: OnceLock<Features> = OnceLock::new();
    *FEATURES.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            let f = std::arch::is_x86_feature_detected!("avx512f");
            let bw = std::arch::is_x86_feature_detected!("avx512bw");
            let vl = std::arch::is_x86_feature_detected!("avx512vl");
            let dq = std::arch::is_x86_feature_detected!("avx512dq");
            Features {
                avx2: std::arch::is_x86_feature_detected!("avx2"),
                fma: std::arch::is_x86_feature_detected!("fma"),
                avx512f: f,
                avx512_rows: f && bw && vl && dq,
                avx512_vl: f && vl,
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            Features {
                avx2: false,
                fma: false,
                avx512f: false,
                avx512_rows: false,
                avx512_vl: false,
            }
        }
    })
}

/// The SIMD level the row kernels run at (detected once).
#[inline]
pub(crate) fn simd_level() -> SimdLevel {
    let f = features();
    if f.avx512_rows {
        SimdLevel::Avx512
    } else if f.avx2 {
        SimdLevel::Avx2
    } else {
        SimdLevel::Base
    }
}

/// True when this CPU has AVX2 and FMA (the packed GEMM's micro-kernels).
#[inline]
pub fn has_avx2_fma() -> bool {
    let f = features();
    f.avx2 && f.fma
}

/// True when this CPU has AVX2 (the attention tile kernels).
#[inline]
pub fn has_avx2() -> bool {
    features().avx2
}

/// True when this CPU has AVX-512F (the GEMM path choice).
#[inline]
pub fn has_avx512f() -> bool {
    features().avx512f
}

/// The vector ISA a fused elementwise loop (the optimizers' updates) may be compiled for.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum UpdateIsa {
    /// AVX-512F + VL with AVX2 and FMA.
    Avx512,
    /// AVX2 + FMA.
    Avx2Fma,
    /// The baseline build.
    Base,
}

/// The widest [`UpdateIsa`] of this CPU (detected once): for crates that compile their own
/// `#[target_feature]` loops (fucina-optim) and must not probe the CPU themselves.
#[inline]
pub fn update_isa() -> UpdateIsa {
    let f = features();
    if f.avx512_vl && f.avx2 && f.fma {
        UpdateIsa::Avx512
    } else if f.avx2 && f.fma {
        UpdateIsa::Avx2Fma
    } else {
        UpdateIsa::Base
    }
}

/// Defines `$name<T: RowFloat>(args)` that runs the `#[inline(always)]` generic
/// `$inner` compiled for AVX-512, AVX2 or the baseline, picked at run time.
/// Every variant computes the same bits: the kernels use no FMA and fixed
/// reduction orders, and rustc never contracts or reassociates float math.
macro_rules! simd_dispatch {
    ($(#[$m:meta])* $vis:vis fn $name:ident => $inner:ident ($($arg:ident : $ty:ty),*) $(-> $ret:ty)?) => {
        $(#[$m])*
        #[inline]
        $vis fn $name<T: $crate::kernels::simd::RowFloat>($($arg: $ty),*) $(-> $ret)? {
            #[cfg(target_arch = "x86_64")]
            {
                /// # Safety
                /// The CPU has AVX-512 F, BW, VL, DQ and AVX2.
                #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2")]
                unsafe fn wide<T: $crate::kernels::simd::RowFloat>($($arg: $ty),*) $(-> $ret)? {
                    $inner::<T>($($arg),*)
                }
                /// # Safety
                /// The CPU has AVX2.
                #[target_feature(enable = "avx2")]
                unsafe fn mid<T: $crate::kernels::simd::RowFloat>($($arg: $ty),*) $(-> $ret)? {
                    $inner::<T>($($arg),*)
                }
                match $crate::kernels::simd::simd_level() {
                    // SAFETY: the CPU supports the features each variant is compiled for.
                    $crate::kernels::simd::SimdLevel::Avx512 => return unsafe { wide::<T>($($arg),*) },
                    // SAFETY: as above.
                    $crate::kernels::simd::SimdLevel::Avx2 => return unsafe { mid::<T>($($arg),*) },
                    $crate::kernels::simd::SimdLevel::Base => {}
                }
            }
            $inner::<T>($($arg),*)
        }
    };
}
pub(crate) use simd_dispatch;
