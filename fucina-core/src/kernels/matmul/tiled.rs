//! The portable GEMM path: `matrixmultiply`'s single-threaded sgemm/dgemm (AVX-512 micro-kernel
//! picked at runtime, AVX2/FMA and scalar fallbacks) on a fixed grid of C tiles.
//!
//! Used where the packed paths are not (no AVX2/FMA), and selectable with `FUCINA_GEMM=tiled`.
//! Tile boundaries depend only on (batch, M, N, K), and every C element is reduced over K
//! inside exactly one kernel call, so results are bitwise identical for any thread count.
//! Strided views reach the kernel as row and column strides: operands are never copied.
//! A bf16/f16 B is widened one column panel of a tile at a time into thread-local scratch
//! (panels a multiple of 64 columns wide: the same micro-tiles, so the same bits).

use crate::dtype::Float;
use crate::exec::{ExecContext, MatMut};
use crate::shape;

use super::packed::with_b_scratch;
use super::tile::{BufArgs, GemmArgs, MatRef};
use super::widen::{pack_panels_widen, BElem};
use super::Problem;

/// Tile edges are multiples of this (the AVX-512 f32 micro-kernel is 16×16).
const TILE_ALIGN: usize = 16;
/// A tile is never split below this many rows or columns.
const MIN_TILE_DIM: usize = 64;
/// A tile is never split below this many FLOPs (keeps packing overhead small).
const MIN_TILE_FLOPS: usize = 1 << 21;
/// Tiles (over all batch items) a large problem is cut into: enough to balance 2–8 threads.
const TARGET_CHUNKS: usize = 8;
/// Below this many FLOPs in total a GEMM runs on the calling thread only.
const PAR_MIN_FLOPS: usize = 1 << 23;
/// A bf16/f16 B is widened per column panel of a tile: at most this many widened elements
/// (1 MiB of f32) per panel, but never fewer than [`WIDEN_COLS`] columns.
const WIDEN_ELEMS: usize = 1 << 18;
/// Widened panels are a multiple of this many columns wide (so every micro-tile of
/// `matrixmultiply` that is full in the whole tile stays full in its panel: NR ≤ 16 divides
/// it, and an element is computed by the same full or masked kernel as unwidened).
const WIDEN_COLS: usize = 64;

/// Element types with a fast GEMM kernel (f32, f64).
pub(super) trait GemmKernel: Float {
    /// `C ← alpha·A·B + beta·C` for one strided matrix triple (matrixmultiply's contract:
    /// A is m×k, B is k×n, C is m×n and does not alias itself; beta == 0 ignores C).
    ///
    /// # Safety
    /// Every addressed element of A, B and C must be in bounds; C must not be read or written
    /// by anyone else during the call.
    #[allow(clippy::too_many_arguments)]
    unsafe fn kernel(
        m: usize,
        k: usize,
        n: usize,
        alpha: Self,
        a: *const Self,
        rsa: isize,
        csa: isize,
        b: *const Self,
        rsb: isize,
        csb: isize,
        beta: Self,
        c: *mut Self,
        rsc: isize,
        csc: isize,
    );
}

/// Implements [`GemmKernel`] for `$t` over `matrixmultiply::$gemm`.
macro_rules! gemm_kernel {
    ($t:ty, $gemm:ident) => {
        impl GemmKernel for $t {
            // SAFETY: the contract is the trait method's (see `GemmKernel::kernel`).
            #[inline]
            unsafe fn kernel(
                m: usize,
                k: usize,
                n: usize,
                alpha: $t,
                a: *const $t,
                rsa: isize,
                csa: isize,
                b: *const $t,
                rsb: isize,
                csb: isize,
                beta: $t,
                c: *mut $t,
                rsc: isize,
                csc: isize,
            ) {
                // SAFETY: forwarded caller contract.
                unsafe {
                    matrixmultiply::$gemm(
                        m, k, n, alpha, a, rsa, csa, b, rsb, csb, beta, c, rsc, csc,
                    )
                }
            }
        }
    };
}

gemm_kernel!(f32, sgemm);
gemm_kernel!(f64, dgemm);

/// The fixed tile size `(rows, cols)` of C for a problem; depends only on its sizes.
fn tile_shape(batch: usize, m: usize, n: usize, k: usize) -> (usize, usize) {
    let flops = m.saturating_mul(n).saturating_mul(k).saturating_mul(2);
    let want = TARGET_CHUNKS.div_ceil(batch.max(1));
    let tiles = want.min((flops / MIN_TILE_FLOPS).max(1));
    let (mut gm, mut gn) = (1usize, 1usize);
    while gm * gn * 2 <= tiles {
        let can_m = m / (gm * 2) >= MIN_TILE_DIM;
        let can_n = n / (gn * 2) >= MIN_TILE_DIM;
        if can_m && (m / gm >= n / gn || !can_n) {
            gm *= 2;
        } else if can_n {
            gn *= 2;
        } else {
            break;
        }
    }
    let edge = |len: usize, parts: usize| {
        if parts == 1 {
            len.max(1)
        } else {
            len.div_ceil(parts).next_multiple_of(TILE_ALIGN)
        }
    };
    (edge(m, gm), edge(n, gn))
}

/// Runs a validated, non-empty problem on C's batch items `c` (one [`MatMut`] per batch
/// index, as [`MatMut::batch`] makes them). The bias of `args` is added to every row of C
/// after the product, tile by tile while the tile is hot in cache.
///
/// # Safety
/// `args.a` and `args.b` are the buffers the problem was planned against (offsets included
/// in `p`): every element the problem addresses in them is in bounds.
pub(super) unsafe fn run<T: GemmKernel, S: BElem<T>>(
    ctx: &ExecContext,
    p: &Problem,
    args: BufArgs<'_, T, S>,
    c: Vec<MatMut<'_, T>>,
) {
    let GemmArgs {
        alpha,
        a,
        b,
        beta,
        bias,
    } = args;
    let (m, n, k) = (p.m, p.n, p.k);
    let nb = p.batch_len();
    let (tm, tn) = tile_shape(nb, m, n, k);
    let (gm, gn) = (m.div_ceil(tm), n.div_ceil(tn));
    let per = gm * gn;
    let n_chunks = nb * per;
    let total_flops = (2 * m * n).saturating_mul(k.max(1)).saturating_mul(nb);
    let parallel = n_chunks > 1 && total_flops >= PAR_MIN_FLOPS;
    // Chunk = (batch item, tile row, tile column), item-major: each a disjoint tile of C.
    let row_cuts: Vec<usize> = (0..gm).map(|i| i * tm).chain([m]).collect();
    let col_cuts: Vec<usize> = (0..gn).map(|j| j * tn).chain([n]).collect();
    let tiles = c
        .into_iter()
        .flat_map(|item| item.split_grid(&row_cuts, &col_cuts));
    ctx.par_pieces(n_chunks, tiles, parallel, |chunk, mut ct| {
        let bi = chunk / per;
        let (ti, tj) = ((chunk % per) / gn, (chunk % per) % gn);
        let (r0, c0) = (ti * tm, tj * tn);
        let rows = tm.min(m - r0);
        let cols = tn.min(n - c0);
        let ao = p.a.offset + shape::offset_of(&p.batch, &p.a.batch_strides, bi) + r0 * p.a.rs;
        let bo = p.b.offset + shape::offset_of(&p.batch, &p.b.batch_strides, bi) + c0 * p.b.cs;
        // The tile's rows of A times `wj` columns of `bv` (`k × wj`), into the tile's columns
        // `j0..j0 + wj`: one kernel call.
        let mut product = |bv: MatRef<'_, T>, j0: usize, wj: usize| {
            // SAFETY: A's offset stays inside the view validated by `plan`; `bv` is, at each
            // call below, B's block inside that view or a widened panel of it, `k × wj`; the
            // columns j0..j0 + wj are inside this chunk's own `rows × cols` tile of C, with C's
            // strides.
            unsafe {
                T::kernel(
                    rows,
                    k,
                    wj,
                    alpha,
                    a.as_ptr().add(ao),
                    p.a.rs as isize,
                    p.a.cs as isize,
                    bv.ptr(),
                    bv.rs as isize,
                    bv.cs as isize,
                    beta,
                    ct.as_mut_ptr().add(j0 * p.c.cs),
                    p.c.rs as isize,
                    p.c.cs as isize,
                );
            }
        };
        match S::same(b) {
            Some(b) => product(
                MatRef {
                    data: b,
                    offset: bo,
                    rs: p.b.rs,
                    cs: p.b.cs,
                },
                0,
                cols,
            ),
            // bf16/f16 B: widen one column panel of the tile at a time into the thread's
            // scratch (`k × w`, row-major) and run the kernel on it. Splitting C's columns
            // leaves every element's K-reduction as it was (matrixmultiply blocks K the same
            // way in each call), so C is bitwise the GEMM of the fully widened B.
            None => {
                let w = (WIDEN_ELEMS / k.max(1) / WIDEN_COLS * WIDEN_COLS).max(WIDEN_COLS);
                let w = w.min(cols.next_multiple_of(WIDEN_COLS));
                with_b_scratch::<T, _>(k * w, |panel| {
                    for j0 in (0..cols).step_by(w) {
                        let wj = w.min(cols - j0);
                        let dst = &mut panel[..k * wj];
                        // SAFETY: columns c0 + j0.. and K steps 0..k are inside the view
                        // validated by `plan`; `dst` holds `k · wj` elements. The lanes
                        // are B's columns (`(lane, step) = (cs, rs)`), one panel `wj` wide:
                        // `dst[p·wj + j]`, B's block row-major `k × wj`.
                        unsafe {
                            pack_panels_widen::<T, S>(
                                dst,
                                b.as_ptr().add(bo + j0 * p.b.cs),
                                (p.b.cs, p.b.rs),
                                (wj, k),
                                wj,
                            )
                        };
                        // The panel is `k × wj` row-major.
                        let panel = MatRef {
                            data: dst,
                            offset: 0,
                            rs: wj,
                            cs: 1,
                        };
                        product(panel, j0, wj);
                    }
                });
            }
        }
        if let Some((bias, bs)) = bias {
            for i in 0..rows {
                for j in 0..cols {
                    *ct.at(i, j) += bias[(c0 + j) * bs];
                }
            }
        }
    });
}
