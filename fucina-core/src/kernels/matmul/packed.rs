//! The packed GEMM driver behind the AVX2 micro-kernels (Goto/BLIS blocking, own packing).
//!
//! For one `C[m×n] = alpha·A[m×k]·B[k×n] + beta·C` with arbitrary strides, C is cut into one
//! job per thread (a run of columns when N is wide enough, else a run of rows), all started in
//! a single parallel dispatch. A job walks its columns in `NC` blocks and K in `KC` steps; per
//! step it packs its B block into `NR`-wide panels (thread-local scratch, reused from L1 by
//! every row tile) and runs the micro-kernel over `MR × NR` tiles. A is read in place when it
//! is row-major (a tile's rows are MR sequential streams); otherwise, and for a last partial
//! row tile, its `MR × KC` panels are packed, zero-padded. The first K step applies
//! `beta`; later steps accumulate.
//!
//! An element of C is therefore always computed the same way: one FMA chain per `KC` step,
//! steps added in ascending K, packed or not. The job grid (which depends on the thread count)
//! only decides *who* computes a tile, never *how*, so results are bitwise identical for any
//! number of threads.

use std::cell::Cell;

use crate::dtype::Float;
use crate::exec::ExecContext;
use crate::kernels::copy::SendPtr;

use super::avx2::{self, MR};
use super::tile::Tile;

/// K step: one FMA chain per element per step (fixed: it defines the rounding).
const KC: usize = 256;
/// Rows per A block inside a job (the rows of A one K step reads stay in L2).
const MC: usize = 96;
/// Columns per packed B block (`KC × NC` elements, in L2/L3 while a job sweeps its rows).
const NC: usize = 512;
/// Most jobs per thread in one GEMM.
const JOBS_PER_THREAD: usize = 4;
/// Below this many FLOPs a problem is run on the calling thread.
pub const PAR_MIN_FLOPS: usize = 1 << 22;

/// Element types with a packed micro-kernel.
pub trait PackedKernel: Float {
    /// Columns of the micro-tile.
    const NR: usize;

    /// Runs the micro-kernel on `kc` packed steps.
    ///
    /// # Safety
    /// As the AVX2 kernels: features present, panels readable, tile writable and unshared.
    unsafe fn micro(kc: usize, a: *const Self, sa: (usize, usize), b: *const Self, t: Tile<Self>);

    /// Packs one full B panel (`k × NR`, `dst[p·NR + j]`) from a K-contiguous B whose
    /// column `j` starts at `src + j·cs`.
    ///
    /// # Safety
    /// Features present; `src` columns readable for `k` steps; `dst` holds `k · NR`.
    unsafe fn pack_b_kmajor(dst: *mut Self, src: *const Self, cs: usize, k: usize);

    /// [`pack_panels`] with `W = NR` and this type's K-major fast path.
    ///
    /// # Safety
    /// As [`pack_panels`].
    unsafe fn pack_b(dst: &mut [Self], src: *const Self, ls: (usize, usize), lk: (usize, usize));
}

/// Implements [`PackedKernel`] for `$t` over the AVX2 kernels `$micro` and `$pack`.
macro_rules! packed_kernel {
    ($t:ty, $nr:expr, $micro:ident, $pack:ident) => {
        impl PackedKernel for $t {
            const NR: usize = $nr;

            #[inline]
            unsafe fn micro(
                kc: usize,
                a: *const $t,
                sa: (usize, usize),
                b: *const $t,
                t: Tile<$t>,
            ) {
                #[cfg(target_arch = "x86_64")]
                // SAFETY: forwarded caller contract.
                unsafe {
                    avx2::$micro(kc, a, sa, b, t)
                }
                #[cfg(not(target_arch = "x86_64"))]
                {
                    let _ = (kc, a, sa, b, t);
                    unreachable!("the packed GEMM path is only chosen on x86_64 with AVX2")
                }
            }

            #[inline]
            unsafe fn pack_b(
                dst: &mut [$t],
                src: *const $t,
                ls: (usize, usize),
                lk: (usize, usize),
            ) {
                // SAFETY: forwarded caller contract.
                unsafe {
                    pack_panels::<$t, { $nr }>(
                        dst,
                        src,
                        ls,
                        lk,
                        Some(<$t as PackedKernel>::pack_b_kmajor),
                    )
                }
            }

            #[inline]
            unsafe fn pack_b_kmajor(dst: *mut $t, src: *const $t, cs: usize, k: usize) {
                #[cfg(target_arch = "x86_64")]
                // SAFETY: forwarded caller contract.
                unsafe {
                    avx2::$pack(dst, src, cs, k)
                }
                #[cfg(not(target_arch = "x86_64"))]
                {
                    let _ = (dst, src, cs, k);
                    unreachable!("the packed GEMM path is only chosen on x86_64 with AVX2")
                }
            }
        }
    };
}

packed_kernel!(f32, avx2::NR_F32, kernel_f32, pack_b_kmajor_f32);
packed_kernel!(f64, avx2::NR_F64, kernel_f64, pack_b_kmajor_f64);

/// A strided read-only matrix (element pointer, row and column strides in elements).
#[derive(Clone, Copy)]
pub struct MatPtr<T> {
    /// Element (0, 0).
    pub ptr: SendPtr<T>,
    /// Row stride.
    pub rs: usize,
    /// Column stride.
    pub cs: usize,
}

thread_local! {
    /// Packed-A scratch of this thread (taken while in use, so re-entry just allocates).
    static A_SCRATCH: Cell<Vec<f64>> = const { Cell::new(Vec::new()) };
    /// Packed-B scratch of this thread (as above).
    static B_SCRATCH: Cell<Vec<f64>> = const { Cell::new(Vec::new()) };
}

/// Runs `f` on a thread-local scratch slice of at least `len` elements of `T`.
fn with_scratch<T: Float, R>(
    key: &'static std::thread::LocalKey<Cell<Vec<f64>>>,
    len: usize,
    f: impl FnOnce(&mut [T]) -> R,
) -> R {
    let words = (len * std::mem::size_of::<T>()).div_ceil(8);
    let mut buf = key.with(Cell::take);
    if buf.len() < words {
        buf = vec![0.0; words];
    }
    let slice: &mut [T] = bytemuck::cast_slice_mut(&mut buf[..words]);
    let out = f(&mut slice[..len]);
    key.with(|c| c.set(buf));
    out
}

/// Packs one panel of width `W`: `dst[p·W + i] = src[i·lane + p·step]` for K steps `0..k`
/// and lanes `i < valid`, zero for lanes `valid..W`. `kmajor` packs a full panel whose K steps
/// are contiguous (`step == 1`) faster, when the element type has one for this width.
///
/// # Safety
/// Every addressed element of `src` is readable; `dst` addresses `k · w` writable elements.
#[allow(clippy::too_many_arguments)]
unsafe fn pack_panel<T: Float, const W: usize>(
    dst: *mut T,
    src: *const T,
    (lane, step): (usize, usize),
    valid: usize,
    k: usize,
    kmajor: Option<unsafe fn(*mut T, *const T, usize, usize)>,
) {
    let w = W;
    // SAFETY: the caller's contract covers every pointer below.
    unsafe {
        match kmajor {
            _ if valid == w && lane == 1 => {
                // Each K step is `w` contiguous elements.
                for p in 0..k {
                    std::ptr::copy_nonoverlapping(src.add(p * step), dst.add(p * w), w);
                }
            }
            Some(f) if valid == w && step == 1 => f(dst, src, lane, k),
            _ if valid == w => {
                for i in 0..w {
                    let line = src.add(i * lane);
                    for p in 0..k {
                        *dst.add(p * w + i) = *line.add(p * step);
                    }
                }
            }
            _ => {
                for p in 0..k {
                    for i in 0..w {
                        *dst.add(p * w + i) = if i < valid {
                            *src.add(i * lane + p * step)
                        } else {
                            T::ZERO
                        };
                    }
                }
            }
        }
    }
}

/// Packs lanes `0..len` and K steps `0..k` of `src` into panels of width `W` (`k × W` each,
/// lane-fastest; the last panel zero-padded): A's rows with `(lane, step) = (rs, cs)` and
/// `W = MR`, B's columns with `(cs, rs)` and `W = NR` (through [`PackedKernel::pack_b`]).
///
/// # Safety
/// Every addressed element of `src` is readable; `dst` holds `len.div_ceil(W) · k · W`.
unsafe fn pack_panels<T: Float, const W: usize>(
    dst: &mut [T],
    src: *const T,
    (lane, step): (usize, usize),
    (len, k): (usize, usize),
    kmajor: Option<unsafe fn(*mut T, *const T, usize, usize)>,
) {
    let w = W;
    let d = dst.as_mut_ptr();
    for pi in 0..len.div_ceil(w) {
        let l0 = pi * w;
        // SAFETY: panel pi of `dst` and lanes l0.. of the caller's block.
        unsafe {
            pack_panel::<T, W>(
                d.add(pi * k * w),
                src.add(l0 * lane),
                (lane, step),
                w.min(len - l0),
                k,
                kmajor,
            )
        };
    }
}

/// Splits `len` into `parts` runs whose starts are multiples of `align` (the last may be
/// shorter); returns the run starts and the end.
fn split(len: usize, parts: usize, align: usize) -> Vec<usize> {
    let step = len.div_ceil(parts).next_multiple_of(align);
    let mut cuts: Vec<usize> = (0..len).step_by(step.max(1)).collect();
    cuts.push(len);
    cuts
}

/// The job grid `(row cuts, column cuts)` for `threads` workers: up to [`JOBS_PER_THREAD`]
/// runs of columns per thread when each run gets at least four B panels (no operand is then
/// packed twice), else runs of rows of at least two A tiles, else one job. Several jobs per
/// thread let a thread that finishes early take work from one that was held up.
fn grid<T: PackedKernel>(m: usize, n: usize, threads: usize) -> (Vec<usize>, Vec<usize>) {
    let most = threads * JOBS_PER_THREAD;
    let by_cols = n / (4 * T::NR);
    let by_rows = m / (2 * MR);
    if threads > 1 && by_cols >= threads {
        (vec![0, m], split(n, most.min(by_cols), T::NR))
    } else if threads > 1 && by_rows >= threads {
        (split(m, most.min(by_rows), MR), vec![0, n])
    } else {
        (vec![0, m], vec![0, n])
    }
}

/// A strided mutable view of C (pointer to element (0, 0), row and column strides).
#[derive(Clone, Copy)]
pub struct MatMut<T> {
    /// Element (0, 0).
    pub ptr: SendPtr<T>,
    /// Row stride.
    pub rs: usize,
    /// Column stride.
    pub cs: usize,
}

/// One job: rows `r0..r1` and columns `c0..c1` of C, over all of K.
///
/// # Safety
/// As [`gemm`]; the job's part of C is written by nobody else.
#[allow(clippy::too_many_arguments)]
unsafe fn job<T: PackedKernel>(
    (r0, r1): (usize, usize),
    (c0, c1): (usize, usize),
    k: usize,
    alpha: T,
    a: MatPtr<T>,
    b: MatPtr<T>,
    beta: T,
    c: MatMut<T>,
    bias: Option<(SendPtr<T>, usize)>,
) {
    let nr = T::NR;
    // Row-major A is read in place (a tile is MR sequential streams); other layouts are packed
    // (a column-major tile would touch one cache line per K step, aliasing in L1).
    let a_in_place = a.cs == 1;
    with_scratch::<T, _>(
        &B_SCRATCH,
        KC * NC.min((c1 - c0).next_multiple_of(nr)),
        |bbuf| {
            with_scratch::<T, _>(&A_SCRATCH, MC.next_multiple_of(MR) * KC, |abuf| {
                for jc in (c0..c1).step_by(NC) {
                    let cols = NC.min(c1 - jc);
                    for pc in (0..k).step_by(KC) {
                        let kc = KC.min(k - pc);
                        let bpk = &mut bbuf[..cols.div_ceil(nr) * kc * nr];
                        // SAFETY: K steps pc.., columns jc.. are inside B.
                        unsafe {
                            T::pack_b(
                                bpk,
                                b.ptr.0.add(pc * b.rs + jc * b.cs),
                                (b.cs, b.rs),
                                (cols, kc),
                            )
                        };
                        let first = pc == 0;
                        for ic in (r0..r1).step_by(MC) {
                            let rows = MC.min(r1 - ic);
                            // SAFETY: rows ic.., K steps pc.. are inside A.
                            let a_blk = unsafe { a.ptr.0.add(ic * a.rs + pc * a.cs) } as *const T;
                            let full = if a_in_place { rows / MR } else { 0 };
                            if full * MR < rows {
                                // SAFETY: the remaining rows are inside A; abuf fits MC rows.
                                unsafe {
                                    pack_panels::<T, MR>(
                                        &mut abuf[..(rows - full * MR).div_ceil(MR) * kc * MR],
                                        a_blk.add(full * MR * a.rs),
                                        (a.rs, a.cs),
                                        (rows - full * MR, kc),
                                        None,
                                    )
                                };
                            }
                            for jp in 0..cols.div_ceil(nr) {
                                let j0 = jp * nr;
                                let bp = bpk[jp * kc * nr..].as_ptr();
                                for ip in 0..rows.div_ceil(MR) {
                                    let i0 = ip * MR;
                                    let (ap, sa) = if ip < full {
                                        // SAFETY: tile rows i0.. are inside the A block.
                                        (unsafe { a_blk.add(i0 * a.rs) }, (a.rs, a.cs))
                                    } else {
                                        (abuf[(ip - full) * kc * MR..].as_ptr(), (1, MR))
                                    };
                                    let tile = Tile {
                                        // SAFETY: (ic + i0, jc + j0) is inside this job's C.
                                        c: unsafe {
                                            c.ptr.0.add((ic + i0) * c.rs + (jc + j0) * c.cs)
                                        },
                                        rsc: c.rs as isize,
                                        csc: c.cs as isize,
                                        rows: MR.min(rows - i0),
                                        cols: nr.min(cols - j0),
                                        alpha,
                                        beta: if first { beta } else { T::ONE },
                                        overwrite: first && beta == T::ZERO,
                                    };
                                    // SAFETY: A and B panels hold kc steps; the tile is this job's.
                                    unsafe { T::micro(kc, ap, sa, bp, tile) };
                                }
                            }
                        }
                    }
                    if let Some((bias, bs)) = bias {
                        // The block is final: add the bias while it is still in cache.
                        for i in r0..r1 {
                            for j in jc..jc + cols {
                                // SAFETY: (i, j) is inside this job's C; the bias has n elements.
                                unsafe { *c.ptr.0.add(i * c.rs + j * c.cs) += *bias.0.add(j * bs) };
                            }
                        }
                    }
                }
            })
        },
    )
}

/// `C ← alpha·A·B + beta·C` for one strided problem (C does not overlap itself; beta == 0
/// never reads C), then `C[i, j] += bias[j]` when a bias `(pointer, stride)` is given.
/// Parallel over the context's threads when `parallel`.
///
/// # Safety
/// Every addressed element of A, B and C is in bounds; C is written by nobody else.
#[allow(clippy::too_many_arguments)]
pub unsafe fn gemm<T: PackedKernel>(
    ctx: &ExecContext,
    parallel: bool,
    (m, n, k): (usize, usize, usize),
    alpha: T,
    a: MatPtr<T>,
    b: MatPtr<T>,
    beta: T,
    c: MatMut<T>,
    bias: Option<(SendPtr<T>, usize)>,
) {
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        for i in 0..m {
            for j in 0..n {
                // SAFETY: (i, j) is inside C.
                let p = unsafe { &mut *c.ptr.0.add(i * c.rs + j * c.cs) };
                *p = if beta == T::ZERO { T::ZERO } else { beta * *p };
                if let Some((b, bs)) = bias {
                    // SAFETY: the bias has n elements.
                    *p += unsafe { *b.0.add(j * bs) };
                }
            }
        }
        return;
    }
    let threads = if parallel { ctx.num_threads() } else { 1 };
    let (rcuts, ccuts) = grid::<T>(m, n, threads);
    let gn = ccuts.len() - 1;
    let jobs = (rcuts.len() - 1) * gn;
    ctx.for_chunks(jobs, jobs > 1, |j| {
        let (ri, ci) = (j / gn, j % gn);
        // SAFETY: jobs cover disjoint parts of C; the caller's contract covers the rest.
        unsafe {
            job(
                (rcuts[ri], rcuts[ri + 1]),
                (ccuts[ci], ccuts[ci + 1]),
                k,
                alpha,
                a,
                b,
                beta,
                c,
                bias,
            )
        };
    });
}
