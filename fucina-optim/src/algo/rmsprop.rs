//! RMSprop, in PyTorch's single-tensor order (centered and momentum options).
//!
//! Per element: `g ← g + wd·p`; `s ← α·s + (1 − α)·g·g`; centered:
//! `a ← lerp(a, g, 1 − α)`, `d ← √(s − a·a) + ε`, else `d ← √s + ε`; with
//! momentum `b ← μ·b + g/d`, `p ← p − lr·b`, else `p ← p − lr·(g/d)`.

use fucina_core::{DType, Float};

use crate::algo::config::{hyperparam_glue, hyperparams};
use crate::algo::{dispatch_step, Algorithm, Step, Update};
use crate::error::Result;
use crate::kernel::{lerp, moment_dtype, run_chunks, BufElem, ChunkKernel, Moment};
use crate::optimizer::Optim;

hyperparams! {
    /// Hyperparameters of RMSprop (one parameter group); defaults are PyTorch's.
    ///
    /// ```
    /// use fucina_optim::RmsPropConfig;
    /// let c = RmsPropConfig::new(1e-2);
    /// assert_eq!((c.alpha, c.eps, c.centered), (0.99, 1e-8, false));
    /// ```
    pub struct RmsPropConfig {
        /// Learning rate (PyTorch default 1e-2).
        lr: f64 = lr, in NonNegative;
        /// Smoothing constant α, default 0.99.
        alpha: f64 = 0.99, in NonNegative;
        /// Added to the denominator, default 1e-8.
        eps: f64 = 1e-8, in NonNegative;
        /// Coupled L2 weight decay, default 0.
        weight_decay: f64 = 0.0, in NonNegative;
        /// Momentum μ, default 0.
        momentum: f64 = 0.0, in NonNegative;
        /// Normalise by the centered second moment (variance estimate).
        centered: bool = false;
        /// Store all state buffers in bf16 (opt-in).
        bf16_state: bool = false;
    }
    validate: lr, eps, weight_decay, momentum, alpha;
    /// PyTorch's defaults with learning rate `lr`.
    pub fn new(lr);
}

/// RMSprop.
pub type RmsProp = Optim<RmsPropConfig>;

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
        let s = u.checked(self)?;
        // every buffer is stored alike (`bf16_state`)
        dispatch_step!(s: T, "square_avg" => M => rmsprop_kernel::<T, M>(self, s))
    }
}

fn rmsprop_kernel<T: Float, M: Moment<T> + BufElem>(
    c: &RmsPropConfig,
    mut s: Step<'_, [T]>,
) -> Result<()> {
    let sq = s.bufs.take::<M>("square_avg")?;
    let mb = s.bufs.take_opt::<M>("momentum_buffer")?;
    let ga = s.bufs.take_opt::<M>("grad_avg")?;
    let f = |x: f64| T::from_f64(x);
    let k = RmsPropChunk {
        g: s.grad,
        wd: (c.weight_decay != 0.0).then(|| f(c.weight_decay)),
        alpha: f(c.alpha),
        oma: f(1.0 - c.alpha),
        oma_m1: f(1.0 - c.alpha) - T::ONE,
        eps: f(c.eps),
        mu: f(c.momentum),
        neg_lr: f(-s.lr),
    };
    run_chunks(s.ctx, s.param.len(), (s.param, sq, mb, ga), &k);
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
