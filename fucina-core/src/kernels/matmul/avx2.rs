//! AVX2 + FMA GEMM micro-kernels (the `micro` template on YMM registers) and the K-major
//! B panel packs (register transposes, shared with the AVX-512 kernels' wider panels).
//!
//! f32: 6 × 16 (12 accumulators of 8 lanes); f64: 6 × 8 (12 accumulators of 4 lanes). Both keep
//! 12 of the 16 YMM registers as accumulators, two for the B row and one for the A broadcast.
//! See `micro` for the arithmetic, which every instantiation shares bit for bit.

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

use super::micro::micro_kernel;
use super::tile::{PanelPack, Tile};
pub use super::tile::{MR, NR_F32, NR_F64};

/// True when this CPU runs the kernels below (AVX2 and FMA; detected once, in `kernels::simd`).
pub fn available() -> bool {
    crate::kernels::simd::has_avx2_fma()
}

micro_kernel!(
    "avx2,fma",
    kernel_f32,
    f32,
    __m256,
    8,
    NR_F32,
    _mm256_setzero_ps,
    _mm256_loadu_ps,
    _mm256_storeu_ps,
    _mm256_broadcast_ss,
    _mm256_fmadd_ps,
    _mm256_mul_ps,
    _mm256_add_ps,
    _mm256_set1_ps
);

micro_kernel!(
    "avx2,fma",
    kernel_f64,
    f64,
    __m256d,
    4,
    NR_F64,
    _mm256_setzero_pd,
    _mm256_loadu_pd,
    _mm256_storeu_pd,
    _mm256_broadcast_sd,
    _mm256_fmadd_pd,
    _mm256_mul_pd,
    _mm256_add_pd,
    _mm256_set1_pd
);

/// Packs one full f32 B panel from a K-contiguous B (B(p, j) at `src + j·cs + p`): K steps
/// `0..k` of `NR` columns (a multiple of 8: `NR_F32` here, 32 for the AVX-512 kernel), written
/// `dst[p·NR + j]`, eight steps of eight columns at a time through 8 × 8 register transposes.
///
/// # Safety
/// AVX2 is available; `src` addresses `NR` columns of `k` readable elements; `dst` holds
/// `k · NR` writable elements.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
pub unsafe fn pack_b_kmajor_f32<const NR: usize>(
    dst: *mut f32,
    src: *const f32,
    cs: usize,
    k: usize,
) {
    const { assert!(NR.is_multiple_of(8)) };
    // SAFETY: the caller's contract covers every pointer below.
    unsafe {
        let full = k / 8 * 8;
        for half in 0..NR / 8 {
            let cols: [*const f32; 8] = std::array::from_fn(|j| src.add((half * 8 + j) * cs));
            for p0 in (0..full).step_by(8) {
                let r: [__m256; 8] = std::array::from_fn(|j| _mm256_loadu_ps(cols[j].add(p0)));
                let o = transpose8(r);
                for (p, v) in o.iter().enumerate() {
                    _mm256_storeu_ps(dst.add((p0 + p) * NR + half * 8), *v);
                }
            }
            for p in full..k {
                for (j, col) in cols.iter().enumerate() {
                    *dst.add(p * NR + half * 8 + j) = *col.add(p);
                }
            }
        }
    }
}

/// The 8 × 8 transpose of eight f32 vectors: `out[p][j] = r[j][p]`.
///
/// # Safety
/// AVX2 is available.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
pub(super) unsafe fn transpose8(r: [__m256; 8]) -> [__m256; 8] {
    let t0 = _mm256_unpacklo_ps(r[0], r[1]);
    let t1 = _mm256_unpackhi_ps(r[0], r[1]);
    let t2 = _mm256_unpacklo_ps(r[2], r[3]);
    let t3 = _mm256_unpackhi_ps(r[2], r[3]);
    let t4 = _mm256_unpacklo_ps(r[4], r[5]);
    let t5 = _mm256_unpackhi_ps(r[4], r[5]);
    let t6 = _mm256_unpacklo_ps(r[6], r[7]);
    let t7 = _mm256_unpackhi_ps(r[6], r[7]);
    let u0 = _mm256_shuffle_ps::<0x44>(t0, t2);
    let u1 = _mm256_shuffle_ps::<0xEE>(t0, t2);
    let u2 = _mm256_shuffle_ps::<0x44>(t1, t3);
    let u3 = _mm256_shuffle_ps::<0xEE>(t1, t3);
    let u4 = _mm256_shuffle_ps::<0x44>(t4, t6);
    let u5 = _mm256_shuffle_ps::<0xEE>(t4, t6);
    let u6 = _mm256_shuffle_ps::<0x44>(t5, t7);
    let u7 = _mm256_shuffle_ps::<0xEE>(t5, t7);
    [
        _mm256_permute2f128_ps::<0x20>(u0, u4),
        _mm256_permute2f128_ps::<0x20>(u1, u5),
        _mm256_permute2f128_ps::<0x20>(u2, u6),
        _mm256_permute2f128_ps::<0x20>(u3, u7),
        _mm256_permute2f128_ps::<0x31>(u0, u4),
        _mm256_permute2f128_ps::<0x31>(u1, u5),
        _mm256_permute2f128_ps::<0x31>(u2, u6),
        _mm256_permute2f128_ps::<0x31>(u3, u7),
    ]
}

/// Packs one full f32 A panel (`MR` = 6 rows) from a row-major A (A(i, p) at `src + i·rs +
/// p`): K steps `0..k` written `dst[p·MR + i]`, eight steps at a time through an 8 × 8
/// register transpose of the six rows (and two zero rows, not stored). The same elements
/// as the scalar pack, in the same places: data movement only.
///
/// # Safety
/// AVX2 is available; `src` addresses `MR` rows of `k` readable elements; `dst` holds
/// `k · MR` writable elements.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
pub unsafe fn pack_a_kmajor_f32(dst: *mut f32, src: *const f32, rs: usize, k: usize) {
    use super::tile::MR;
    const { assert!(MR == 6) };
    // SAFETY: the caller's contract covers every pointer below.
    unsafe {
        let rows: [*const f32; MR] = std::array::from_fn(|i| src.add(i * rs));
        let full = k / 8 * 8;
        for p0 in (0..full).step_by(8) {
            let r: [__m256; 8] = std::array::from_fn(|i| {
                if i < MR {
                    _mm256_loadu_ps(rows[i].add(p0))
                } else {
                    _mm256_setzero_ps()
                }
            });
            for (p, v) in transpose8(r).iter().enumerate() {
                let at = dst.add((p0 + p) * MR);
                _mm_storeu_ps(at, _mm256_castps256_ps128(*v));
                let hi = _mm256_extractf128_ps::<1>(*v);
                _mm_storel_epi64(at.add(4).cast::<__m128i>(), _mm_castps_si128(hi));
            }
        }
        for p in full..k {
            for (i, row) in rows.iter().enumerate() {
                *dst.add(p * MR + i) = *row.add(p);
            }
        }
    }
}

/// The K-major A panel pack of the f32 kernels ([`pack_a_kmajor_f32`]; none off x86_64).
#[cfg(target_arch = "x86_64")]
pub const PACK_A_F32: Option<PanelPack<f32>> = Some(pack_a_kmajor_f32);
/// The K-major A panel pack of the f32 kernels ([`pack_a_kmajor_f32`]; none off x86_64).
#[cfg(not(target_arch = "x86_64"))]
pub const PACK_A_F32: Option<PanelPack<f32>> = None;
/// f64 A panels use the portable pack.
pub const PACK_A_F64: Option<PanelPack<f64>> = None;

/// [`pack_b_kmajor_f32`] for f64: `NR` columns (a multiple of 4: `NR_F64` here, 16 for the
/// AVX-512 kernel), four steps of four columns at a time (4 × 4 transposes).
///
/// # Safety
/// As [`pack_b_kmajor_f32`], with `NR` f64 columns.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
pub unsafe fn pack_b_kmajor_f64<const NR: usize>(
    dst: *mut f64,
    src: *const f64,
    cs: usize,
    k: usize,
) {
    const { assert!(NR.is_multiple_of(4)) };
    // SAFETY: the caller's contract covers every pointer below.
    unsafe {
        let full = k / 4 * 4;
        for half in 0..NR / 4 {
            let cols: [*const f64; 4] = std::array::from_fn(|j| src.add((half * 4 + j) * cs));
            for p0 in (0..full).step_by(4) {
                let r: [__m256d; 4] = std::array::from_fn(|j| _mm256_loadu_pd(cols[j].add(p0)));
                let t0 = _mm256_unpacklo_pd(r[0], r[1]);
                let t1 = _mm256_unpackhi_pd(r[0], r[1]);
                let t2 = _mm256_unpacklo_pd(r[2], r[3]);
                let t3 = _mm256_unpackhi_pd(r[2], r[3]);
                let o = [
                    _mm256_permute2f128_pd::<0x20>(t0, t2),
                    _mm256_permute2f128_pd::<0x20>(t1, t3),
                    _mm256_permute2f128_pd::<0x31>(t0, t2),
                    _mm256_permute2f128_pd::<0x31>(t1, t3),
                ];
                for (p, v) in o.iter().enumerate() {
                    _mm256_storeu_pd(dst.add((p0 + p) * NR + half * 4), *v);
                }
            }
            for p in full..k {
                for (j, col) in cols.iter().enumerate() {
                    *dst.add(p * NR + half * 4 + j) = *col.add(p);
                }
            }
        }
    }
}
