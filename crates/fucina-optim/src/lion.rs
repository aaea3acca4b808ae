//! Lion (Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms").
//!
//! Per element: `c ← β1·m + (1 − β1)·g`; `p ← p·(1 − lr·wd)`;
//! `p ← p − lr·sign(c)` (sign(0) = 0); `m ← β2·m + (1 − β2)·g`.

use fucina_core::{DType, ExecContext, Float, RawTensor};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::kernel::{
    for_each_chunk, moment_dtype, moment_type, param_type, typed, Buf, BufElem, Disjoint, Moment,
};
use crate::optimizer::{Algorithm, Optim};

/// Hyperparameters of Lion (one parameter group).
///
/// ```
/// use fucina_optim::LionConfig;
/// let c = LionConfig::new(1e-4);
/// assert_eq!(c.betas, (0.9, 0.99));
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LionConfig {
    /// Learning rate (typically 3–10× smaller than AdamW's), default 1e-4.
    pub lr: f64,
    /// (β1, β2): interpolation for the update and for the moment, default (0.9, 0.99).
    pub betas: (f64, f64),
    /// Decoupled weight decay, default 0.
    pub weight_decay: f64,
    /// Store the moment in bf16 (opt-in).
    pub bf16_exp_avg: bool,
}

impl LionConfig {
    /// The paper's defaults with learning rate `lr`.
    pub fn new(lr: f64) -> Self {
        LionConfig {
            lr,
            betas: (0.9, 0.99),
            weight_decay: 0.0,
            bf16_exp_avg: false,
        }
    }
}

/// Lion.
pub type Lion = Optim<LionConfig>;

impl Algorithm for LionConfig {
    const NAME: &'static str = "lion";

    fn lr(&self) -> f64 {
        self.lr
    }

    fn set_lr(&mut self, lr: f64) {
        self.lr = lr;
    }

    fn validate(&self) -> Result<()> {
        let (b1, b2) = self.betas;
        let ok = |x: f64| x.is_finite() && x >= 0.0;
        if !ok(self.lr)
            || !ok(self.weight_decay)
            || !(0.0..=1.0).contains(&b1)
            || !(0.0..=1.0).contains(&b2)
        {
            return Err(Error::config(
                "lion",
                format!("invalid hyperparameters: {self:?}"),
            ));
        }
        Ok(())
    }

    fn buffers(&self, _shape: &[usize], dtype: DType) -> Vec<(&'static str, DType)> {
        vec![("exp_avg", moment_dtype(dtype, self.bf16_exp_avg))]
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
        let [m] = bufs else {
            return Err(Error::StateMismatch(format!(
                "lion: {} state buffers, expected 1",
                bufs.len()
            )));
        };
        let dt = m.dtype();
        let lr = self.lr * lr_factor;
        param_type!(param.dtype(), "lion", T => moment_type!(dt, T, M => {
            lion_kernel::<T, M>(ctx, self, lr, param.as_mut_slice::<T>()?, grad.as_slice::<T>()?, m)
        }))
    }
}

#[inline(always)]
fn sign<T: Float>(x: T) -> T {
    if x > T::ZERO {
        T::ONE
    } else if x < T::ZERO {
        -T::ONE
    } else {
        x // ±0 (and NaN) pass through, as torch.sign
    }
}

fn lion_kernel<T: Float, M: Moment<T> + BufElem>(
    ctx: &ExecContext,
    c: &LionConfig,
    lr: f64,
    param: &mut [T],
    grad: &[T],
    m: &mut Buf,
) -> Result<()> {
    let n = param.len();
    let m = typed::<M>(m, "lion exp_avg", n)?;
    let p = Disjoint::new(param);
    let f = |x: f64| T::from_f64(x);
    let (b1, b2) = c.betas;
    let (b1, omb1, b2, omb2) = (f(b1), f(1.0 - b1), f(b2), f(1.0 - b2));
    let decay = (c.weight_decay != 0.0).then(|| f(1.0 - lr * c.weight_decay));
    let neg_lr = f(-lr);
    for_each_chunk(ctx, n, |r| {
        // SAFETY: each chunk owns the disjoint range `r`.
        let (p, m) = unsafe { (p.range(r.clone()), m.range(r.clone())) };
        let g = &grad[r];
        for i in 0..p.len() {
            let (gi, mi) = (g[i], m[i].load());
            let u = gi.mul_add(omb1, mi * b1);
            let mut pi = p[i];
            if let Some(d) = decay {
                pi = pi * d;
            }
            p[i] = sign(u).mul_add(neg_lr, pi);
            m[i] = M::store(gi.mul_add(omb2, mi * b2));
        }
    });
    Ok(())
}
