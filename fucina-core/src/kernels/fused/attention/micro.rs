//! The register-blocked tile product the streaming attention kernels are built from:
//! `C[m, n] (+)= Σ_k A(m, k) · B(k)[n]` on one (query block, key block) tile.
//!
//! Invariants: every C element is reduced over k in increasing order, with separate
//! multiplies and adds (no FMA), in `MR × NR` register tiles whose lanes are independent,
//! so the bits do not depend on the SIMD width the caller was compiled for (see
//! `softmax::simd_dispatch`) nor on the thread count. A and B are closures, so the same
//! kernel serves `Q·Kᵀ` (packed Kᵀ panels), `P·V` (V rows in place) and the transposed
//! products of the backward (`Pᵀ·dO`, `dSᵀ·Q`). Everything here is inlined so it is
//! compiled inside the dispatched caller; full f32 tiles on AVX2 CPUs use explicit
//! vectors ([`tile_f32_avx2`]: the same multiplies and adds, with each B row loaded once).

use crate::dtype::{DType, Float};

/// Rows of C per register tile.
pub(super) const MR: usize = 4;
/// Columns of C per register tile (two AVX2 vectors of f32), and the width of packed panels.
pub(super) const NR: usize = 16;

/// `C[m, n] = (C[m, n] if accumulate else 0) + Σ_{k < kc} a(m, k) · b(k, n0)[n − n0]`
/// for `m < rows`, `n < cols`, where `C[m, n] = c[m * ldc + n]` and `b(k, n0)` returns row
/// `k` of B from column `n0` on (at least `min(NR, cols − n0)` elements; `n0` is a multiple
/// of 8 below `cols`, or any column when fewer than 8 are left).
#[inline(always)]
pub(super) fn gemm<'b, T: Float + 'b>(
    rows: usize,
    cols: usize,
    kc: usize,
    c: &mut [T],
    ldc: usize,
    accumulate: bool,
    a: impl Fn(usize, usize) -> T + Copy,
    b: impl Fn(usize, usize) -> &'b [T] + Copy,
) {
    let fast = T::DTYPE == DType::F32 && avx2();
    gemm_impl(rows, cols, kc, c, ldc, accumulate, fast, a, b);
}

/// [`gemm`] with the AVX2 f32 tiles on (`fast`, which the caller has checked) or off.
#[inline(always)]
fn gemm_impl<'b, T: Float + 'b>(
    rows: usize,
    cols: usize,
    kc: usize,
    c: &mut [T],
    ldc: usize,
    accumulate: bool,
    fast: bool,
    a: impl Fn(usize, usize) -> T + Copy,
    b: impl Fn(usize, usize) -> &'b [T] + Copy,
) {
    let mut m0 = 0;
    while m0 < rows {
        if rows - m0 >= MR {
            row_tiles::<T, MR>(m0, cols, kc, c, ldc, accumulate, fast, a, b);
            m0 += MR;
        } else {
            row_tiles::<T, 1>(m0, cols, kc, c, ldc, accumulate, fast, a, b);
            m0 += 1;
        }
    }
}

/// Whether this CPU has AVX2 (detected once, in `kernels::simd`).
#[inline(always)]
fn avx2() -> bool {
    crate::kernels::simd::has_avx2()
}

/// The tiles of rows `m0..m0 + R` of C: `NR`-wide, then 8-wide, then single columns.
#[inline(always)]
fn row_tiles<'b, T: Float + 'b, const R: usize>(
    m0: usize,
    cols: usize,
    kc: usize,
    c: &mut [T],
    ldc: usize,
    accumulate: bool,
    fast: bool,
    a: impl Fn(usize, usize) -> T + Copy,
    b: impl Fn(usize, usize) -> &'b [T] + Copy,
) {
    let mut n0 = 0;
    while n0 < cols {
        let left = cols - n0;
        if left >= NR {
            tile::<T, R, NR>(m0, n0, kc, c, ldc, accumulate, fast, a, b);
            n0 += NR;
        } else if left >= 8 {
            tile::<T, R, 8>(m0, n0, kc, c, ldc, accumulate, false, a, b);
            n0 += 8;
        } else {
            tile::<T, R, 1>(m0, n0, kc, c, ldc, accumulate, false, a, b);
            n0 += 1;
        }
    }
}

/// One `R × W` register tile of C at (m0, n0).
#[inline(always)]
fn tile<'b, T: Float + 'b, const R: usize, const W: usize>(
    m0: usize,
    n0: usize,
    kc: usize,
    c: &mut [T],
    ldc: usize,
    accumulate: bool,
    fast: bool,
    a: impl Fn(usize, usize) -> T,
    b: impl Fn(usize, usize) -> &'b [T],
) {
    let mut acc = [[T::ZERO; W]; R];
    if accumulate {
        for (r, acc_r) in acc.iter_mut().enumerate() {
            let base = (m0 + r) * ldc + n0;
            acc_r.copy_from_slice(&c[base..base + W]);
        }
    }
    #[cfg(target_arch = "x86_64")]
    if fast && W == NR {
        // SAFETY: `fast` is set only for f32 on a CPU with AVX2 (see `gemm`), and W == NR.
        unsafe { tile_f32_avx2(&mut acc, kc, |r, k| a(m0 + r, k), |k| b(k, n0)) };
        for (r, acc_r) in acc.iter().enumerate() {
            let base = (m0 + r) * ldc + n0;
            c[base..base + W].copy_from_slice(acc_r);
        }
        return;
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = fast;
    for k in 0..kc {
        let bk = &b(k, n0)[..W];
        for (r, acc_r) in acc.iter_mut().enumerate() {
            let x = a(m0 + r, k);
            for w in 0..W {
                acc_r[w] += x * bk[w];
            }
        }
    }
    for (r, acc_r) in acc.iter().enumerate() {
        let base = (m0 + r) * ldc + n0;
        c[base..base + W].copy_from_slice(acc_r);
    }
}

/// `acc[r][w] += Σ_k a(r, k) · b(k)[w]` for one `R × 16` f32 tile: per k, the B row is
/// loaded once into two vectors and each `a(r, k)` broadcast; products and sums are
/// separate IEEE operations in ascending k, exactly as the generic tile.
///
/// # Safety
/// `T` is `f32`, `W == NR` and the CPU has AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn tile_f32_avx2<'b, T: Float + 'b, const R: usize, const W: usize>(
    acc: &mut [[T; W]; R],
    kc: usize,
    a: impl Fn(usize, usize) -> T,
    b: impl Fn(usize) -> &'b [T],
) {
    use std::arch::x86_64::*;
    debug_assert!(T::DTYPE == DType::F32 && W == NR);
    // SAFETY: T is f32 and W == NR (the caller's contract), so every pointer cast below
    // reads or writes 16 f32s inside the slice or array it comes from.
    unsafe {
        let mut v = [[_mm256_setzero_ps(); 2]; R];
        for (vr, ar) in v.iter_mut().zip(acc.iter()) {
            let p = ar.as_ptr().cast::<f32>();
            *vr = [_mm256_loadu_ps(p), _mm256_loadu_ps(p.add(8))];
        }
        for k in 0..kc {
            let bk = &b(k)[..NR];
            let p = bk.as_ptr().cast::<f32>();
            let (b0, b1) = (_mm256_loadu_ps(p), _mm256_loadu_ps(p.add(8)));
            for (r, vr) in v.iter_mut().enumerate() {
                let x = a(r, k);
                let x = _mm256_set1_ps(*std::ptr::from_ref(&x).cast::<f32>());
                vr[0] = _mm256_add_ps(vr[0], _mm256_mul_ps(x, b0));
                vr[1] = _mm256_add_ps(vr[1], _mm256_mul_ps(x, b1));
            }
        }
        for (vr, ar) in v.iter().zip(acc.iter_mut()) {
            let p = ar.as_mut_ptr().cast::<f32>();
            _mm256_storeu_ps(p, vr[0]);
            _mm256_storeu_ps(p.add(8), vr[1]);
        }
    }
}

/// Packs rows `row(0..n)` (each of at least `kc` elements) as `Bᵀ` panels for [`gemm`]:
/// panel `p` holds rows `p·NR..p·NR + NR` transposed, `dst[p·kc·NR + x·NR + l] =
/// row(p·NR + l)[x]`, zero for `p·NR + l ≥ n`. `dst` holds `n.div_ceil(NR)·kc·NR` elements.
#[inline(always)]
pub(super) fn pack_t<'r, T: Float + 'r>(
    n: usize,
    row: impl Fn(usize) -> &'r [T],
    kc: usize,
    dst: &mut [T],
) {
    for p in 0..n.div_ceil(NR) {
        let out = &mut dst[p * kc * NR..(p + 1) * kc * NR];
        let lanes = NR.min(n - p * NR);
        if lanes < NR {
            out.fill(T::ZERO);
        }
        for l in 0..lanes {
            for (x, &v) in row(p * NR + l)[..kc].iter().enumerate() {
                out[x * NR + l] = v;
            }
        }
    }
}

/// Row `k` of packed `Bᵀ` panels (from [`pack_t`] with reduction length `kc`) from column
/// `n0` on (`n0` a multiple of `NR`).
#[inline(always)]
pub(super) fn panel_row<T>(packed: &[T], kc: usize, k: usize, n0: usize) -> &[T] {
    let base = (n0 / NR) * kc * NR + k * NR;
    &packed[base..base + NR]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tile product against a plain triple loop (same summation order, so exact), on
    /// the AVX2 tiles where the CPU has them and on the portable ones.
    #[test]
    fn gemm_matches_naive_and_packing_round_trips() {
        if !avx2() {
            println!("skip: no AVX2 on this CPU; the portable tiles are tested below");
        }
        for fast in [avx2(), false] {
            gemm_case(fast);
        }
    }

    fn gemm_case(fast: bool) {
        let mut g = crate::rng::SplitMix64::new(9);
        for (m, n, kc) in [(1, 1, 1), (5, 17, 3), (9, 40, 7), (4, 16, 64), (7, 33, 0)] {
            let a: Vec<f32> = (0..m * kc).map(|_| g.next_normal() as f32).collect();
            let bm: Vec<f32> = (0..kc * n).map(|_| g.next_normal() as f32).collect();
            let c0: Vec<f32> = (0..m * n).map(|_| g.next_normal() as f32).collect();
            let mut c = c0.clone();
            gemm_impl(
                m,
                n,
                kc,
                &mut c,
                n,
                true,
                fast,
                |r, k| a[r * kc + k],
                |k, n0| &bm[k * n + n0..(k + 1) * n],
            );
            for r in 0..m {
                for j in 0..n {
                    let mut want = c0[r * n + j];
                    for k in 0..kc {
                        want += a[r * kc + k] * bm[k * n + j];
                    }
                    assert_eq!(c[r * n + j].to_bits(), want.to_bits(), "{m}x{n}x{kc}");
                }
            }
            // Bᵀ packed from its rows (n rows of kc) gives the same product via panels.
            let bt: Vec<f32> = (0..n * kc).map(|i| bm[(i % kc) * n + i / kc]).collect();
            let npad = n.div_ceil(NR) * NR;
            let mut packed = vec![f32::NAN; npad * kc];
            pack_t(n, |j| &bt[j * kc..(j + 1) * kc], kc, &mut packed);
            let mut c2 = vec![0f32; m * npad];
            gemm_impl(
                m,
                npad,
                kc,
                &mut c2,
                npad,
                false,
                fast,
                |r, k| a[r * kc + k],
                |k, n0| panel_row(&packed, kc, k, n0),
            );
            for r in 0..m {
                for j in 0..n {
                    let mut want = 0f32;
                    for k in 0..kc {
                        want += a[r * kc + k] * bm[k * n + j];
                    }
                    assert_eq!(c2[r * npad + j].to_bits(), want.to_bits());
                }
            }
        }
    }
}
