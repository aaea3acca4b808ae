//! Creating autograd tensors: random fills with an explicit seed, ranges,
//! `*_like`, `from_vec`, and the `requires_grad_` builder.
//!
//! The convention is PyTorch's: every constructor returns a constant (a leaf
//! that needs no gradient); `.requires_grad_(true)` turns a float leaf into a
//! variable, as `torch.randn(3, requires_grad=True)` or `.requires_grad_()`
//! do. [`Tensor::variable`] remains the one-call form for data in a slice.
//!
//! Random fills are counter-based (`fucina_core::rng`): element `i` is a pure
//! function of `(seed, i)`, so the same seed gives bitwise-identical values
//! for any thread count and any shape with the same element count.
//!
//! ```
//! use fucina_autograd::{DType, Tensor};
//! let ctx = fucina_core::ExecContext::with_threads(1)?;
//! let w = Tensor::randn(&ctx, DType::F32, &[3, 2], 42)?.requires_grad_(true)?;
//! assert!(w.requires_grad() && w.is_leaf());
//! assert_eq!(w.to_vec::<f32>()?, Tensor::randn(&ctx, DType::F32, &[6], 42)?.to_vec::<f32>()?);
//! let x = Tensor::linspace(&ctx, DType::F64, 0.0, 1.0, 5)?;
//! assert_eq!(x.to_vec::<f64>()?, vec![0.0, 0.25, 0.5, 0.75, 1.0]);
//! assert_eq!(x.zeros_like()?.to_vec::<f64>()?, vec![0.0; 5]);
//! # Ok::<(), fucina_autograd::Error>(())
//! ```

use fucina_core::{dispatch_any, DType, Element, Error as CoreError, ExecContext};

use crate::error::Result;
use crate::tape::tensor::Tensor;

impl Tensor {
    /// Turns gradient tracking of this leaf on or off and returns it, for
    /// chaining after a constructor: `Tensor::randn(..)?.requires_grad_(true)?`.
    /// Errors for a non-float dtype or a non-leaf (see
    /// [`Tensor::set_requires_grad`]).
    pub fn requires_grad_(self, on: bool) -> Result<Tensor> {
        self.set_requires_grad(on)?;
        Ok(self)
    }

    /// A constant holding `data` (moved in, copied once into a pooled buffer).
    pub fn from_vec<T: Element>(
        ctx: &ExecContext,
        data: Vec<T>,
        shape: &[usize],
    ) -> Result<Tensor> {
        Ok(Tensor::leaf(ctx, ctx.from_vec(data, shape)?))
    }

    /// A constant of standard normal samples (mean 0, std 1) in a float `dtype`
    /// (f32 or f64); element `i` depends only on `(seed, i)`.
    pub fn randn(ctx: &ExecContext, dtype: DType, shape: &[usize], seed: u64) -> Result<Tensor> {
        Self::normal(ctx, dtype, shape, 0.0, 1.0, seed)
    }

    /// A constant of normal samples with `mean` and `std` (finite, std ≥ 0).
    pub fn normal(
        ctx: &ExecContext,
        dtype: DType,
        shape: &[usize],
        mean: f64,
        std: f64,
        seed: u64,
    ) -> Result<Tensor> {
        Ok(Tensor::leaf(ctx, ctx.randn(dtype, shape, mean, std, seed)?))
    }

    /// A constant of uniform samples in [0, 1).
    pub fn rand(ctx: &ExecContext, dtype: DType, shape: &[usize], seed: u64) -> Result<Tensor> {
        Self::uniform(ctx, dtype, shape, 0.0, 1.0, seed)
    }

    /// A constant of uniform samples in [lo, hi) (finite, lo ≤ hi).
    pub fn uniform(
        ctx: &ExecContext,
        dtype: DType,
        shape: &[usize],
        lo: f64,
        hi: f64,
        seed: u64,
    ) -> Result<Tensor> {
        Ok(Tensor::leaf(
            ctx,
            ctx.rand_uniform(dtype, shape, lo, hi, seed)?,
        ))
    }

    /// A 1-D constant `[start, start + step, ...)` stopping before `end`
    /// (PyTorch's `arange`), in any `dtype`.
    pub fn arange(
        ctx: &ExecContext,
        dtype: DType,
        start: f64,
        end: f64,
        step: f64,
    ) -> Result<Tensor> {
        let raw = dispatch_any!(dtype, T => ctx.arange::<T>(start, end, step)?);
        Ok(Tensor::leaf(ctx, raw))
    }

    /// A 1-D constant of `steps` evenly spaced values from `start` to `end`
    /// inclusive (PyTorch's `linspace`; one step gives `[start]`). Element `i`
    /// is `start + i·(end − start)/(steps − 1)`, with the last exactly `end`.
    pub fn linspace(
        ctx: &ExecContext,
        dtype: DType,
        start: f64,
        end: f64,
        steps: usize,
    ) -> Result<Tensor> {
        if !(start.is_finite() && end.is_finite()) {
            return Err(CoreError::InvalidArgument {
                op: "linspace",
                msg: format!("start and end must be finite, got {start} and {end}"),
            }
            .into());
        }
        let step = if steps > 1 {
            (end - start) / (steps - 1) as f64
        } else {
            0.0
        };
        let vals: Vec<f64> = (0..steps)
            .map(|i| {
                if steps > 1 && i == steps - 1 {
                    end
                } else {
                    start + i as f64 * step
                }
            })
            .collect();
        let raw = dispatch_any!(dtype, T => {
            let v: Vec<T> = vals.iter().map(|&x| T::from_f64(x)).collect();
            ctx.from_vec(v, &[steps])?
        });
        Ok(Tensor::leaf(ctx, raw))
    }

    /// A constant of zeros with this tensor's shape and dtype.
    pub fn zeros_like(&self) -> Result<Tensor> {
        Tensor::zeros(self.ctx(), self.dtype(), self.shape())
    }

    /// A constant of ones with this tensor's shape and dtype.
    pub fn ones_like(&self) -> Result<Tensor> {
        Tensor::ones(self.ctx(), self.dtype(), self.shape())
    }

    /// A constant filled with `value`, with this tensor's shape and dtype.
    pub fn full_like(&self, value: f64) -> Result<Tensor> {
        Tensor::full(self.ctx(), self.dtype(), self.shape(), value)
    }

    /// A constant of standard normal samples with this tensor's shape and dtype.
    pub fn randn_like(&self, seed: u64) -> Result<Tensor> {
        Tensor::randn(self.ctx(), self.dtype(), self.shape(), seed)
    }

    /// A constant of uniform [0, 1) samples with this tensor's shape and dtype.
    pub fn rand_like(&self, seed: u64) -> Result<Tensor> {
        Tensor::rand(self.ctx(), self.dtype(), self.shape(), seed)
    }
}
