//! The one-row GEMM (`m == 1`: a decoder's step, `y = x·Wᵀ` for one token) over a K-contiguous
//! f32 B (linear's `wᵀ`: column `j` of B is row `j` of W), without packing B.
//!
//! The packed driver would copy all of B into `NR`-wide panels for every call, once per token
//! for each weight: at batch 1 that copy costs more than the FMAs that read it (64 % of a
//! greedy decode's samples on the Sapphire Rapids VM, `perf record -e cpu-clock`). Here each
//! group of eight columns is read as eight K runs, eight steps at a time, moved into K-major
//! order by the same 8 × 8 register transpose the pack uses, and consumed at once.
//!
//! The arithmetic is the packed kernels' exactly (`micro`): per column, one FMA chain per
//! `KC` step in ascending K (`acc = x[p]·b[p] + acc`), then `c = alpha·acc` on the first step
//! when it overwrites, else `c = alpha·acc + beta·c` (`beta` 1 after the first step), then
//! `+ bias[j]` after the last. So C is bitwise the packed path's C; `gemm_paths.rs` checks it.

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

use super::avx2::transpose8;
use super::tile::{GemvRow, Tile};

/// Column groups of eight run side by side (independent FMA chains, to cover the latency).
const GROUPS: usize = 4;

/// `C[0, j] ← alpha·Σ_p x[p]·B[p, j] + beta·C[0, j]` (`+ bias[j]`) for `j < t.cols`, K
/// reduced in `kc_step`-long steps as the packed driver does; `t` describes the first step
/// (`beta`, `overwrite`) and the bias (added after the last step).
///
/// # Safety
/// AVX2 and FMA are available; `x` addresses `k` readable elements `xs` apart; column `j` of
/// B is `k` readable contiguous elements at `b + j·cs`; `t.c` addresses `t.cols` writable
/// elements `t.csc` apart that nobody else touches, and `t.bias`, when not null, `t.cols`
/// readable elements `t.bias_stride` apart.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
pub unsafe fn gemv_kmajor_f32(
    k: usize,
    kc_step: usize,
    (x, xs): (*const f32, usize),
    (b, cs): (*const f32, usize),
    t: Tile<f32>,
) {
    debug_assert!(kc_step.is_multiple_of(8));
    let n = t.cols;
    let mut j0 = 0;
    // SAFETY: every pointer below stays inside the caller's columns, K steps and C.
    unsafe {
        while j0 < n {
            let groups = ((n - j0) / 8).min(GROUPS);
            for pc in (0..k).step_by(kc_step) {
                let kc = kc_step.min(k - pc);
                let mut acc = [[0.0f32; 8]; GROUPS];
                if groups > 0 {
                    let mut v = [_mm256_setzero_ps(); GROUPS];
                    let full = kc / 8 * 8;
                    for p0 in (pc..pc + full).step_by(8) {
                        let mut xv = [_mm256_setzero_ps(); 8];
                        for (q, e) in xv.iter_mut().enumerate() {
                            *e = _mm256_set1_ps(*x.add((p0 + q) * xs));
                        }
                        for (g, a) in v.iter_mut().enumerate().take(groups) {
                            let col = b.add((j0 + 8 * g) * cs + p0);
                            let r: [__m256; 8] =
                                std::array::from_fn(|i| _mm256_loadu_ps(col.add(i * cs)));
                            for (q, row) in transpose8(r).iter().enumerate() {
                                *a = _mm256_fmadd_ps(xv[q], *row, *a);
                            }
                        }
                    }
                    for p in pc + full..pc + kc {
                        let xp = _mm256_set1_ps(*x.add(p * xs));
                        for (g, a) in v.iter_mut().enumerate().take(groups) {
                            let col = b.add((j0 + 8 * g) * cs + p);
                            let row: [f32; 8] = std::array::from_fn(|i| *col.add(i * cs));
                            *a = _mm256_fmadd_ps(xp, _mm256_loadu_ps(row.as_ptr()), *a);
                        }
                    }
                    for (g, a) in v.iter().enumerate().take(groups) {
                        _mm256_storeu_ps(acc[g].as_mut_ptr(), *a);
                    }
                }
                let width = if groups > 0 { 8 * groups } else { n - j0 };
                if groups == 0 {
                    // Fewer than eight columns left: one scalar chain each (a fused
                    // multiply-add rounds once, as a vector lane's does).
                    for (jj, slot) in acc.as_flattened_mut().iter_mut().enumerate().take(width) {
                        let col = b.add((j0 + jj) * cs);
                        let mut s = 0.0f32;
                        for p in pc..pc + kc {
                            s = (*x.add(p * xs)).mul_add(*col.add(p), s);
                        }
                        *slot = s;
                    }
                }
                let first = pc == 0;
                let last = pc + kc == k;
                for (jj, &v) in acc.as_flattened().iter().enumerate().take(width) {
                    let j = (j0 + jj) as isize;
                    let p = t.c.offset(j * t.csc);
                    let out = if first && t.overwrite {
                        t.alpha * v
                    } else {
                        let beta = if first { t.beta } else { 1.0 };
                        t.alpha * v + beta * *p
                    };
                    *p = if last && !t.bias.is_null() {
                        out + *t.bias.offset(j * t.bias_stride)
                    } else {
                        out
                    };
                }
            }
            j0 += if groups > 0 { 8 * groups } else { n - j0 };
        }
    }
}

/// The one-row kernel of the f32 packed kernels ([`gemv_kmajor_f32`]; none off x86_64).
#[cfg(target_arch = "x86_64")]
pub const GEMV_F32: Option<GemvRow<f32>> = Some(gemv_kmajor_f32);
/// The one-row kernel of the f32 packed kernels ([`gemv_kmajor_f32`]; none off x86_64).
#[cfg(not(target_arch = "x86_64"))]
pub const GEMV_F32: Option<GemvRow<f32>> = None;
/// f64 one-row products go through the packed driver.
pub const GEMV_F64: Option<GemvRow<f64>> = None;
