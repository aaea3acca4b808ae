//! f32 `e^x` over a slice, vectorised, bit for bit the platform's `expf` (`f32::exp`) where
//! that is glibc's.
//!
//! glibc (since 2.27) computes `expf` with ARM's optimized-routines algorithm: in f64,
//! `x = (k + r)·ln2/32` with `k = round(x·32/ln2)` (a shift trick), `2^(k/32)` from a
//! 32-entry table with the integer part added to its exponent bits, and a degree-3
//! polynomial in `r`; the product is rounded to f32 once. On every CPU with AVX2 and FMA
//! glibc's ifunc picks `__expf_fma`, the same C compiled with FMA contraction. This file
//! transcribes that variant's instruction sequence (read off its disassembly: which
//! multiply-adds are fused, and in which operand order) onto f64 lanes, so each lane
//! returns `__expf_fma`'s bits: four lanes per AVX2 vector (the table read by a gather), or
//! eight per AVX-512 vector (the table held in four registers, read by two two-register
//! permutes and a blend). Lanes with `|x| ≥ 88` (overflow, underflow, ±∞, NaN: glibc's
//! slow path) send their whole vector to `f32::exp`, as does the tail of a slice.
//!
//! Only used where it is the platform's `expf`: x86_64 Linux with glibc, AVX2 and FMA, and
//! a probe over range boundaries and a sweep agreeing with `f32::exp` bit for bit (an older
//! glibc with another `expf` would fail it; each vector width is probed on its own).
//! Everywhere else the slice goes through `f32::exp` one element at a time. `tests/vexp.rs`
//! checks every variant this CPU runs on a sweep of the f32 range, and, with `--ignored`,
//! every f32 input.

/// `x[i] = e^x[i]` (f32), bit for bit `f32::exp`: the widest vector loop this machine
/// passed the probe with.
pub fn exp_f32_in_place(x: &mut [f32]) {
    #[cfg(all(target_arch = "x86_64", target_os = "linux", target_env = "gnu"))]
    match vector_path() {
        // SAFETY: `vector_path` names a loop only where the CPU has its features (detected
        // once, in `kernels::simd`).
        Some(Path::Avx512) => return unsafe { avx512::exp_in_place(x) },
        // SAFETY: as above.
        Some(Path::Avx2) => return unsafe { avx2::exp_in_place(x) },
        None => {}
    }
    scalar(x);
}

/// True when [`exp_f32_in_place`] runs a vector loop on this machine.
pub fn exp_f32_vectorised() -> bool {
    #[cfg(all(target_arch = "x86_64", target_os = "linux", target_env = "gnu"))]
    {
        vector_path().is_some()
    }
    #[cfg(not(all(target_arch = "x86_64", target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}

/// One slice loop of [`exp_f32_in_place`]: `x[i] = e^x[i]`.
pub type ExpSliceFn = fn(&mut [f32]);

/// Every loop of [`exp_f32_in_place`] this machine can run bit for bit, by name
/// (`"avx512"`, `"avx2"`, `"scalar"`), for tests that compare each with `f32::exp`.
pub fn exp_f32_in_place_variants() -> Vec<(&'static str, ExpSliceFn)> {
    let mut v: Vec<(&'static str, ExpSliceFn)> = Vec::new();
    #[cfg(all(target_arch = "x86_64", target_os = "linux", target_env = "gnu"))]
    {
        if probe(Path::Avx512) {
            // SAFETY: `probe` passes only where the CPU has the loop's features.
            v.push(("avx512", |x| unsafe { avx512::exp_in_place(x) }));
        }
        if probe(Path::Avx2) {
            // SAFETY: as above.
            v.push(("avx2", |x| unsafe { avx2::exp_in_place(x) }));
        }
    }
    v.push(("scalar", scalar));
    v
}

/// `f32::exp` one element at a time.
fn scalar(x: &mut [f32]) {
    for v in x {
        *v = v.exp();
    }
}

/// A vector loop of this file.
#[cfg(all(target_arch = "x86_64", target_os = "linux", target_env = "gnu"))]
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Path {
    /// Eight f64 lanes per vector (AVX-512F).
    Avx512,
    /// Four f64 lanes per vector (AVX2 + FMA).
    Avx2,
}

/// The widest loop that the CPU runs and that reproduces this process's `f32::exp` on the
/// probe (decided once).
#[cfg(all(target_arch = "x86_64", target_os = "linux", target_env = "gnu"))]
fn vector_path() -> Option<Path> {
    use std::sync::OnceLock;
    static PATH: OnceLock<Option<Path>> = OnceLock::new();
    *PATH.get_or_init(|| [Path::Avx512, Path::Avx2].into_iter().find(|&p| probe(p)))
}

/// Whether the CPU has `path`'s features and the loop gives `f32::exp`'s bits on every
/// 2^-9 step of [-90, 90] and on glibc's region edges (±88, the overflow and the two
/// underflow thresholds) with their float neighbours.
#[cfg(all(target_arch = "x86_64", target_os = "linux", target_env = "gnu"))]
fn probe(path: Path) -> bool {
    let has = match path {
        Path::Avx512 => super::has_avx512f() && super::has_avx2_fma(),
        Path::Avx2 => super::has_avx2_fma(),
    };
    if !has {
        return false;
    }
    let mut probe: Vec<f32> = (-46_080..=46_080).map(|i| i as f32 / 512.0).collect();
    for b in [
        0x42b0_0000u32,
        0xc2b0_0000,
        0x42b1_7217,
        0xc2cf_f1b4,
        0xc2ce_8ecf,
    ] {
        probe.extend((b - 4..=b + 4).map(f32::from_bits));
    }
    let mut got = probe.clone();
    match path {
        // SAFETY: the CPU has AVX-512F, AVX2 and FMA (checked above).
        Path::Avx512 => unsafe { avx512::exp_in_place(&mut got) },
        // SAFETY: the CPU has AVX2 and FMA (checked above).
        Path::Avx2 => unsafe { avx2::exp_in_place(&mut got) },
    }
    probe
        .iter()
        .zip(&got)
        .all(|(x, y)| x.exp().to_bits() == y.to_bits())
}

#[cfg(all(target_arch = "x86_64", target_os = "linux", target_env = "gnu"))]
mod avx2 {
    use std::arch::x86_64::*;

    /// `2^(i/32)` as f64 bits, minus `i << 47` (glibc's `__exp2f_data.tab`): adding
    /// `k << 47` for `k ≡ i (mod 32)` puts `k/32`'s integer part into the exponent.
    pub(super) const TAB: [u64; 32] = [
        0x3ff0000000000000,
        0x3fefd9b0d3158574,
        0x3fefb5586cf9890f,
        0x3fef9301d0125b51,
        0x3fef72b83c7d517b,
        0x3fef54873168b9aa,
        0x3fef387a6e756238,
        0x3fef1e9df51fdee1,
        0x3fef06fe0a31b715,
        0x3feef1a7373aa9cb,
        0x3feedea64c123422,
        0x3feece086061892d,
        0x3feebfdad5362a27,
        0x3feeb42b569d4f82,
        0x3feeab07dd485429,
        0x3feea47eb03a5585,
        0x3feea09e667f3bcd,
        0x3fee9f75e8ec5f74,
        0x3feea11473eb0187,
        0x3feea589994cce13,
        0x3feeace5422aa0db,
        0x3feeb737b0cdc5e5,
        0x3feec49182a3f090,
        0x3feed503b23e255d,
        0x3feee89f995ad3ad,
        0x3feeff76f2fb5e47,
        0x3fef199bdd85529c,
        0x3fef3720dcef9069,
        0x3fef5818dcfba487,
        0x3fef7c97337b9b5f,
        0x3fefa4afa2a490da,
        0x3fefd0765b6e4540,
    ];
    /// 32/ln2.
    pub(super) const INV_LN2_N: u64 = 0x40471547652b82fe;
    /// 1.5·2^52: adding it rounds to an integer held in the low mantissa bits.
    pub(super) const SHIFT: u64 = 0x4338000000000000;
    /// The polynomial `C0·r³ + C1·r² + C2·r + 1` (glibc's `poly_scaled`).
    pub(super) const C0: u64 = 0x3ebc6af84b912394;
    pub(super) const C1: u64 = 0x3f2ebfce50fac4f3;
    pub(super) const C2: u64 = 0x3f962e42ff0c52d6;

    /// Four lanes of `__expf_fma`'s fast path (|x| < 88), rounded to f32.
    ///
    /// # Safety
    /// The CPU has AVX2 and FMA (the caller is compiled for them).
    #[inline(always)]
    unsafe fn exp4(xd: __m256d) -> __m128 {
        // SAFETY: AVX2 and FMA are enabled in the caller; the gather reads TAB[0..32].
        unsafe {
            let f = |b: u64| _mm256_set1_pd(f64::from_bits(b));
            let (inv, shift) = (f(INV_LN2_N), f(SHIFT));
            // z = InvLn2N·x + Shift (fused); its low bits are k.
            let z = _mm256_fmadd_pd(inv, xd, shift);
            let ki = _mm256_castpd_si256(z);
            let kd = _mm256_sub_pd(z, shift);
            // r = InvLn2N·x − kd (fused).
            let r = _mm256_fmsub_pd(inv, xd, kd);
            let idx = _mm256_and_si256(ki, _mm256_set1_epi64x(31));
            let tab = _mm256_i64gather_epi64::<8>(TAB.as_ptr() as *const i64, idx);
            let s = _mm256_castsi256_pd(_mm256_add_epi64(tab, _mm256_slli_epi64::<47>(ki)));
            // y = (C0·r + C1)·r² + (C2·r + 1), each multiply-add fused, then y·s.
            let p = _mm256_fmadd_pd(r, f(C0), f(C1));
            let r2 = _mm256_mul_pd(r, r);
            let q = _mm256_fmadd_pd(r, f(C2), _mm256_set1_pd(1.0));
            let y = _mm256_fmadd_pd(p, r2, q);
            _mm256_cvtpd_ps(_mm256_mul_pd(y, s))
        }
    }

    /// # Safety
    /// The CPU has AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn exp_in_place(x: &mut [f32]) {
        let mut chunks = x.chunks_exact_mut(8);
        for c in &mut chunks {
            // SAFETY: `c` holds 8 f32; AVX2 and FMA are enabled.
            unsafe {
                let v = _mm256_loadu_ps(c.as_ptr());
                // glibc's slow path: (bits >> 20) & 0x7ff ≥ 0x42b, i.e. |x| ≥ 88 or NaN.
                let top = _mm256_and_si256(
                    _mm256_srli_epi32::<20>(_mm256_castps_si256(v)),
                    _mm256_set1_epi32(0x7ff),
                );
                let slow = _mm256_cmpgt_epi32(top, _mm256_set1_epi32(0x42a));
                if _mm256_movemask_epi8(slow) != 0 {
                    super::scalar(c);
                    continue;
                }
                let lo = exp4(_mm256_cvtps_pd(_mm256_castps256_ps128(v)));
                let hi = exp4(_mm256_cvtps_pd(_mm256_extractf128_ps::<1>(v)));
                _mm256_storeu_ps(c.as_mut_ptr(), _mm256_set_m128(hi, lo));
            }
        }
        super::scalar(chunks.into_remainder());
    }
}

#[cfg(all(target_arch = "x86_64", target_os = "linux", target_env = "gnu"))]
mod avx512 {
    use super::avx2::{C0, C1, C2, INV_LN2_N, SHIFT, TAB};
    use std::arch::x86_64::*;

    /// Eight lanes of `__expf_fma`'s fast path (|x| < 88), rounded to f32: the AVX2 `exp4`'s
    /// operations in the same order, with `tab[i]` for `i = k mod 32` read from the four
    /// registers `tab` holding the table (entries 0..16 and 16..32 by a two-register
    /// permute each, picked by bit 4 of `i`).
    ///
    /// # Safety
    /// The CPU has AVX-512F (the caller is compiled for it).
    #[inline(always)]
    unsafe fn exp8(xd: __m512d, tab: [__m512i; 4]) -> __m256 {
        // SAFETY: AVX-512F is enabled in the caller; no memory is read.
        unsafe {
            let f = |b: u64| _mm512_set1_pd(f64::from_bits(b));
            let (inv, shift) = (f(INV_LN2_N), f(SHIFT));
            // z = InvLn2N·x + Shift (fused); its low bits are k.
            let z = _mm512_fmadd_pd(inv, xd, shift);
            let ki = _mm512_castpd_si512(z);
            let kd = _mm512_sub_pd(z, shift);
            // r = InvLn2N·x − kd (fused).
            let r = _mm512_fmsub_pd(inv, xd, kd);
            let idx = _mm512_and_si512(ki, _mm512_set1_epi64(31));
            let lo = _mm512_permutex2var_epi64(tab[0], idx, tab[1]);
            let hi = _mm512_permutex2var_epi64(tab[2], idx, tab[3]);
            let upper = _mm512_test_epi64_mask(idx, _mm512_set1_epi64(16));
            let t = _mm512_mask_blend_epi64(upper, lo, hi);
            let s = _mm512_castsi512_pd(_mm512_add_epi64(t, _mm512_slli_epi64::<47>(ki)));
            // y = (C0·r + C1)·r² + (C2·r + 1), each multiply-add fused, then y·s.
            let p = _mm512_fmadd_pd(r, f(C0), f(C1));
            let r2 = _mm512_mul_pd(r, r);
            let q = _mm512_fmadd_pd(r, f(C2), _mm512_set1_pd(1.0));
            let y = _mm512_fmadd_pd(p, r2, q);
            _mm512_cvtpd_ps(_mm512_mul_pd(y, s))
        }
    }

    /// # Safety
    /// The CPU has AVX-512F, AVX2 and FMA.
    #[target_feature(enable = "avx512f,avx2,fma")]
    pub(super) unsafe fn exp_in_place(x: &mut [f32]) {
        // SAFETY: TAB holds 32 u64, read as four vectors of eight; AVX-512F is enabled.
        let tab = unsafe {
            let p = TAB.as_ptr().cast::<__m512i>();
            [
                _mm512_loadu_si512(p),
                _mm512_loadu_si512(p.add(1)),
                _mm512_loadu_si512(p.add(2)),
                _mm512_loadu_si512(p.add(3)),
            ]
        };
        let mut chunks = x.chunks_exact_mut(16);
        for c in &mut chunks {
            // SAFETY: `c` holds 16 f32; AVX-512F is enabled.
            unsafe {
                let v = _mm512_loadu_ps(c.as_ptr());
                // glibc's slow path: (bits >> 20) & 0x7ff ≥ 0x42b, i.e. |x| ≥ 88 or NaN.
                let top = _mm512_and_si512(
                    _mm512_srli_epi32::<20>(_mm512_castps_si512(v)),
                    _mm512_set1_epi32(0x7ff),
                );
                if _mm512_cmpgt_epi32_mask(top, _mm512_set1_epi32(0x42a)) != 0 {
                    super::scalar(c);
                    continue;
                }
                let lo = exp8(_mm512_cvtps_pd(_mm512_castps512_ps256(v)), tab);
                let hi = exp8(
                    _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(
                        _mm512_castps_pd(v),
                    ))),
                    tab,
                );
                let both = _mm512_insertf64x4::<1>(
                    _mm512_castpd256_pd512(_mm256_castps_pd(lo)),
                    _mm256_castps_pd(hi),
                );
                _mm512_storeu_ps(c.as_mut_ptr(), _mm512_castpd_ps(both));
            }
        }
        // The tail: eight at a time, then one by one.
        // SAFETY: the CPU has AVX2 and FMA.
        unsafe { super::avx2::exp_in_place(chunks.into_remainder()) };
    }
}
