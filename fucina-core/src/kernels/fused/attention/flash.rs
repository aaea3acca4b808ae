//! Streaming attention (flash attention's algorithm on the CPU), forward and backward.
//!
//! Forward, per (head, block of `BR` query rows): loop over blocks of `BC` keys, skipping
//! blocks wholly above the causal diagonal; per tile compute S = Q·Kᵀ, fold it into the
//! running row max `m`, the running sum `l` and the output accumulator O (rescaled by
//! e^(m_old − m_new)), and at the end write O / l and `lse = m + ln l`. Backward, per k/v
//! head: for each of its query heads in ascending order, loop over key blocks, and inside
//! over query blocks in increasing order, recompute P = e^(S − lse) per tile and accumulate
//! gV, gK (key-block rows of the k/v head), gQ (query rows of the query head).
//!
//! Grouped-query attention: query head h reads k/v head `h / G` (`G = H / Hkv`) in place;
//! without grouping (G = 1) each k/v head has one query head and this is the per-head
//! kernel, bit for bit.
//!
//! Keys a row cannot see (causally hidden, or after the last key a keep-mask lets its rows
//! see) have weight exactly 0, so the tile products skip them: whole key blocks past every
//! row's last visible key, and, inside a tile, the columns and reduction steps past each
//! band of rows' last visible key (see `micro::Span`). Sums that start at +0 and skip only
//! exact-zero terms give the same bits, so this changes no result (only non-finite V, K or
//! Q values under masked keys no longer reach the output as NaN, as in PyTorch's flash
//! kernel, which skips masked blocks too).
//!
//! NaN in, NaN out: a NaN score (NaN in a query row, in a key the row sees, or a NaN
//! scale) makes the row's running sum NaN even where the block max, which skips NaN, is
//! −∞, and a NaN sum gives a NaN output row and lse (never the fully masked row's 0 and
//! −∞); the backward then gives NaN probabilities at the keys that row sees (0 where
//! masked). Finite inputs never take these branches, so their results are unchanged.
//!
//! Invariants: the only per-tile memory is a thread-local scratch of `O(BR·BC + BC·D)`
//! elements (never pool memory, never `[T, S]`); each chunk writes only its own rows;
//! every sum runs in a fixed order (keys, then query rows, ascending) with no FMA, so the
//! bits depend neither on the thread count nor on the SIMD level picked at run time.

use std::cell::Cell;

use super::micro::{gemm, pack_t, prefetch_row, ARef, BRef, CMut, Span, NR};
use super::{Heads, Mask, RowMask};
use crate::dtype::Float;
use crate::error::Result;
use crate::exec::ExecContext;
use crate::kernels::fused::softmax::causal_allowed;
use crate::kernels::simd::{dot, max, simd_dispatch, sum, RowFloat};
use crate::kernels::with_scratch;
use crate::tensor::RawTensor;

/// Query rows per block (one forward chunk; the inner loop of the backward).
const BR: usize = 64;
/// Keys per block (a multiple of [`NR`]).
const BC: usize = 64;
/// Problems with fewer multiply-adds than this run on the calling thread.
const PAR_MIN_WORK: usize = 1 << 15;

thread_local! {
    /// This thread's tile scratch (taken while in use, so a re-entrant call just allocates).
    static SCRATCH: Cell<Vec<f64>> = const { Cell::new(Vec::new()) };
}

/// A validated attention problem: operands read in place, sizes, options.
pub(super) struct Problem<'a, T> {
    q: Heads<'a, T>,
    k: Heads<'a, T>,
    v: Heads<'a, T>,
    mask: Mask<'a, T>,
    nb: usize,
    /// Query heads.
    nh: usize,
    /// K/V heads (dividing `nh`).
    nhk: usize,
    /// Query heads per k/v head: query head h reads k/v head `h / group`.
    group: usize,
    nt: usize,
    ns: usize,
    d: usize,
    dv: usize,
    causal: bool,
    scale: T,
}

impl<'a, T: Float> Problem<'a, T> {
    /// Reads q `[B,H,T,D]`, k `[B,Hkv,S,D]`, v `[B,Hkv,S,Dv]` (validated: `Hkv` divides `H`,
    /// last axes unit-stride) and a mask prepared by `prepare_mask`.
    pub(super) fn new(
        q: &'a RawTensor,
        k: &'a RawTensor,
        v: &'a RawTensor,
        mask: Option<&'a RawTensor>,
        causal: bool,
        scale: f64,
    ) -> Result<Problem<'a, T>> {
        let (qs, ks, vs) = (q.shape(), k.shape(), v.shape());
        debug_assert!(qs.len() == 4 && ks.len() == 4 && vs.len() == 4);
        Ok(Problem {
            q: Heads::new(q)?,
            k: Heads::new(k)?,
            v: Heads::new(v)?,
            mask: Mask::new(mask)?,
            nb: qs[0],
            nh: qs[1],
            nhk: ks[1],
            // H = Hkv = 0 (no head at all) reads nothing.
            group: qs[1].checked_div(ks[1]).unwrap_or(1),
            nt: qs[2],
            ns: ks[2],
            d: qs[3],
            dv: vs[3],
            causal,
            scale: T::from_f64(scale),
        })
    }

    /// Keys visible to query row `i`: `0..visible(i)` (causal: `j ≤ i + S − T`).
    #[inline(always)]
    fn visible(&self, i: usize) -> usize {
        if self.causal {
            causal_allowed(i, self.nt, self.ns)
        } else {
            self.ns
        }
    }

    /// Whether the problem is worth the worker threads.
    fn parallel(&self) -> bool {
        [self.nh, self.nt, self.ns, self.d + self.dv]
            .iter()
            .fold(self.nb, |w, &x| w.saturating_mul(x))
            >= PAR_MIN_WORK
    }
}

/// How one row's raw scores `s·(q·k)` of a key block become its logits: the keys
/// `j0..j0 + valid` it sees, the scale and the row's mask (the rest of the block is hidden).
#[derive(Clone, Copy)]
struct Logits<'m, T> {
    valid: usize,
    scale: T,
    mask: RowMask<'m, T>,
    j0: usize,
}

impl<T: Float> Problem<'_, T> {
    /// The logits of query row `i` of head (b, h) over keys `j0..j0 + valid`.
    #[inline(always)]
    fn logits(&self, (b, h, i): (usize, usize, usize), j0: usize, valid: usize) -> Logits<'_, T> {
        Logits {
            valid,
            scale: self.scale,
            mask: self.mask.row(b, h, i),
            j0,
        }
    }
}

/// `row[..valid] = row · scale` plus the row's mask (−∞ where a keep-mask is 0), for keys
/// `j0..j0 + valid`; `row[valid..] = −∞` (causally hidden).
#[inline(always)]
fn scale_and_mask<T: Float>(row: &mut [T], logits: Logits<'_, T>) {
    let Logits {
        valid,
        scale,
        mask,
        j0,
    } = logits;
    let (vis, hidden) = row.split_at_mut(valid);
    hidden.fill(T::NEG_INFINITY);
    match mask {
        RowMask::None => {
            for x in vis.iter_mut() {
                *x *= scale;
            }
        }
        RowMask::Bias { m, base, st } => {
            let base = base + j0 * st;
            if st == 1 {
                for (x, &bias) in vis.iter_mut().zip(&m[base..base + valid]) {
                    *x = *x * scale + bias;
                }
            } else {
                for (c, x) in vis.iter_mut().enumerate() {
                    *x = *x * scale + m[base + c * st];
                }
            }
        }
        RowMask::Keep { m, base, st } => {
            let base = base + j0 * st;
            for (c, x) in vis.iter_mut().enumerate() {
                *x = if m[base + c * st] == 0 {
                    T::NEG_INFINITY
                } else {
                    *x * scale
                };
            }
        }
    }
}

/// One row of the online softmax: turns the raw scores `row` into e^(s − m_new), where
/// m_new = max(m, max s), updates `m` and `l ← l·e^(m − m_new) + Σ e^(s − m_new)`, and
/// returns the factor e^(m − m_new) the row's output accumulator must be scaled by.
/// A row with no visible key so far stays at m = −∞, l = 0 with all-zero weights, unless
/// a score is NaN (NaN in q, k or the scale: `max` skips NaN, so such a block's max can be
/// −∞): then l becomes NaN, and stays NaN, so the row ends NaN instead of looking fully
/// masked. With a finite max, a NaN score makes its e^(s − m) and so l NaN by itself.
#[inline(always)]
fn online_row<T: RowFloat>(row: &mut [T], logits: Logits<'_, T>, m: &mut T, l: &mut T) -> T {
    scale_and_mask(row, logits);
    let block_max = max(row);
    let m_new = if block_max > *m { block_max } else { *m };
    if m_new == T::NEG_INFINITY {
        // Only rows with no finite score so far get here (rare): look for a NaN.
        if row.iter().any(|x| x.is_nan()) {
            *l = T::from_f64(f64::NAN);
        }
        row.fill(T::ZERO);
        return T::ONE;
    }
    // e^(−∞) = 0: the first visible block discards the (zero) accumulator.
    let alpha = (*m - m_new).vexp();
    for x in row.iter_mut() {
        *x = (*x - m_new).vexp();
    }
    *l = *l * alpha + sum(row);
    *m = m_new;
    alpha
}

/// What the query rows of one (query block, key block) tile see: row `r` sees keys
/// `0..vend[r]` of the block (nondecreasing in r), of `bc` keys. Its three products are
/// the tile products of the forward and the backward, each band of rows (or of keys) cut to
/// what it can see; every term skipped has weight exactly 0.
#[derive(Clone, Copy)]
struct Visible<'a> {
    /// One entry per query row of the block.
    vend: &'a [usize],
    /// Keys in the block.
    bc: usize,
}

impl Visible<'_> {
    /// `out[r, c] = Σ_k X(r, k) · Y_c[k]` over `kd` steps (S = Q·Kᵀ, gP = gO·Vᵀ; rows of
    /// `out` `BC` apart), X's rows read in place and the block's Y rows packed by `pack_t`
    /// into `yt`: a band of rows computes the keys its last row sees (padding columns of its
    /// last panel are computed and ignored; columns past it are left stale).
    #[inline(always)]
    fn scores<T: Float>(self, out: &mut [T], x: ARef<'_, T>, yt: &[T], kd: usize) {
        let vend = self.vend;
        gemm(
            vend.len(),
            self.bc.next_multiple_of(NR),
            kd,
            CMut::overwrite(out, BC),
            x,
            BRef::panels(yt, kd),
            |_, m_end| Span {
                cols: vend[m_end - 1],
                k0: 0,
                k1: kd,
            },
        );
    }

    /// `out[r, ..] += Σ_c W[r, c] · y_c` (O += P·V, gQ += gS·K) for `w`-wide rows of `out`
    /// (`w` apart), from the tile's weights `wts` (rows `BC` apart): a band of rows reduces
    /// over the keys its last row sees.
    #[inline(always)]
    fn add_to_rows<T: Float>(self, out: &mut [T], w: usize, wts: &[T], y: BRef<'_, T>) {
        let vend = self.vend;
        gemm(
            vend.len(),
            w,
            self.bc,
            CMut::accumulate(out, w),
            ARef::rows(wts, 0, BC),
            y,
            |_, m_end| Span {
                cols: w,
                k0: 0,
                k1: vend[m_end - 1],
            },
        );
    }

    /// `out[c, ..] += Σ_r W[r, c] · y_r` (gV += Pᵀ·gO, gK += gSᵀ·Q) for the block's keys'
    /// `w`-wide rows of `out` (`w` apart), from the tile's weights `wts` (rows `BC` apart): a
    /// band of keys reduces from the first row that sees its first key.
    #[inline(always)]
    fn add_to_keys<T: Float>(self, out: &mut [T], w: usize, wts: &[T], y: BRef<'_, T>) {
        let vend = self.vend;
        let br = vend.len();
        gemm(
            self.bc,
            w,
            br,
            CMut::accumulate(out, w),
            ARef::transposed(wts, 0, BC),
            y,
            |m0, _| Span {
                cols: w,
                k0: vend.partition_point(|&v| v <= m0),
                k1: br,
            },
        );
    }
}

/// The forward of chunk `c` = (head, query block): writes its rows of `out` and `lse`
/// (`o` and `lse` are exactly those rows: `br · dv` and `br` elements).
#[inline(always)]
fn fwd_block_impl<T: RowFloat>(
    p: &Problem<'_, T>,
    chunk: usize,
    o: &mut [T],
    lse: &mut [T],
    buf: &mut [T],
) {
    let (nt, d, dv) = (p.nt, p.d, p.dv);
    let n_qb = nt.div_ceil(BR);
    let (bh, i0) = (chunk / n_qb, (chunk % n_qb) * BR);
    let (b, h) = (bh / p.nh, bh % p.nh);
    // The k/v head this query head reads (itself without grouping).
    let kh = h / p.group;
    let br = BR.min(nt - i0);
    let (o, lse) = (&mut o[..br * dv], &mut lse[..br]);
    o.fill(T::ZERO);
    let (kt, s) = buf.split_at_mut(BC * d);
    // Operands read in place: row r of this query block is at qs[q0 + r·qsr..].
    let (qs, q0, qsr) = (p.q.st, p.q.start(b, h) + i0 * p.q.sr, p.q.sr);
    let (vs, v0, vsr) = (p.v.st, p.v.start(b, kh), p.v.sr);
    let mut m = [T::NEG_INFINITY; BR];
    let mut l = [T::ZERO; BR];
    let mut alpha = [T::ONE; BR];
    // Keys past the last row's visible range are hidden from every row of the block; keys
    // from `mend` on are also masked out of every row (weight 0: their blocks add nothing).
    let kend = p.visible(i0 + br - 1);
    let mend = p.mask.keys_end(b, h, i0, br, p.ns).min(kend);
    // Row r sees keys j0..j0 + vend[r] of the current block (nondecreasing in r).
    let mut vend = [0usize; BR];
    let mut j0 = 0;
    while j0 < mend {
        let bc = BC.min(kend - j0);
        for (r, v) in vend.iter_mut().enumerate().take(br) {
            *v = p.visible(i0 + r).min(mend).saturating_sub(j0).min(bc);
        }
        // A band of rows needs the columns its last row sees, and P·V only those keys
        // (the other rows' weights there are exactly 0).
        let seen = Visible {
            vend: &vend[..br],
            bc,
        };
        pack_t(bc, |c| p.k.row(b, kh, j0 + c), d, kt);
        // P·V below reads this block's V rows in place: start fetching them now.
        for c in 0..bc {
            prefetch_row(&p.v.row(b, kh, j0 + c)[..dv]);
        }
        // S = Q·Kᵀ over the columns each band sees (columns past them are hidden below).
        seen.scores(s, ARef::rows(qs, q0, qsr), kt, d);
        for r in 0..br {
            let row = &mut s[r * BC..r * BC + bc];
            let logits = p.logits((b, h, i0 + r), j0, vend[r]);
            alpha[r] = online_row(row, logits, &mut m[r], &mut l[r]);
        }
        // O = diag(alpha)·O + P·V.
        for (r, orow) in o.chunks_exact_mut(dv.max(1)).enumerate().take(br) {
            if alpha[r] != T::ONE {
                for x in orow.iter_mut() {
                    *x *= alpha[r];
                }
            }
        }
        seen.add_to_rows(o, dv, s, BRef::rows(vs, v0 + j0 * vsr, vsr));
        j0 += bc;
    }
    for r in 0..br {
        let orow = &mut o[r * dv..(r + 1) * dv];
        if l[r] > T::ZERO {
            let inv = T::ONE / l[r];
            for x in orow.iter_mut() {
                *x *= inv;
            }
            lse[r] = m[r] + l[r].ln();
        } else if l[r].is_nan() {
            // A NaN score (or an infinite one: e^(∞ − ∞)): NaN out, as PyTorch, and
            // lse = NaN, so the backward's gradients of the row are NaN too. (Finite inputs
            // never get here: the max score adds e^0 = 1 to l.)
            orow.fill(T::from_f64(f64::NAN));
            lse[r] = T::from_f64(f64::NAN);
        } else {
            // No visible key: zero output, lse = −∞ (the backward then skips the row).
            orow.fill(T::ZERO);
            lse[r] = T::NEG_INFINITY;
        }
    }
}

simd_dispatch! { fn fwd_block => fwd_block_impl(p: &Problem<'_, T>, chunk: usize, o: &mut [T], lse: &mut [T], buf: &mut [T]) }

/// The streaming forward: fills `out [B,H,T,Dv]` and `lse [B,H,T]` (fresh, contiguous).
pub(super) fn forward<T: RowFloat>(
    ctx: &ExecContext,
    p: &Problem<'_, T>,
    out: &mut RawTensor,
    lse: &mut RawTensor,
) -> Result<()> {
    let outs = [out.as_mut_slice::<T>()?, lse.as_mut_slice::<T>()?];
    let n_qb = p.nt.div_ceil(BR);
    let n_chunks = p.nb * p.nh * n_qb;
    let len = BC * p.d + BR * BC;
    // Chunk c = (head, query block) owns rows bh*nt + qb*BR .. (+ BR, within the head).
    let first_row = |c: usize| (c / n_qb) * p.nt + (c % n_qb) * BR;
    let units = [p.dv, 1];
    ctx.par_split_mut_n(
        outs,
        units,
        n_chunks,
        p.parallel(),
        first_row,
        |c, [o, l]| {
            with_scratch::<T, _>(&SCRATCH, len, |buf| fwd_block(p, c, o, l, buf));
        },
    );
    Ok(())
}

/// Probabilities of one recomputed row: e^(s·scale + mask − lse), 0 where hidden or masked,
/// and all 0 for a row with no visible key (lse = −∞). A NaN row (lse = NaN: a NaN score
/// in the forward) is NaN at every key it sees and still exactly 0 where hidden or masked
/// (e^(−∞ − NaN) would be NaN), so its NaN reaches the gradients of the keys it sees.
#[inline(always)]
fn probs_row<T: RowFloat>(row: &mut [T], logits: Logits<'_, T>, lse: T) {
    if lse == T::NEG_INFINITY {
        row.fill(T::ZERO);
        return;
    }
    scale_and_mask(row, logits);
    if lse.is_nan() {
        for x in row.iter_mut() {
            *x = if *x == T::NEG_INFINITY {
                T::ZERO
            } else {
                T::from_f64(f64::NAN)
            };
        }
        return;
    }
    for x in row.iter_mut() {
        *x = (*x - lse).vexp();
    }
}

/// Rows of the backward's outputs (zero-initialised, `None` when not needed) and of
/// Δ = rowsum(gO ∘ O): per chunk, gk and gv of one k/v head and gq and Δ of its query heads.
struct BwdOut<'a, T> {
    gq: Option<&'a mut [T]>,
    gk: Option<&'a mut [T]>,
    gv: Option<&'a mut [T]>,
    delta: Option<&'a mut [T]>,
}

/// The backward's inputs besides the problem: the upstream gradient `g_out` and the
/// forward's `out` (for Δ), and the forward's `lse` rows (of every head, or of the one
/// head being run).
#[derive(Clone, Copy)]
struct BwdIn<'a, T> {
    g_out: &'a Heads<'a, T>,
    out: &'a Heads<'a, T>,
    lse: &'a [T],
}

/// The backward of k/v head `bj` = (b, j): for its query heads h = j·G .. j·G + G − 1 in
/// ascending order, accumulates their rows of gq and the k/v head's rows of gk, gv (so each
/// gK/gV row sums over query heads, then query blocks, in a fixed order).
#[inline(always)]
fn bwd_head_impl<T: RowFloat>(
    p: &Problem<'_, T>,
    bj: usize,
    inp: BwdIn<'_, T>,
    dst: BwdOut<'_, T>,
    buf: &mut [T],
) {
    let (nt, d, group) = (p.nt, p.d, p.group);
    let (b, kh) = (bj / p.nhk, bj % p.nhk);
    let BwdOut {
        mut gq,
        mut gk,
        mut gv,
        mut delta,
    } = dst;
    for g in 0..group {
        let h = kh * group + g;
        let bh = b * p.nh + h;
        let dst = BwdOut {
            gq: gq
                .as_deref_mut()
                .map(|x| &mut x[g * nt * d..(g + 1) * nt * d]),
            gk: gk.as_deref_mut(),
            gv: gv.as_deref_mut(),
            delta: delta.as_deref_mut().map(|x| &mut x[g * nt..(g + 1) * nt]),
        };
        let lse = &inp.lse[bh * nt..(bh + 1) * nt];
        bwd_query_head(p, (b, h, kh), BwdIn { lse, ..inp }, dst, buf);
    }
}

/// Query head (b, h)'s share of the backward, reading k/v head (b, kh) (`inp.lse` is this
/// head's): accumulates into its rows of gq (`dst.gq`, `dst.delta`: this head's) and into
/// gk, gv (the k/v head's).
#[inline(always)]
fn bwd_query_head<T: RowFloat>(
    p: &Problem<'_, T>,
    (b, h, kh): (usize, usize, usize),
    inp: BwdIn<'_, T>,
    dst: BwdOut<'_, T>,
    buf: &mut [T],
) {
    let BwdIn { g_out, out, lse } = inp;
    let (nt, ns, d, dv) = (p.nt, p.ns, p.d, p.dv);
    let BwdOut {
        mut gq,
        mut gk,
        mut gv,
        delta,
    } = dst;
    // Δ_i = gO_i · O_i (= Σ_j P_ij gP_ij): the softmax backward's row term.
    let delta: &[T] = match delta {
        Some(dl) => {
            for (i, x) in dl.iter_mut().enumerate() {
                *x = dot(g_out.row(b, h, i), out.row(b, h, i));
            }
            dl
        }
        None => &[],
    };
    let need_s = !delta.is_empty();
    let (kt, rest) = buf.split_at_mut(BC * d);
    let (vt, rest) = rest.split_at_mut(BC * dv);
    let (s, dp) = rest.split_at_mut(BR * BC);
    // Operands read in place: row r of head (b, h) of x is at xs[x0 + r·xsr..].
    let (qs, q0, qsr) = (p.q.st, p.q.start(b, h), p.q.sr);
    let (ks, k0, ksr) = (p.k.st, p.k.start(b, kh), p.k.sr);
    let (gs, g0, gsr) = (g_out.st, g_out.start(b, h), g_out.sr);
    let scale = p.scale;
    // Keys from `mend` on are masked out of every row of the head: their gK and gV rows stay
    // zero and they add only exact zeros to gQ, so their blocks are skipped.
    let mend = p.mask.keys_end(b, h, 0, nt, ns);
    // Row r of the current query block sees keys j0..j0 + vend[r] (nondecreasing in r).
    let mut vend = [0usize; BR];
    let mut j0 = 0;
    while j0 < mend {
        let bc = BC.min(ns - j0);
        pack_t(bc, |c| p.k.row(b, kh, j0 + c), d, kt);
        if need_s {
            pack_t(bc, |c| p.v.row(b, kh, j0 + c), dv, vt);
        }
        // Causal: query rows before j0 − (S − T) see no key of this block.
        let i_first = if p.causal {
            (j0 + nt).saturating_sub(ns)
        } else {
            0
        };
        let mut i0 = i_first / BR * BR;
        while i0 < nt {
            let br = BR.min(nt - i0);
            let (qi, gi) = (q0 + i0 * qsr, g0 + i0 * gsr);
            if j0 == 0 {
                // This query block's Q and gO rows are read in place (first visit): fetch
                // them early.
                for r in 0..br {
                    prefetch_row(&qs[qi + r * qsr..][..d]);
                    prefetch_row(&gs[gi + r * gsr..][..dv]);
                }
            }
            let qend = p.mask.keys_end(b, h, i0, br, ns);
            for (r, v) in vend.iter_mut().enumerate().take(br) {
                *v = p.visible(i0 + r).min(qend).saturating_sub(j0).min(bc);
            }
            let vend = &vend[..br];
            // Bands over query rows need the keys their last row sees; bands over keys
            // (the transposed products) need the query rows from the first that sees
            // their first key. Every skipped term has weight exactly 0.
            let seen = Visible { vend, bc };
            // P = e^(s·Q·Kᵀ + M − lse), recomputed for this tile.
            seen.scores(s, ARef::rows(qs, qi, qsr), kt, d);
            for (r, &valid) in vend.iter().enumerate() {
                let row = &mut s[r * BC..r * BC + bc];
                probs_row(row, p.logits((b, h, i0 + r), j0, valid), lse[i0 + r]);
            }
            // gV[j] += Σ_i P_ij gO_i.
            if let Some(gv) = gv.as_deref_mut() {
                seen.add_to_keys(&mut gv[j0 * dv..], dv, s, BRef::rows(gs, gi, gsr));
            }
            if need_s {
                // gP = gO·Vᵀ, then gS = P ∘ (gP − Δ), scaled by s once here.
                seen.scores(dp, ARef::rows(gs, gi, gsr), vt, dv);
                for (r, &valid) in vend.iter().enumerate() {
                    let dl = delta[i0 + r];
                    let prow = &s[r * BC..r * BC + valid];
                    let (seen, hidden) = dp[r * BC..r * BC + bc].split_at_mut(valid);
                    let l = lse[i0 + r];
                    if l.is_nan() || l == T::NEG_INFINITY {
                        // A NaN row: gS is NaN where P is (Δ is NaN), and 0 where P = 0
                        // (masked keys stay out of it, as in the forward). A fully
                        // masked row: gS = 0, even with a NaN scale.
                        for (x, &pv) in seen.iter_mut().zip(prow) {
                            *x = if pv == T::ZERO { T::ZERO } else { pv };
                        }
                    } else {
                        for (x, &pv) in seen.iter_mut().zip(prow) {
                            *x = pv * (*x - dl) * scale;
                        }
                    }
                    // P = 0 there (and gP may be stale): gS = 0.
                    hidden.fill(T::ZERO);
                }
                // gQ_i += Σ_j s·gS_ij K_j.
                if let Some(gq) = gq.as_deref_mut() {
                    let kv = BRef::rows(ks, k0 + j0 * ksr, ksr);
                    seen.add_to_rows(&mut gq[i0 * d..], d, dp, kv);
                }
                // gK_j += Σ_i s·gS_ij Q_i.
                if let Some(gk) = gk.as_deref_mut() {
                    seen.add_to_keys(&mut gk[j0 * d..], d, dp, BRef::rows(qs, qi, qsr));
                }
            }
            i0 += br;
        }
        j0 += bc;
    }
}

simd_dispatch! { fn bwd_head => bwd_head_impl(p: &Problem<'_, T>, bj: usize, inp: BwdIn<'_, T>, dst: BwdOut<'_, T>, buf: &mut [T]) }

/// The streaming backward from the forward's `out` and `lse` (contiguous) and the upstream
/// `g_out` (last axis unit-stride): `(gq, gk, gv)` for those `needs` asks.
pub(super) fn backward<T: RowFloat>(
    ctx: &ExecContext,
    p: &Problem<'_, T>,
    out: &RawTensor,
    lse: &RawTensor,
    g_out: &RawTensor,
    needs: [bool; 3],
) -> Result<(Option<RawTensor>, Option<RawTensor>, Option<RawTensor>)> {
    let (nb, nh, nhk, nt, ns, d, dv) = (p.nb, p.nh, p.nhk, p.nt, p.ns, p.d, p.dv);
    let zeros = |need: bool, shape: &[usize]| -> Result<Option<RawTensor>> {
        Ok(if need {
            Some(ctx.zeros(T::DTYPE, shape)?)
        } else {
            None
        })
    };
    let mut gq = zeros(needs[0], &[nb, nh, nt, d])?;
    let mut gk = zeros(needs[1], &[nb, nhk, ns, d])?;
    let mut gv = zeros(needs[2], &[nb, nhk, ns, dv])?;
    if !needs.iter().any(|&n| n) {
        return Ok((gq, gk, gv));
    }
    let mut delta = zeros(needs[0] || needs[1], &[nb, nh, nt])?;
    // Chunk bj = (b, j) owns k/v head j's rows of gk, gv and the rows of gq and Δ of its
    // query heads j·G .. j·G + G − 1, which are consecutive (an absent output is an empty
    // slice with chunk length 0).
    fn part<T: Float>(t: &mut Option<RawTensor>, per: usize) -> Result<(&mut [T], usize)> {
        Ok(match t {
            Some(t) => (t.as_mut_slice::<T>()?, per),
            None => (&mut [][..], 0),
        })
    }
    let (gqs, gq_len) = part(&mut gq, p.group * nt * d)?;
    let (gks, gk_len) = part(&mut gk, ns * d)?;
    let (gvs, gv_len) = part(&mut gv, ns * dv)?;
    let (dls, dl_len) = part(&mut delta, p.group * nt)?;
    let lens = [gq_len, gk_len, gv_len, dl_len];
    let (g_h, o_h) = (Heads::<T>::new(g_out)?, Heads::<T>::new(out)?);
    let inp = BwdIn {
        g_out: &g_h,
        out: &o_h,
        lse: lse.as_slice::<T>()?,
    };
    let len = BC * (d + dv) + 2 * BR * BC;
    let outs = [gqs, gks, gvs, dls];
    ctx.par_chunks_mut_n(
        outs,
        lens,
        nb * nhk,
        p.parallel(),
        |bj, [gq, gk, gv, dl]| {
            let dst = BwdOut {
                gq: (lens[0] > 0).then_some(gq),
                gk: (lens[1] > 0).then_some(gk),
                gv: (lens[2] > 0).then_some(gv),
                delta: (lens[3] > 0).then_some(dl),
            };
            with_scratch::<T, _>(&SCRATCH, len, |buf| bwd_head(p, bj, inp, dst, buf));
        },
    );
    drop(delta);
    Ok((gq, gk, gv))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::fused::attention::{prepare_mask, AttentionOpts};

    /// The runtime-dispatched (AVX2/AVX-512) tile kernels give the same bits as the
    /// baseline build of the same code, with one k/v head per query head and grouped.
    #[test]
    fn dispatched_blocks_match_baseline_bitwise() -> Result<()> {
        dispatched_blocks_case(2, 2)?;
        dispatched_blocks_case(6, 2)
    }

    fn dispatched_blocks_case(nh: usize, nhk: usize) -> Result<()> {
        let ctx = ExecContext::with_threads(1)?;
        let mut g = crate::rng::SplitMix64::new(11);
        let (nb, nt, ns, d, dv) = (1, 70, 77, 19, 24);
        let group = nh / nhk;
        let mut rnd = |n: usize| -> Vec<f32> { (0..n).map(|_| g.next_normal() as f32).collect() };
        let q = ctx.from_slice(&rnd(nb * nh * nt * d), &[nb, nh, nt, d])?;
        let k = ctx.from_slice(&rnd(nb * nhk * ns * d), &[nb, nhk, ns, d])?;
        let v = ctx.from_slice(&rnd(nb * nhk * ns * dv), &[nb, nhk, ns, dv])?;
        let go = ctx.from_slice(&rnd(nb * nh * nt * dv), &[nb, nh, nt, dv])?;
        let bias = ctx.from_slice(&rnd(ns), &[1, 1, 1, ns])?;
        let mask = prepare_mask(&ctx, "test", Some(&bias), q.dtype(), [nb, nh, nt, ns])?;
        let opts = AttentionOpts {
            causal: true,
            scale: None,
        };
        let p = Problem::<f32>::new(&q, &k, &v, mask.as_ref(), true, opts.scale_for(d))?;
        let (mut o1, mut l1) = (vec![0f32; nb * nh * nt * dv], vec![0f32; nb * nh * nt]);
        let (mut o2, mut l2) = (o1.clone(), l1.clone());
        let len = BC * d + BR * BC;
        let (mut s1, mut s2) = (vec![0f32; len], vec![0f32; len]);
        let n_qb = nt.div_ceil(BR);
        for c in 0..nb * nh * n_qb {
            let r0 = (c / n_qb) * nt + (c % n_qb) * BR;
            let r1 = (r0 + BR).min((c / n_qb + 1) * nt);
            let (o, l) = (&mut o1[r0 * dv..r1 * dv], &mut l1[r0..r1]);
            fwd_block(&p, c, o, l, &mut s1);
            let (o, l) = (&mut o2[r0 * dv..r1 * dv], &mut l2[r0..r1]);
            fwd_block_impl(&p, c, o, l, &mut s2);
        }
        assert_eq!(o1, o2);
        assert_eq!(l1, l2);
        let out = ctx.from_slice(&o1, &[nb, nh, nt, dv])?;
        let (oh, gh) = (Heads::<f32>::new(&out)?, Heads::<f32>::new(&go)?);
        let n = |len: usize| vec![0f32; len];
        let (nq, nk) = (nb * nh, nb * nhk);
        let mut bufs = [
            (n(nq * nt * d), n(nk * ns * d), n(nk * ns * dv), n(nq * nt)),
            (n(nq * nt * d), n(nk * ns * d), n(nk * ns * dv), n(nq * nt)),
        ];
        let len = BC * (d + dv) + 2 * BR * BC;
        for (which, (gq, gk, gv, dl)) in bufs.iter_mut().enumerate() {
            let mut sc = vec![0f32; len];
            for bj in 0..nk {
                let (q0, q1) = (bj * group, (bj + 1) * group);
                let dst = BwdOut {
                    gq: Some(&mut gq[q0 * nt * d..q1 * nt * d]),
                    gk: Some(&mut gk[bj * ns * d..(bj + 1) * ns * d]),
                    gv: Some(&mut gv[bj * ns * dv..(bj + 1) * ns * dv]),
                    delta: Some(&mut dl[q0 * nt..q1 * nt]),
                };
                let inp = BwdIn {
                    g_out: &gh,
                    out: &oh,
                    lse: &l1,
                };
                if which == 0 {
                    bwd_head(&p, bj, inp, dst, &mut sc);
                } else {
                    bwd_head_impl(&p, bj, inp, dst, &mut sc);
                }
            }
        }
        assert_eq!(bufs[0], bufs[1]);
        assert!(bufs[0].0.iter().any(|&x| x != 0.0));
        Ok(())
    }
}
