//! RMSprop, in PyTorch's single-tensor order (centered and momentum options).
//!
//! Per element: `g ← g + wd·p`; `s ← α·s + (1 − α)·g·g`; centered:
//! `a ← lerp(a, g, 1 − α)`, `d ← √(s − a·a) + ε`, else `d ← √s + ε`; with
//! momentum `b ← μ·b + g/d`, `p ← p − lr·b`, else `p ← p − lr·(g/d)`.

use fucina_core::{DType, ExecContext, Float};
use serde::{Deserialize, Serialize};

use crate::algo::{hyperparam_glue, wrong_buffer_count, Algorithm, Bound, Hyperparams, Update};
use crate::error::{Error, Result};
use crate::kernel::{
    dispatch_moment, lerp, moment_dtype, run_chunks, typed, Buf, BufElem, ChunkKernel, Moment,
};
use crate::optimizer::Optim;

/// Hyperparameters of RMSprop (one parameter group); defaults are PyTorch's.
///
/// ```
/// use fucina_optim::RmsPropConfig;
/// let c = RmsPropConfig::new(1e-2);
/// assert_eq!((c.alpha, c.eps, c.centered), (0.99, 1e-8, false));
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RmsPropConfig {
    /// Learning rate (PyTorch default 1e-2).
    pub lr: f64,
    /// Smoothing constant α, default 0.99.
    pub alpha: f64,
    /// Added to the denominator, default 1e-8.
    pub eps: f64,
    /// Coupled L2 weight decay, default 0.
    pub weight_decay: f64,
    /// Momentum μ, default 0.
    pub momentum: f64,
    /// Normalise by the centered second moment (variance estimate).
    pub centered: bool,
    /// Store all state buffers in bf16 (opt-in).
    pub bf16_state: bool,
}

impl RmsPropConfig {
    /// PyTorch's defaults with learning rate `lr`.
    pub fn new(lr: f64) -> Self {
        RmsPropConfig {
            lr,
            alpha: 0.99,
            eps: 1e-8,
            weight_decay: 0.0,
            momentum: 0.0,
            centered: false,
            bf16_state: false,
        }
    }
}

/// RMSprop.
pub type RmsProp = Optim<RmsPropConfig>;

impl Hyperparams for RmsPropConfig {
    fn bounds(&self) -> Vec<(&'static str, f64, Bound)> {
        vec![
            ("lr", self.lr, Bound::NonNegative),
            ("eps", self.eps, Bound::NonNegative),
            ("weight_decay", self.weight_decay, Bound::NonNegative),
            ("momentum", self.momentum, Bound::NonNegative),
            ("alpha", self.alpha, Bound::NonNegative),
        ]
    }
}

impl Algorithm for RmsPropConfig {
    hyperparam_glue!("rmsprop");

    fn buffers(&self, _shape: &[usize], dtype: DType) -> Vec<(&'static str, DType)> {
        let dt = moment_dtype(dtype, self.bf16_state);
        let mut v = vec![("square_avg", dt)];
        if self.momentum > 0.0 {
            v.push(("momentum_buffer", dt));
        }
        if self.centered {
            v.push(("grad_avg", dt));
        }
        v
    }

    fn update(&self, u: Update<'_>) -> Result<()> {
        let want = 1 + usize::from(self.momentum > 0.0) + usize::from(self.centered);
        if u.bufs.len() != want {
            return Err(wrong_buffer_count("rmsprop", u.bufs.len(), want));
        }
        let dt = u.bufs[0].dtype();
        let lr = self.lr * u.lr_factor;
        fucina_core::dispatch_float!(u.param.dtype(), "rmsprop", T => dispatch_moment!(dt, T, M => {
            rmsprop_kernel::<T, M>(u.ctx, self, lr, u.param.as_mut_slice::<T>()?, u.grad.as_slice::<T>()?, u.bufs)
        }))
    }
}

fn rmsprop_kernel<T: Float, M: Moment<T> + BufElem>(
    ctx: &ExecContext,
    c: &RmsPropConfig,
    lr: f64,
    param: &mut [T],
    grad: &[T],
    bufs: &mut [Buf],
) -> Result<()> {
    let n = param.len();
    let mut it = bufs.iter_mut();
    let mut next = |what: &str| match it.next() {
        Some(b) => typed::<M>(b, what, n),
        None => Err(Error::StateMismatch(format!("rmsprop: missing {what}"))),
    };
    let sq = next("rmsprop square_avg")?;
    let mb = if c.momentum > 0.0 {
        Some(next("rmsprop momentum_buffer")?)
    } else {
        None
    };
    let ga = if c.centered {
        Some(next("rmsprop grad_avg")?)
    } else {
        None
    };
    let f = |x: f64| T::from_f64(x);
    let k = RmsPropChunk {
        g: grad,
        wd: (c.weight_decay != 0.0).then(|| f(c.weight_decay)),
        alpha: f(c.alpha),
        oma: f(1.0 - c.alpha),
        oma_m1: f(1.0 - c.alpha) - T::ONE,
        eps: f(c.eps),
        mu: f(c.momentum),
        neg_lr: f(-lr),
    };
    run_chunks(ctx, n, (param, sq, mb, ga), &k);
    Ok(())
}

struct RmsPropChunk<'a, T> {
    g: &'a [T],
    wd: Option<T>,
    alpha: T,
    oma: T,
    oma_m1: T,
    eps: T,
    mu: T,
    neg_lr: T,
}

/// The chunk's part of the parameter, square average, momentum and grad average.
type RmsPropBufs<'s, T, M> = (
    &'s mut [T],
    &'s mut [M],
    Option<&'s mut [M]>,
    Option<&'s mut [M]>,
);

impl<'s, T: Float, M: Moment<T>> ChunkKernel<RmsPropBufs<'s, T, M>> for RmsPropChunk<'_, T> {
    #[inline(always)]
    fn run(&self, r: std::ops::Range<usize>, (p, sq, mut mb, mut ga): RmsPropBufs<'s, T, M>) {
        let g = &self.g[r];
        for i in 0..p.len() {
            let mut gi = g[i];
            if let Some(wd) = self.wd {
                gi = p[i].mul_add(wd, gi);
            }
            let si = (self.oma * gi).mul_add(gi, sq[i].load() * self.alpha); // s·α, then addcmul
            sq[i] = M::store(si);
            let avg = match ga.as_deref_mut() {
                Some(ga) => {
                    let a = lerp(ga[i].load(), gi, self.oma, self.oma_m1);
                    ga[i] = M::store(a);
                    (-a).mul_add(a, si).sqrt() + self.eps // s.addcmul(a, a, value=-1).sqrt() + ε
                }
                None => si.sqrt() + self.eps,
            };
            match mb.as_deref_mut() {
                Some(mb) => {
                    let b = mb[i].load() * self.mu + gi / avg; // b·μ, then addcdiv(g, avg)
                    mb[i] = M::store(b);
                    p[i] = b.mul_add(self.neg_lr, p[i]);
                }
                None => p[i] += (self.neg_lr * gi) / avg, // addcdiv(g, avg, value=-lr)
            }
        }
    }
}
