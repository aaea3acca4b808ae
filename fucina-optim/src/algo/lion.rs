//! Lion (Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms").
//!
//! Per element: `c ← β1·m + (1 − β1)·g`; `p ← p·(1 − lr·wd)`;
//! `p ← p − lr·sign(c)` (sign(0) = 0); `m ← β2·m + (1 − β2)·g`.

use fucina_core::{DType, ExecContext, Float};
use serde::{Deserialize, Serialize};

use crate::algo::{hyperparam_glue, wrong_buffer_count, Algorithm, Bound, Hyperparams, Update};
use crate::error::Result;
use crate::kernel::{
    dispatch_moment, moment_dtype, run_chunks, typed, Buf, BufElem, ChunkKernel, Moment,
};
use crate::optimizer::Optim;

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

impl Hyperparams for LionConfig {
    fn bounds(&self) -> Vec<(&'static str, f64, Bound)> {
        let (b1, b2) = self.betas;
        vec![
            ("beta1", b1, Bound::Closed(0.0, 1.0)),
            ("beta2", b2, Bound::Closed(0.0, 1.0)),
            ("lr", self.lr, Bound::NonNegative),
            ("weight_decay", self.weight_decay, Bound::NonNegative),
        ]
    }
}

impl Algorithm for LionConfig {
    hyperparam_glue!("lion");

    fn buffers(&self, _shape: &[usize], dtype: DType) -> Vec<(&'static str, DType)> {
        vec![("exp_avg", moment_dtype(dtype, self.bf16_exp_avg))]
    }

    fn update(&self, u: Update<'_>) -> Result<()> {
        let [m] = u.bufs else {
            return Err(wrong_buffer_count("lion", u.bufs.len(), 1));
        };
        let dt = m.dtype();
        let lr = self.lr * u.lr_factor;
        fucina_core::dispatch_float!(u.param.dtype(), "lion", T => dispatch_moment!(dt, T, M => {
            lion_kernel::<T, M>(u.ctx, self, lr, u.param.as_mut_slice::<T>()?, u.grad.as_slice::<T>()?, m)
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
    let f = |x: f64| T::from_f64(x);
    let (b1, b2) = c.betas;
    let k = LionChunk {
        g: grad,
        b1: f(b1),
        omb1: f(1.0 - b1),
        b2: f(b2),
        omb2: f(1.0 - b2),
        decay: (c.weight_decay != 0.0).then(|| f(1.0 - lr * c.weight_decay)),
        neg_lr: f(-lr),
    };
    run_chunks(ctx, n, (param, m), &k);
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
