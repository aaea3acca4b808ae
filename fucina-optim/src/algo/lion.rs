//! Lion (Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms").
//!
//! Per element: `c ← β1·m + (1 − β1)·g`; `p ← p·(1 − lr·wd)`;
//! `p ← p − lr·sign(c)` (sign(0) = 0); `m ← β2·m + (1 − β2)·g`.

use fucina_core::{DType, Float};

use crate::algo::config::{hyperparam_glue, hyperparams};
use crate::algo::{dispatch_step, Algorithm, Step, Update};
use crate::error::Result;
use crate::kernel::{moment_dtype, run_chunks, BufElem, ChunkKernel, Moment};
use crate::optimizer::Optim;

hyperparams! {
    /// Hyperparameters of Lion (one parameter group).
    ///
    /// ```
    /// use fucina_optim::LionConfig;
    /// let c = LionConfig::new(1e-4);
    /// assert_eq!(c.betas, (0.9, 0.99));
    /// ```
    pub struct LionConfig {
        /// Learning rate (typically 3–10× smaller than AdamW's), default 1e-4.
        lr: f64 = lr, in NonNegative;
        /// (β1, β2): interpolation for the update and for the moment, default (0.9, 0.99).
        betas: (f64, f64) = (0.9, 0.99), each (beta1, beta2) in Closed(0.0, 1.0);
        /// Decoupled weight decay, default 0.
        weight_decay: f64 = 0.0, in NonNegative;
        /// Store the moment in bf16 (opt-in).
        bf16_exp_avg: bool = false;
    }
    validate: beta1, beta2, lr, weight_decay;
    /// The paper's defaults with learning rate `lr`.
    pub fn new(lr);
}

/// Lion.
pub type Lion = Optim<LionConfig>;

impl Algorithm for LionConfig {
    hyperparam_glue!("lion");

    fn buffers(&self, _shape: &[usize], dtype: DType) -> Vec<(&'static str, DType)> {
        vec![("exp_avg", moment_dtype(dtype, self.bf16_exp_avg))]
    }

    fn update(&self, u: Update<'_>) -> Result<()> {
        let s = u.checked(self)?;
        dispatch_step!(s: T, "exp_avg" => M => lion_kernel::<T, M>(self, s))
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
    c: &LionConfig,
    mut s: Step<'_, [T]>,
) -> Result<()> {
    let m = s.bufs.take::<M>("exp_avg")?;
    let f = |x: f64| T::from_f64(x);
    let (b1, b2) = c.betas;
    let k = LionChunk {
        g: s.grad,
        b1: f(b1),
        omb1: f(1.0 - b1),
        b2: f(b2),
        omb2: f(1.0 - b2),
        decay: (c.weight_decay != 0.0).then(|| f(1.0 - s.lr * c.weight_decay)),
        neg_lr: f(-s.lr),
    };
    run_chunks(s.ctx, s.param.len(), (s.param, m), &k);
    Ok(())
}

struct LionChunk<'a, T> {
    g: &'a [T],
    b1: T,
    omb1: T,
    b2: T,
    omb2: T,
    decay: Option<T>,
    neg_lr: T,
}

impl<'s, T: Float, M: Moment<T>> ChunkKernel<(&'s mut [T], &'s mut [M])> for LionChunk<'_, T> {
    #[inline(always)]
    fn run(&self, r: std::ops::Range<usize>, (p, m): (&'s mut [T], &'s mut [M])) {
        let n = p.len();
        let (m, g) = (&mut m[..n], &self.g[r][..n]);
        for i in 0..n {
            let (gi, mi) = (g[i], m[i].load());
            let u = gi.mul_add(self.omb1, mi * self.b1); // m·β1 + (1 − β1)·g
            let mut pi = p[i];
            if let Some(d) = self.decay {
                pi *= d;
            }
            p[i] = sign(u).mul_add(self.neg_lr, pi);
            m[i] = M::store(gi.mul_add(self.omb2, mi * self.b2));
        }
    }
}
