//! Layer norm and RMS norm over the last axis, with their backward kernels.
//!
//! Invariants: `x` may have any leading shape and any strides (it is made
//! contiguous first); per-row statistics (mean, rstd) have shape
//! `x.shape()[..rank-1]` and x's dtype. Rows run in fixed chunks; the weight and
//! bias gradients are summed per chunk into partial rows, then the partials are
//! added in chunk order, so every result is bitwise identical for any thread count.

use crate::dtype::Float;
use crate::error::{Error, Result};
use crate::exec::ExecContext;
use crate::kernels::rows::{par_rows_mut, rows_per_chunk};
use crate::kernels::simd::{dot, lane_map_sum, lane_map_sum2, lane_sum, sum};
use crate::tensor::RawTensor;

/// Minimum rows per chunk of a backward pass (bounds the gw/gb partials to numel/8).
const BWD_MIN_ROWS: usize = 8;

/// Checks `x` (rank ≥ 1, f32/f64, last dim > 0) and returns (rows, d).
fn check_x(op: &'static str, x: &RawTensor) -> Result<(usize, usize)> {
    if !x.dtype().is_compute_float() {
        return Err(Error::UnsupportedDType {
            op,
            dtype: x.dtype(),
        });
    }
    if x.rank() == 0 || x.shape()[x.rank() - 1] == 0 {
        return Err(Error::InvalidArgument {
            op,
            msg: format!(
                "needs rank >= 1 and a non-empty last axis, got shape {:?}",
                x.shape()
            ),
        });
    }
    let d = x.shape()[x.rank() - 1];
    Ok((x.numel() / d, d))
}

/// Checks that `t` has `shape` and `x`'s dtype.
fn check_like(op: &'static str, x: &RawTensor, t: &RawTensor, shape: &[usize]) -> Result<()> {
    if t.dtype() != x.dtype() {
        return Err(Error::DTypeMismatch {
            op,
            lhs: x.dtype(),
            rhs: t.dtype(),
        });
    }
    if t.shape() != shape {
        return Err(Error::ShapeMismatch {
            op,
            lhs: shape.to_vec(),
            rhs: t.shape().to_vec(),
        });
    }
    Ok(())
}

fn check_eps(op: &'static str, eps: f64) -> Result<()> {
    if !(eps >= 0.0 && eps.is_finite()) {
        return Err(Error::InvalidArgument {
            op,
            msg: format!("eps must be finite and >= 0, got {eps}"),
        });
    }
    Ok(())
}

/// A forward's checks: `x` as [`check_x`], `eps` finite and ≥ 0, and each
/// affine parameter present (weight, bias) of shape `[d]` in `x`'s dtype.
fn check_forward(
    op: &'static str,
    x: &RawTensor,
    affine: [Option<&RawTensor>; 2],
    eps: f64,
) -> Result<()> {
    let (_, d) = check_x(op, x)?;
    check_eps(op, eps)?;
    for t in affine.into_iter().flatten() {
        check_like(op, x, t, &[d])?;
    }
    Ok(())
}

/// A backward's checks: `x` as [`check_x`], the weight (if any) `[d]`, each
/// saved row statistic (mean, rstd) of `x`'s leading shape and `gy` of
/// `x`'s shape, all in `x`'s dtype.
fn check_backward(
    op: &'static str,
    x: &RawTensor,
    weight: Option<&RawTensor>,
    stats: &[&RawTensor],
    gy: &RawTensor,
) -> Result<()> {
    let (_, d) = check_x(op, x)?;
    let lead = &x.shape()[..x.rank() - 1];
    if let Some(w) = weight {
        check_like(op, x, w, &[d])?;
    }
    for s in stats {
        check_like(op, x, s, lead)?;
    }
    check_like(op, x, gy, x.shape())
}

/// A forward's input as rows: `x` (contiguous) as `n_rows` rows of its last axis `d`, and
/// `lead`, the shape of the row statistics.
struct Rows<'x> {
    x: RawTensor,
    d: usize,
    n_rows: usize,
    lead: &'x [usize],
}

impl<'x> Rows<'x> {
    fn new(ctx: &ExecContext, x: &'x RawTensor) -> Result<Self> {
        let d = x.shape()[x.rank() - 1];
        Ok(Rows {
            x: ctx.contiguous(x)?,
            d,
            n_rows: x.numel() / d,
            lead: &x.shape()[..x.rank() - 1],
        })
    }
}

fn opt_contig(ctx: &ExecContext, t: Option<&RawTensor>) -> Result<Option<RawTensor>> {
    t.map(|t| ctx.contiguous(t)).transpose()
}

fn opt_slice<T: Float>(t: &Option<RawTensor>) -> Result<Option<&[T]>> {
    t.as_ref().map(|t| t.as_slice::<T>()).transpose()
}

/// Adds the per-chunk partial rows `[n_chunks, d]` in chunk order into a fresh `[d]` tensor.
fn sum_partials<T: Float>(
    ctx: &ExecContext,
    partials: &RawTensor,
    n_chunks: usize,
    d: usize,
) -> Result<RawTensor> {
    let mut out = ctx.zeros(partials.dtype(), &[d])?;
    let o = out.as_mut_slice::<T>()?;
    let p = partials.as_slice::<T>()?;
    for c in 0..n_chunks {
        for (acc, &v) in o.iter_mut().zip(&p[c * d..(c + 1) * d]) {
            *acc += v;
        }
    }
    Ok(out)
}

impl ExecContext {
    /// Layer norm over the last axis: `y = (x − mean) * rstd * w + b` with the
    /// biased variance and `rstd = 1/sqrt(var + eps)`. Returns `(y, mean, rstd)`,
    /// mean and rstd of shape `x.shape()[..rank-1]`. `weight` and `bias` are
    /// optional, independent, of shape `[D]`.
    ///
    /// ```
    /// use fucina_core::ExecContext;
    /// let ctx = ExecContext::with_threads(1)?;
    /// let x = ctx.from_slice(&[1.0f64, 3.0], &[1, 2])?;
    /// let (y, mean, rstd) = ctx.layer_norm(&x, None, None, 0.0)?;
    /// assert_eq!(y.to_vec::<f64>()?, vec![-1.0, 1.0]);
    /// assert_eq!((mean.item::<f64>()?, rstd.item::<f64>()?), (2.0, 1.0));
    /// # Ok::<(), fucina_core::Error>(())
    /// ```
    pub fn layer_norm(
        &self,
        x: &RawTensor,
        weight: Option<&RawTensor>,
        bias: Option<&RawTensor>,
        eps: f64,
    ) -> Result<(RawTensor, RawTensor, RawTensor)> {
        const OP: &str = "layer_norm";
        check_forward(OP, x, [weight, bias], eps)?;
        let rows = Rows::new(self, x)?;
        crate::dispatch_float!(x.dtype(), OP, T => self.layer_norm_t::<T>(rows, [weight, bias], eps))
    }

    /// [`ExecContext::layer_norm`] in `T`, with the affine `[weight, bias]` (checked).
    fn layer_norm_t<T: Float>(
        &self,
        rows: Rows<'_>,
        [weight, bias]: [Option<&RawTensor>; 2],
        eps: f64,
    ) -> Result<(RawTensor, RawTensor, RawTensor)> {
        let Rows {
            x: xc,
            d,
            n_rows,
            lead,
        } = rows;
        let (wc, bc) = (opt_contig(self, weight)?, opt_contig(self, bias)?);
        let mut y = self.empty(xc.dtype(), xc.shape())?;
        let mut mean = self.empty(xc.dtype(), lead)?;
        let mut rstd = self.empty(xc.dtype(), lead)?;
        {
            let xs = xc.as_slice::<T>()?;
            let (ws, bs) = (opt_slice::<T>(&wc)?, opt_slice::<T>(&bc)?);
            let yp = y.as_mut_slice::<T>()?;
            let mp = mean.as_mut_slice::<T>()?;
            let rp = rstd.as_mut_slice::<T>()?;
            let inv_d = T::ONE / T::from_usize(d);
            let eps = T::from_f64(eps);
            let rpc = rows_per_chunk(d, 1);
            let outs = [yp, mp, rp];
            par_rows_mut(
                self,
                (n_rows, d, rpc),
                outs,
                [rpc * d, rpc, rpc],
                |_, r0, _, o| {
                    let [yc, mc, rc] = o;
                    for (k, yr) in yc.chunks_exact_mut(d).enumerate() {
                        let xr = &xs[(r0 + k) * d..(r0 + k + 1) * d];
                        let m = sum(xr) * inv_d;
                        let var = lane_map_sum(xr, |v| (v - m) * (v - m)) * inv_d;
                        let r = T::ONE / (var + eps).sqrt();
                        mc[k] = m;
                        rc[k] = r;
                        match (ws, bs) {
                            (Some(w), Some(b)) => {
                                for j in 0..d {
                                    yr[j] = (xr[j] - m) * r * w[j] + b[j];
                                }
                            }
                            (Some(w), None) => {
                                for j in 0..d {
                                    yr[j] = (xr[j] - m) * r * w[j];
                                }
                            }
                            (None, Some(b)) => {
                                for j in 0..d {
                                    yr[j] = (xr[j] - m) * r + b[j];
                                }
                            }
                            (None, None) => {
                                for j in 0..d {
                                    yr[j] = (xr[j] - m) * r;
                                }
                            }
                        }
                    }
                },
            );
        }
        Ok((y, mean, rstd))
    }

    /// Layer norm backward. Returns `(gx, gw, gb)`: `gx` when `needs_x`, `gw`
    /// when `needs_w` and a weight exists, `gb` whenever `needs_b` (the bias is
    /// not an input: the caller asks for `gb` only when it has one).
    /// `mean` and `rstd` are the forward's statistics.
    ///
    /// Math, per row with `x̂ = (x − mean) * rstd` and `g = gy * w` (`g = gy` without weight):
    /// `gx = rstd * (g − mean(g) − x̂ * mean(g * x̂))`,
    /// `gw = Σ_rows gy * x̂`, `gb = Σ_rows gy` (fixed row-chunk partials, summed in chunk order).
    pub fn layer_norm_backward(
        &self,
        x: &RawTensor,
        weight: Option<&RawTensor>,
        mean: &RawTensor,
        rstd: &RawTensor,
        gy: &RawTensor,
        needs_x: bool,
        needs_w: bool,
        needs_b: bool,
    ) -> Result<(Option<RawTensor>, Option<RawTensor>, Option<RawTensor>)> {
        const OP: &str = "layer_norm_backward";
        check_backward(OP, x, weight, &[mean, rstd], gy)?;
        let needs_w = needs_w && weight.is_some();
        crate::dispatch_float!(x.dtype(), OP, T => {
            self.norm_backward_t::<T>(x, weight, Some(mean), rstd, gy, [needs_x, needs_w, needs_b])
        })
    }

    /// RMS norm over the last axis: `y = x * rstd * w`, `rstd = 1/sqrt(mean(x²) + eps)`.
    /// Returns `(y, rstd)`, rstd of shape `x.shape()[..rank-1]`.
    pub fn rms_norm(
        &self,
        x: &RawTensor,
        weight: Option<&RawTensor>,
        eps: f64,
    ) -> Result<(RawTensor, RawTensor)> {
        const OP: &str = "rms_norm";
        check_forward(OP, x, [weight, None], eps)?;
        let rows = Rows::new(self, x)?;
        crate::dispatch_float!(x.dtype(), OP, T => self.rms_norm_t::<T>(rows, weight, eps))
    }

    /// [`ExecContext::rms_norm`] in `T` (`weight` checked).
    fn rms_norm_t<T: Float>(
        &self,
        rows: Rows<'_>,
        weight: Option<&RawTensor>,
        eps: f64,
    ) -> Result<(RawTensor, RawTensor)> {
        let Rows {
            x: xc,
            d,
            n_rows,
            lead,
        } = rows;
        let wc = opt_contig(self, weight)?;
        let mut y = self.empty(xc.dtype(), xc.shape())?;
        let mut rstd = self.empty(xc.dtype(), lead)?;
        {
            let xs = xc.as_slice::<T>()?;
            let ws = opt_slice::<T>(&wc)?;
            let yp = y.as_mut_slice::<T>()?;
            let rp = rstd.as_mut_slice::<T>()?;
            let inv_d = T::ONE / T::from_usize(d);
            let eps = T::from_f64(eps);
            let rpc = rows_per_chunk(d, 1);
            par_rows_mut(
                self,
                (n_rows, d, rpc),
                [yp, rp],
                [rpc * d, rpc],
                |_, r0, _, o| {
                    let [yc, rc] = o;
                    for (k, yr) in yc.chunks_exact_mut(d).enumerate() {
                        let xr = &xs[(r0 + k) * d..(r0 + k + 1) * d];
                        let r = T::ONE / (dot(xr, xr) * inv_d + eps).sqrt();
                        rc[k] = r;
                        match ws {
                            Some(w) => {
                                for j in 0..d {
                                    yr[j] = xr[j] * r * w[j];
                                }
                            }
                            None => {
                                for j in 0..d {
                                    yr[j] = xr[j] * r;
                                }
                            }
                        }
                    }
                },
            );
        }
        Ok((y, rstd))
    }

    /// RMS norm backward. Returns `(gx, gw)`: `gx` when `needs_x`, `gw` when
    /// `needs_w` and a weight exists.
    ///
    /// Math, per row with `x̂ = x * rstd` and `g = gy * w` (`g = gy` without weight):
    /// `∂rstd/∂x_i = −rstd³ x_i / D`, so `gx = rstd * (g − x̂ * mean(g * x̂))`;
    /// `gw = Σ_rows gy * x̂` (fixed row-chunk partials, summed in chunk order).
    pub fn rms_norm_backward(
        &self,
        x: &RawTensor,
        weight: Option<&RawTensor>,
        rstd: &RawTensor,
        gy: &RawTensor,
        needs_x: bool,
        needs_w: bool,
    ) -> Result<(Option<RawTensor>, Option<RawTensor>)> {
        const OP: &str = "rms_norm_backward";
        check_backward(OP, x, weight, &[rstd], gy)?;
        let needs_w = needs_w && weight.is_some();
        let (gx, gw, _) = crate::dispatch_float!(x.dtype(), OP, T => {
            self.norm_backward_t::<T>(x, weight, None, rstd, gy, [needs_x, needs_w, false])
        })?;
        Ok((gx, gw))
    }

    /// Shared backward of layer norm (`mean` is Some) and RMS norm (`mean` is None:
    /// x̂ = x * rstd and no mean(g) term). Inputs are validated by the callers.
    fn norm_backward_t<T: Float>(
        &self,
        x: &RawTensor,
        weight: Option<&RawTensor>,
        mean: Option<&RawTensor>,
        rstd: &RawTensor,
        gy: &RawTensor,
        [needs_x, needs_w, needs_b]: [bool; 3],
    ) -> Result<(Option<RawTensor>, Option<RawTensor>, Option<RawTensor>)> {
        let d = x.shape()[x.rank() - 1];
        let n_rows = x.numel() / d;
        let dtype = x.dtype();
        if !(needs_x || needs_w || needs_b) {
            return Ok((None, None, None));
        }
        let xc = self.contiguous(x)?;
        let gyc = self.contiguous(gy)?;
        let rc = self.contiguous(rstd)?;
        let mc = opt_contig(self, mean)?;
        let wc = opt_contig(self, weight)?;
        let rpc = rows_per_chunk(d, BWD_MIN_ROWS);
        let n_chunks = n_rows.div_ceil(rpc);
        let mut gx = if needs_x {
            Some(self.empty(dtype, x.shape())?)
        } else {
            None
        };
        let mut pw = if needs_w {
            Some(self.empty(dtype, &[n_chunks, d])?)
        } else {
            None
        };
        let mut pb = if needs_b {
            Some(self.empty(dtype, &[n_chunks, d])?)
        } else {
            None
        };
        {
            let xs = xc.as_slice::<T>()?;
            let gys = gyc.as_slice::<T>()?;
            let rs = rc.as_slice::<T>()?;
            let ms = opt_slice::<T>(&mc)?;
            let ws = opt_slice::<T>(&wc)?;
            // An absent output is an empty slice with chunk length 0 (every chunk gets `[]`).
            fn out<T: Float>(t: &mut Option<RawTensor>, per: usize) -> Result<(&mut [T], usize)> {
                Ok(match t {
                    Some(t) => (t.as_mut_slice::<T>()?, per),
                    None => (&mut [][..], 0),
                })
            }
            let (gxs, gx_len) = out(&mut gx, rpc * d)?;
            let (pws, pw_len) = out(&mut pw, d)?;
            let (pbs, pb_len) = out(&mut pb, d)?;
            let present = (gx_len > 0, pw_len > 0, pb_len > 0);
            let inv_d = T::ONE / T::from_usize(d);
            let outs = [gxs, pws, pbs];
            let lens = [gx_len, pw_len, pb_len];
            par_rows_mut(
                self,
                (n_rows, d, rpc),
                outs,
                lens,
                |_, r0, r1, [gxc, pwc, pbc]| {
                    // Chunk c owns rows r0..r1 of gx and partial row c of pw/pb.
                    let mut gxc = present.0.then_some(gxc);
                    let mut pwc = present.1.then_some(pwc);
                    let mut pbc = present.2.then_some(pbc);
                    if let Some(p) = pwc.as_deref_mut() {
                        p.fill(T::ZERO);
                    }
                    if let Some(p) = pbc.as_deref_mut() {
                        p.fill(T::ZERO);
                    }
                    for r in r0..r1 {
                        let xr = &xs[r * d..(r + 1) * d];
                        let gr = &gys[r * d..(r + 1) * d];
                        let rs_r = rs[r];
                        let m = ms.map_or(T::ZERO, |m| m[r]);
                        // x̂_j = (x_j − m) * rstd (m = 0 for RMS norm).
                        let xhat = |j: usize| (xr[j] - m) * rs_r;
                        if let Some(gxc) = gxc.as_deref_mut() {
                            let gxr = &mut gxc[(r - r0) * d..(r - r0 + 1) * d];
                            match ws {
                                Some(w) => {
                                    let g = |j: usize| gr[j] * w[j];
                                    let a = if ms.is_some() {
                                        dot(gr, w) * inv_d
                                    } else {
                                        T::ZERO
                                    };
                                    let b = lane_sum(d, |j| g(j) * xhat(j)) * inv_d;
                                    for j in 0..d {
                                        gxr[j] = rs_r * (g(j) - a - xhat(j) * b);
                                    }
                                }
                                None => {
                                    let a = if ms.is_some() {
                                        sum(gr) * inv_d
                                    } else {
                                        T::ZERO
                                    };
                                    let b =
                                        lane_map_sum2(gr, xr, |g, x| g * ((x - m) * rs_r)) * inv_d;
                                    for j in 0..d {
                                        gxr[j] = rs_r * (gr[j] - a - xhat(j) * b);
                                    }
                                }
                            }
                        }
                        if let Some(p) = pwc.as_deref_mut() {
                            for j in 0..d {
                                p[j] += gr[j] * xhat(j);
                            }
                        }
                        if let Some(p) = pbc.as_deref_mut() {
                            for j in 0..d {
                                p[j] += gr[j];
                            }
                        }
                    }
                },
            );
        }
        drop((xc, gyc, rc, mc, wc));
        let gw = match pw {
            Some(p) => Some(sum_partials::<T>(self, &p, n_chunks, d)?),
            None => None,
        };
        let gb = match pb {
            Some(p) => Some(sum_partials::<T>(self, &p, n_chunks, d)?),
            None => None,
        };
        Ok((gx, gw, gb))
    }
}

/// Plain scalar implementations: the spec of the kernels above. `x` is a
/// contiguous row-major `[rows, d]` element vector.
pub mod reference {
    use crate::dtype::Float;

    /// Layer norm: returns (y, mean, rstd).
    pub fn layer_norm<T: Float>(
        x: &[T],
        d: usize,
        w: Option<&[T]>,
        b: Option<&[T]>,
        eps: f64,
    ) -> (Vec<T>, Vec<T>, Vec<T>) {
        let (mut y, mut mean, mut rstd) = (vec![T::ZERO; x.len()], vec![], vec![]);
        for (xr, yr) in x.chunks(d).zip(y.chunks_mut(d)) {
            let mut s = T::ZERO;
            for &v in xr {
                s += v;
            }
            let m = s / T::from_usize(d);
            let mut v2 = T::ZERO;
            for &v in xr {
                v2 += (v - m) * (v - m);
            }
            let r = T::ONE / (v2 / T::from_usize(d) + T::from_f64(eps)).sqrt();
            for j in 0..d {
                let mut o = (xr[j] - m) * r;
                if let Some(w) = w {
                    o *= w[j];
                }
                if let Some(b) = b {
                    o += b[j];
                }
                yr[j] = o;
            }
            mean.push(m);
            rstd.push(r);
        }
        (y, mean, rstd)
    }

    /// Layer norm backward: returns (gx, gw, gb) (gw is all zeros without a weight).
    pub fn layer_norm_backward<T: Float>(
        x: &[T],
        d: usize,
        w: Option<&[T]>,
        mean: &[T],
        rstd: &[T],
        gy: &[T],
    ) -> (Vec<T>, Vec<T>, Vec<T>) {
        let mut gx = vec![T::ZERO; x.len()];
        let (mut gw, mut gb) = (vec![T::ZERO; d], vec![T::ZERO; d]);
        let dd = T::from_usize(d);
        backward_rows(x, d, w, gy, &mut gx, |i, xr, gr, g, gxr| {
            let xhat: Vec<T> = xr.iter().map(|&v| (v - mean[i]) * rstd[i]).collect();
            let mut a = T::ZERO;
            let mut b = T::ZERO;
            for j in 0..d {
                a += g[j];
                b += g[j] * xhat[j];
            }
            for j in 0..d {
                gxr[j] = rstd[i] * (g[j] - a / dd - xhat[j] * (b / dd));
                gw[j] += gr[j] * xhat[j];
                gb[j] += gr[j];
            }
        });
        (gx, gw, gb)
    }

    /// The row loop of both norm backwards: `row(i, x_i, gy_i, g_i, gx_i)` for each row `i`
    /// in order, with `g_i = gy_i * w` (`gy_i` without weight), writing row `i` of `gx`.
    fn backward_rows<T: Float>(
        x: &[T],
        d: usize,
        w: Option<&[T]>,
        gy: &[T],
        gx: &mut [T],
        mut row: impl FnMut(usize, &[T], &[T], &[T], &mut [T]),
    ) {
        for (i, ((xr, gr), gxr)) in x
            .chunks(d)
            .zip(gy.chunks(d))
            .zip(gx.chunks_mut(d))
            .enumerate()
        {
            let g: Vec<T> = (0..d).map(|j| gr[j] * w.map_or(T::ONE, |w| w[j])).collect();
            row(i, xr, gr, &g, gxr);
        }
    }

    /// RMS norm: returns (y, rstd).
    pub fn rms_norm<T: Float>(x: &[T], d: usize, w: Option<&[T]>, eps: f64) -> (Vec<T>, Vec<T>) {
        let (mut y, mut rstd) = (vec![T::ZERO; x.len()], vec![]);
        for (xr, yr) in x.chunks(d).zip(y.chunks_mut(d)) {
            let mut s = T::ZERO;
            for &v in xr {
                s += v * v;
            }
            let r = T::ONE / (s / T::from_usize(d) + T::from_f64(eps)).sqrt();
            for j in 0..d {
                yr[j] = xr[j] * r * w.map_or(T::ONE, |w| w[j]);
            }
            rstd.push(r);
        }
        (y, rstd)
    }

    /// RMS norm backward: returns (gx, gw) (gw is all zeros without a weight).
    pub fn rms_norm_backward<T: Float>(
        x: &[T],
        d: usize,
        w: Option<&[T]>,
        rstd: &[T],
        gy: &[T],
    ) -> (Vec<T>, Vec<T>) {
        let mut gx = vec![T::ZERO; x.len()];
        let mut gw = vec![T::ZERO; d];
        let dd = T::from_usize(d);
        backward_rows(x, d, w, gy, &mut gx, |i, xr, gr, g, gxr| {
            let xhat: Vec<T> = xr.iter().map(|&v| v * rstd[i]).collect();
            let mut b = T::ZERO;
            for j in 0..d {
                b += g[j] * xhat[j];
            }
            for j in 0..d {
                gxr[j] = rstd[i] * (g[j] - xhat[j] * (b / dd));
                gw[j] += gr[j] * xhat[j];
            }
        });
        (gx, gw)
    }
}
