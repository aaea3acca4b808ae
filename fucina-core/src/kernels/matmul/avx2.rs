//! AVX2 + FMA GEMM micro-kernels: one `MR × NR` tile of C from packed panels.
//!
//! `acc[i][j] = Σ_p a[p·MR + i] · b[p·NR + j]` for `p` in `0..kc`, one fused multiply-add per
//! step in ascending `p` (so an element's rounding sequence depends only on `kc`, never on where
//! its tile sits or which thread runs it). The epilogue is the same two IEEE operations in the
//! vector and the scalar (edge-tile) paths: `c = alpha·acc` when overwriting, else
//! `c = alpha·acc + beta·c`.
//!
//! f32: 6 × 16 (12 accumulators of 8 lanes); f64: 6 × 8 (12 accumulators of 4 lanes). Both keep
//! 12 of the 16 YMM registers as accumulators, two for the B row and one for the A broadcast.

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

use super::tile::Tile;
pub use super::tile::{MR, NR_F32, NR_F64};

/// True when this CPU runs the kernels below (AVX2 and FMA; detected once, in `kernels::simd`).
pub fn available() -> bool {
    crate::kernels::simd::has_avx2_fma()
}

/// Generates one micro-kernel: `$t` elements, `$v` vectors of `$lanes` lanes, `$nr` columns.
macro_rules! micro_kernel {
    ($name:ident, $t:ty, $v:ty, $lanes:expr, $nr:expr,
     $zero:ident, $load:ident, $store:ident, $bcast:ident, $fmadd:ident, $mul:ident, $add:ident, $set1:ident) => {
        /// One micro-tile: see the module docs for the arithmetic.
        ///
        /// # Safety
        /// AVX2 and FMA are available; `a` addresses `MR × kc` readable elements with strides
        /// `(ars, acs)` and `b` holds `kc·NR` readable elements;
        /// `t` addresses `t.rows × t.cols` (≤ MR × NR) writable elements of C that nobody
        /// else touches during the call, and `t.bias`, when not null, `t.cols` readable
        /// elements with stride `t.bias_stride`.
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = "avx2,fma")]
        pub unsafe fn $name(
            kc: usize,
            a: *const $t,
            (ars, acs): (usize, usize),
            b: *const $t,
            t: Tile<$t>,
        ) {
            const NV: usize = $nr / $lanes;
            // SAFETY: the caller's contract covers every pointer below.
            unsafe {
                // Start pulling C's tile toward L1 now: its rows sit a row of C apart (often
                // a multiple of 4 KiB), and waiting until the epilogue stalls on the misses.
                if !t.overwrite {
                    for i in 0..t.rows {
                        let row = t.c.offset(i as isize * t.rsc);
                        _mm_prefetch::<_MM_HINT_T0>(row as *const i8);
                        _mm_prefetch::<_MM_HINT_T0>(
                            row.offset((t.cols as isize - 1) * t.csc) as *const i8
                        );
                    }
                }
                let mut acc = [[$zero(); NV]; MR];
                // One K step: B's row at `bp`, A's element of row `i` at `arow(i)`. Every
                // layout below runs exactly these FMAs in ascending `p`; they differ only in
                // how addresses are formed (and in unrolling, which keeps the order).
                macro_rules! step {
                    ($bp:expr, $arow:expr) => {{
                        let mut bv = [$zero(); NV];
                        for (h, v) in bv.iter_mut().enumerate() {
                            *v = $load($bp.add(h * $lanes));
                        }
                        for (i, row) in acc.iter_mut().enumerate() {
                            let av = $bcast(&*$arow(i));
                            for (h, v) in row.iter_mut().enumerate() {
                                *v = $fmadd(av, bv[h], *v);
                            }
                        }
                    }};
                }
                const U: usize = 4;
                let mut bp = b;
                let mut p = 0;
                if acs == 1 {
                    // A read in place, row-major: each row is one contiguous run along K.
                    let rows: [*const $t; MR] = std::array::from_fn(|i| a.add(i * ars));
                    while p + U <= kc {
                        for o in 0..U {
                            step!(bp.add(o * $nr), |i: usize| rows[i].add(p + o));
                        }
                        bp = bp.add(U * $nr);
                        p += U;
                    }
                    while p < kc {
                        step!(bp, |i: usize| rows[i].add(p));
                        bp = bp.add($nr);
                        p += 1;
                    }
                } else if ars == 1 {
                    // A packed (or column-major): one K step's MR elements are contiguous.
                    let mut ap = a;
                    while p + U <= kc {
                        for o in 0..U {
                            step!(bp.add(o * $nr), |i: usize| ap.add(o * acs + i));
                        }
                        ap = ap.add(U * acs);
                        bp = bp.add(U * $nr);
                        p += U;
                    }
                    while p < kc {
                        step!(bp, |i: usize| ap.add(i));
                        ap = ap.add(acs);
                        bp = bp.add($nr);
                        p += 1;
                    }
                } else {
                    let rows: [*const $t; MR] = std::array::from_fn(|i| a.add(i * ars));
                    while p < kc {
                        let off = p * acs;
                        step!(bp, |i: usize| rows[i].add(off));
                        bp = bp.add($nr);
                        p += 1;
                    }
                }
                let alpha = $set1(t.alpha);
                let beta = $set1(t.beta);
                let has_bias = !t.bias.is_null();
                if t.rows == MR && t.cols == $nr && t.csc == 1 && (!has_bias || t.bias_stride == 1)
                {
                    let mut bias = [$zero(); NV];
                    if has_bias {
                        for (h, v) in bias.iter_mut().enumerate() {
                            *v = $load(t.bias.add(h * $lanes));
                        }
                    }
                    for (i, row) in acc.iter().enumerate() {
                        let c = t.c.offset(i as isize * t.rsc);
                        for (h, v) in row.iter().enumerate() {
                            let p = c.add(h * $lanes);
                            let mut out = $mul(alpha, *v);
                            if !t.overwrite {
                                out = $add(out, $mul(beta, $load(p)));
                            }
                            if has_bias {
                                out = $add(out, bias[h]);
                            }
                            $store(p, out);
                        }
                    }
                } else {
                    let mut buf = [[0.0 as $t; $nr]; MR];
                    for (i, row) in acc.iter().enumerate() {
                        for (h, v) in row.iter().enumerate() {
                            $store(buf[i].as_mut_ptr().add(h * $lanes), *v);
                        }
                    }
                    for (i, row) in buf.iter().enumerate().take(t.rows) {
                        for (j, &v) in row.iter().enumerate().take(t.cols) {
                            let p = t.c.offset(i as isize * t.rsc + j as isize * t.csc);
                            let out = if t.overwrite {
                                t.alpha * v
                            } else {
                                t.alpha * v + t.beta * *p
                            };
                            *p = if has_bias {
                                out + *t.bias.offset(j as isize * t.bias_stride)
                            } else {
                                out
                            };
                        }
                    }
                }
            }
        }
    };
}

micro_kernel!(
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
/// `0..k` of `NR_F32` columns, written `dst[p·NR + j]`, eight steps at a time through 8 × 8
/// register transposes.
///
/// # Safety
/// AVX2 is available; `src` addresses `NR_F32` columns of `k` readable elements; `dst` holds
/// `k · NR_F32` writable elements.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
pub unsafe fn pack_b_kmajor_f32(dst: *mut f32, src: *const f32, cs: usize, k: usize) {
    const NR: usize = NR_F32;
    // SAFETY: the caller's contract covers every pointer below.
    unsafe {
        let full = k / 8 * 8;
        for half in 0..NR / 8 {
            let cols: [*const f32; 8] = std::array::from_fn(|j| src.add((half * 8 + j) * cs));
            for p0 in (0..full).step_by(8) {
                let r: [__m256; 8] = std::array::from_fn(|j| _mm256_loadu_ps(cols[j].add(p0)));
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
                let o = [
                    _mm256_permute2f128_ps::<0x20>(u0, u4),
                    _mm256_permute2f128_ps::<0x20>(u1, u5),
                    _mm256_permute2f128_ps::<0x20>(u2, u6),
                    _mm256_permute2f128_ps::<0x20>(u3, u7),
                    _mm256_permute2f128_ps::<0x31>(u0, u4),
                    _mm256_permute2f128_ps::<0x31>(u1, u5),
                    _mm256_permute2f128_ps::<0x31>(u2, u6),
                    _mm256_permute2f128_ps::<0x31>(u3, u7),
                ];
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

/// [`pack_b_kmajor_f32`] for f64: `NR_F64` columns, four steps at a time (4 × 4 transposes).
///
/// # Safety
/// As [`pack_b_kmajor_f32`], with `NR_F64` columns.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
pub unsafe fn pack_b_kmajor_f64(dst: *mut f64, src: *const f64, cs: usize, k: usize) {
    const NR: usize = NR_F64;
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
