//! SGD with momentum, dampening, Nesterov and coupled weight decay
//! (PyTorch's single-tensor order).
//!
//! Per element: `g ← g + wd·p`; with momentum, the buffer starts as the first
//! (decayed) gradient, then `b ← μ·b + (1 − τ)·g`; `g ← g + μ·b` (Nesterov) or
//! `g ← b`; finally `p ← p − lr·g`.

use fucina_core::{DType, Float};

use crate::algo::config::{hyperparam_glue, hyperparams};
use crate::algo::{dispatch_step, Algorithm, Step, Update};
use crate::error::{Error, Result};
use crate::kernel::{moment_dtype, run_chunks, BufElem, ChunkKernel, Moment};
use crate::optimizer::Optim;

hyperparams! {
    /// Hyperparameters of SGD (one parameter group); defaults are PyTorch's.
    ///
    /// ```
    /// use fucina_autograd::Tensor;
    /// use fucina_optim::{Optimizer, Sgd, SgdConfig};
    /// let ctx = fucina_core::ExecContext::with_threads(1)?;
    /// let w = Tensor::variable(&ctx, &[1.0f64], &[1])?;
    /// let mut opt = Sgd::single(vec![w.clone()], SgdConfig { momentum: 0.9, ..SgdConfig::new(0.1) })?;
    /// for _ in 0..2 {
    ///     w.set_grad(Some(ctx.from_slice(&[1.0f64], &[1])?))?;
    ///     opt.step()?;
    /// }
    /// // buffer 1, then 0.9·1 + 1 = 1.9: w = 1 − 0.1 − 0.19
    /// assert!((w.to_vec::<f64>()?[0] - 0.71).abs() < 1e-12);
    /// # Ok::<(), fucina_optim::Error>(())
    /// ```
    pub struct SgdConfig {
        /// Learning rate.
        lr: f64 = lr, in NonNegative;
        /// Momentum factor μ (0 = plain SGD).
        momentum: f64 = 0.0, in NonNegative;
        /// Dampening τ of the momentum.
        dampening: f64 = 0.0, in Finite;
        /// Coupled L2 weight decay.
        weight_decay: f64 = 0.0, in NonNegative;
        /// Nesterov momentum (needs momentum > 0 and dampening 0).
        nesterov: bool = false;
        /// Store the momentum buffer in bf16 (opt-in).
        bf16_momentum: bool = false;
    }
    validate: lr, momentum, weight_decay, dampening; then nesterov_rule;
    /// Plain SGD with learning rate `lr` (PyTorch defaults: no momentum, no decay).
    pub fn new(lr);
}

impl SgdConfig {
    /// Nesterov needs momentum and no dampening.
    fn nesterov_rule(&self) -> Result<()> {
        if self.nesterov && (self.momentum <= 0.0 || self.dampening != 0.0) {
            return Err(Error::config(
                "sgd",
                "nesterov needs momentum > 0 and dampening 0",
            ));
        }
        Ok(())
    }
}

/// Stochastic gradient descent.
pub type Sgd = Optim<SgdConfig>;

impl Algorithm for SgdConfig {
    hyperparam_glue!("sgd");

    fn buffers(&self, _shape: &[usize], dtype: DType) -> Vec<(&'static str, DType)> {
        if self.momentum != 0.0 {
            vec![("momentum_buffer", moment_dtype(dtype, self.bf16_momentum))]
        } else {
            Vec::new()
        }
    }

    fn update(&self, u: Update<'_>) -> Result<()> {
        let got = u.bufs.len();
        // The count follows the momentum, so the error names it.
        let s = u.checked(self).map_err(|_| {
            Error::StateMismatch(format!(
                "sgd: {got} state buffers for momentum {}",
                self.momentum
            ))
        })?;
        dispatch_step!(s: T, "momentum_buffer" => M => sgd_kernel::<T, M>(self, s))
    }
}

fn sgd_kernel<T: Float, M: Moment<T> + BufElem>(c: &SgdConfig, mut s: Step<'_, [T]>) -> Result<()> {
    let b = s.bufs.take_opt::<M>("momentum_buffer")?;
    let f = |x: f64| T::from_f64(x);
    let k = SgdChunk {
        g: s.grad,
        wd: (c.weight_decay != 0.0).then(|| f(c.weight_decay)),
        mu: f(c.momentum),
        one_minus_damp: f(1.0 - c.dampening),
        neg_lr: f(-s.lr),
        first: s.step == 1,
        nesterov: c.nesterov,
    };
    run_chunks(s.ctx, s.param.len(), (s.param, b), &k);
    Ok(())
}

struct SgdChunk<'a, T> {
    g: &'a [T],
    wd: Option<T>,
    mu: T,
    one_minus_damp: T,
    neg_lr: T,
    first: bool,
    nesterov: bool,
}

impl<'s, T: Float, M: Moment<T>> ChunkKernel<(&'s mut [T], Option<&'s mut [M]>)>
    for SgdChunk<'_, T>
{
    #[inline(always)]
    fn run(&self, r: std::ops::Range<usize>, (p, b): (&'s mut [T], Option<&'s mut [M]>)) {
        let n = p.len();
        let g = &self.g[r][..n];
        match b {
            None => {
                for i in 0..n {
                    let mut gi = g[i];
                    if let Some(wd) = self.wd {
                        gi = p[i].mul_add(wd, gi); // grad.add(param, alpha=wd)
                    }
                    p[i] = gi.mul_add(self.neg_lr, p[i]); // param.add_(grad, alpha=-lr): one FMA
                }
            }
            Some(b) => {
                let b = &mut b[..n];
                for i in 0..n {
                    let mut gi = g[i];
                    if let Some(wd) = self.wd {
                        gi = p[i].mul_add(wd, gi);
                    }
                    // the buffer starts as the first gradient, then b·μ + (1 − τ)·g
                    let bi = if self.first {
                        gi
                    } else {
                        gi.mul_add(self.one_minus_damp, b[i].load() * self.mu)
                    };
                    b[i] = M::store(bi);
                    let d = if self.nesterov {
                        bi.mul_add(self.mu, gi)
                    } else {
                        bi
                    };
                    p[i] = d.mul_add(self.neg_lr, p[i]);
                }
            }
        }
    }
}
