//! Adam and AdamW, in PyTorch's single-tensor update order exactly.
//!
//! Per element, in the parameter's dtype, with scalars prepared in f64:
//! AdamW decays the parameter (`p ← p·(1 − lr·wd)`) before the moments; Adam
//! adds `wd·p` to the gradient instead. Then `m ← lerp(m, g, 1 − β1)`,
//! `v ← β2·v + (1 − β2)·g·g`, `p ← p − lr/(1 − β1ᵗ) · m / (√v / √(1 − β2ᵗ) + ε)`.
//! Each step rounds as ATen's CPU kernels do (`add` with alpha, `lerp` and
//! `addcmul` fuse their last multiply-add; `addcdiv` is `p + (value·m)/d`).

use fucina_core::{DType, Float};

use crate::algo::config::{hyperparam_glue, hyperparams};
use crate::algo::{dispatch_step, Algorithm, Step, Update};
use crate::error::Result;
use crate::kernel::{lerp, moment_dtype, run_chunks, BufElem, ChunkKernel, Moment};
use crate::optimizer::Optim;

hyperparams! {
    /// Hyperparameters of Adam / AdamW (one parameter group).
    ///
    /// ```
    /// use fucina_autograd::Tensor;
    /// use fucina_optim::{AdamConfig, AdamW, Optimizer};
    /// let ctx = fucina_core::ExecContext::with_threads(1)?;
    /// let w = Tensor::variable(&ctx, &[1.0f32, -1.0], &[2])?;
    /// let mut opt = AdamW::single(vec![w.clone()], AdamConfig::adamw(0.1))?;
    /// w.set_grad(Some(ctx.from_slice(&[0.5f32, -0.5], &[2])?))?;
    /// opt.step()?;
    /// opt.zero_grad();
    /// let v = w.to_vec::<f32>()?;
    /// assert!((v[0] - (1.0 * (1.0 - 0.1 * 0.01) - 0.1)).abs() < 1e-6); // first Adam step moves by lr
    /// # Ok::<(), fucina_optim::Error>(())
    /// ```
    pub struct AdamConfig {
        /// Learning rate (PyTorch default 1e-3).
        lr: f64 = lr, in NonNegative;
        /// (β1, β2), default (0.9, 0.999).
        betas: (f64, f64) = (0.9, 0.999), each (beta1, beta2) in HalfOpen(0.0, 1.0);
        /// Added after the bias-corrected square root, default 1e-8.
        eps: f64 = 1e-8, in NonNegative;
        /// Weight decay: coupled L2 for Adam (default 0), decoupled for AdamW (default 0.01).
        weight_decay: f64 = 0.0, in NonNegative;
        /// True for AdamW (decoupled decay applied to the parameter before the moments).
        decoupled: bool = false;
        /// Store the first moment in bf16 (opt-in).
        bf16_exp_avg: bool = false;
        /// Store the second moment in bf16 (opt-in; with β2 = 0.999 its per-step change
        /// is below bf16 resolution, so prefer keeping it in full precision).
        bf16_exp_avg_sq: bool = false;
    }
    validate: beta1, beta2, lr, eps, weight_decay;
    /// PyTorch's `Adam` defaults with learning rate `lr`.
    pub fn adam(lr);
}

impl AdamConfig {
    /// PyTorch's `AdamW` defaults (weight decay 0.01) with learning rate `lr`.
    pub fn adamw(lr: f64) -> Self {
        AdamConfig {
            weight_decay: 0.01,
            decoupled: true,
            ..Self::adam(lr)
        }
    }
}

impl Default for AdamConfig {
    fn default() -> Self {
        Self::adamw(1e-3)
    }
}

/// Adam and AdamW, one optimizer: `Optim<AdamConfig>`. The config chooses
/// the rule: [`AdamConfig::adamw`] (decoupled weight decay, PyTorch's
/// `AdamW`) or [`AdamConfig::adam`] (coupled L2 decay, PyTorch's `Adam`);
/// there is no separate `Adam` name.
pub type AdamW = Optim<AdamConfig>;

impl Algorithm for AdamConfig {
    hyperparam_glue!("adam");

    fn buffers(&self, _shape: &[usize], dtype: DType) -> Vec<(&'static str, DType)> {
        vec![
            ("exp_avg", moment_dtype(dtype, self.bf16_exp_avg)),
            ("exp_avg_sq", moment_dtype(dtype, self.bf16_exp_avg_sq)),
        ]
    }

    fn update(&self, u: Update<'_>) -> Result<()> {
        let s = u.checked(self)?;
        dispatch_step!(s: T, "exp_avg" => M1, "exp_avg_sq" => M2 => {
            adam_kernel::<T, M1, M2>(&AdamScalars::new(self, s.lr, s.step), s)
        })
    }
}

/// The per-step scalars of an Adam update, prepared in f64.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AdamScalars {
    pub(crate) decay: Option<f64>,
    pub(crate) l2: Option<f64>,
    pub(crate) w1: f64,
    pub(crate) beta2: f64,
    pub(crate) one_minus_beta2: f64,
    pub(crate) bc2_sqrt: f64,
    pub(crate) eps: f64,
    pub(crate) neg_step_size: f64,
}

impl AdamScalars {
    pub(crate) fn new(c: &AdamConfig, lr: f64, step: u64) -> Self {
        let (b1, b2) = c.betas;
        let t = step as f64;
        let bc1 = 1.0 - b1.powf(t);
        let bc2 = 1.0 - b2.powf(t);
        let wd = c.weight_decay;
        AdamScalars {
            decay: (c.decoupled && wd != 0.0).then_some(1.0 - lr * wd),
            l2: (!c.decoupled && wd != 0.0).then_some(wd),
            w1: 1.0 - b1,
            beta2: b2,
            one_minus_beta2: 1.0 - b2,
            bc2_sqrt: bc2.sqrt(),
            eps: c.eps,
            neg_step_size: -(lr / bc1),
        }
    }
}

/// The fused single-pass Adam/AdamW loop (see the module docs for the math).
pub(crate) fn adam_kernel<T, M1, M2>(sc: &AdamScalars, mut s: Step<'_, [T]>) -> Result<()>
where
    T: Float,
    M1: Moment<T> + BufElem,
    M2: Moment<T> + BufElem,
{
    let m = s.bufs.take::<M1>("exp_avg")?;
    let v = s.bufs.take::<M2>("exp_avg_sq")?;
    let c = |x: f64| T::from_f64(x);
    let k = AdamChunk {
        g: s.grad,
        decay: sc.decay.map(c),
        l2: sc.l2.map(c),
        w1: c(sc.w1),
        w1m1: c(sc.w1) - T::ONE,
        b2: c(sc.beta2),
        omb2: c(sc.one_minus_beta2),
        bc2s: c(sc.bc2_sqrt),
        eps: c(sc.eps),
        nss: c(sc.neg_step_size),
    };
    run_chunks(s.ctx, s.param.len(), (s.param, m, v), &k);
    Ok(())
}

struct AdamChunk<'a, T> {
    g: &'a [T],
    decay: Option<T>,
    l2: Option<T>,
    w1: T,
    w1m1: T,
    b2: T,
    omb2: T,
    bc2s: T,
    eps: T,
    nss: T,
}

impl<'s, T: Float, M1: Moment<T>, M2: Moment<T>>
    ChunkKernel<(&'s mut [T], &'s mut [M1], &'s mut [M2])> for AdamChunk<'_, T>
{
    #[inline(always)]
    fn run(&self, r: std::ops::Range<usize>, (p, m, v): (&'s mut [T], &'s mut [M1], &'s mut [M2])) {
        let n = p.len();
        let (m, v, g) = (&mut m[..n], &mut v[..n], &self.g[r][..n]);
        for i in 0..n {
            let mut pi = p[i];
            let mut gi = g[i];
            if let Some(wd) = self.l2 {
                gi = pi.mul_add(wd, gi); // grad.add(param, alpha=wd)
            }
            if let Some(d) = self.decay {
                pi *= d; // param.mul_(1 - lr·wd)
            }
            let mi = lerp(m[i].load(), gi, self.w1, self.w1m1); // exp_avg.lerp_(grad, 1 - β1)
            let vi = (self.omb2 * gi).mul_add(gi, v[i].load() * self.b2); // v·β2, then addcmul
            let denom = vi.sqrt() / self.bc2s + self.eps;
            p[i] = pi + (self.nss * mi) / denom; // addcdiv: p + (value·m)/denom
            m[i] = M1::store(mi);
            v[i] = M2::store(vi);
        }
    }
}
