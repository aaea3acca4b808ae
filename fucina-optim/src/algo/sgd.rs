//! SGD with momentum, dampening, Nesterov and coupled weight decay
//! (PyTorch's single-tensor order).
//!
//! Per element: `g ← g + wd·p`; with momentum, the buffer starts as the first
//! (decayed) gradient, then `b ← μ·b + (1 − τ)·g`; `g ← g + μ·b` (Nesterov) or
//! `g ← b`; finally `p ← p − lr·g`.

use fucina_core::{DType, ExecContext, Float};
use serde::{Deserialize, Serialize};

use crate::algo::{hyperparam_glue, Algorithm, Bound, Hyperparams, Update};
use crate::error::{Error, Result};
use crate::kernel::{
    dispatch_moment, moment_dtype, run_chunks, typed, Buf, BufElem, ChunkKernel, Moment,
};
use crate::optimizer::Optim;

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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SgdConfig {
    /// Learning rate.
    pub lr: f64,
    /// Momentum factor μ (0 = plain SGD).
    pub momentum: f64,
    /// Dampening τ of the momentum.
    pub dampening: f64,
    /// Coupled L2 weight decay.
    pub weight_decay: f64,
    /// Nesterov momentum (needs momentum > 0 and dampening 0).
    pub nesterov: bool,
    /// Store the momentum buffer in bf16 (opt-in).
    pub bf16_momentum: bool,
}

impl SgdConfig {
    /// Plain SGD with learning rate `lr` (PyTorch defaults: no momentum, no decay).
    pub fn new(lr: f64) -> Self {
        SgdConfig {
            lr,
            momentum: 0.0,
            dampening: 0.0,
            weight_decay: 0.0,
            nesterov: false,
            bf16_momentum: false,
        }
    }
}

/// Stochastic gradient descent.
pub type Sgd = Optim<SgdConfig>;

impl Hyperparams for SgdConfig {
    fn bounds(&self) -> Vec<(&'static str, f64, Bound)> {
        vec![
            ("lr", self.lr, Bound::NonNegative),
            ("momentum", self.momentum, Bound::NonNegative),
            ("weight_decay", self.weight_decay, Bound::NonNegative),
            ("dampening", self.dampening, Bound::Finite),
        ]
    }

    fn cross_checks(&self) -> Result<()> {
        if self.nesterov && (self.momentum <= 0.0 || self.dampening != 0.0) {
            return Err(Error::config(
                "sgd",
                "nesterov needs momentum > 0 and dampening 0",
            ));
        }
        Ok(())
    }
}

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
        let lr = self.lr * u.lr_factor;
        match u.bufs {
            [] if self.momentum == 0.0 => {
                fucina_core::dispatch_float!(u.param.dtype(), "sgd", T => {
                    sgd_kernel::<T, T>(u.ctx, self, lr, u.step, u.param.as_mut_slice::<T>()?, u.grad.as_slice::<T>()?, None)
                })
            }
            [b] if self.momentum != 0.0 => {
                let db = b.dtype();
                fucina_core::dispatch_float!(u.param.dtype(), "sgd", T => dispatch_moment!(db, T, M => {
                    sgd_kernel::<T, M>(u.ctx, self, lr, u.step, u.param.as_mut_slice::<T>()?, u.grad.as_slice::<T>()?, Some(b))
                }))
            }
            _ => Err(Error::StateMismatch(format!(
                "sgd: {} state buffers for momentum {}",
                u.bufs.len(),
                self.momentum
            ))),
        }
    }
}

fn sgd_kernel<T: Float, M: Moment<T> + BufElem>(
    ctx: &ExecContext,
    c: &SgdConfig,
    lr: f64,
    step: u64,
    param: &mut [T],
    grad: &[T],
    buf: Option<&mut Buf>,
) -> Result<()> {
    let n = param.len();
    let b = match buf {
        Some(b) => Some(typed::<M>(b, "sgd momentum_buffer", n)?),
        None => None,
    };
    let f = |x: f64| T::from_f64(x);
    let k = SgdChunk {
        g: grad,
        wd: (c.weight_decay != 0.0).then(|| f(c.weight_decay)),
        mu: f(c.momentum),
        one_minus_damp: f(1.0 - c.dampening),
        neg_lr: f(-lr),
        first: step == 1,
        nesterov: c.nesterov,
    };
    run_chunks(ctx, n, (param, b), &k);
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
