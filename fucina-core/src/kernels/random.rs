//! Dropout and random fills from the counter-based RNG.
//!
//! Element `i` (the row-major logical index) depends only on `(seed, i)`
//! through [`crate::rng::at`], so a mask or a fill is the same for any thread
//! count and is regenerated (never stored) by the dropout backward.

use crate::dtype::{DType, Float};
use crate::error::{Error, Result};
use crate::exec::ExecContext;
use crate::kernels::map::run_chunks;
use crate::rng;
use crate::tensor::RawTensor;

/// The keep threshold of dropout: element `i` is kept iff
/// `(rng::at(seed, i) >> 11) < keep_threshold(p)`, i.e. with probability 1 − p.
pub fn keep_threshold(p: f64) -> u64 {
    ((1.0 - p) * (1u64 << 53) as f64).ceil() as u64
}

fn check_p(op: &'static str, p: f64) -> Result<()> {
    if !(0.0..1.0).contains(&p) {
        return Err(Error::InvalidArgument {
            op,
            msg: format!("dropout probability must be in [0, 1), got {p}"),
        });
    }
    Ok(())
}

/// `out[i] = keep(i) ? x[i] · scale : 0` over the row-major elements of `x`.
fn masked_scale<T: Float>(
    ctx: &ExecContext,
    x: &RawTensor,
    p: f64,
    seed: u64,
) -> Result<RawTensor> {
    let thr = keep_threshold(p);
    let scale = T::from_f64(1.0 / (1.0 - p));
    let xc = ctx.contiguous(x)?;
    let xs = xc.as_slice::<T>()?;
    let mut out = ctx.empty(T::DTYPE, x.shape())?;
    run_chunks::<T>(ctx, &mut out, |start, dst| {
        for (j, (o, &v)) in dst.iter_mut().zip(&xs[start..]).enumerate() {
            let keep = (rng::at(seed, (start + j) as u64) >> 11) < thr;
            *o = if keep { v * scale } else { T::ZERO };
        }
    })?;
    Ok(out)
}

fn fill<T: Float>(
    ctx: &ExecContext,
    shape: &[usize],
    f: impl Fn(u64) -> f64 + Send + Sync,
) -> Result<RawTensor> {
    let mut out = ctx.empty(T::DTYPE, shape)?;
    run_chunks::<T>(ctx, &mut out, |start, dst| {
        for (j, o) in dst.iter_mut().enumerate() {
            *o = T::from_f64(f((start + j) as u64));
        }
    })?;
    Ok(out)
}

impl ExecContext {
    /// `y = x · mask / (1 − p)`: element `i` (row-major logical index) is kept iff
    /// `(rng::at(seed, i) >> 11) < ceil((1 − p)·2⁵³)`; the scale `1/(1 − p)` is
    /// rounded to the element type once. `p` must be in `[0, 1)`; `p == 0`
    /// returns a `clone_view` of `x`.
    ///
    /// ```
    /// use fucina_core::ExecContext;
    /// let ctx = ExecContext::with_threads(1)?;
    /// let x = ctx.ones(fucina_core::DType::F32, &[1000])?;
    /// let y = ctx.dropout(&x, 0.5, 7)?.to_vec::<f32>()?;
    /// assert!(y.iter().all(|&v| v == 0.0 || v == 2.0));
    /// # Ok::<(), fucina_core::Error>(())
    /// ```
    pub fn dropout(&self, x: &RawTensor, p: f64, seed: u64) -> Result<RawTensor> {
        self.dropout_mask("dropout", x, p, seed)
    }

    /// `gx = gy · mask / (1 − p)` with the mask regenerated from `(seed, i)`
    /// (d/dx of x·m/(1−p) is m/(1−p)); `p == 0` returns a `clone_view` of `gy`.
    pub fn dropout_backward(&self, gy: &RawTensor, p: f64, seed: u64) -> Result<RawTensor> {
        self.dropout_mask("dropout_backward", gy, p, seed)
    }

    /// Both directions of dropout (the same mask and scale), as `op`: `x · mask / (1 − p)`,
    /// or a `clone_view` of `x` for `p == 0`.
    fn dropout_mask(
        &self,
        op: &'static str,
        x: &RawTensor,
        p: f64,
        seed: u64,
    ) -> Result<RawTensor> {
        check_p(op, p)?;
        crate::dispatch_float!(x.dtype(), op, T => {
            if p == 0.0 {
                return Ok(x.clone_view());
            }
            masked_scale::<T>(self, x, p, seed)
        })
    }

    /// Element `i` = `lo + (hi − lo)·rng::uniform(seed, i)`, computed in f64 and
    /// rounded to `dtype` (f32/f64). Needs finite `lo <= hi`.
    pub fn rand_uniform(
        &self,
        dtype: DType,
        shape: &[usize],
        lo: f64,
        hi: f64,
        seed: u64,
    ) -> Result<RawTensor> {
        if !(lo.is_finite() && hi.is_finite() && lo <= hi) {
            return Err(Error::InvalidArgument {
                op: "rand_uniform",
                msg: format!("bounds must be finite with lo <= hi, got [{lo}, {hi})"),
            });
        }
        crate::dispatch_float!(dtype, "rand_uniform", T => {
            fill::<T>(self, shape, move |i| lo + (hi - lo) * rng::uniform(seed, i))
        })
    }

    /// Element `i` = `mean + std·rng::normal(seed, i)`, computed in f64 and
    /// rounded to `dtype` (f32/f64). Needs finite `mean` and finite `std >= 0`.
    pub fn randn(
        &self,
        dtype: DType,
        shape: &[usize],
        mean: f64,
        std: f64,
        seed: u64,
    ) -> Result<RawTensor> {
        if !(mean.is_finite() && std.is_finite() && std >= 0.0) {
            return Err(Error::InvalidArgument {
                op: "randn",
                msg: format!("need finite mean and std >= 0, got mean {mean}, std {std}"),
            });
        }
        crate::dispatch_float!(dtype, "randn", T => {
            fill::<T>(self, shape, move |i| mean + std * rng::normal(seed, i))
        })
    }
}

/// The plain scalar spec of dropout and the fills.
pub mod reference {
    use super::keep_threshold;
    use crate::dtype::Float;
    use crate::error::Result;
    use crate::rng;
    use crate::tensor::RawTensor;

    /// Whether element `i` survives dropout with probability `p` under `seed`.
    pub fn keep(p: f64, seed: u64, i: usize) -> bool {
        (rng::at(seed, i as u64) >> 11) < keep_threshold(p)
    }

    /// The reference of `ctx.dropout` (row-major logical order).
    pub fn dropout<T: Float>(x: &RawTensor, p: f64, seed: u64) -> Result<Vec<T>> {
        let scale = T::from_f64(1.0 / (1.0 - p));
        Ok(x.to_vec::<T>()?
            .into_iter()
            .enumerate()
            .map(|(i, v)| if keep(p, seed, i) { v * scale } else { T::ZERO })
            .collect())
    }

    /// The reference of `ctx.rand_uniform`.
    pub fn rand_uniform<T: Float>(n: usize, lo: f64, hi: f64, seed: u64) -> Vec<T> {
        (0..n)
            .map(|i| T::from_f64(lo + (hi - lo) * rng::uniform(seed, i as u64)))
            .collect()
    }

    /// The reference of `ctx.randn`.
    pub fn randn<T: Float>(n: usize, mean: f64, std: f64, seed: u64) -> Vec<T> {
        (0..n)
            .map(|i| T::from_f64(mean + std * rng::normal(seed, i as u64)))
            .collect()
    }
}
