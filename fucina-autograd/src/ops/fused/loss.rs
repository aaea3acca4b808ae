//! Losses: the fused cross-entropy from logits (ignore_index, label
//! smoothing, mean / sum / none; kernels in
//! `fucina-core/src/kernels/fused/loss.rs`, whose backward reuses the
//! forward's per-row max and sum), and the losses composed from other ops
//! (nll, mse, bce with logits, huber), each with its gradcheck rows.

use fucina_core::kernels::fused::loss::{CrossEntropyOpts, CrossEntropySaved, Reduction};
use fucina_core::{DType, ExecContext, RawTensor};

use super::row;
use crate::error::{Error, Result};
use crate::ops::elementwise::not_differentiable;
use crate::suite::case::{f, fr, idx, OpCase};
use crate::tape::graph::{record, Backward, Grads, SavedTensors, TensorGrads};
use crate::tape::higher::rederive;
use crate::tape::tensor::Tensor;

/// dlogits = gy · (softmax(x) − target distribution) [/ count for mean];
/// ignored rows get 0.
struct CrossEntropyBackward {
    logits: RawTensor,
    targets: RawTensor,
    saved: CrossEntropySaved,
    opts: CrossEntropyOpts,
}

impl Backward for CrossEntropyBackward {
    fn backward(&self, ctx: &ExecContext, gy: &RawTensor, _needs: &[bool]) -> Result<Grads> {
        let g =
            ctx.cross_entropy_backward(&self.logits, &self.targets, &self.saved, gy, self.opts)?;
        Ok(smallvec::smallvec![Some(g), None])
    }
    /// Re-derived from the decomposed loss: per row −Σ_c q_c·log_softmax(x)_c
    /// with q = (1−ε)·onehot + ε/C (0 on ignored rows), then the reduction.
    fn backward_graph(&self, saved: &SavedTensors<'_>, gy: &Tensor) -> Result<TensorGrads> {
        let x = saved.input(0, &self.logits);
        let c = *self.logits.shape().last().unwrap_or(&1);
        let t: Vec<i64> = Tensor::new_internal(saved.ctx(), self.targets.clone(), false, None)
            .to_vec_f64()?
            .into_iter()
            .map(|v| v as i64)
            .collect();
        let eps = self.opts.label_smoothing;
        let mut q = vec![0.0f64; t.len() * c];
        let mut count = 0usize;
        for (r, &ti) in t.iter().enumerate() {
            if Some(ti) == self.opts.ignore_index {
                continue;
            }
            count += 1;
            for v in &mut q[r * c..(r + 1) * c] {
                *v = eps / c as f64;
            }
            if let Ok(ti) = usize::try_from(ti) {
                if ti < c {
                    q[r * c + ti] += 1.0 - eps;
                }
            }
        }
        let q = saved.ctx().to_dtype(&saved.ctx().from_slice(&q, &[t.len(), c])?, self.logits.dtype())?;
        let q = saved.constant(&q);
        let (reduction, out_shape) = (self.opts.reduction, self.targets.shape().to_vec());
        let mut grads = rederive(&[x], gy, &saved.needs_input_grad()[..1], |x| {
            let lp = x[0].reshape([t.len(), c])?.log_softmax(-1)?;
            let per_row = lp.mul(&q)?.sum(&[-1], false)?.neg()?;
            match reduction {
                Reduction::None => per_row.reshape(&out_shape[..]),
                Reduction::Sum => per_row.sum_all(),
                Reduction::Mean => per_row.sum_all()?.div_scalar(count.max(1) as f64),
            }
        })?;
        grads.push(None);
        Ok(grads)
    }
}

impl Tensor {
    /// Cross-entropy of `[N, C]` logits against `[N]` integer targets.
    /// With mean reduction and every row ignored, the loss is 0 (not NaN).
    /// Targets of another dtype (one-hot or probability floats) are an
    /// error naming the `targets` argument.
    ///
    /// ```
    /// use fucina_autograd::Tensor;
    /// let ctx = fucina_core::ExecContext::with_threads(1)?;
    /// use fucina_autograd::CrossEntropyOpts;
    /// let logits = Tensor::variable(&ctx, &[0.0f64, 0.0, 0.0, 0.0], &[2, 2])?;
    /// let targets = Tensor::constant(&ctx, &[0i64, 1], &[2])?;
    /// let loss = logits.cross_entropy(&targets, CrossEntropyOpts::default())?;
    /// assert!((loss.item()? - 2f64.ln()).abs() < 1e-12); // uniform over 2 classes
    /// loss.backward()?;
    /// # Ok::<(), fucina_autograd::Error>(())
    /// ```
    pub fn cross_entropy(&self, targets: &Tensor, opts: CrossEntropyOpts) -> Result<Tensor> {
        class_index_targets("cross_entropy", targets)?;
        if targets.requires_grad() {
            return Err(not_differentiable("cross_entropy (targets)"));
        }
        let x = self.raw()?;
        let t = targets.raw()?;
        let ctx = self.ctx();
        let (loss, saved) = ctx.cross_entropy(&x, &t, opts)?;
        Ok(record(ctx, "cross_entropy", loss, &[self, targets], |_| {
            Box::new(CrossEntropyBackward {
                logits: x,
                targets: t,
                saved,
                opts,
            })
        }))
    }
}

/// Class-index losses take integer targets; a float tensor here is almost
/// always one-hot or soft labels, which these losses do not take.
fn class_index_targets(op: &'static str, targets: &Tensor) -> Result<()> {
    if matches!(targets.dtype(), DType::I64 | DType::I32) {
        return Ok(());
    }
    Err(Error::WrongArgumentDType {
        op,
        arg: "targets",
        expected: "must be integer class indices (i64 or i32) of shape [N]",
        got: targets.dtype(),
        shape: targets.shape().to_vec(),
        hint: "for one-hot rows pass their argmax (`targets.argmax(-1, false)`)",
    })
}

/// Elementwise losses compare `input` and `target` element by element: their
/// shapes must be equal, since broadcasting `[N, 1]` against `[N]` would
/// silently compare every pair and return a wrong loss.
fn same_shape_target(op: &'static str, input: &Tensor, target: &Tensor) -> Result<()> {
    if input.shape() == target.shape() {
        return Ok(());
    }
    Err(Error::ArgumentShapeMismatch {
        op,
        lhs_name: "input",
        lhs: input.shape().to_vec(),
        rhs_name: "target",
        rhs: target.shape().to_vec(),
        hint: "reshape one of them, e.g. `input.reshape(target.shape())`",
    })
}

impl Tensor {
    fn reduce_loss(&self, reduction: Reduction) -> Result<Tensor> {
        match reduction {
            Reduction::Mean => self.mean_all(),
            Reduction::Sum => self.sum_all(),
            Reduction::None => Ok(self.clone()),
        }
    }

    /// Negative log-likelihood of `[N, C]` log-probabilities at `[N]` integer
    /// targets; `ignore_index` rows are excluded (mean over the rest; all
    /// ignored gives 0).
    pub fn nll_loss(
        &self,
        targets: &Tensor,
        ignore_index: Option<i64>,
        reduction: Reduction,
    ) -> Result<Tensor> {
        class_index_targets("nll_loss", targets)?;
        if targets.requires_grad() {
            return Err(not_differentiable("nll_loss (targets)"));
        }
        let ctx = self.ctx();
        let tv: Vec<i64> = targets
            .to_vec_f64()?
            .into_iter()
            .map(|v| v as i64)
            .collect();
        let keep: Vec<bool> = tv.iter().map(|&t| Some(t) != ignore_index).collect();
        // Ignored rows gather class 0 and are then zeroed by the weight.
        let safe: Vec<i64> = tv
            .iter()
            .zip(&keep)
            .map(|(&t, &k)| if k { t } else { 0 })
            .collect();
        let n = safe.len();
        let idx = Tensor::leaf(ctx, ctx.from_slice(&safe, &[n, 1])?);
        let picked = self.gather(1, &idx)?.reshape([n])?;
        let wv: Vec<f64> = keep.iter().map(|&k| if k { 1.0 } else { 0.0 }).collect();
        let w = Tensor::leaf(
            ctx,
            ctx.to_dtype(&ctx.from_slice(&wv, &[n])?, self.dtype())?
        );
        let per_row = picked.mul(&w)?.neg()?;
        match reduction {
            Reduction::None => Ok(per_row),
            Reduction::Sum => per_row.sum_all(),
            Reduction::Mean => {
                let count = keep.iter().filter(|&&k| k).count();
                per_row.sum_all()?.div_scalar(count.max(1) as f64)
            }
        }
    }

    /// Mean squared error against `target`, which must have the same shape
    /// (no broadcasting: a mismatch is an error that says so).
    ///
    /// ```
    /// use fucina_autograd::{Reduction, Tensor};
    /// let ctx = fucina_core::ExecContext::with_threads(1)?;
    /// let y = Tensor::variable(&ctx, &[1.0f64, 2.0, 4.0], &[3])?;
    /// let t = Tensor::constant(&ctx, &[1.0f64, 2.0, 3.0], &[3])?;
    /// let loss = y.mse_loss(&t, Reduction::Mean)?; // (0 + 0 + 1) / 3
    /// assert!((loss.item()? - 1.0 / 3.0).abs() < 1e-12);
    /// let col = Tensor::constant(&ctx, &[1.0f64, 2.0, 3.0], &[3, 1])?;
    /// assert!(y.mse_loss(&col, Reduction::Mean).is_err()); // [3] vs [3, 1]
    /// # Ok::<(), fucina_autograd::Error>(())
    /// ```
    pub fn mse_loss(&self, target: &Tensor, reduction: Reduction) -> Result<Tensor> {
        same_shape_target("mse_loss", self, target)?;
        self.sub(target)?.square()?.reduce_loss(reduction)
    }

    /// Binary cross-entropy on logits: softplus(x) − x·y (stable; gradient σ(x) − y).
    /// `target` must have the input's shape.
    pub fn bce_with_logits(&self, target: &Tensor, reduction: Reduction) -> Result<Tensor> {
        same_shape_target("bce_with_logits", self, target)?;
        self.softplus()?
            .sub(&self.mul(target)?)?
            .reduce_loss(reduction)
    }

    /// Huber loss with threshold `delta`: ½d² where |d| < δ, else δ(|d| − ½δ).
    /// `target` must have the input's shape, and `delta` must be positive
    /// (PyTorch's rule; a negative or NaN δ, which would silently give a
    /// meaningless loss, is `InvalidArgument`).
    pub fn huber_loss(&self, target: &Tensor, delta: f64, reduction: Reduction) -> Result<Tensor> {
        if delta.is_nan() || delta <= 0.0 {
            return Err(Error::Core(fucina_core::Error::InvalidArgument {
                op: "huber_loss",
                msg: format!("delta {delta} must be positive"),
            }));
        }
        same_shape_target("huber_loss", self, target)?;
        let d = self.sub(target)?;
        let ad = d.abs()?;
        let small = ad.compare(
            &Tensor::scalar(self.ctx(), self.dtype(), delta)?,
            fucina_core::kernels::elementwise::CmpOp::Lt,
        )?;
        let quad = d.square()?.mul_scalar(0.5)?;
        let lin = ad.sub_scalar(0.5 * delta)?.mul_scalar(delta)?;
        quad.where_cond(&small, &lin)?.reduce_loss(reduction)
    }
}

/// The gradcheck rows: cross-entropy plain, smoothed with a sum, with an
/// ignored class and no reduction; then the composed losses.
pub(crate) fn cases() -> Vec<OpCase> {
    vec![
        row(
            "cross_entropy",
            "lambda x: F.cross_entropy(x[0], x[1])",
            vec![f(&[5, 4]), idx(&[5], 4)],
            |x| x[0].cross_entropy(&x[1], CrossEntropyOpts::default()),
        ),
        row(
            "cross_entropy_smooth_sum",
            "lambda x: F.cross_entropy(x[0], x[1], label_smoothing=0.1, reduction='sum')",
            vec![f(&[5, 4]), idx(&[5], 4)],
            |x| {
                x[0].cross_entropy(
                    &x[1],
                    CrossEntropyOpts {
                        label_smoothing: 0.1,
                        reduction: Reduction::Sum,
                        ..Default::default()
                    },
                )
            },
        ),
        row(
            "cross_entropy_ignore_none",
            "lambda x: F.cross_entropy(x[0], x[1], ignore_index=2, reduction='none')",
            vec![f(&[5, 4]), idx(&[5], 4)],
            |x| {
                x[0].cross_entropy(
                    &x[1],
                    CrossEntropyOpts {
                        ignore_index: Some(2),
                        reduction: Reduction::None,
                        ..Default::default()
                    },
                )
            },
        ),
        row(
            "nll_loss",
            "lambda x: F.nll_loss(x[0].log_softmax(1), x[1], ignore_index=1)",
            vec![f(&[5, 4]), idx(&[5], 4)],
            |x| {
                x[0].log_softmax(1)?
                    .nll_loss(&x[1], Some(1), Reduction::Mean)
            },
        ),
        row(
            "mse_loss",
            "lambda x: F.mse_loss(x[0], x[1])",
            vec![f(&[3, 4]), f(&[3, 4])],
            |x| x[0].mse_loss(&x[1], Reduction::Mean),
        ),
        row(
            "bce_with_logits",
            "lambda x: F.binary_cross_entropy_with_logits(x[0], x[1])",
            vec![f(&[3, 4]), fr(&[3, 4], 0.0, 1.0)],
            |x| x[0].bce_with_logits(&x[1], Reduction::Mean),
        ),
        row(
            "huber_loss",
            "lambda x: F.huber_loss(x[0], x[1], delta=0.5, reduction='sum')",
            vec![f(&[3, 4]), f(&[3, 4])],
            |x| x[0].huber_loss(&x[1], 0.5, Reduction::Sum),
        ),
    ]
}
