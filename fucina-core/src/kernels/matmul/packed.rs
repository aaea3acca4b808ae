//! The packed GEMM driver behind the AVX2 and AVX-512 micro-kernels (Goto/BLIS blocking, own
//! packing), generic over the kernel ([`PackedKernel`]: `Avx2F32`, `Avx512F32`, ...).
//!
//! For one `C[m×n] = alpha·A[m×k]·B[k×n] + beta·C` with arbitrary strides, C is cut into one
//! job per thread (a run of columns or of rows, whichever packs and reads fewer elements: see
//! `grid`), all started in a single parallel dispatch. A job walks its columns in `NC` blocks
//! and K in `KC` steps; per step it packs its B block into `NR`-wide panels (thread-local
//! scratch, reused from L1 by every row tile) and runs the micro-kernel over `MR × NR` tiles.
//! A's `MR × KC` panels are packed (zero-padded), by register transposes for row-major f32
//! A; row-major A without a fast pack (f64) is read in place when K takes more than one
//! step (a tile's rows are MR sequential streams).
//! The first K step applies `beta`; later steps accumulate.
//! B may be bf16/f16 (`widen::BElem`): its panels are then widened to f32/f64 as they are
//! packed (the same values in the same places as the pack of a widened B, so the same C).
//!
//! An element of C is therefore always computed the same way: one FMA chain per `KC` step,
//! steps added in ascending K, packed or not. The job grid (which depends on the thread count)
//! only decides *who* computes a tile, never *how*, so results are bitwise identical for any
//! number of threads. The kernel's width `NR` decides only how columns are grouped, never an
//! element's arithmetic (`KC` does not depend on it), so the AVX2 and AVX-512 kernels give
//! bitwise the same C as well.

use std::cell::Cell;

use crate::dtype::Float;
use crate::exec::{ExecContext, MatMut};
use crate::kernels::with_scratch;

use super::tile::{self, GemmArgs, GemvRow, PanelPack, Tile, ViewArgs, MR};
use super::widen::{pack_panels_widen, BElem};
use super::{avx2, avx512, gemv};

/// K step: one FMA chain per element per step (fixed: it defines the rounding).
const KC: usize = 256;
/// Rows per A block inside a job (the rows of A one K step reads stay in L2).
const MC: usize = 96;
/// Columns per packed B block (`KC × NC` elements, in L2/L3 while a job sweeps its rows).
const NC: usize = 512;
/// Below this many FLOPs a problem is run on the calling thread.
pub const PAR_MIN_FLOPS: usize = 1 << 22;
/// The same for a one-row product over a K-contiguous B (`gemv`, B read in place).
pub const GEMV_PAR_MIN_FLOPS: usize = 1 << 18;

/// A packed micro-kernel (one instruction set, one element type): its tile width, the
/// kernel and its B packing. Implemented by the marker types below; the driver is generic
/// over it, so the AVX2 and AVX-512 kernels run the same blocking, packing and job grid.
pub trait PackedKernel {
    /// The element type of A, B and C.
    type Elem: Float;
    /// Columns of the micro-tile.
    const NR: usize;
    /// Packs one full `MR`-row A panel from a row-major A (`k` contiguous steps per row,
    /// rows `lane` apart), faster than the portable pack; `None` where there is none.
    const PACK_A: Option<PanelPack<Self::Elem>>;
    /// Runs a one-row product over a K-contiguous B without packing B, bitwise the packed
    /// path's result; `None` where there is none.
    const GEMV: Option<GemvRow<Self::Elem>>;

    /// Runs the micro-kernel on `kc` packed steps.
    ///
    /// # Safety
    /// As the `micro` template's kernels: the kernel's features present (its module's
    /// `available`), panels readable, tile writable and unshared.
    unsafe fn micro(
        kc: usize,
        a: *const Self::Elem,
        sa: (usize, usize),
        b: *const Self::Elem,
        t: Tile<Self::Elem>,
    );

    /// Packs one full B panel (`k × NR`, `dst[p·NR + j]`) from a K-contiguous B whose
    /// column `j` starts at `src + j·cs`.
    ///
    /// # Safety
    /// Features present; `src` columns readable for `k` steps; `dst` holds `k · NR`.
    unsafe fn pack_b_kmajor(dst: *mut Self::Elem, src: *const Self::Elem, cs: usize, k: usize);

    /// [`pack_panels`] with `W = NR` and this kernel's K-major fast path.
    ///
    /// # Safety
    /// As [`pack_panels`].
    unsafe fn pack_b(
        dst: &mut [Self::Elem],
        src: *const Self::Elem,
        ls: (usize, usize),
        lk: (usize, usize),
    );
}

/// Defines the marker `$k` and implements [`PackedKernel`] for it over the `$t` micro-kernel
/// `$kmod::$micro` (`$nr` columns) and the K-major B pack `avx2::$pack::<$nr>` (register
/// transposes: data movement only, shared by both instruction sets).
macro_rules! packed_kernel {
    ($(#[$doc:meta])* $k:ident, $t:ty, $nr:expr, $kmod:ident::$micro:ident, $pack:ident, $pack_a:expr, $gemv:expr) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug)]
        pub struct $k;

        impl PackedKernel for $k {
            type Elem = $t;
            const NR: usize = $nr;
            const PACK_A: Option<PanelPack<$t>> = $pack_a;
            const GEMV: Option<GemvRow<$t>> = $gemv;

            // SAFETY: the contract is the trait method's (see `PackedKernel::micro`).
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
                    $kmod::$micro(kc, a, sa, b, t)
                }
                #[cfg(not(target_arch = "x86_64"))]
                {
                    let _ = (kc, a, sa, b, t);
                    unreachable!("the packed GEMM paths are only chosen on x86_64")
                }
            }

            // SAFETY: the contract is the trait method's (see `PackedKernel::pack_b`).
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
                        Some(<$k as PackedKernel>::pack_b_kmajor),
                    )
                }
            }

            // SAFETY: the contract is the trait method's (see `PackedKernel::pack_b_kmajor`).
            #[inline]
            unsafe fn pack_b_kmajor(dst: *mut $t, src: *const $t, cs: usize, k: usize) {
                #[cfg(target_arch = "x86_64")]
                // SAFETY: forwarded caller contract.
                unsafe {
                    avx2::$pack::<{ $nr }>(dst, src, cs, k)
                }
                #[cfg(not(target_arch = "x86_64"))]
                {
                    let _ = (dst, src, cs, k);
                    unreachable!("the packed GEMM paths are only chosen on x86_64")
                }
            }
        }
    };
}

packed_kernel!(
    /// The AVX2 + FMA f32 kernel (6 × 16).
    Avx2F32,
    f32,
    tile::NR_F32,
    avx2::kernel_f32,
    pack_b_kmajor_f32,
    avx2::PACK_A_F32,
    gemv::GEMV_F32
);
packed_kernel!(
    /// The AVX2 + FMA f64 kernel (6 × 8).
    Avx2F64,
    f64,
    tile::NR_F64,
    avx2::kernel_f64,
    pack_b_kmajor_f64,
    avx2::PACK_A_F64,
    gemv::GEMV_F64
);
packed_kernel!(
    /// The AVX-512F f32 kernel (6 × 32; B packed by the AVX2 transposes at that width).
    Avx512F32,
    f32,
    tile::NR512_F32,
    avx512::kernel_f32,
    pack_b_kmajor_f32,
    avx2::PACK_A_F32,
    gemv::GEMV_F32
);
packed_kernel!(
    /// The AVX-512F f64 kernel (6 × 16; B packed as for [`Avx512F32`]).
    Avx512F64,
    f64,
    tile::NR512_F64,
    avx512::kernel_f64,
    pack_b_kmajor_f64,
    avx2::PACK_A_F64,
    gemv::GEMV_F64
);

thread_local! {
    /// Packed-A scratch of this thread (taken while in use, so re-entry just allocates).
    static A_SCRATCH: Cell<Vec<f64>> = const { Cell::new(Vec::new()) };
    /// Packed-B scratch of this thread (as above).
    static B_SCRATCH: Cell<Vec<f64>> = const { Cell::new(Vec::new()) };
    /// One widened B panel's K runs (bf16/f16 B, as above).
    static W_SCRATCH: Cell<Vec<f64>> = const { Cell::new(Vec::new()) };
}

/// Runs `f` on this thread's packed-B scratch (`len` elements of `T`): the tiled path widens
/// its bf16/f16 B panels into it.
pub(super) fn with_b_scratch<T: Float, R>(len: usize, f: impl FnOnce(&mut [T]) -> R) -> R {
    with_scratch(&B_SCRATCH, len, f)
}

/// Packs one panel of width `W` whose lanes are strided (`lane != 1`; [`pack_panels`] copies
/// contiguous lanes itself): `dst[p·W + i] = src[i·lane + p·step]` for K steps `0..k`
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
    kmajor: Option<PanelPack<T>>,
) {
    let w = W;
    // SAFETY: the caller's contract covers every pointer below.
    unsafe {
        match kmajor {
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

/// K steps a contiguous-lane pack prefetches ahead.
const PF_STEPS: usize = 4;

/// Hints that the cache line at `p` will be read soon (no-op off x86-64).
#[inline(always)]
fn prefetch(p: *const i8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch never faults, whatever the address.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p)
    };
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
    kmajor: Option<PanelPack<T>>,
) {
    let w = W;
    let d = dst.as_mut_ptr();
    let panels = len.div_ceil(w);
    if lane == 1 {
        // Lanes are contiguous: read each K step's `len` elements as one run and scatter
        // them to the panels (one sequential stream instead of one pass per panel).
        for p in 0..k {
            // Pull the K step `PF_STEPS` ahead toward L1 while this one is scattered: a step
            // is one short run of a strided source (a column-major A's rows, `step` apart),
            // which the hardware prefetcher does not run ahead on.
            if p + PF_STEPS < k {
                let ahead = src.wrapping_add((p + PF_STEPS) * step) as *const i8;
                let bytes = len * std::mem::size_of::<T>();
                let mut o = 0;
                while o < bytes {
                    prefetch(ahead.wrapping_add(o));
                    o += 64;
                }
            }
            for pi in 0..panels {
                let l0 = pi * w;
                let valid = w.min(len - l0);
                // SAFETY: lanes l0..l0+valid of step p are inside the caller's block; row p
                // of panel pi is inside `dst` (`panels · k · w` elements).
                unsafe {
                    let o = d.add(pi * k * w + p * w);
                    let from = src.add(p * step + l0);
                    if valid == W {
                        // A fixed-size copy: inlined, no call per panel row.
                        std::ptr::copy_nonoverlapping(from, o, W);
                    } else {
                        for i in 0..W {
                            *o.add(i) = if i < valid { *from.add(i) } else { T::ZERO };
                        }
                    }
                }
            }
        }
        return;
    }
    for pi in 0..panels {
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

/// Packs a bf16/f16 B block into `K::NR`-wide f32/f64 panels, widening: the layout and
/// values of [`pack_panels`] on the widened block. A K-contiguous B (`step == 1`: linear's
/// `wᵀ`) widens each full panel's `NR` K runs into scratch (contiguous, vectorisable) and
/// moves them with the kernel's register-transpose pack (data movement only); any other
/// layout, and a last partial panel, go through the portable `pack_panels_widen`.
///
/// # Safety
/// As [`pack_panels`] (`src` of `S`), with `K`'s features present.
unsafe fn pack_b_widened<T: Float, K: PackedKernel<Elem = T>, S: BElem<T>>(
    dst: &mut [T],
    src: *const S,
    (lane, step): (usize, usize),
    (len, k): (usize, usize),
) {
    let nr = K::NR;
    if step != 1 || lane == 1 {
        // SAFETY: forwarded caller contract.
        unsafe { pack_panels_widen::<T, S>(dst, src, (lane, step), (len, k), nr) };
        return;
    }
    let full = len / nr;
    with_scratch::<T, _>(&W_SCRATCH, nr * k, |runs| {
        for pi in 0..full {
            for (i, run) in runs.chunks_exact_mut(k).enumerate() {
                // SAFETY: lane pi·NR + i < len, its K steps 0..k are inside the block.
                let line = unsafe { src.add((pi * nr + i) * lane) };
                for (p, v) in run.iter_mut().enumerate() {
                    // SAFETY: as above, p < k.
                    *v = unsafe { *line.add(p) }.widen();
                }
            }
            // SAFETY: `runs` holds NR K-contiguous columns `k` apart; panel pi of `dst`
            // holds `k · NR` elements; the caller guarantees `K`'s features.
            unsafe { K::pack_b_kmajor(dst.as_mut_ptr().add(pi * k * nr), runs.as_ptr(), k, k) };
        }
    });
    if full * nr < len {
        // SAFETY: the remaining lanes of the block, into the panels after the full ones.
        unsafe {
            pack_panels_widen::<T, S>(
                &mut dst[full * k * nr..],
                src.add(full * nr * lane),
                (lane, step),
                (len - full * nr, k),
                nr,
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

/// The job grid `(row cuts, column cuts)` for `threads` workers: one job per thread, as a
/// run of columns (each job then reads all of A and packs its own columns of B) or a run of
/// rows (each job packs all of B and reads its own rows of A), whichever moves fewer
/// elements: `jobs·m·wa + 2n` against `m·wa + jobs·2n` (times K), where B's weight 2 is its
/// read plus its packed write and A's `wa` is 2 when A is column-major (a strided pack), 1
/// when it is row-major (read in place, or packed by register transposes, which the timings
/// behind `job`'s choice were taken with). A run gets at least four B panels or two A tiles; with neither, one job.
///
/// One job per thread, not several: on the gpt workload (AVX2 EPYC, 2 threads) four jobs
/// per thread spent ~12 % more CPU time in the GEMM (each job re-packing A), which cost
/// more than the load balance they bought.
fn grid<K: PackedKernel>(
    m: usize,
    n: usize,
    a_packed: bool,
    threads: usize,
) -> (Vec<usize>, Vec<usize>) {
    let by_cols = n / (4 * K::NR);
    let by_rows = m / (2 * MR);
    let col_ok = threads > 1 && by_cols >= threads;
    let row_ok = threads > 1 && by_rows >= threads;
    let wa = if a_packed { 2 } else { 1 };
    let col_cost = threads * m * wa + 2 * n;
    let row_cost = m * wa + threads * 2 * n;
    if row_ok && (!col_ok || row_cost < col_cost) {
        (split(m, threads, MR), vec![0, n])
    } else if col_ok {
        (vec![0, m], split(n, threads, K::NR))
    } else {
        (vec![0, m], vec![0, n])
    }
}

/// One job: rows `r0..r1` and columns `c0..c1` of C, over all of K; `c` is exactly that
/// tile of C (its element (0, 0) is C's `(r0, c0)`), owned by this job.
///
/// # Safety
/// As [`gemm`] for A and B.
unsafe fn job<T: Float, K: PackedKernel<Elem = T>, S: BElem<T>>(
    (r0, r1): (usize, usize),
    (c0, c1): (usize, usize),
    k: usize,
    args: ViewArgs<'_, T, S>,
    mut c: MatMut<'_, T>,
) {
    let GemmArgs {
        alpha,
        a,
        b,
        beta,
        bias,
    } = args;
    let (crs, ccs) = (c.rs(), c.cs());
    let nr = K::NR;
    // A is packed into MR-row panels (contiguous K steps, read sequentially by the kernel).
    // Row-major A with the kernel's fast pack (`PACK_A`, register transposes: f32) is packed
    // too: on the AVX2 EPYC, 2 threads, paired in-process timings of packed against in-place
    // A put gpt's and minilm's shapes (K = 256 to 1536) and 1024³ at 0.93–0.99× the time.
    // Without a fast pack (f64), row-major A is read in place (a tile is MR sequential
    // streams) unless K is a single step, where packed panels still ran 0.90–0.93×.
    let a_in_place = a.cs == 1 && K::PACK_A.is_none() && k > KC;
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
                        let at = pc * b.rs + jc * b.cs;
                        match S::same(b.data) {
                            // SAFETY: K steps pc.., columns jc.. are inside B.
                            Some(bt) => unsafe {
                                K::pack_b(
                                    bpk,
                                    bt.as_ptr().wrapping_add(b.offset).add(at),
                                    (b.cs, b.rs),
                                    (cols, kc),
                                )
                            },
                            // bf16/f16 B: widened into the f32/f64 panels as it is packed.
                            // SAFETY: as above.
                            None => unsafe {
                                pack_b_widened::<T, K, S>(
                                    bpk,
                                    b.ptr().add(at),
                                    (b.cs, b.rs),
                                    (cols, kc),
                                )
                            },
                        }
                        let first = pc == 0;
                        for ic in (r0..r1).step_by(MC) {
                            let rows = MC.min(r1 - ic);
                            // SAFETY: rows ic.., K steps pc.. are inside A.
                            let a_blk = unsafe { a.ptr().add(ic * a.rs + pc * a.cs) };
                            let full = if a_in_place { rows / MR } else { 0 };
                            if full * MR < rows {
                                // SAFETY: the remaining rows are inside A; abuf fits MC rows.
                                unsafe {
                                    pack_panels::<T, MR>(
                                        &mut abuf[..(rows - full * MR).div_ceil(MR) * kc * MR],
                                        a_blk.add(full * MR * a.rs),
                                        (a.rs, a.cs),
                                        (rows - full * MR, kc),
                                        K::PACK_A,
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
                                    let (ci, cj) = (ic + i0 - r0, jc + j0 - c0);
                                    let tile = Tile {
                                        // SAFETY: (ci, cj) is inside this job's tile of C.
                                        c: unsafe { c.as_mut_ptr().add(ci * crs + cj * ccs) },
                                        rsc: crs as isize,
                                        csc: ccs as isize,
                                        rows: MR.min(rows - i0),
                                        cols: nr.min(cols - j0),
                                        alpha,
                                        beta: if first { beta } else { T::ONE },
                                        overwrite: first && beta == T::ZERO,
                                        // The last K step adds the bias in the epilogue.
                                        bias: match bias {
                                            Some((bias, bs)) if pc + kc == k => {
                                                bias[(jc + j0) * bs..].as_ptr()
                                            }
                                            _ => std::ptr::null(),
                                        },
                                        bias_stride: bias.map_or(0, |(_, bs)| bs as isize),
                                    };
                                    // SAFETY: A and B panels hold kc steps; the tile is this job's.
                                    unsafe { K::micro(kc, ap, sa, bp, tile) };
                                }
                            }
                        }
                    }
                }
            })
        },
    )
}

/// A kernel's one-row path with the B it reads (see [`one_row`]).
pub type OneRow<'b, T> = (GemvRow<T>, &'b [T]);

/// The kernel's one-row path and B as `T` when [`gemm`] takes it for an `m`-row A and a B
/// with row stride `b_rs` over `b`: one row of A times a K-contiguous B that needs no
/// widening, on a kernel with a `GEMV`; `None` otherwise.
pub fn one_row<K: PackedKernel, S: BElem<K::Elem>>(
    m: usize,
    b_rs: usize,
    b: &[S],
) -> Option<OneRow<'_, K::Elem>> {
    match (K::GEMV, m, b_rs) {
        (Some(row), 1, 1) => S::same(b).map(|bt| (row, bt)),
        _ => None,
    }
}

/// `C ← alpha·A·B + beta·C` for one strided problem (`c` is `m × n`, the reduction `k` long;
/// beta == 0 never reads C; B of `T` or of a 16-bit storage type `S` widened while packed),
/// then `C[i, j] += bias[j]` when `args` has a bias.
/// Parallel over the context's threads when `parallel`: C's jobs are disjoint tiles
/// ([`MatMut::split_grid`]).
///
/// # Safety
/// Every addressed element of A and B is inside its buffer (a view validated by `plan`).
pub unsafe fn gemm<T: Float, K: PackedKernel<Elem = T>, S: BElem<T>>(
    ctx: &ExecContext,
    parallel: bool,
    k: usize,
    args: ViewArgs<'_, T, S>,
    mut c: MatMut<'_, T>,
) {
    let (m, n) = (c.rows(), c.cols());
    if m == 0 || n == 0 {
        return;
    }
    let (a, beta, bias) = (args.a, args.beta, args.bias);
    if k == 0 {
        for i in 0..m {
            for j in 0..n {
                let p = c.at(i, j);
                *p = if beta == T::ZERO { T::ZERO } else { beta * *p };
                if let Some((b, bs)) = bias {
                    *p += b[j * bs];
                }
            }
        }
        return;
    }
    let threads = if parallel { ctx.num_threads() } else { 1 };
    if let Some((row, bt)) = one_row::<K, S>(m, args.b.rs, args.b.data) {
        // One row of A times a K-contiguous B: read B in place, column runs per thread.
        let cuts = split(n, threads, 8);
        let tiles = c.split_grid(&[0, 1], &cuts);
        let jobs = tiles.len();
        let (boff, bcs) = (args.b.offset, args.b.cs);
        ctx.par_pieces(jobs, tiles.into_iter(), jobs > 1, |j, mut cj| {
            let j0 = cuts[j];
            let tile = Tile {
                c: cj.as_mut_ptr(),
                rsc: 0,
                csc: cj.cs() as isize,
                rows: 1,
                cols: cuts[j + 1] - j0,
                alpha: args.alpha,
                beta,
                overwrite: beta == T::ZERO,
                bias: bias.map_or(std::ptr::null(), |(v, bs)| v[j0 * bs..].as_ptr()),
                bias_stride: bias.map_or(0, |(_, bs)| bs as isize),
            };
            // SAFETY: `K::GEMV` exists only with `K`'s features (the caller's contract); A's
            // row and B's columns j0.. (K-contiguous, `bcs` apart) are inside the validated
            // views; `cj` is this job's own part of C's row, the bias `n` elements long.
            unsafe {
                let b0 = bt.as_ptr().add(boff + j0 * bcs);
                row(k, KC, (a.ptr(), a.cs), (b0, bcs), tile)
            };
        });
        return;
    }
    let (rcuts, ccuts) = grid::<K>(m, n, a.cs != 1, threads);
    let gn = ccuts.len() - 1;
    let tiles = c.split_grid(&rcuts, &ccuts);
    let jobs = tiles.len();
    ctx.par_pieces(jobs, tiles.into_iter(), jobs > 1, |j, cj| {
        let (ri, ci) = (j / gn, j % gn);
        // SAFETY: the caller's contract covers A and B; `cj` is this job's own tile of C.
        unsafe {
            job::<T, K, S>(
                (rcuts[ri], rcuts[ri + 1]),
                (ccuts[ci], ccuts[ci + 1]),
                k,
                args,
                cj,
            )
        };
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The register-transpose A pack (`PACK_A` of the f32 kernels) writes exactly what the
    /// portable strided pack writes: full and partial panels, K below, at and past the
    /// 8-step block with tails, odd row strides.
    #[test]
    fn fast_a_pack_matches_the_portable_pack() {
        let Some(fast) = Avx2F32::PACK_A.filter(|_| avx2::available()) else {
            println!("skip: no AVX2 + FMA on this CPU (the portable A pack is the only one)");
            return;
        };
        let mut g = crate::rng::SplitMix64::new(5);
        for (rows, k, rs) in [
            (6usize, 1usize, 3usize),
            (6, 7, 9),
            (6, 8, 8),
            (13, 9, 11),
            (18, 37, 40),
            (7, 256, 263),
        ] {
            let src: Vec<f32> = (0..rows * rs + k).map(|_| g.next_normal() as f32).collect();
            let len = rows.div_ceil(MR) * k * MR;
            let (mut want, mut got) = (vec![f32::NAN; len], vec![f32::NAN; len]);
            // SAFETY: `src` holds `rows` rows of `k` elements `rs` apart; each buffer holds
            // the panels.
            unsafe {
                pack_panels::<f32, MR>(&mut want, src.as_ptr(), (rs, 1), (rows, k), None);
                pack_panels::<f32, MR>(&mut got, src.as_ptr(), (rs, 1), (rows, k), Some(fast));
            }
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&got), bits(&want), "rows {rows}, k {k}, rs {rs}");
        }
    }
}
