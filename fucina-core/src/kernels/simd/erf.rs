//! erf over a slice of f64, **bitwise identical to `libm::erf`** (the `libm` crate's port of
//! FreeBSD msun's `s_erf.c`, which calls that crate's `exp`, msun's `e_exp.c`), four lanes
//! at a time on AVX2; [`erf_in_place`] is the entry point, with plain `libm::erf` as the
//! fallback on other CPUs.
//!
//! How the vector form keeps every bit (the tests in `fucina-core/tests/erf_simd.rs` compare
//! it with `libm::erf` on strided sweeps of the f32 and f64 ranges, every region boundary and
//! its neighbours, the specials and millions of random values):
//! - msun picks a region by the high word of |x|; for `|x| ≥ 0` the order of the bit
//!   patterns is the order of the values, so `ix < H` is exactly the float comparison
//!   `|x| < f64::from_bits(H << 32)`, done per lane.
//! - Each lane evaluates its own region's rational function: msun's four `P(v)/Q(v)` pairs
//!   (v = x², |x| − 1 or 1/x²) are Horner chains of the same shape, so each lane's
//!   coefficients are picked from a per-region table (one `vpermps` per coefficient) and the
//!   shorter chains are padded at the top with zeros — `a + v·0 = a` exactly for finite v —
//!   so every lane runs msun's own chain, operation for operation.
//! - Separate IEEE multiplies and adds in msun's order (never an FMA: rustc does not contract
//!   the scalar `libm` code, so a fused multiply-add would change bits).
//! - |x| < 0.84375 and the tiny region compute `x + x·y` and `0.125(8x + 1.027x)` on |x| and
//!   put the sign back: round-to-nearest is symmetric, so this is msun's signed computation.
//! - `exp` is msun's `e_exp.c`: the same `k` per branch (0, ±1 or `trunc(x/ln2 ± 0.5)`), the
//!   `ln2` hi/lo reduction, the rational `c(r)` form and `scalbn` as one multiply by `2^k`
//!   (exact: erf's arguments keep `exp` far from overflow and subnormal results).
//! - `z` = |x| with the low 32 bits cleared, by a bit mask, as msun's `SET_LOW_WORD`.
//!
//! `U` vectors go through each step together (independent dependency chains, so the
//! latency of the Horner chains and divisions overlaps). Lanes compute garbage in the
//! regions they do not belong to (never trapping: SIMD float exceptions are masked); the
//! final blends keep only each lane's own region.

/// erf of every element of `x`, in place, each bit-for-bit `libm::erf(x)`: sixteen lanes
/// (two AVX-512 vectors) at a time where the CPU has AVX-512 F/BW/VL/DQ, eight (two AVX2
/// vectors) where it has AVX2, else the scalar `libm::erf`.
pub fn erf_in_place(x: &mut [f64]) {
    #[cfg(target_arch = "x86_64")]
    match super::simd_level() {
        // SAFETY: the CPU has AVX-512 F/BW/VL/DQ (detected once, in `kernels::simd`).
        super::SimdLevel::Avx512 => return unsafe { avx512::erf_slice(x) },
        // SAFETY: the CPU has AVX2 (as above).
        super::SimdLevel::Avx2 => return unsafe { avx2::erf_slice(x) },
        super::SimdLevel::Base => {}
    }
    scalar(x);
}

/// One slice loop of [`erf_in_place`]: `x[i] = erf(x[i])`.
pub type ErfSliceFn = fn(&mut [f64]);

/// Every loop of [`erf_in_place`] this CPU runs, by name (`"avx512"`, `"avx2"`,
/// `"scalar"`), for tests that compare each with `libm::erf`.
pub fn erf_in_place_variants() -> Vec<(&'static str, ErfSliceFn)> {
    let mut v: Vec<(&'static str, ErfSliceFn)> = Vec::new();
    #[cfg(target_arch = "x86_64")]
    {
        let level = super::simd_level();
        if level == super::SimdLevel::Avx512 {
            // SAFETY: listed only when the CPU has the loop's features.
            v.push(("avx512", |x| unsafe { avx512::erf_slice(x) }));
        }
        if level != super::SimdLevel::Base {
            // SAFETY: as above (the AVX-512 level implies AVX2: `simd_level`).
            v.push(("avx2", |x| unsafe { avx2::erf_slice(x) }));
        }
    }
    v.push(("scalar", scalar));
    v
}

/// `libm::erf` one element at a time.
fn scalar(x: &mut [f64]) {
    for v in x {
        *v = libm::erf(*v);
    }
}

// msun's constants are kept digit for digit as s_erf.c / e_exp.c print them (each parses
// to the commented bit pattern there), so they can be checked against the source.
/// `[e; U]` with `e` evaluated for each `$k in 0..U` of the enclosing module's `U` (a loop,
/// not a closure: a closure would not inherit the target features on every supported
/// compiler).
#[cfg(target_arch = "x86_64")]
macro_rules! each {
    ($zero:expr, $k:ident => $e:expr) => {{
        let mut a = [$zero; U];
        for $k in 0..U {
            a[$k] = $e;
        }
        a
    }};
}

/// `step` over each `STEP` elements of `x`, the tail copied into a zero-padded buffer of
/// `STEP` and back (the vector loops' shared slice walk).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn in_steps<const STEP: usize>(x: &mut [f64], step: impl Fn(&mut [f64; STEP])) {
    let mut chunks = x.chunks_exact_mut(STEP);
    for c in &mut chunks {
        step(c.try_into().expect("a chunk of STEP"));
    }
    let rem = chunks.into_remainder();
    if !rem.is_empty() {
        let mut buf = [0.0f64; STEP];
        buf[..rem.len()].copy_from_slice(rem);
        step(&mut buf);
        rem.copy_from_slice(&buf[..rem.len()]);
    }
}

#[allow(clippy::excessive_precision, clippy::approx_constant)]
#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    // msun's constants, copied from libm's `erf.rs` and `exp.rs` (same bits).
    pub(super) const ERX: f64 = 8.45062911510467529297e-01;
    pub(super) const EFX8: f64 = 1.02703333676410069053e+00;
    pub(super) const LN2HI: f64 = 6.93147180369123816490e-01;
    pub(super) const LN2LO: f64 = 1.90821492927058770002e-10;
    pub(super) const INVLN2: f64 = 1.44269504088896338700e+00;
    pub(super) const EP1: f64 = 1.66666666666666019037e-01;
    pub(super) const EP2: f64 = -2.77777777770155933842e-03;
    pub(super) const EP3: f64 = 6.61375632143793436117e-05;
    pub(super) const EP4: f64 = -1.65339022054652515390e-06;
    pub(super) const EP5: f64 = 4.13813679705723846039e-08;

    /// Numerator coefficients `a0..a7` of `a0 + v(a1 + v(… + v·a7))`, each as the four
    /// regions' values in lane order `[≥ 1/0.35, ≥ 1.25, ≥ 0.84375, < 0.84375]` (the lane
    /// index is how many of the three thresholds |x| is below). Missing top terms are 0.
    pub(super) const NUM: [[f64; 4]; 8] = [
        // RB0, RA0, PA0, PP0
        [
            -9.86494292470009928597e-03,
            -9.86494403484714822705e-03,
            -2.36211856075265944077e-03,
            1.28379167095512558561e-01,
        ],
        [
            -7.99283237680523006574e-01,
            -6.93858572707181764372e-01,
            4.14856118683748331666e-01,
            -3.25042107247001499370e-01,
        ],
        [
            -1.77579549177547519889e+01,
            -1.05586262253232909814e+01,
            -3.72207876035701323847e-01,
            -2.84817495755985104766e-02,
        ],
        [
            -1.60636384855821916062e+02,
            -6.23753324503260060396e+01,
            3.18346619901161753674e-01,
            -5.77027029648944159157e-03,
        ],
        [
            -6.37566443368389627722e+02,
            -1.62396669462573470355e+02,
            -1.10894694282396677476e-01,
            -2.37630166566501626084e-05,
        ],
        [
            -1.02509513161107724954e+03,
            -1.84605092906711035994e+02,
            3.54783043256182359371e-02,
            0.0,
        ],
        [
            -4.83519191608651397019e+02,
            -8.12874355063065934246e+01,
            -2.16637559486879084300e-03,
            0.0,
        ],
        [0.0, -9.81432934416914548592e+00, 0.0, 0.0],
    ];

    /// Denominator coefficients `b1..b8` of `1 + v(b1 + v(… + v·b8))`, lanes as [`NUM`].
    pub(super) const DEN: [[f64; 4]; 8] = [
        // SB1, SA1, QA1, QQ1
        [
            3.03380607434824582924e+01,
            1.96512716674392571292e+01,
            1.06420880400844228286e-01,
            3.97917223959155352819e-01,
        ],
        [
            3.25792512996573918826e+02,
            1.37657754143519042600e+02,
            5.40397917702171048937e-01,
            6.50222499887672944485e-02,
        ],
        [
            1.53672958608443695994e+03,
            4.34565877475229228821e+02,
            7.18286544141962662868e-02,
            5.08130628187576562776e-03,
        ],
        [
            3.19985821950859553908e+03,
            6.45387271733267880336e+02,
            1.26171219808761642112e-01,
            1.32494738004321644526e-04,
        ],
        [
            2.55305040643316442583e+03,
            4.29008140027567833386e+02,
            1.36370839120290507362e-02,
            -3.96022827877536812320e-06,
        ],
        [
            4.74528541206955367215e+02,
            1.08635005541779435134e+02,
            1.19844998467991074170e-02,
            0.0,
        ],
        [
            -2.24409524465858183362e+01,
            6.57024977031928170135e+00,
            0.0,
            0.0,
        ],
        [0.0, -6.04244152148580987438e-02, 0.0, 0.0],
    ];

    /// `f64::from_bits(hi << 32)`: the threshold that msun's high-word test `ix < hi` is.
    pub(super) const fn hw(hi: u64) -> f64 {
        f64::from_bits(hi << 32)
    }

    /// Vectors processed together: independent chains that hide each other's latency.
    const U: usize = 2;
    /// Elements per step (`U` vectors of four lanes).
    const STEP: usize = 4 * U;

    /// erf of each element in place (see the module docs).
    ///
    /// # Safety
    /// The CPU has AVX2.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn erf_slice(x: &mut [f64]) {
        // SAFETY: each step gets STEP f64s, read and then written; AVX2 is present (this
        // function's contract).
        super::in_steps::<STEP>(x, |c| unsafe { erf_step(c.as_mut_ptr()) });
    }

    /// msun's `exp` of each lane of `U` vectors, for the arguments erf hands it (|a| < 708
    /// and a normal result, so `scalbn(y, k)` is the exact product `y·2^k`).
    ///
    /// # Safety
    /// The CPU has AVX2.
    #[target_feature(enable = "avx2")]
    #[inline]
    #[allow(unused_unsafe)] // the intrinsics are safe here from Rust 1.87 on, not on the MSRV
    unsafe fn exp_v(a: [__m256d; U]) -> [__m256d; U] {
        // SAFETY: value-only AVX/AVX2 intrinsics; the CPU has AVX2 (this fn's contract).
        unsafe {
            let z = _mm256_setzero_pd();
            let signbit = _mm256_set1_pd(-0.0);
            let one = _mm256_set1_pd(1.0);
            let sign = each!(z, k => _mm256_and_pd(a[k], signbit));
            let aa = each!(z, k => _mm256_andnot_pd(signbit, a[k]));
            // hx > 0x3fd62e42 (|a| > ln2/2), hx >= 0x3ff0a2b2 (|a| >= 1.5 ln2), hx > 0x3e300000.
            let t_red = _mm256_set1_pd(hw(0x3fd6_2e43));
            let t_far = _mm256_set1_pd(hw(0x3ff0_a2b2));
            let t_tiny = _mm256_set1_pd(hw(0x3e30_0001));
            let reduce = each!(z, k => _mm256_cmp_pd::<_CMP_GE_OQ>(aa[k], t_red));
            let far = each!(z, k => _mm256_cmp_pd::<_CMP_GE_OQ>(aa[k], t_far));
            let not_tiny = each!(z, k => _mm256_cmp_pd::<_CMP_GE_OQ>(aa[k], t_tiny));
            // k = (INVLN2·a + HALF[sign]) as i32 where far, 1 − 2·sign between, 0 below.
            let kf = each!(z, k => {
                let half = _mm256_or_pd(_mm256_set1_pd(0.5), sign[k]);
                let kt = _mm256_add_pd(_mm256_mul_pd(_mm256_set1_pd(INVLN2), a[k]), half);
                let k_far = _mm256_cvtepi32_pd(_mm256_cvttpd_epi32(kt));
                let k_mid = _mm256_or_pd(one, sign[k]);
                _mm256_and_pd(reduce[k], _mm256_blendv_pd(k_mid, k_far, far[k]))
            });
            let hi =
                each!(z, k => _mm256_sub_pd(a[k], _mm256_mul_pd(kf[k], _mm256_set1_pd(LN2HI))));
            let lo = each!(z, k => _mm256_mul_pd(kf[k], _mm256_set1_pd(LN2LO)));
            let r = each!(z, k => _mm256_sub_pd(hi[k], lo[k]));
            let xx = each!(z, k => _mm256_mul_pd(r[k], r[k]));
            let mut p = [_mm256_set1_pd(EP5); U];
            for c in [EP4, EP3, EP2, EP1] {
                p = each!(z, k => _mm256_add_pd(_mm256_set1_pd(c), _mm256_mul_pd(xx[k], p[k])));
            }
            let c = each!(z, k => _mm256_sub_pd(r[k], _mm256_mul_pd(xx[k], p[k])));
            each!(z, k => {
                let q = _mm256_div_pd(
                    _mm256_mul_pd(r[k], c[k]),
                    _mm256_sub_pd(_mm256_set1_pd(2.0), c[k]),
                );
                let y = _mm256_add_pd(one, _mm256_add_pd(_mm256_sub_pd(q, lo[k]), hi[k]));
                // scalbn(y, k) = y·2^k (exact for normal results; k = 0 multiplies by 1).
                let ki = _mm256_cvtepi32_epi64(_mm256_cvtpd_epi32(kf[k]));
                let scale =
                    _mm256_slli_epi64::<52>(_mm256_add_epi64(ki, _mm256_set1_epi64x(1023)));
                let y = _mm256_mul_pd(y, _mm256_castsi256_pd(scale));
                // |a| <= 2^-28: 1 + a.
                _mm256_blendv_pd(_mm256_add_pd(one, a[k]), y, not_tiny[k])
            })
        }
    }

    /// erf of the `STEP` f64s at `p`, written back in place.
    ///
    /// # Safety
    /// The CPU has AVX2; `p` addresses `STEP` readable and writable f64s.
    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn erf_step(p: *mut f64) {
        // SAFETY: `p` addresses STEP f64s (the caller's contract); the other intrinsics are
        // value-only and the CPU has AVX2.
        unsafe {
            let z = _mm256_setzero_pd();
            let zi = _mm256_setzero_si256();
            let x = each!(z, k => _mm256_loadu_pd(p.add(4 * k)));
            let signbit = _mm256_set1_pd(-0.0);
            let one = _mm256_set1_pd(1.0);
            let sign = each!(z, k => _mm256_and_pd(x[k], signbit));
            let ax = each!(z, k => _mm256_andnot_pd(signbit, x[k]));
            macro_rules! lt {
                ($t:expr) => {{
                    let t = _mm256_set1_pd($t);
                    each!(z, k => _mm256_cmp_pd::<_CMP_LT_OQ>(ax[k], t))
                }};
            }
            // msun's regions by the high word ix of |x| (NaN is in none of them).
            let m_tiny = lt!(hw(0x3e30_0000)); // |x| < 2^-28
            let m1 = lt!(hw(0x3feb_0000)); // |x| < 0.84375
            let m2 = lt!(hw(0x3ff4_0000)); // |x| < 1.25
            let m3 = lt!(hw(0x4006_db6d)); // |x| < 1/0.35
            let m4 = lt!(hw(0x4018_0000)); // |x| < 6
            let finite = lt!(f64::INFINITY);
            // Lanes of 1.25 <= |x| < 6 need exp (and v = 1/x²); the other regions skip them.
            let mut any34 = _mm256_setzero_pd();
            for k in 0..U {
                any34 = _mm256_or_pd(any34, _mm256_andnot_pd(m2[k], m4[k]));
            }
            let need_exp = _mm256_movemask_pd(any34) != 0;
            let x2 = each!(z, k => _mm256_mul_pd(ax[k], ax[k]));
            // v: x² below 0.84375, |x| − 1 below 1.25, 1/x² above.
            let mut v = each!(z, k => _mm256_blendv_pd(_mm256_sub_pd(ax[k], one), x2[k], m1[k]));
            if need_exp {
                v = each!(z, k => _mm256_blendv_pd(_mm256_div_pd(one, x2[k]), v[k], m2[k]));
            }
            // Per-lane table index: how many of the thresholds 0.84375, 1.25, 1/0.35 |x| is
            // below (0..=3), as the f32-pair indices (2i, 2i + 1) of `vpermps`.
            let idx = each!(zi, k => {
                let below = _mm256_sub_epi64(
                    zi,
                    _mm256_add_epi64(
                        _mm256_castpd_si256(m1[k]),
                        _mm256_add_epi64(_mm256_castpd_si256(m2[k]), _mm256_castpd_si256(m3[k])),
                    ),
                );
                let i2 = _mm256_slli_epi64::<1>(below);
                _mm256_or_si256(
                    i2,
                    _mm256_add_epi64(_mm256_slli_epi64::<32>(i2), _mm256_set1_epi64x(1 << 32)),
                )
            });
            macro_rules! pick {
                ($t:expr, $k:expr) => {
                    _mm256_castps_pd(_mm256_permutevar8x32_ps(
                        _mm256_castpd_ps(_mm256_loadu_pd($t.as_ptr())),
                        idx[$k],
                    ))
                };
            }
            let mut num = each!(z, k => pick!(NUM[7], k));
            let mut den = each!(z, k => pick!(DEN[7], k));
            for j in (0..7).rev() {
                num = each!(z, k => _mm256_add_pd(pick!(NUM[j], k), _mm256_mul_pd(v[k], num[k])));
                den = each!(z, k => _mm256_add_pd(pick!(DEN[j], k), _mm256_mul_pd(v[k], den[k])));
            }
            let rq = each!(z, k => _mm256_div_pd(num[k], _mm256_add_pd(one, _mm256_mul_pd(v[k], den[k]))));
            // |x| >= 6: 1 − 2^-1022 (rounds to 1).
            let mut y = [_mm256_set1_pd(1.0 - f64::from_bits(0x0010_0000_0000_0000)); U];
            if need_exp {
                // erfc = exp(−z² − 0.5625)·exp((z − x)(z + x) + R/S)/x, z = x with the low
                // word cleared; erf = 1 − erfc.
                let zc = each!(z, k => _mm256_castsi256_pd(_mm256_and_si256(
                    _mm256_castpd_si256(ax[k]),
                    _mm256_set1_epi64x(-1 << 32),
                )));
                let e1 = exp_v(each!(z, k => _mm256_sub_pd(
                    _mm256_mul_pd(_mm256_xor_pd(zc[k], signbit), zc[k]),
                    _mm256_set1_pd(0.5625),
                )));
                let e2 = exp_v(each!(z, k => _mm256_add_pd(
                    _mm256_mul_pd(_mm256_sub_pd(zc[k], ax[k]), _mm256_add_pd(zc[k], ax[k])),
                    rq[k],
                )));
                y = each!(z, k => {
                    let erfc = _mm256_div_pd(_mm256_mul_pd(e1[k], e2[k]), ax[k]);
                    _mm256_blendv_pd(y[k], _mm256_sub_pd(one, erfc), m4[k])
                });
            }
            for k in 0..U {
                // 0.84375 <= |x| < 1.25: erfc = (1 − erx) − P/Q, erf = 1 − erfc.
                let erfc1 = _mm256_sub_pd(_mm256_sub_pd(one, _mm256_set1_pd(ERX)), rq[k]);
                let mut yk = _mm256_blendv_pd(y[k], _mm256_sub_pd(one, erfc1), m2[k]);
                // |x| < 0.84375: x + x·(P/Q).
                yk = _mm256_blendv_pd(yk, _mm256_add_pd(ax[k], _mm256_mul_pd(ax[k], rq[k])), m1[k]);
                // |x| < 2^-28: 0.125·(8x + efx8·x).
                let tiny = _mm256_mul_pd(
                    _mm256_set1_pd(0.125),
                    _mm256_add_pd(
                        _mm256_mul_pd(_mm256_set1_pd(8.0), ax[k]),
                        _mm256_mul_pd(_mm256_set1_pd(EFX8), ax[k]),
                    ),
                );
                yk = _mm256_blendv_pd(yk, tiny, m_tiny[k]);
                yk = _mm256_xor_pd(yk, sign[k]);
                // NaN and ±inf: 1 − 2·sign + 1/x (±1, or NaN from 1/x).
                let special = _mm256_add_pd(_mm256_or_pd(one, sign[k]), _mm256_div_pd(one, x[k]));
                yk = _mm256_blendv_pd(special, yk, finite[k]);
                _mm256_storeu_pd(p.add(4 * k), yk);
            }
        }
    }
}

/// The AVX2 module's steps on 8-lane AVX-512 vectors, with mask registers for its blends:
/// the same operations on each lane in the same order, so the same bits.
#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::avx2::{hw, DEN, EFX8, EP1, EP2, EP3, EP4, EP5, ERX, INVLN2, LN2HI, LN2LO, NUM};
    use std::arch::x86_64::*;

    /// Vectors processed together: independent chains that hide each other's latency.
    const U: usize = 2;
    /// Elements per step (`U` vectors of eight lanes).
    const STEP: usize = 8 * U;

    /// erf of each element in place (see the module docs).
    ///
    /// # Safety
    /// The CPU has AVX-512 F and DQ.
    #[target_feature(enable = "avx512f,avx512dq")]
    pub(super) unsafe fn erf_slice(x: &mut [f64]) {
        // SAFETY: each step gets STEP f64s, read and then written; the CPU has AVX-512 F and
        // DQ (this function's contract).
        super::in_steps::<STEP>(x, |c| unsafe { erf_step(c.as_mut_ptr()) });
    }

    /// msun's `exp` of each lane of `U` vectors (the AVX2 `exp_v`, lane for lane).
    ///
    /// # Safety
    /// The CPU has AVX-512 F and DQ.
    #[target_feature(enable = "avx512f,avx512dq")]
    #[inline]
    #[allow(unused_unsafe)] // the intrinsics are safe here from Rust 1.87 on, not on the MSRV
    unsafe fn exp_v(a: [__m512d; U]) -> [__m512d; U] {
        // SAFETY: value-only AVX-512 intrinsics; the CPU has AVX-512 F and DQ.
        unsafe {
            let z = _mm512_setzero_pd();
            let signbit = _mm512_set1_pd(-0.0);
            let one = _mm512_set1_pd(1.0);
            let sign = each!(z, k => _mm512_and_pd(a[k], signbit));
            let aa = each!(z, k => _mm512_andnot_pd(signbit, a[k]));
            let t_red = _mm512_set1_pd(hw(0x3fd6_2e43));
            let t_far = _mm512_set1_pd(hw(0x3ff0_a2b2));
            let t_tiny = _mm512_set1_pd(hw(0x3e30_0001));
            let reduce = each!(0, k => _mm512_cmp_pd_mask::<_CMP_GE_OQ>(aa[k], t_red));
            let far = each!(0, k => _mm512_cmp_pd_mask::<_CMP_GE_OQ>(aa[k], t_far));
            let not_tiny = each!(0, k => _mm512_cmp_pd_mask::<_CMP_GE_OQ>(aa[k], t_tiny));
            // k = (INVLN2·a + HALF[sign]) as i32 where far, 1 − 2·sign between, +0 below.
            let kf = each!(z, k => {
                let half = _mm512_or_pd(_mm512_set1_pd(0.5), sign[k]);
                let kt = _mm512_add_pd(_mm512_mul_pd(_mm512_set1_pd(INVLN2), a[k]), half);
                let k_far = _mm512_cvtepi32_pd(_mm512_cvttpd_epi32(kt));
                let k_mid = _mm512_or_pd(one, sign[k]);
                _mm512_maskz_mov_pd(reduce[k], _mm512_mask_blend_pd(far[k], k_mid, k_far))
            });
            let hi =
                each!(z, k => _mm512_sub_pd(a[k], _mm512_mul_pd(kf[k], _mm512_set1_pd(LN2HI))));
            let lo = each!(z, k => _mm512_mul_pd(kf[k], _mm512_set1_pd(LN2LO)));
            let r = each!(z, k => _mm512_sub_pd(hi[k], lo[k]));
            let xx = each!(z, k => _mm512_mul_pd(r[k], r[k]));
            let mut p = [_mm512_set1_pd(EP5); U];
            for c in [EP4, EP3, EP2, EP1] {
                p = each!(z, k => _mm512_add_pd(_mm512_set1_pd(c), _mm512_mul_pd(xx[k], p[k])));
            }
            let c = each!(z, k => _mm512_sub_pd(r[k], _mm512_mul_pd(xx[k], p[k])));
            each!(z, k => {
                let q = _mm512_div_pd(
                    _mm512_mul_pd(r[k], c[k]),
                    _mm512_sub_pd(_mm512_set1_pd(2.0), c[k]),
                );
                let y = _mm512_add_pd(one, _mm512_add_pd(_mm512_sub_pd(q, lo[k]), hi[k]));
                // scalbn(y, k) = y·2^k (exact for normal results; k = 0 multiplies by 1).
                let ki = _mm512_cvtepi32_epi64(_mm512_cvtpd_epi32(kf[k]));
                let scale = _mm512_slli_epi64::<52>(_mm512_add_epi64(ki, _mm512_set1_epi64(1023)));
                let y = _mm512_mul_pd(y, _mm512_castsi512_pd(scale));
                // |a| <= 2^-28: 1 + a.
                _mm512_mask_blend_pd(not_tiny[k], _mm512_add_pd(one, a[k]), y)
            })
        }
    }

    /// erf of the `STEP` f64s at `p`, written back in place (the AVX2 `erf_step`, lane for
    /// lane; region masks in mask registers).
    ///
    /// # Safety
    /// The CPU has AVX-512 F and DQ; `p` addresses `STEP` readable and writable f64s.
    #[target_feature(enable = "avx512f,avx512dq")]
    #[inline]
    unsafe fn erf_step(p: *mut f64) {
        // SAFETY: `p` addresses STEP f64s (the caller's contract); the other intrinsics are
        // value-only and the CPU has AVX-512 F and DQ.
        unsafe {
            let z = _mm512_setzero_pd();
            let zi = _mm512_setzero_si512();
            let x = each!(z, k => _mm512_loadu_pd(p.add(8 * k)));
            let signbit = _mm512_set1_pd(-0.0);
            let one = _mm512_set1_pd(1.0);
            let sign = each!(z, k => _mm512_and_pd(x[k], signbit));
            let ax = each!(z, k => _mm512_andnot_pd(signbit, x[k]));
            macro_rules! lt {
                ($t:expr) => {{
                    let t = _mm512_set1_pd($t);
                    each!(0, k => _mm512_cmp_pd_mask::<_CMP_LT_OQ>(ax[k], t))
                }};
            }
            // msun's regions by the high word ix of |x| (NaN is in none of them).
            let m_tiny = lt!(hw(0x3e30_0000)); // |x| < 2^-28
            let m1 = lt!(hw(0x3feb_0000)); // |x| < 0.84375
            let m2 = lt!(hw(0x3ff4_0000)); // |x| < 1.25
            let m3 = lt!(hw(0x4006_db6d)); // |x| < 1/0.35
            let m4 = lt!(hw(0x4018_0000)); // |x| < 6
            let finite = lt!(f64::INFINITY);
            // Lanes of 1.25 <= |x| < 6 need exp (and v = 1/x²); the other regions skip them.
            let need_exp = (0..U).any(|k| !m2[k] & m4[k] != 0);
            let x2 = each!(z, k => _mm512_mul_pd(ax[k], ax[k]));
            // v: x² below 0.84375, |x| − 1 below 1.25, 1/x² above.
            let mut v =
                each!(z, k => _mm512_mask_blend_pd(m1[k], _mm512_sub_pd(ax[k], one), x2[k]));
            if need_exp {
                v = each!(z, k => _mm512_mask_blend_pd(m2[k], _mm512_div_pd(one, x2[k]), v[k]));
            }
            // Per-lane table index: how many of the thresholds 0.84375, 1.25, 1/0.35 |x| is
            // below (0..=3).
            let idx = each!(zi, k => {
                let ones = _mm512_set1_epi64(1);
                let i = _mm512_maskz_mov_epi64(m1[k], ones);
                let i = _mm512_mask_add_epi64(i, m2[k], i, ones);
                _mm512_mask_add_epi64(i, m3[k], i, ones)
            });
            // The four regions' coefficient, lane by lane (indices 0..=3 read the low half).
            macro_rules! pick {
                ($t:expr, $k:expr) => {
                    _mm512_permutexvar_pd(
                        idx[$k],
                        _mm512_castpd256_pd512(_mm256_loadu_pd($t.as_ptr())),
                    )
                };
            }
            let mut num = each!(z, k => pick!(NUM[7], k));
            let mut den = each!(z, k => pick!(DEN[7], k));
            for j in (0..7).rev() {
                num = each!(z, k => _mm512_add_pd(pick!(NUM[j], k), _mm512_mul_pd(v[k], num[k])));
                den = each!(z, k => _mm512_add_pd(pick!(DEN[j], k), _mm512_mul_pd(v[k], den[k])));
            }
            let rq = each!(z, k => _mm512_div_pd(num[k], _mm512_add_pd(one, _mm512_mul_pd(v[k], den[k]))));
            // |x| >= 6: 1 − 2^-1022 (rounds to 1).
            let mut y = [_mm512_set1_pd(1.0 - f64::from_bits(0x0010_0000_0000_0000)); U];
            if need_exp {
                // erfc = exp(−z² − 0.5625)·exp((z − x)(z + x) + R/S)/x, z = x with the low
                // word cleared; erf = 1 − erfc.
                let zc = each!(z, k => _mm512_castsi512_pd(_mm512_and_si512(
                    _mm512_castpd_si512(ax[k]),
                    _mm512_set1_epi64(-1 << 32),
                )));
                let e1 = exp_v(each!(z, k => _mm512_sub_pd(
                    _mm512_mul_pd(_mm512_xor_pd(zc[k], signbit), zc[k]),
                    _mm512_set1_pd(0.5625),
                )));
                let e2 = exp_v(each!(z, k => _mm512_add_pd(
                    _mm512_mul_pd(_mm512_sub_pd(zc[k], ax[k]), _mm512_add_pd(zc[k], ax[k])),
                    rq[k],
                )));
                y = each!(z, k => {
                    let erfc = _mm512_div_pd(_mm512_mul_pd(e1[k], e2[k]), ax[k]);
                    _mm512_mask_blend_pd(m4[k], y[k], _mm512_sub_pd(one, erfc))
                });
            }
            for k in 0..U {
                // 0.84375 <= |x| < 1.25: erfc = (1 − erx) − P/Q, erf = 1 − erfc.
                let erfc1 = _mm512_sub_pd(_mm512_sub_pd(one, _mm512_set1_pd(ERX)), rq[k]);
                let mut yk = _mm512_mask_blend_pd(m2[k], y[k], _mm512_sub_pd(one, erfc1));
                // |x| < 0.84375: x + x·(P/Q).
                yk = _mm512_mask_blend_pd(
                    m1[k],
                    yk,
                    _mm512_add_pd(ax[k], _mm512_mul_pd(ax[k], rq[k])),
                );
                // |x| < 2^-28: 0.125·(8x + efx8·x).
                let tiny = _mm512_mul_pd(
                    _mm512_set1_pd(0.125),
                    _mm512_add_pd(
                        _mm512_mul_pd(_mm512_set1_pd(8.0), ax[k]),
                        _mm512_mul_pd(_mm512_set1_pd(EFX8), ax[k]),
                    ),
                );
                yk = _mm512_mask_blend_pd(m_tiny[k], yk, tiny);
                yk = _mm512_xor_pd(yk, sign[k]);
                // NaN and ±inf: 1 − 2·sign + 1/x (±1, or NaN from 1/x).
                let special = _mm512_add_pd(_mm512_or_pd(one, sign[k]), _mm512_div_pd(one, x[k]));
                yk = _mm512_mask_blend_pd(finite[k], special, yk);
                _mm512_storeu_pd(p.add(8 * k), yk);
            }
        }
    }
}
