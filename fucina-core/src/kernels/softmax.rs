//! Softmax, log-softmax and logsumexp along an axis, with their backward kernels,
//! and the causal (attention) variants over the last axis.
//!
//! Invariants: inputs may have any strides (a strided view, or a reduced axis
//! that is not the last, is first copied so every row is contiguous); rows run
//! in fixed chunks of rows and each row's reduction order is fixed, so results
//! are bitwise identical for any thread count. The row max is subtracted before
//! `exp`, so no finite input overflows. Also home of the row helpers (fixed
//! chunking, 8-lane sums) shared with `norm` and `loss`.

use crate::dtype::Float;
use crate::error::{Error, Result};
use crate::exec::ExecContext;
use crate::kernels::check_axis;
use crate::tensor::RawTensor;

// ------------------------------------------------------------ row helpers

/// Elements per parallel chunk of rows (a fixed size: chunking never depends on threads).
pub(crate) const ROW_CHUNK_ELEMS: usize = 1 << 14;
/// Problems smaller than this many elements run on the calling thread.
pub(crate) const PAR_MIN_ELEMS: usize = 1 << 15;
/// Accumulator lanes of the row sums (a fixed order, so vectorisable and deterministic).
const LANES: usize = 8;

/// Rows per chunk for rows of `len` elements (at least `min_rows`).
pub(crate) fn rows_per_chunk(len: usize, min_rows: usize) -> usize {
    (ROW_CHUNK_ELEMS / len.max(1)).max(min_rows).max(1)
}

/// Runs `f(chunk, r0, r1, outs)` over the fixed row chunks `[r0, r1)` of `n_rows` rows of
/// `len` elements, in parallel when the problem is large enough. `outs[i]` is chunk `c`'s
/// disjoint part of output `i`: elements `c·chunk_len[i] ..` of it (pass `rpc · width` for an
/// output of `width` elements per row, `width` for one row of partials per chunk, 0 for an
/// absent output). Returns the number of chunks.
pub(crate) fn par_rows_mut<T: Send, const N: usize>(
    ctx: &ExecContext,
    (n_rows, len, rpc): (usize, usize, usize),
    outs: [&mut [T]; N],
    chunk_len: [usize; N],
    f: impl Fn(usize, usize, usize, [&mut [T]; N]) + Send + Sync,
) -> usize {
    let n_chunks = n_rows.div_ceil(rpc);
    let parallel = n_rows.saturating_mul(len) >= PAR_MIN_ELEMS;
    ctx.par_chunks_mut_n(outs, chunk_len, n_chunks, parallel, |c, o| {
        let r0 = c * rpc;
        let r1 = (r0 + rpc).min(n_rows);
        f(c, r0, r1, o);
    });
    n_chunks
}

#[inline(always)]
fn fold_lanes<T: Float>(acc: [T; LANES]) -> T {
    ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]))
}

/// Σ f(i) for i in 0..n, in 8 interleaved lanes folded pairwise, then the tail
/// in order: a fixed order that the compiler can vectorise.
#[inline(always)]
pub(crate) fn lane_sum<T: Float>(n: usize, f: impl Fn(usize) -> T) -> T {
    let mut acc = [T::ZERO; LANES];
    let full = n / LANES * LANES;
    let mut i = 0;
    while i < full {
        for (l, a) in acc.iter_mut().enumerate() {
            *a += f(i + l);
        }
        i += LANES;
    }
    let mut s = fold_lanes(acc);
    for k in full..n {
        s += f(k);
    }
    s
}

/// Σ f(x_i), in the lane order of [`lane_sum`] (bounds-check free, so it vectorises).
#[inline(always)]
pub(crate) fn lane_map_sum<T: Float>(x: &[T], f: impl Fn(T) -> T) -> T {
    let mut acc = [T::ZERO; LANES];
    let mut chunks = x.chunks_exact(LANES);
    for c in &mut chunks {
        for l in 0..LANES {
            acc[l] += f(c[l]);
        }
    }
    let mut s = fold_lanes(acc);
    for &v in chunks.remainder() {
        s += f(v);
    }
    s
}

/// Σ f(a_i, b_i) over the length of `a`, in the lane order of [`lane_sum`].
#[inline(always)]
pub(crate) fn lane_map_sum2<T: Float>(a: &[T], b: &[T], f: impl Fn(T, T) -> T) -> T {
    let b = &b[..a.len()];
    let mut acc = [T::ZERO; LANES];
    let mut ca = a.chunks_exact(LANES);
    let mut cb = b.chunks_exact(LANES);
    for (x, y) in (&mut ca).zip(&mut cb) {
        for l in 0..LANES {
            acc[l] += f(x[l], y[l]);
        }
    }
    let mut s = fold_lanes(acc);
    for (&x, &y) in ca.remainder().iter().zip(cb.remainder()) {
        s += f(x, y);
    }
    s
}

/// Σ x.
#[inline(always)]
pub(crate) fn sum<T: Float>(x: &[T]) -> T {
    lane_map_sum(x, |v| v)
}

/// Σ a·b (same lengths).
#[inline(always)]
pub(crate) fn dot<T: Float>(a: &[T], b: &[T]) -> T {
    lane_map_sum2(a, b, |x, y| x * y)
}

/// max x (−∞ for an empty row; a NaN is skipped here but propagates through `exp`).
#[inline(always)]
pub(crate) fn max<T: Float>(x: &[T]) -> T {
    let mut acc = [T::NEG_INFINITY; LANES];
    let mut chunks = x.chunks_exact(LANES);
    for c in &mut chunks {
        for l in 0..LANES {
            acc[l] = acc[l].max(c[l]);
        }
    }
    let mut m = T::NEG_INFINITY;
    for a in acc {
        m = m.max(a);
    }
    for &v in chunks.remainder() {
        m = m.max(v);
    }
    m
}

/// Σ exp(x − m) (the vectorisable exp).
#[inline(always)]
pub(crate) fn sum_exp_impl<T: RowFloat>(x: &[T], m: T) -> T {
    lane_map_sum(x, |v| (v - m).vexp())
}

// ------------------------------------------------------------ exp and SIMD dispatch

/// e^x for f32 in plain arithmetic (no libm call, no FMA), so loops over it
/// vectorise and give the same bits on every SIMD width: Cody–Waite reduction
/// `x = n·ln2 + r`, Cephes' degree-7 polynomial for e^r (≈1–2 ulp), then
/// `2^n` applied as two exact power-of-two factors (covers the subnormal range).
/// exp(−∞) = 0, exp(+∞) = +∞, NaN propagates.
#[inline(always)]
pub fn exp_f32(x: f32) -> f32 {
    const MAGIC: f32 = 12_582_912.0; // 1.5·2^23: adding it rounds to an integer
    const C1: f32 = 0.693_359_4; // ln 2 high part (exact, few bits): n·C1 is exact
    const C2: f32 = -2.121_944_4e-4; // ln 2 − C1
    let xc = x.clamp(-104.0, 89.0);
    let t = xc * std::f32::consts::LOG2_E + MAGIC;
    let n = t - MAGIC;
    let r = (xc - n * C1) - n * C2;
    let p = ((((1.987_569_2e-4 * r + 1.398_199_9e-3) * r + 8.333_452e-3) * r + 4.166_579_6e-2) * r
        + 1.666_666_5e-1)
        * r
        + 0.5;
    let e = p * (r * r) + r + 1.0;
    let ni = t.to_bits() as i32 - MAGIC.to_bits() as i32;
    let n1 = ni >> 1;
    let n2 = ni - n1;
    let s1 = f32::from_bits(((n1 + 127) as u32) << 23);
    let s2 = f32::from_bits(((n2 + 127) as u32) << 23);
    let y = e * s1 * s2;
    if x < -104.0 {
        0.0
    } else {
        y
    }
}

/// e^x for f64 in plain arithmetic (see [`exp_f32`]): Cody–Waite reduction and
/// the degree-13 Taylor polynomial of e^r on |r| ≤ ln2/2 (≈1–2 ulp).
#[inline(always)]
pub fn exp_f64(x: f64) -> f64 {
    const MAGIC: f64 = 6_755_399_441_055_744.0; // 1.5·2^52
    const C1: f64 = 6.931_457_519_531_25e-1;
    const C2: f64 = 1.428_606_820_309_417_2e-6;
    let xc = x.clamp(-746.0, 710.0);
    let t = xc * std::f64::consts::LOG2_E + MAGIC;
    let n = t - MAGIC;
    let r = (xc - n * C1) - n * C2;
    // 1/k! for k = 13 down to 2.
    const INV_FACT: [f64; 12] = [
        1.0 / 6_227_020_800.0,
        1.0 / 479_001_600.0,
        1.0 / 39_916_800.0,
        1.0 / 3_628_800.0,
        1.0 / 362_880.0,
        1.0 / 40_320.0,
        1.0 / 5_040.0,
        1.0 / 720.0,
        1.0 / 120.0,
        1.0 / 24.0,
        1.0 / 6.0,
        0.5,
    ];
    let mut p = INV_FACT[0];
    for &c in &INV_FACT[1..] {
        p = p * r + c;
    }
    let e = p * (r * r) + r + 1.0;
    let ni = t.to_bits() as i64 - MAGIC.to_bits() as i64;
    let n1 = ni >> 1;
    let n2 = ni - n1;
    let s1 = f64::from_bits(((n1 + 1023) as u64) << 52);
    let s2 = f64::from_bits(((n2 + 1023) as u64) << 52);
    let y = e * s1 * s2;
    if x < -746.0 {
        0.0
    } else {
        y
    }
}

/// A compute float (f32, f64) with the vectorisable exp the row kernels use.
pub trait RowFloat: Float {
    /// e^x by [`exp_f32`] / [`exp_f64`].
    fn vexp(self) -> Self;
}
impl RowFloat for f32 {
    #[inline(always)]
    fn vexp(self) -> f32 {
        exp_f32(self)
    }
}
impl RowFloat for f64 {
    #[inline(always)]
    fn vexp(self) -> f64 {
        exp_f64(self)
    }
}

/// The widest SIMD level of this CPU that the row kernels are compiled for.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum SimdLevel {
    /// The build's baseline target.
    Base,
    /// AVX2.
    Avx2,
    /// AVX-512 (F, BW, VL, DQ).
    Avx512,
}

/// Detects the SIMD level once per call (std caches the CPUID probe).
#[inline]
pub(crate) fn simd_level() -> SimdLevel {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512bw")
            && std::arch::is_x86_feature_detected!("avx512vl")
            && std::arch::is_x86_feature_detected!("avx512dq")
        {
            return SimdLevel::Avx512;
        }
        if std::arch::is_x86_feature_detected!("avx2") {
            return SimdLevel::Avx2;
        }
    }
    SimdLevel::Base
}

/// Defines `$name<T: RowFloat>(args)` that runs the `#[inline(always)]` generic
/// `$inner` compiled for AVX-512, AVX2 or the baseline, picked at run time.
/// Every variant computes the same bits: the kernels use no FMA and fixed
/// reduction orders, and rustc never contracts or reassociates float math.
macro_rules! simd_dispatch {
    ($(#[$m:meta])* $vis:vis fn $name:ident => $inner:ident ($($arg:ident : $ty:ty),*) $(-> $ret:ty)?) => {
        $(#[$m])*
        #[inline]
        $vis fn $name<T: $crate::kernels::softmax::RowFloat>($($arg: $ty),*) $(-> $ret)? {
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2")]
                unsafe fn wide<T: $crate::kernels::softmax::RowFloat>($($arg: $ty),*) $(-> $ret)? {
                    $inner::<T>($($arg),*)
                }
                #[target_feature(enable = "avx2")]
                unsafe fn mid<T: $crate::kernels::softmax::RowFloat>($($arg: $ty),*) $(-> $ret)? {
                    $inner::<T>($($arg),*)
                }
                match $crate::kernels::softmax::simd_level() {
                    // SAFETY: the CPU supports the features each variant is compiled for.
                    $crate::kernels::softmax::SimdLevel::Avx512 => return unsafe { wide::<T>($($arg),*) },
                    // SAFETY: as above.
                    $crate::kernels::softmax::SimdLevel::Avx2 => return unsafe { mid::<T>($($arg),*) },
                    $crate::kernels::softmax::SimdLevel::Base => {}
                }
            }
            $inner::<T>($($arg),*)
        }
    };
}
pub(crate) use simd_dispatch;

// ------------------------------------------------------------ row kernels

/// y = exp(x − max) / Σ exp(x − max) over one contiguous row.
#[inline(always)]
fn softmax_row_impl<T: RowFloat>(x: &[T], y: &mut [T]) {
    let m = max(x);
    for (o, &v) in y.iter_mut().zip(x) {
        *o = (v - m).vexp();
    }
    let inv = T::ONE / sum(y);
    for o in y.iter_mut() {
        *o *= inv;
    }
}

/// y = x − max − ln Σ exp(x − max) over one contiguous row.
#[inline(always)]
fn log_softmax_row_impl<T: RowFloat>(x: &[T], y: &mut [T]) {
    let m = max(x);
    let shift = m + sum_exp_impl(x, m).ln();
    for (o, &v) in y.iter_mut().zip(x) {
        *o = v - shift;
    }
}

/// ln Σ exp(x): m + ln Σ exp(x − m); −∞ for an empty or all −∞ row, +∞ if any +∞.
#[inline(always)]
fn logsumexp_row_impl<T: RowFloat>(x: &[T]) -> T {
    let m = max(x);
    if m == T::NEG_INFINITY || m == T::INFINITY {
        return m;
    }
    m + sum_exp_impl(x, m).ln()
}

/// Softmax backward: y = softmax(x), so ∂y_j/∂x_i = y_j(δ_ij − y_i) and
/// gx_i = Σ_j gy_j y_j (δ_ij − y_i) = y_i (gy_i − Σ_j gy_j y_j).
#[inline(always)]
fn softmax_backward_row_impl<T: RowFloat>(y: &[T], gy: &[T], gx: &mut [T]) {
    let d = dot(gy, y);
    for ((o, &yv), &g) in gx.iter_mut().zip(y).zip(gy) {
        *o = yv * (g - d);
    }
}

/// Log-softmax backward: y = x − lse(x), ∂y_j/∂x_i = δ_ij − softmax_i = δ_ij − exp(y_i),
/// so gx_i = gy_i − exp(y_i) Σ_j gy_j.
#[inline(always)]
fn log_softmax_backward_row_impl<T: RowFloat>(y: &[T], gy: &[T], gx: &mut [T]) {
    let s = sum(gy);
    for ((o, &yv), &g) in gx.iter_mut().zip(y).zip(gy) {
        *o = g - yv.vexp() * s;
    }
}

simd_dispatch! { fn softmax_row => softmax_row_impl(x: &[T], y: &mut [T]) }
simd_dispatch! { fn log_softmax_row => log_softmax_row_impl(x: &[T], y: &mut [T]) }
simd_dispatch! { fn logsumexp_row => logsumexp_row_impl(x: &[T]) -> T }
simd_dispatch! { fn softmax_backward_row => softmax_backward_row_impl(y: &[T], gy: &[T], gx: &mut [T]) }
simd_dispatch! { fn log_softmax_backward_row => log_softmax_backward_row_impl(y: &[T], gy: &[T], gx: &mut [T]) }

/// Number of unmasked leading columns of row `i` of a causal `[rows, cols]`
/// block: column j is kept when j ≤ i + (cols − rows).
#[inline]
pub fn causal_allowed(i: usize, rows: usize, cols: usize) -> usize {
    let limit = i as i64 + cols as i64 - rows as i64 + 1;
    limit.clamp(0, cols as i64) as usize
}

// ------------------------------------------------------------ drivers

fn check_pair(op: &'static str, a: &RawTensor, b: &RawTensor) -> Result<()> {
    if a.dtype() != b.dtype() {
        return Err(Error::DTypeMismatch {
            op,
            lhs: a.dtype(),
            rhs: b.dtype(),
        });
    }
    if a.shape() != b.shape() {
        return Err(Error::ShapeMismatch {
            op,
            lhs: a.shape().to_vec(),
            rhs: b.shape().to_vec(),
        });
    }
    Ok(())
}

/// The permutation moving `axis` to the last place, the others keeping their order.
fn axis_to_last(rank: usize, axis: usize) -> Vec<usize> {
    (0..rank).filter(|&a| a != axis).chain([axis]).collect()
}

/// The inverse of [`axis_to_last`]: moves the last axis back to `axis`.
fn last_to_axis(rank: usize, axis: usize) -> Vec<usize> {
    (0..rank - 1)
        .take(axis)
        .chain([rank - 1])
        .chain(axis..rank - 1)
        .collect()
}

/// `t` with `axis` moved to the last place (the others in order), made contiguous.
fn axis_last_contiguous(ctx: &ExecContext, t: &RawTensor, axis: usize) -> Result<RawTensor> {
    if axis == t.rank() - 1 {
        ctx.contiguous(t)
    } else {
        ctx.copy(&t.permute(&axis_to_last(t.rank(), axis))?)
    }
}

/// Maps every row along `axis` of `a` (and the matching row of `b`, if any)
/// through `f(row_index, a_row, b_row, out_row)`; the output has `a`'s shape.
fn map_rows<T: RowFloat>(
    ctx: &ExecContext,
    a: &RawTensor,
    b: Option<&RawTensor>,
    axis: usize,
    f: impl Fn(usize, &[T], &[T], &mut [T]) + Send + Sync,
) -> Result<RawTensor> {
    let last = a.rank() - 1;
    let ac = axis_last_contiguous(ctx, a, axis)?;
    let bc = match b {
        Some(b) => Some(axis_last_contiguous(ctx, b, axis)?),
        None => None,
    };
    let mut out = ctx.empty(a.dtype(), ac.shape())?;
    let len = ac.shape()[last];
    let n = ac.numel();
    if n > 0 {
        let n_rows = n / len;
        let xs = ac.as_slice::<T>()?;
        let bs: &[T] = match &bc {
            Some(t) => t.as_slice::<T>()?,
            None => &[],
        };
        let o = out.as_mut_slice::<T>()?;
        let rpc = rows_per_chunk(len, 1);
        par_rows_mut(ctx, (n_rows, len, rpc), [o], [rpc * len], |_, r0, _, [o]| {
            for (k, orow) in o.chunks_exact_mut(len).enumerate() {
                let r = r0 + k;
                let arow = &xs[r * len..(r + 1) * len];
                let brow = if bs.is_empty() {
                    &[][..]
                } else {
                    &bs[r * len..(r + 1) * len]
                };
                f(r, arow, brow, orow);
            }
        });
    }
    drop(ac);
    drop(bc);
    if axis == last {
        Ok(out)
    } else {
        ctx.copy(&out.permute(&last_to_axis(a.rank(), axis))?)
    }
}

fn causal_rows(op: &'static str, x: &RawTensor) -> Result<(usize, usize)> {
    if x.rank() < 2 {
        return Err(Error::InvalidArgument {
            op,
            msg: format!(
                "needs rank >= 2 ([.., rows, cols]), got shape {:?}",
                x.shape()
            ),
        });
    }
    let r = x.rank();
    Ok((x.shape()[r - 2], x.shape()[r - 1]))
}

impl ExecContext {
    /// Softmax along `axis`: `exp(x − max) / Σ exp(x − max)`. A row that is all
    /// −∞ gives NaN (as PyTorch). The output is contiguous, of `x`'s shape.
    ///
    /// ```
    /// use fucina_core::ExecContext;
    /// let ctx = ExecContext::with_threads(1)?;
    /// let x = ctx.from_slice(&[0.0f64, 0.0, 1.0, 1.0], &[2, 2])?;
    /// assert_eq!(ctx.softmax(&x, 1)?.to_vec::<f64>()?, vec![0.5; 4]);
    /// # Ok::<(), fucina_core::Error>(())
    /// ```
    pub fn softmax(&self, x: &RawTensor, axis: usize) -> Result<RawTensor> {
        check_axis("softmax", x, axis)?;
        crate::dispatch_float!(x.dtype(), "softmax", T => {
            map_rows::<T>(self, x, None, axis, |_, x, _, y| softmax_row(x, y))
        })
    }

    /// Log-softmax along `axis`: `x − max − ln Σ exp(x − max)`.
    pub fn log_softmax(&self, x: &RawTensor, axis: usize) -> Result<RawTensor> {
        check_axis("log_softmax", x, axis)?;
        crate::dispatch_float!(x.dtype(), "log_softmax", T => {
            map_rows::<T>(self, x, None, axis, |_, x, _, y| log_softmax_row(x, y))
        })
    }

    /// Softmax backward from the forward output `y`: `gx = y * (gy − Σ_axis gy·y)`.
    pub fn softmax_backward(
        &self,
        y: &RawTensor,
        gy: &RawTensor,
        axis: usize,
    ) -> Result<RawTensor> {
        check_axis("softmax_backward", y, axis)?;
        check_pair("softmax_backward", y, gy)?;
        crate::dispatch_float!(y.dtype(), "softmax_backward", T => {
            map_rows::<T>(self, y, Some(gy), axis, |_, y, gy, gx| softmax_backward_row(y, gy, gx))
        })
    }

    /// Log-softmax backward from the forward output `y`: `gx = gy − exp(y) * Σ_axis gy`.
    pub fn log_softmax_backward(
        &self,
        y: &RawTensor,
        gy: &RawTensor,
        axis: usize,
    ) -> Result<RawTensor> {
        check_axis("log_softmax_backward", y, axis)?;
        check_pair("log_softmax_backward", y, gy)?;
        crate::dispatch_float!(y.dtype(), "log_softmax_backward", T => {
            map_rows::<T>(self, y, Some(gy), axis, |_, y, gy, gx| log_softmax_backward_row(y, gy, gx))
        })
    }

    /// `ln Σ_axis exp(x)`, computed as `max + ln Σ exp(x − max)`; the axis is
    /// removed, or kept with size 1 when `keepdim`. An all −∞ (or empty) row
    /// gives −∞; a row holding +∞ gives +∞.
    pub fn logsumexp(&self, x: &RawTensor, axis: usize, keepdim: bool) -> Result<RawTensor> {
        check_axis("logsumexp", x, axis)?;
        crate::dispatch_float!(x.dtype(), "logsumexp", T => self.logsumexp_t::<T>(x, axis, keepdim))
    }

    fn logsumexp_t<T: RowFloat>(
        &self,
        x: &RawTensor,
        axis: usize,
        keepdim: bool,
    ) -> Result<RawTensor> {
        let xc = axis_last_contiguous(self, x, axis)?;
        let len = x.shape()[axis];
        let mut out_shape = x.shape().to_vec();
        if keepdim {
            out_shape[axis] = 1;
        } else {
            out_shape.remove(axis);
        }
        let mut out = self.empty(x.dtype(), &out_shape)?;
        // Rows of `xc` are in the order of x's shape with `axis` moved last:
        // that is x's remaining axes in order, so the output is written row-major.
        let n_rows = out.numel();
        let o = out.as_mut_slice::<T>()?;
        if len == 0 {
            o.fill(T::NEG_INFINITY);
            return Ok(out);
        }
        let xs = xc.as_slice::<T>()?;
        let rpc = rows_per_chunk(len, 1);
        par_rows_mut(self, (n_rows, len, rpc), [o], [rpc], |_, r0, _, [o]| {
            for (k, v) in o.iter_mut().enumerate() {
                let r = r0 + k;
                *v = logsumexp_row(&xs[r * len..(r + 1) * len]);
            }
        });
        Ok(out)
    }

    /// Causal softmax over the last axis of `x` `[.., rows, cols]`: element
    /// `(.., i, j)` with `j > i + (cols − rows)` is masked (probability 0).
    /// A fully masked row (only when rows > cols) is all zeros, not NaN.
    pub fn softmax_causal(&self, x: &RawTensor) -> Result<RawTensor> {
        let (rows, cols) = causal_rows("softmax_causal", x)?;
        let axis = x.rank() - 1;
        crate::dispatch_float!(x.dtype(), "softmax_causal", T => {
            map_rows::<T>(self, x, None, axis, |r, x, _, y| {
                let a = causal_allowed(r % rows, rows, cols);
                softmax_row(&x[..a], &mut y[..a]);
                y[a..].fill(T::ZERO);
            })
        })
    }

    /// Causal log-softmax over the last axis (mask as [`ExecContext::softmax_causal`]):
    /// masked elements are −∞ (log 0); a fully masked row is all −∞, never NaN.
    /// Use [`ExecContext::log_softmax_causal_backward`] for its gradient, which
    /// sends nothing to masked positions.
    pub fn log_softmax_causal(&self, x: &RawTensor) -> Result<RawTensor> {
        let (rows, cols) = causal_rows("log_softmax_causal", x)?;
        let axis = x.rank() - 1;
        crate::dispatch_float!(x.dtype(), "log_softmax_causal", T => {
            map_rows::<T>(self, x, None, axis, |r, x, _, y| {
                let a = causal_allowed(r % rows, rows, cols);
                log_softmax_row(&x[..a], &mut y[..a]);
                y[a..].fill(T::NEG_INFINITY);
            })
        })
    }

    /// Backward of [`ExecContext::log_softmax_causal`] from its output `y`:
    /// on unmasked columns `gx = gy − exp(y) * Σ_unmasked gy`, and 0 on masked ones
    /// (masked inputs do not reach the output). [`ExecContext::softmax_backward`]
    /// on the output of `softmax_causal` is already exact (y = 0 there).
    pub fn log_softmax_causal_backward(&self, y: &RawTensor, gy: &RawTensor) -> Result<RawTensor> {
        let (rows, cols) = causal_rows("log_softmax_causal_backward", y)?;
        check_pair("log_softmax_causal_backward", y, gy)?;
        let axis = y.rank() - 1;
        crate::dispatch_float!(y.dtype(), "log_softmax_causal_backward", T => {
            map_rows::<T>(self, y, Some(gy), axis, |r, y, gy, gx| {
                let a = causal_allowed(r % rows, rows, cols);
                log_softmax_backward_row(&y[..a], &gy[..a], &mut gx[..a]);
                gx[a..].fill(T::ZERO);
            })
        })
    }
}

/// Plain scalar implementations: the spec of the kernels above. Inputs are
/// contiguous row-major element vectors with their shape.
pub mod reference {
    use crate::dtype::Float;

    /// (outer, len, inner) of `shape` split at `axis`.
    fn split(shape: &[usize], axis: usize) -> (usize, usize, usize) {
        let outer = shape[..axis].iter().product();
        let inner = shape[axis + 1..].iter().product();
        (outer, shape[axis], inner)
    }

    /// Calls `f(indices of one row along axis)` for every row.
    /// An empty shape has no rows (and its other extents may be huge: the
    /// fuzzer found `[0, 1 << 62]` overflowing the row buffer here).
    fn for_each_row(shape: &[usize], axis: usize, mut f: impl FnMut(&[usize])) {
        if shape.contains(&0) {
            return;
        }
        let (outer, len, inner) = split(shape, axis);
        let mut idx = vec![0; len];
        for o in 0..outer {
            for i in 0..inner {
                for (k, v) in idx.iter_mut().enumerate() {
                    *v = (o * len + k) * inner + i;
                }
                f(&idx);
            }
        }
    }

    /// The row max and Σ exp(x − max) over the entries `idx`, serially.
    fn max_sumexp<T: Float>(x: &[T], idx: &[usize]) -> (T, T) {
        let mut m = T::NEG_INFINITY;
        for &i in idx {
            m = m.max(x[i]);
        }
        let mut s = T::ZERO;
        for &i in idx {
            s += (x[i] - m).exp();
        }
        (m, s)
    }

    /// Softmax along `axis`.
    pub fn softmax<T: Float>(x: &[T], shape: &[usize], axis: usize) -> Vec<T> {
        let mut y = vec![T::ZERO; x.len()];
        for_each_row(shape, axis, |idx| {
            let (m, s) = max_sumexp(x, idx);
            for &i in idx {
                y[i] = (x[i] - m).exp() / s;
            }
        });
        y
    }

    /// Log-softmax along `axis`.
    pub fn log_softmax<T: Float>(x: &[T], shape: &[usize], axis: usize) -> Vec<T> {
        let mut y = vec![T::ZERO; x.len()];
        for_each_row(shape, axis, |idx| {
            let (m, s) = max_sumexp(x, idx);
            for &i in idx {
                y[i] = x[i] - m - s.ln();
            }
        });
        y
    }

    /// `y * (gy − Σ gy·y)` along `axis`.
    pub fn softmax_backward<T: Float>(y: &[T], gy: &[T], shape: &[usize], axis: usize) -> Vec<T> {
        let mut gx = vec![T::ZERO; y.len()];
        for_each_row(shape, axis, |idx| {
            let mut d = T::ZERO;
            for &i in idx {
                d += gy[i] * y[i];
            }
            for &i in idx {
                gx[i] = y[i] * (gy[i] - d);
            }
        });
        gx
    }

    /// `gy − exp(y) Σ gy` along `axis`.
    pub fn log_softmax_backward<T: Float>(
        y: &[T],
        gy: &[T],
        shape: &[usize],
        axis: usize,
    ) -> Vec<T> {
        let mut gx = vec![T::ZERO; y.len()];
        for_each_row(shape, axis, |idx| {
            let mut s = T::ZERO;
            for &i in idx {
                s += gy[i];
            }
            for &i in idx {
                gx[i] = gy[i] - y[i].exp() * s;
            }
        });
        gx
    }

    /// `ln Σ exp(x)` along `axis` (the axis removed; row-major over the rest).
    pub fn logsumexp<T: Float>(x: &[T], shape: &[usize], axis: usize) -> Vec<T> {
        let mut out = Vec::new();
        for_each_row(shape, axis, |idx| {
            let mut m = T::NEG_INFINITY;
            for &i in idx {
                m = m.max(x[i]);
            }
            if m == T::NEG_INFINITY || m == T::INFINITY {
                out.push(m);
                return;
            }
            let mut s = T::ZERO;
            for &i in idx {
                s += (x[i] - m).exp();
            }
            out.push(m + s.ln());
        });
        out
    }

    /// One causal row pass over the last axis: entry (i, j) is kept iff
    /// `j ≤ i + cols − rows`; kept entries get `f(x, row max, Σ exp(x − max))`
    /// over the kept entries, masked ones get `masked`.
    fn causal_map<T: Float>(
        x: &[T],
        shape: &[usize],
        masked: T,
        f: impl Fn(T, T, T) -> T,
    ) -> Vec<T> {
        let r = shape.len();
        let (rows, cols) = (shape[r - 2], shape[r - 1]);
        let mut y = vec![T::ZERO; x.len()];
        for (row, (xr, yr)) in x.chunks(cols).zip(y.chunks_mut(cols)).enumerate() {
            let i = (row % rows) as i64;
            let keep = |j: usize| j as i64 <= i + cols as i64 - rows as i64;
            let mut m = T::NEG_INFINITY;
            for j in (0..cols).filter(|&j| keep(j)) {
                m = m.max(xr[j]);
            }
            let mut s = T::ZERO;
            for j in (0..cols).filter(|&j| keep(j)) {
                s += (xr[j] - m).exp();
            }
            for j in 0..cols {
                yr[j] = if keep(j) { f(xr[j], m, s) } else { masked };
            }
        }
        y
    }

    /// Causal softmax over the last axis (`j > i + cols − rows` masked; fully masked rows are 0).
    pub fn softmax_causal<T: Float>(x: &[T], shape: &[usize]) -> Vec<T> {
        causal_map(x, shape, T::ZERO, |v, m, s| (v - m).exp() / s)
    }

    /// Causal log-softmax over the last axis (masked entries −∞).
    pub fn log_softmax_causal<T: Float>(x: &[T], shape: &[usize]) -> Vec<T> {
        causal_map(x, shape, T::NEG_INFINITY, |v, m, s| v - m - s.ln())
    }

    /// Backward of the causal log-softmax (0 on masked entries).
    pub fn log_softmax_causal_backward<T: Float>(y: &[T], gy: &[T], shape: &[usize]) -> Vec<T> {
        let r = shape.len();
        let (rows, cols) = (shape[r - 2], shape[r - 1]);
        let mut gx = vec![T::ZERO; y.len()];
        for (row, ((yr, gr), xr)) in y
            .chunks(cols)
            .zip(gy.chunks(cols))
            .zip(gx.chunks_mut(cols))
            .enumerate()
        {
            let i = (row % rows) as i64;
            let keep = |j: usize| j as i64 <= i + cols as i64 - rows as i64;
            let mut s = T::ZERO;
            for j in (0..cols).filter(|&j| keep(j)) {
                s += gr[j];
            }
            for j in (0..cols).filter(|&j| keep(j)) {
                xr[j] = gr[j] - yr[j].exp() * s;
            }
        }
        gx
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The runtime-dispatched (AVX2/AVX-512) rows give the same bits as the
    /// baseline build of the same kernel.
    #[test]
    fn dispatched_rows_match_baseline_bitwise() {
        let mut g = crate::rng::SplitMix64::new(5);
        for len in [1usize, 7, 16, 33, 257, 1000] {
            let x: Vec<f32> = (0..len).map(|_| 20.0 * g.next_normal() as f32).collect();
            let gy: Vec<f32> = (0..len).map(|_| g.next_normal() as f32).collect();
            let (mut a, mut b) = (vec![0f32; len], vec![0f32; len]);
            softmax_row(&x, &mut a);
            softmax_row_impl(&x, &mut b);
            assert_eq!(a, b);
            log_softmax_row(&x, &mut a);
            log_softmax_row_impl(&x, &mut b);
            assert_eq!(a, b);
            log_softmax_backward_row(&x, &gy, &mut a);
            log_softmax_backward_row_impl(&x, &gy, &mut b);
            assert_eq!(a, b);
            let xd: Vec<f64> = x.iter().map(|&v| v as f64 * 30.0).collect();
            assert_eq!(
                logsumexp_row(&xd).to_bits(),
                logsumexp_row_impl(&xd).to_bits()
            );
            let (mut c, mut d) = (vec![0f64; len], vec![0f64; len]);
            softmax_row(&xd, &mut c);
            softmax_row_impl(&xd, &mut d);
            assert_eq!(c, d);
        }
    }
}
