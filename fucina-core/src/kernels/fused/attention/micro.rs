//! The register-blocked tile product the streaming attention kernels are built from:
//! `C[m, n] (+)= Σ_k A(m, k) · B(k)[n]` on one (query block, key block) tile.
//!
//! Invariants: every C element is reduced over k in increasing order, with separate
//! multiplies and adds (no FMA), in `MR × NR` register tiles whose lanes are independent,
//! so the bits do not depend on the SIMD width the caller was compiled for (see
//! `softmax::simd_dispatch`) nor on the thread count. A and B are closures, so the same
//! kernel serves `Q·Kᵀ` (packed Kᵀ panels), `P·V` (V rows in place) and the transposed
//! products of the backward (`Pᵀ·dO`, `dSᵀ·Q`). Everything here is inlined so it is
//! compiled inside the dispatched caller; full f32 tiles use explicit vectors where the CPU
//! has them ([`tile_f32_avx2`], two 8-lane vectors per row, and [`tile_f32_avx512`], one
//! 16-lane vector per row: the same multiplies and adds, with each B row loaded once).

use crate::dtype::{DType, Float};

/// Rows of C per register tile.
pub(super) const MR: usize = 4;
/// Columns of C per register tile (two AVX2 vectors of f32, one AVX-512 vector), and the
/// width of packed panels.
pub(super) const NR: usize = 16;

/// The A operand of [`gemm`]: `A(m, k) = data[off + m·rs + k·ks]` (row-major with `ks = 1`,
/// or read transposed, K-major, with `rs = 1`).
#[derive(Clone, Copy)]
pub(super) struct ARef<'a, T> {
    data: &'a [T],
    off: usize,
    rs: usize,
    ks: usize,
}

impl<'a, T: Float> ARef<'a, T> {
    /// Rows of a row-major matrix: `A(m, k) = data[off + m·rs + k]`.
    #[inline(always)]
    pub(super) fn rows(data: &'a [T], off: usize, rs: usize) -> ARef<'a, T> {
        ARef {
            data,
            off,
            rs,
            ks: 1,
        }
    }

    /// The transpose of a row-major matrix: `A(m, k) = data[off + k·ks + m]`.
    #[inline(always)]
    pub(super) fn transposed(data: &'a [T], off: usize, ks: usize) -> ARef<'a, T> {
        ARef {
            data,
            off,
            rs: 1,
            ks,
        }
    }

    /// The index of `A(m, k)`.
    #[inline(always)]
    fn index(&self, m: usize, k: usize) -> usize {
        self.off + m * self.rs + k * self.ks
    }
}

/// The B operand of [`gemm`]: `B(k, n) = data[off + k·ks + (n / NR)·ps + n % NR]`: plain
/// rows (`ps = NR`, so `B(k, n) = data[off + k·ks + n]`) or the `NR`-wide panels of
/// [`pack_t`] (`ks = NR`, `ps = kc·NR`).
#[derive(Clone, Copy)]
pub(super) struct BRef<'a, T> {
    data: &'a [T],
    off: usize,
    ks: usize,
    ps: usize,
}

impl<'a, T: Float> BRef<'a, T> {
    /// Rows of a row-major matrix: `B(k, n) = data[off + k·ks + n]`.
    #[inline(always)]
    pub(super) fn rows(data: &'a [T], off: usize, ks: usize) -> BRef<'a, T> {
        BRef {
            data,
            off,
            ks,
            ps: NR,
        }
    }

    /// Panels packed by [`pack_t`] with reduction length `kc`.
    #[inline(always)]
    pub(super) fn panels(packed: &'a [T], kc: usize) -> BRef<'a, T> {
        BRef {
            data: packed,
            off: 0,
            ks: NR,
            ps: kc * NR,
        }
    }

    /// The index of `B(k, n)`.
    #[inline(always)]
    fn index(&self, k: usize, n: usize) -> usize {
        self.off + k * self.ks + (n / NR) * self.ps + n % NR
    }
}

/// What one register-tile row band `[m0, m_end)` of a [`gemm`] computes: its columns
/// `0..cols` and the reduction steps `k0..k1`. [`gemm`] clamps it to the problem (and, with
/// packed B panels, rounds `cols` up to whole panels).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Span {
    /// Columns of C to compute (the rest of the band's columns are left as they are).
    pub cols: usize,
    /// First reduction step.
    pub k0: usize,
    /// One past the last reduction step.
    pub k1: usize,
}

/// The C operand of [`gemm`]: `C[m, n] = data[m·ldc + n]`, and whether the product is
/// added to it (`accumulate`) or overwrites it.
pub(super) struct CMut<'a, T> {
    data: &'a mut [T],
    ldc: usize,
    accumulate: bool,
}

impl<'a, T> CMut<'a, T> {
    /// Rows `ldc` apart that the product overwrites.
    #[inline(always)]
    pub(super) fn overwrite(data: &'a mut [T], ldc: usize) -> CMut<'a, T> {
        CMut {
            data,
            ldc,
            accumulate: false,
        }
    }

    /// Rows `ldc` apart that the product is added to.
    #[inline(always)]
    pub(super) fn accumulate(data: &'a mut [T], ldc: usize) -> CMut<'a, T> {
        CMut {
            data,
            ldc,
            accumulate: true,
        }
    }
}

/// `C[m, n] = (C[m, n] if c.accumulate else 0) + Σ_{k0 ≤ k < k1} A(m, k) · B(k, n)` for
/// `m < rows`, `n < span.cols`, where `C[m, n] = c.data[m * c.ldc + n]` and
/// `span = span(m0, m_end)` is asked once per band of `MR` rows (or single row)
/// `[m0, m_end)`; with packed B panels, `cols` is a multiple of `NR`. Columns past a band's `span.cols` are not written.
///
/// Skipping steps changes no bit where the skipped terms are exact zeros and the
/// accumulator can never be −0: it starts at +0 (or at a C that was built that way), and a
/// round-to-nearest sum that starts at +0 and adds ±0 terms stays +0. The attention kernels
/// use this to skip keys a row cannot see (causally hidden or keep-masked: weight exactly 0).
///
/// # Panics
/// If an operand is too short for the problem (a kernel bug: the callers size them).
#[inline(always)]
pub(super) fn gemm<T: Float>(
    rows: usize,
    cols: usize,
    kc: usize,
    c: CMut<'_, T>,
    a: ARef<'_, T>,
    b: BRef<'_, T>,
    span: impl Fn(usize, usize) -> Span,
) {
    let fast = if T::DTYPE == DType::F32 {
        Tiles::detect()
    } else {
        Tiles::Portable
    };
    gemm_impl(rows, cols, kc, c, fast, a, b, span);
}

/// Which code computes the full `R × NR` f32 tiles (every choice gives the same bits).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tiles {
    /// The portable loops ([`tile_portable`]).
    Portable,
    /// Two 8-lane AVX2 vectors per row ([`tile_f32_avx2`]).
    Avx2,
    /// One 16-lane AVX-512 vector per row ([`tile_f32_avx512`]).
    Avx512,
}

impl Tiles {
    /// The widest this CPU has (detected once, in `kernels::simd`).
    #[inline(always)]
    fn detect() -> Tiles {
        if crate::kernels::simd::has_avx512f() {
            Tiles::Avx512
        } else if avx2() {
            Tiles::Avx2
        } else {
            Tiles::Portable
        }
    }

    /// Every choice this CPU can run, widest first.
    #[cfg(test)]
    fn available() -> Vec<Tiles> {
        let mut v = Vec::new();
        if crate::kernels::simd::has_avx512f() {
            v.push(Tiles::Avx512);
        } else {
            println!("skip: no AVX-512F on this CPU; its attention tiles are not tested here");
        }
        if avx2() {
            v.push(Tiles::Avx2);
        } else {
            println!("skip: no AVX2 on this CPU; its attention tiles are not tested here");
        }
        v.push(Tiles::Portable);
        v
    }
}

/// [`gemm`] with the full f32 tiles computed by `fast` (which the caller has checked the
/// CPU runs).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn gemm_impl<T: Float>(
    rows: usize,
    cols: usize,
    kc: usize,
    c: CMut<'_, T>,
    fast: Tiles,
    a: ARef<'_, T>,
    b: BRef<'_, T>,
    span: impl Fn(usize, usize) -> Span,
) {
    let mut c = c;
    if rows == 0 || cols == 0 {
        return;
    }
    assert!(
        (rows - 1) * c.ldc + cols <= c.data.len(),
        "attention tile: C too short"
    );
    if kc > 0 {
        // Both index maps grow with each coordinate, so the last element bounds them all:
        // every read in the tiles below is in bounds.
        assert!(
            a.index(rows - 1, kc - 1) < a.data.len(),
            "attention tile: A too short"
        );
        assert!(
            b.index(kc - 1, cols - 1) < b.data.len(),
            "attention tile: B too short"
        );
        assert!(
            b.ps == NR || cols.is_multiple_of(NR),
            "attention tile: partial packed panel"
        );
    }
    // A band's span, clamped to the problem (whole panels when B is packed).
    let band = |m0: usize, m_end: usize| -> (usize, usize, usize) {
        let Span { cols: n, k0, k1 } = span(m0, m_end);
        let n = if b.ps == NR {
            n
        } else {
            n.next_multiple_of(NR)
        };
        let k1 = k1.min(kc);
        (n.min(cols), k0.min(k1), k1)
    };
    let mut m0 = 0;
    while m0 < rows {
        if rows - m0 >= MR {
            let (n, k0, k1) = band(m0, m0 + MR);
            row_tiles::<T, MR>(m0, n, (k0, k1), &mut c, fast, a, b);
            m0 += MR;
        } else {
            let (n, k0, k1) = band(m0, m0 + 1);
            row_tiles::<T, 1>(m0, n, (k0, k1), &mut c, fast, a, b);
            m0 += 1;
        }
    }
}

/// Whether this CPU has AVX2 (detected once, in `kernels::simd`).
#[inline(always)]
fn avx2() -> bool {
    crate::kernels::simd::has_avx2()
}

/// Two panels side by side: the width of the AVX-512 tiles (eight independent add chains in
/// a 4-row band, enough to hide the adds' latency).
const NR2: usize = 2 * NR;

/// The tiles of rows `m0..m0 + R` of C: `NR2`-wide (AVX-512 only), `NR`-wide, then 8-wide,
/// then single columns.
#[inline(always)]
fn row_tiles<T: Float, const R: usize>(
    m0: usize,
    cols: usize,
    ks: (usize, usize),
    c: &mut CMut<'_, T>,
    fast: Tiles,
    a: ARef<'_, T>,
    b: BRef<'_, T>,
) {
    let mut n0 = 0;
    while n0 < cols {
        let left = cols - n0;
        if fast == Tiles::Avx512 && left >= NR2 {
            tile::<T, R, NR2>(m0, n0, ks, c, fast, a, b);
            n0 += NR2;
        } else if left >= NR {
            tile::<T, R, NR>(m0, n0, ks, c, fast, a, b);
            n0 += NR;
        } else if left >= 8 {
            tile::<T, R, 8>(m0, n0, ks, c, Tiles::Portable, a, b);
            n0 += 8;
        } else {
            tile::<T, R, 1>(m0, n0, ks, c, Tiles::Portable, a, b);
            n0 += 1;
        }
    }
}

/// One `R × W` register tile of C at (m0, n0) over reduction steps `k0..k1` (inside the
/// problem [`gemm_impl`] checked).
#[inline(always)]
fn tile<T: Float, const R: usize, const W: usize>(
    m0: usize,
    n0: usize,
    (k0, k1): (usize, usize),
    c: &mut CMut<'_, T>,
    fast: Tiles,
    a: ARef<'_, T>,
    b: BRef<'_, T>,
) {
    let (ldc, accumulate) = (c.ldc, c.accumulate);
    let c = &mut *c.data;
    let mut acc = [[T::ZERO; W]; R];
    if accumulate {
        for (r, acc_r) in acc.iter_mut().enumerate() {
            let base = (m0 + r) * ldc + n0;
            acc_r.copy_from_slice(&c[base..base + W]);
        }
    }
    // A tile's W columns from n0 lie in one panel (n0 is a multiple of NR, or W < NR
    // columns of plain rows), so B's row k of the tile is W consecutive elements from
    // b_at + k·ks; A(m0 + r, k) is at a_at + r·rs + k·ks.
    let kc = k1 - k0;
    let (a_at, b_at) = (a.index(m0, k0), b.index(k0, n0));
    #[cfg(target_arch = "x86_64")]
    match fast {
        Tiles::Avx512 if (W == NR || W == NR2) && kc > 0 => {
            let b2_at = if W == NR2 { b.index(k0, n0 + NR) } else { b_at };
            // SAFETY: `fast` is Avx512 only for f32 on a CPU with AVX-512F (see `gemm`), W is
            // NR or NR2 (whose second panel starts at `b.index(k0, n0 + NR)`), and `gemm_impl`
            // checked that every A and B element the tile reads (steps `k0..k1` inside
            // `0..kc` of the checked problem, columns below `cols`) is in bounds.
            unsafe { tile_f32_avx512::<T, R, W>(&mut acc, kc, a, a_at, b, [b_at, b2_at]) }
        }
        // SAFETY: `fast` is Avx2 only for f32 on a CPU with AVX2 (see `gemm`), W == NR, and
        // the reads are in bounds as above.
        Tiles::Avx2 if W == NR && kc > 0 => unsafe {
            tile_f32_avx2::<T, R, W>(&mut acc, kc, a, a_at, b, b_at)
        },
        _ => tile_portable(&mut acc, kc, a, a_at, b, b_at),
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = fast;
        tile_portable(&mut acc, kc, a, a_at, b, b_at);
    }
    for (r, acc_r) in acc.iter().enumerate() {
        let base = (m0 + r) * ldc + n0;
        c[base..base + W].copy_from_slice(acc_r);
    }
}

/// `acc[r][w] += Σ_k A(r, k) · B(k)[w]` with separate multiplies and adds, k ascending.
#[inline(always)]
fn tile_portable<T: Float, const R: usize, const W: usize>(
    acc: &mut [[T; W]; R],
    kc: usize,
    a: ARef<'_, T>,
    a_at: usize,
    b: BRef<'_, T>,
    b_at: usize,
) {
    for k in 0..kc {
        let bk = &b.data[b_at + k * b.ks..][..W];
        for (r, acc_r) in acc.iter_mut().enumerate() {
            let x = a.data[a_at + r * a.rs + k * a.ks];
            for w in 0..W {
                acc_r[w] += x * bk[w];
            }
        }
    }
}

/// [`tile_portable`] for one `R × 16` f32 tile: per k, the B row is loaded once into two
/// vectors and each `A(r, k)` broadcast; products and sums are separate IEEE operations in
/// ascending k, exactly as the portable tile. Operands are read through raw pointers
/// stepped by their strides (no per-element bounds checks: the caller checked the extent).
///
/// # Safety
/// `T` is `f32`, `W == NR`, the CPU has AVX2, and `A(a_at + r·rs + k·ks)` for `r < R`,
/// `k < kc` and `B(b_at + k·ks .. + NR)` for `k < kc` are inside their slices.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn tile_f32_avx2<T: Float, const R: usize, const W: usize>(
    acc: &mut [[T; W]; R],
    kc: usize,
    a: ARef<'_, T>,
    a_at: usize,
    b: BRef<'_, T>,
    b_at: usize,
) {
    use std::arch::x86_64::*;
    debug_assert!(T::DTYPE == DType::F32 && W == NR);
    // SAFETY: T is f32 and W == NR (the caller's contract), so every cast below reads or
    // writes 16 f32s inside the array it comes from; A and B reads stay inside their
    // slices by the caller's contract.
    unsafe {
        let mut v = [[_mm256_setzero_ps(); 2]; R];
        for (vr, ar) in v.iter_mut().zip(acc.iter()) {
            let p = ar.as_ptr().cast::<f32>();
            *vr = [_mm256_loadu_ps(p), _mm256_loadu_ps(p.add(8))];
        }
        let mut ap = a.data.as_ptr().add(a_at).cast::<f32>();
        let mut bp = b.data.as_ptr().add(b_at).cast::<f32>();
        let (ars, aks, bks) = (a.rs, a.ks, b.ks);
        for _ in 0..kc {
            let (b0, b1) = (_mm256_loadu_ps(bp), _mm256_loadu_ps(bp.add(8)));
            for (r, vr) in v.iter_mut().enumerate() {
                let x = _mm256_broadcast_ss(&*ap.add(r * ars));
                vr[0] = _mm256_add_ps(vr[0], _mm256_mul_ps(x, b0));
                vr[1] = _mm256_add_ps(vr[1], _mm256_mul_ps(x, b1));
            }
            // Wrapping: after the last step the pointers may pass the end (never read).
            ap = ap.wrapping_add(aks);
            bp = bp.wrapping_add(bks);
        }
        for (vr, ar) in v.iter().zip(acc.iter_mut()) {
            let p = ar.as_mut_ptr().cast::<f32>();
            _mm256_storeu_ps(p, vr[0]);
            _mm256_storeu_ps(p.add(8), vr[1]);
        }
    }
}

/// [`tile_f32_avx2`] with 16-lane vectors: one per row (`W == NR`) or two (`W == NR2`, the
/// second from the panel at `b_at[1]`); per k, each B panel row is one load and each
/// `A(r, k)` one broadcast; the same separate IEEE multiplies and adds in ascending k, so
/// the same bits, in half the instructions.
///
/// # Safety
/// `T` is `f32`, `W` is `NR` or `NR2`, the CPU has AVX-512F, and `A(a_at + r·rs + k·ks)`
/// for `r < R`, `k < kc` and `B(b_at[j] + k·ks .. + NR)` for `k < kc`, `j < W / NR` are
/// inside their slices.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn tile_f32_avx512<T: Float, const R: usize, const W: usize>(
    acc: &mut [[T; W]; R],
    kc: usize,
    a: ARef<'_, T>,
    a_at: usize,
    b: BRef<'_, T>,
    b_at: [usize; 2],
) {
    use std::arch::x86_64::*;
    debug_assert!(T::DTYPE == DType::F32 && (W == NR || W == NR2));
    let nv = W / NR;
    // SAFETY: T is f32 and W is nv·16 (the caller's contract), so every cast below reads or
    // writes 16 f32s inside the array it comes from; A and B reads stay inside their slices
    // by the caller's contract.
    unsafe {
        let mut v = [[_mm512_setzero_ps(); 2]; R];
        for (vr, ar) in v.iter_mut().zip(acc.iter()) {
            for (j, x) in vr.iter_mut().enumerate().take(nv) {
                *x = _mm512_loadu_ps(ar.as_ptr().cast::<f32>().add(j * NR));
            }
        }
        let mut ap = a.data.as_ptr().add(a_at).cast::<f32>();
        let base = b.data.as_ptr().cast::<f32>();
        let mut bp = [base.add(b_at[0]), base.add(b_at[1])];
        let (ars, aks, bks) = (a.rs, a.ks, b.ks);
        for _ in 0..kc {
            let bv = [_mm512_loadu_ps(bp[0]), _mm512_loadu_ps(bp[1])];
            for (r, vr) in v.iter_mut().enumerate() {
                let x = _mm512_set1_ps(*ap.add(r * ars));
                for (x_acc, &bj) in vr.iter_mut().zip(&bv).take(nv) {
                    *x_acc = _mm512_add_ps(*x_acc, _mm512_mul_ps(x, bj));
                }
            }
            // Wrapping: after the last step the pointers may pass the end (never read).
            ap = ap.wrapping_add(aks);
            bp = [bp[0].wrapping_add(bks), bp[1].wrapping_add(bks)];
        }
        for (vr, ar) in v.iter().zip(acc.iter_mut()) {
            for (j, x) in vr.iter().enumerate().take(nv) {
                _mm512_storeu_ps(ar.as_mut_ptr().cast::<f32>().add(j * NR), *x);
            }
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
    // The rows are usually a head's slice of wider token rows, a few KiB apart, which the
    // hardware prefetchers do not follow: ask for each row's lines `AHEAD` rows early.
    const AHEAD: usize = 8;
    for r in 0..n.min(AHEAD) {
        prefetch_row(&row(r)[..kc]);
    }
    for p in 0..n.div_ceil(NR) {
        let out = &mut dst[p * kc * NR..(p + 1) * kc * NR];
        let lanes = NR.min(n - p * NR);
        if lanes < NR {
            out.fill(T::ZERO);
        }
        for l in 0..lanes {
            if p * NR + l + AHEAD < n {
                prefetch_row(&row(p * NR + l + AHEAD)[..kc]);
            }
            for (x, &v) in row(p * NR + l)[..kc].iter().enumerate() {
                out[x * NR + l] = v;
            }
        }
    }
}

/// Hints the CPU to bring `row`'s cache lines into L1 (no effect on results; a no-op off
/// x86_64).
#[inline(always)]
pub(super) fn prefetch_row<T>(row: &[T]) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        let bytes = std::mem::size_of_val(row);
        let p = row.as_ptr().cast::<i8>();
        for off in (0..bytes).step_by(64) {
            // SAFETY: a prefetch never faults, and `p + off` is inside `row`.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(p.add(off)) };
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = row;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tile product against a plain triple loop (same summation order, so exact), on
    /// the AVX-512 and AVX2 tiles where the CPU has them and on the portable ones.
    #[test]
    fn gemm_matches_naive_and_packing_round_trips() {
        for fast in Tiles::available() {
            gemm_case(fast);
        }
    }

    /// The whole problem for every band: `cols` columns, steps `0..kc`.
    fn whole(cols: usize, kc: usize) -> impl Fn(usize, usize) -> Span {
        move |_, _| Span {
            cols,
            k0: 0,
            k1: kc,
        }
    }

    fn gemm_case(fast: Tiles) {
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
                CMut::accumulate(&mut c, n),
                fast,
                ARef::rows(&a, 0, kc),
                BRef::rows(&bm, 0, n),
                whole(n, kc),
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
                CMut::overwrite(&mut c2, npad),
                fast,
                ARef::rows(&a, 0, kc),
                BRef::panels(&packed, kc),
                whole(npad, kc),
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

    /// Per-band spans: each band computes exactly its columns over its steps (the same
    /// sums as a plain loop over that range) and leaves the columns past its span alone,
    /// with plain and packed B, AVX2 and portable tiles.
    #[test]
    fn gemm_spans_compute_their_bands_only() {
        let mut g = crate::rng::SplitMix64::new(21);
        let (m, kc) = (11, 37);
        for fast in Tiles::available() {
            for packed in [false, true] {
                let n = if packed { 48 } else { 45 };
                let a: Vec<f32> = (0..m * kc).map(|_| g.next_normal() as f32).collect();
                let bm: Vec<f32> = (0..kc * n).map(|_| g.next_normal() as f32).collect();
                let c0: Vec<f32> = (0..m * n).map(|_| g.next_normal() as f32).collect();
                // A band's span grows with its rows, as a causal tile's does.
                let span = |m0: usize, m_end: usize| Span {
                    cols: (5 * m_end).min(n),
                    k0: m0 * 2,
                    k1: 9 + 3 * m_end,
                };
                let bt: Vec<f32> = (0..n * kc).map(|i| bm[(i % kc) * n + i / kc]).collect();
                let mut pk = vec![f32::NAN; n.div_ceil(NR) * NR * kc];
                pack_t(n, |j| &bt[j * kc..(j + 1) * kc], kc, &mut pk);
                let b = if packed {
                    BRef::panels(&pk, kc)
                } else {
                    BRef::rows(&bm, 0, n)
                };
                for accumulate in [false, true] {
                    let mut c = c0.clone();
                    gemm_impl(
                        m,
                        n,
                        kc,
                        CMut {
                            data: &mut c,
                            ldc: n,
                            accumulate,
                        },
                        fast,
                        ARef::rows(&a, 0, kc),
                        b,
                        span,
                    );
                    let mut m0 = 0;
                    while m0 < m {
                        let m_end = if m - m0 >= MR { m0 + MR } else { m0 + 1 };
                        let sp = span(m0, m_end);
                        let cols = if packed {
                            sp.cols.next_multiple_of(NR).min(n)
                        } else {
                            sp.cols
                        };
                        let k1 = sp.k1.min(kc);
                        for r in m0..m_end {
                            for j in 0..n {
                                let got = c[r * n + j].to_bits();
                                if j >= cols {
                                    assert_eq!(
                                        got,
                                        c0[r * n + j].to_bits(),
                                        "untouched ({r}, {j})"
                                    );
                                    continue;
                                }
                                let mut want = if accumulate { c0[r * n + j] } else { 0.0 };
                                for k in sp.k0.min(k1)..k1 {
                                    want += a[r * kc + k] * bm[k * n + j];
                                }
                                assert_eq!(
                                    got,
                                    want.to_bits(),
                                    "({r}, {j}) fast={fast:?} packed={packed}"
                                );
                            }
                        }
                        m0 = m_end;
                    }
                }
            }
        }
    }
}
