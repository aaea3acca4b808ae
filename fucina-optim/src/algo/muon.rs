//! Muon: momentum orthogonalised by a Newton–Schulz iteration, for matrix
//! parameters (rank ≥ 2, flattened to `shape[0] × rest`); every other
//! parameter (and any group with `use_muon: false`, e.g. embeddings and heads)
//! takes the AdamW fallback.
//!
//! Per matrix (torch.optim.Muon's order, Newton–Schulz in the parameter's
//! dtype): `b ← lerp(b, g, 1 − μ)`; `u ← lerp(g, b, μ)` (Nesterov) or `b`;
//! `X ← u/max(‖u‖, ε)` (transposed when tall); 5× { `A ← XXᵀ`;
//! `B ← b·A + c·A²`; `X ← a·X + B·X` } with (a, b, c) = (3.4445, −4.7750,
//! 2.0315); `p ← p·(1 − lr·wd)`; `p ← p − lr·√max(1, rows/cols)·X`.

use fucina_core::{DType, ExecContext, Float};
use serde::{Deserialize, Serialize};

use crate::algo::adam::AdamConfig;
use crate::algo::config::{hyperparam_glue, hyperparams};
use crate::algo::{dispatch_step, Algorithm, Step, Update};
use crate::error::{Error, Result};
use crate::kernel::{lerp, moment_dtype, run_chunks, BufElem, ChunkKernel, Moment};
use crate::optimizer::Optim;

/// How Muon scales its learning rate by the matrix shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum MuonLrAdjust {
    /// `lr·√max(1, rows/cols)` (Keller Jordan's original; torch's default).
    #[default]
    Original,
    /// `lr·0.2·√max(rows, cols)`: matches AdamW's update RMS, so AdamW's lr and decay carry over.
    MatchRmsAdamW,
}

hyperparams! {
    /// Hyperparameters of Muon (one parameter group), with the AdamW fallback's.
    ///
    /// ```
    /// use fucina_autograd::Tensor;
    /// use fucina_optim::{Muon, MuonConfig, Optimizer};
    /// let ctx = fucina_core::ExecContext::with_threads(1)?;
    /// let w = Tensor::variable(&ctx, &[0.1f32, 0.2, 0.3, 0.4, 0.5, 0.6], &[2, 3])?; // Muon
    /// let b = Tensor::variable(&ctx, &[0.0f32; 2], &[2])?; // AdamW fallback
    /// let mut opt = Muon::single(vec![w.clone(), b.clone()], MuonConfig::default())?;
    /// w.set_grad(Some(ctx.from_slice(&[1.0f32, 0.0, 0.0, 0.0, 1.0, 0.0], &[2, 3])?))?;
    /// b.set_grad(Some(ctx.from_slice(&[1.0f32, -1.0], &[2])?))?;
    /// opt.step()?;
    /// assert_eq!(opt.param_state(0, 0).unwrap().bufs.len(), 1); // momentum
    /// assert_eq!(opt.param_state(0, 1).unwrap().bufs.len(), 2); // Adam moments
    /// # Ok::<(), fucina_optim::Error>(())
    /// ```
    pub struct MuonConfig {
        /// Learning rate of the Muon update, default 0.02.
        lr: f64 = 0.02, in NonNegative;
        /// Momentum μ, default 0.95.
        momentum: f64 = 0.95, in HalfOpen(0.0, 1.0);
        /// Nesterov momentum, default true.
        nesterov: bool = true;
        /// Newton–Schulz iterations, default 5.
        ns_steps: usize = 5;
        /// Newton–Schulz quintic coefficients (a, b, c), default (3.4445, −4.7750, 2.0315).
        ns_coefficients: (f64, f64, f64) = (3.4445, -4.7750, 2.0315);
        /// Floor of the norm the momentum is divided by, default 1e-7.
        eps: f64 = 1e-7, in NonNegative;
        /// Decoupled weight decay of Muon parameters, default 0.
        weight_decay: f64 = 0.0, in NonNegative;
        /// Learning-rate scaling by shape.
        adjust_lr: MuonLrAdjust = MuonLrAdjust::Original;
        /// False sends every parameter of the group to the AdamW fallback.
        use_muon: bool = true;
        /// Store the momentum in bf16 (opt-in).
        bf16_momentum: bool = false;
        /// The fallback for non-matrix parameters (its lr is scheduled like Muon's).
        adamw: AdamConfig = AdamConfig::adamw(1e-3);
    }
    validate: lr, weight_decay, eps, momentum; then finite_coefficients, fallback_valid;
    impl Default;
}

impl MuonConfig {
    fn is_muon(&self, shape: &[usize]) -> bool {
        self.use_muon && shape.len() >= 2 && shape.iter().all(|&d| d > 0)
    }

    /// The Newton–Schulz coefficients are finite.
    fn finite_coefficients(&self) -> Result<()> {
        let (a, b, c) = self.ns_coefficients;
        if !(a.is_finite() && b.is_finite() && c.is_finite()) {
            return Err(Error::config(
                "muon",
                "Newton–Schulz coefficients must be finite",
            ));
        }
        Ok(())
    }

    /// The AdamW fallback's own config is valid.
    fn fallback_valid(&self) -> Result<()> {
        self.adamw.validate()
    }
}

/// Muon with an AdamW fallback.
pub type Muon = Optim<MuonConfig>;

impl Algorithm for MuonConfig {
    hyperparam_glue!("muon");

    fn buffers(&self, shape: &[usize], dtype: DType) -> Vec<(&'static str, DType)> {
        if self.is_muon(shape) {
            vec![("momentum_buffer", moment_dtype(dtype, self.bf16_momentum))]
        } else {
            self.adamw.buffers(shape, dtype)
        }
    }

    fn update(&self, u: Update<'_>) -> Result<()> {
        if !self.is_muon(u.param.shape()) {
            return self.adamw.update(u);
        }
        let rows = u.param.shape()[0];
        let cols = u.param.numel() / rows;
        let s = u.checked(self)?;
        dispatch_step!(s: T, "momentum_buffer" => M => muon_kernel::<T, M>(self, rows, cols, s))
    }
}

fn muon_kernel<T: Float, M: Moment<T> + BufElem>(
    c: &MuonConfig,
    rows: usize,
    cols: usize,
    mut s: Step<'_, [T]>,
) -> Result<()> {
    let n = s.param.len();
    let b = s.bufs.take::<M>("momentum_buffer")?;
    let f = |x: f64| T::from_f64(x);
    let (ctx, lr, grad) = (s.ctx, s.lr, s.grad);
    // 1. momentum and the (Nesterov) update direction
    let mut u = vec![T::ZERO; n];
    let (w, wm1) = (f(1.0 - c.momentum), f(1.0 - c.momentum) - T::ONE);
    let (mu, mum1) = (f(c.momentum), f(c.momentum) - T::ONE);
    run_chunks(
        ctx,
        n,
        (b, &mut u[..]),
        &MomentumChunk {
            g: grad,
            w,
            wm1,
            mu,
            mum1,
            nesterov: c.nesterov,
        },
    );
    // 2. orthogonalise (wide orientation: r ≤ k)
    let tall = rows > cols;
    let (r, k) = if tall { (cols, rows) } else { (rows, cols) };
    let mut x = if tall { transpose(&u, rows, cols) } else { u };
    newton_schulz(ctx, c, &mut x, r, k);
    let x = if tall { transpose(&x, r, k) } else { x };
    // 3. apply
    let ratio = match c.adjust_lr {
        MuonLrAdjust::Original => (rows as f64 / cols as f64).max(1.0).sqrt(),
        MuonLrAdjust::MatchRmsAdamW => 0.2 * (rows.max(cols) as f64).sqrt(),
    };
    let decay = (c.weight_decay != 0.0).then(|| f(1.0 - lr * c.weight_decay));
    let neg = f(-(lr * ratio));
    run_chunks(ctx, n, s.param, &ApplyChunk { x: &x, decay, neg });
    Ok(())
}

/// `X ← NS⁵(X / max(‖X‖, ε))` for a row-major `r × k` matrix with r ≤ k.
fn newton_schulz<T: Float>(ctx: &ExecContext, c: &MuonConfig, x: &mut [T], r: usize, k: usize) {
    let f = |v: f64| T::from_f64(v);
    let sumsq: f64 = x.iter().map(|&v| v.to_f64() * v.to_f64()).sum();
    let norm = f(sumsq.sqrt()).max(f(c.eps));
    for v in x.iter_mut() {
        *v /= norm;
    }
    let (a, b, cc) = c.ns_coefficients;
    let (a, b, cc) = (f(a), f(b), f(cc));
    for _ in 0..c.ns_steps {
        let xt = transpose(x, r, k);
        let gram = matmul(ctx, x, &xt, r, k, r); // A = X Xᵀ
        let gram2 = matmul(ctx, &gram, &gram, r, r, r); // A²
        let bm: Vec<T> = gram
            .iter()
            .zip(&gram2)
            .map(|(&g1, &g2)| b * g1 + cc * g2)
            .collect();
        let bx = matmul(ctx, &bm, x, r, r, k); // B X
        for (xv, &y) in x.iter_mut().zip(&bx) {
            *xv = a * *xv + y;
        }
    }
}

/// The transpose of a row-major `m × n` matrix.
fn transpose<T: Float>(a: &[T], m: usize, n: usize) -> Vec<T> {
    let mut t = vec![T::ZERO; a.len()];
    for i in 0..m {
        for j in 0..n {
            t[j * m + i] = a[i * n + j];
        }
    }
    t
}

/// `C = A·B` for row-major `A: m × k`, `B: k × n`; rows of C are split into
/// fixed blocks across threads, each row summed in k order (deterministic).
fn matmul<T: Float>(ctx: &ExecContext, a: &[T], b: &[T], m: usize, k: usize, n: usize) -> Vec<T> {
    let mut out = vec![T::ZERO; m * n];
    let rows_per_chunk = (crate::kernel::CHUNK / n.max(1)).clamp(1, 64);
    // Chunk ch owns rows r0..r1 of the output.
    ctx.par_chunks_mut_n(
        [&mut out[..]],
        [rows_per_chunk * n],
        m.div_ceil(rows_per_chunk),
        m * n * k >= 1 << 16,
        |ch, [o]| {
            let r0 = ch * rows_per_chunk;
            let r1 = (r0 + rows_per_chunk).min(m);
            for (ri, i) in (r0..r1).enumerate() {
                let orow = &mut o[ri * n..(ri + 1) * n];
                for p in 0..k {
                    let av = a[i * k + p];
                    let brow = &b[p * n..(p + 1) * n];
                    for (ov, &bv) in orow.iter_mut().zip(brow) {
                        *ov += av * bv;
                    }
                }
            }
        },
    );
    out
}

/// `b ← lerp(b, g, 1 − μ)`; `u ← lerp(g, b, μ)` (Nesterov) or `b`.
struct MomentumChunk<'a, T> {
    g: &'a [T],
    w: T,
    wm1: T,
    mu: T,
    mum1: T,
    nesterov: bool,
}

impl<'s, T: Float, M: Moment<T>> ChunkKernel<(&'s mut [M], &'s mut [T])> for MomentumChunk<'_, T> {
    #[inline(always)]
    fn run(&self, r: std::ops::Range<usize>, (b, u): (&'s mut [M], &'s mut [T])) {
        let g = &self.g[r];
        for i in 0..b.len() {
            let bi = lerp(b[i].load(), g[i], self.w, self.wm1);
            b[i] = M::store(bi);
            u[i] = if self.nesterov {
                lerp(g[i], bi, self.mu, self.mum1)
            } else {
                bi
            };
        }
    }
}

/// `p ← p·(1 − lr·wd)`; `p ← p − adjusted_lr·X` (one FMA, as `add_` with alpha).
struct ApplyChunk<'a, T> {
    x: &'a [T],
    decay: Option<T>,
    neg: T,
}

impl<'s, T: Float> ChunkKernel<&'s mut [T]> for ApplyChunk<'_, T> {
    #[inline(always)]
    fn run(&self, r: std::ops::Range<usize>, p: &'s mut [T]) {
        let x = &self.x[r];
        for i in 0..p.len() {
            let mut pi = p[i];
            if let Some(d) = self.decay {
                pi *= d;
            }
            p[i] = x[i].mul_add(self.neg, pi);
        }
    }
}
