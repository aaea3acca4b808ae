//! The GEMM micro-kernel template: one `MR × NR` tile of C from packed panels, instantiated
//! once per instruction set (`avx2`: 256-bit YMM, `avx512`: 512-bit ZMM) and element type.
//!
//! `acc[i][j] = Σ_p a[p·MR + i] · b[p·NR + j]` for `p` in `0..kc`, one fused multiply-add per
//! step in ascending `p` (so an element's rounding sequence depends only on `kc`, never on where
//! its tile sits, which thread runs it, or how wide the vectors are: an FMA rounds once
//! whatever its lane count). The epilogue is the same IEEE operations in the vector and the
//! scalar (edge-tile) paths: `c = alpha·acc` when overwriting, else `c = alpha·acc + beta·c`,
//! then `+ bias[j]` when the tile carries a bias. So every instantiation computes bitwise the
//! same C; they differ only in how many columns one call covers.
//!
//! A leaf of the GEMM: the invoking module supplies `MR`, `Tile` and `std::arch::x86_64::*`
//! in scope (`macro_rules!` resolves them where it is expanded).

/// Generates one micro-kernel compiled for the target features `$feat`: `$t` elements, `$v`
/// vectors of `$lanes` lanes, `$nr` columns (`$nr / $lanes` accumulators per row). `$bcast`
/// broadcasts an element read through a reference (`&$t`).
macro_rules! micro_kernel {
    ($feat:literal, $name:ident, $t:ty, $v:ty, $lanes:expr, $nr:expr,
     $zero:ident, $load:ident, $store:ident, $bcast:ident, $fmadd:ident, $mul:ident, $add:ident, $set1:ident) => {
        /// One micro-tile: see the module docs for the arithmetic.
        ///
        /// # Safety
        /// The CPU has the target features the kernel is compiled for (see the invoking
        /// module's `available`); `a` addresses `MR × kc` readable elements with strides
        /// `(ars, acs)` and `b` holds `kc·NR` readable elements;
        /// `t` addresses `t.rows × t.cols` (≤ MR × NR) writable elements of C that nobody
        /// else touches during the call, and `t.bias`, when not null, `t.cols` readable
        /// elements with stride `t.bias_stride`.
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = $feat)]
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
pub(super) use micro_kernel;
