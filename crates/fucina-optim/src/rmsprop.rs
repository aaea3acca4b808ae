//! RMSprop, in PyTorch's single-tensor order (centered and momentum options).
//!
//! Per element: `g ← g + wd·p`; `s ← α·s + (1 − α)·g·g`; centered:
//! `a ← lerp(a, g, 1 − α)`, `d ← √(s − a·a) + ε`, else `d ← √s + ε`; with
//! momentum `b ← μ·b + g/d`, `p ← p − lr·b`, else `p ← p − lr·(g/d)`.

use fucina_core::{DType, ExecContext, Float, RawTensor};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::kernel::{
    for_each_chunk, lerp, moment_dtype, moment_type, param_type, typed, Buf, BufElem, Disjoint,
    Moment,
};
use crate::optimizer::{Algorithm, Optim};

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

impl Algorithm for RmsPropConfig {
    const NAME: &'static str = "rmsprop";

    fn lr(&self) -> f64 {
        self.lr
    }

    fn set_lr(&mut self, lr: f64) {
        self.lr = lr;
    }

    fn validate(&self) -> Result<()> {
        let ok = |x: f64| x.is_finite() && x >= 0.0;
        if !ok(self.lr)
            || !ok(self.eps)
            || !ok(self.weight_decay)
            || !ok(self.momentum)
            || !ok(self.alpha)
        {
            return Err(Error::config(
                "rmsprop",
                format!("hyperparameters must be finite and ≥ 0: {self:?}"),
            ));
        }
        Ok(())
    }

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

    fn update(
        &self,
        ctx: &ExecContext,
        lr_factor: f64,
        _step: u64,
        param: &mut RawTensor,
        grad: &RawTensor,
        bufs: &mut [Buf],
    ) -> Result<()> {
        let want = 1 + usize::from(self.momentum > 0.0) + usize::from(self.centered);
        if bufs.len() != want {
            return Err(Error::StateMismatch(format!(
                "rmsprop: {} state buffers, expected {want}",
                bufs.len()
            )));
        }
        let dt = bufs[0].dtype();
        let lr = self.lr * lr_factor;
        param_type!(param.dtype(), "rmsprop", T => moment_type!(dt, T, M => {
            rmsprop_kernel::<T, M>(ctx, self, lr, param.as_mut_slice::<T>()?, grad.as_slice::<T>()?, bufs)
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
    let p = Disjoint::new(param);
    let f = |x: f64| T::from_f64(x);
    let wd = (c.weight_decay != 0.0).then(|| f(c.weight_decay));
    let (alpha, oma, eps, mu, neg_lr) = (
        f(c.alpha),
        f(1.0 - c.alpha),
        f(c.eps),
        f(c.momentum),
        f(-lr),
    );
    let oma_m1 = oma - T::ONE;
    for_each_chunk(ctx, n, |r| {
        // SAFETY: each chunk owns the disjoint range `r` of every buffer.
        let (p, sq) = unsafe { (p.range(r.clone()), sq.range(r.clone())) };
        let mb = mb.map(|b| unsafe { b.range(r.clone()) });
        let ga = ga.map(|b| unsafe { b.range(r.clone()) });
        let g = &grad[r];
        let mut mb = mb;
        let mut ga = ga;
        for i in 0..p.len() {
            let mut gi = g[i];
            if let Some(wd) = wd {
                gi = p[i].mul_add(wd, gi);
            }
            let si = (oma * gi).mul_add(gi, sq[i].load() * alpha);
            sq[i] = M::store(si);
            let avg = match ga.as_deref_mut() {
                Some(ga) => {
                    let a = lerp(ga[i].load(), gi, oma, oma_m1);
                    ga[i] = M::store(a);
                    (-a).mul_add(a, si).sqrt() + eps
                }
                None => si.sqrt() + eps,
            };
            match mb.as_deref_mut() {
                Some(mb) => {
                    let b = mb[i].load() * mu + gi / avg;
                    mb[i] = M::store(b);
                    p[i] = b.mul_add(neg_lr, p[i]);
                }
                None => p[i] = p[i] + (neg_lr * gi) / avg,
            }
        }
    });
    Ok(())
}
