//! Softmax and log-softmax along an axis, and their causal variants over the
//! last axis: the methods, the backward node and the gradcheck rows. The
//! kernels (forward, backward, reference) are
//! `fucina-core/src/kernels/fused/softmax.rs`; `logsumexp`, a reduction over
//! the same row kernels, is in `ops/reduce.rs`.

use fucina_core::{ExecContext, RawTensor};

use super::row;
use crate::error::Result;
use crate::ops::axis_of;
use crate::suite::case::{f, OpCase};
use crate::tape::graph::{record, Backward, Grads, SavedTensors, TensorGrads};
use crate::tape::tensor::Tensor;

/// softmax: gx = y ⊙ (gy − Σ gy ⊙ y); log_softmax: gx = gy − exp(y) ⊙ Σ gy.
/// The causal variants share these formulas; masked entries get no gradient
/// (causal log-softmax has its own kernel so that gy does not leak through them).
struct SoftmaxBackward {
    y: RawTensor,
    axis: usize,
    log: bool,
    causal: bool,
}

impl Backward for SoftmaxBackward {
    fn backward(&self, ctx: &ExecContext, gy: &RawTensor, _needs: &[bool]) -> Result<Grads> {
        let g = match (self.log, self.causal) {
            // Masked entries (y = −∞) must not pass gy through.
            (true, true) => ctx.log_softmax_causal_backward(&self.y, gy)?,
            (true, false) => ctx.log_softmax_backward(&self.y, gy, self.axis)?,
            (false, _) => ctx.softmax_backward(&self.y, gy, self.axis)?,
        };
        Ok(smallvec::smallvec![Some(g)])
    }
    /// The same formulas over the lifted output y (its history is this node).
    fn backward_graph(&self, saved: &SavedTensors<'_>, gy: &Tensor) -> Result<TensorGrads> {
        let y = saved.output(&self.y);
        let axis = self.axis as isize;
        let g = if self.log {
            let g = gy.sub(&y.exp()?.mul(&gy.sum(&[axis], true)?)?)?;
            if self.causal {
                // Masked entries (y = −∞) get no gradient.
                let masked = saved.ctx().compare_scalar(&self.y, f64::NEG_INFINITY, fucina_core::kernels::elementwise::CmpOp::Eq)?;
                g.masked_fill(&saved.constant(&masked), 0.0)?
            } else {
                g
            }
        } else {
            y.mul(&gy.sub(&gy.mul(&y)?.sum(&[axis], true)?)?)?
        };
        Ok(smallvec::smallvec![Some(g)])
    }
}

impl Tensor {
    fn softmax_impl(&self, axis: isize, log: bool, causal: bool) -> Result<Tensor> {
        let name = if log { "log_softmax" } else { "softmax" };
        let a = axis_of(name, self, axis)?;
        let ctx = self.ctx();
        let x = self.value()?;
        let y = match (log, causal) {
            (false, false) => ctx.softmax(&x, a)?,
            (true, false) => ctx.log_softmax(&x, a)?,
            (false, true) => ctx.softmax_causal(&x)?,
            (true, true) => ctx.log_softmax_causal(&x)?,
        };
        drop(x);
        Ok(record(ctx, name, y, &[self], |y| {
            Box::new(SoftmaxBackward {
                y: y.clone(),
                axis: a,
                log,
                causal,
            })
        }))
    }

    /// Softmax along `axis`.
    ///
    /// ```
    /// use fucina_autograd::Tensor;
    /// let ctx = fucina_core::ExecContext::with_threads(1)?;
    /// let x = Tensor::constant(&ctx, &[0.0f64, 0.0, 1.0, 1.0], &[2, 2])?;
    /// let p = x.softmax(-1)?;
    /// assert_eq!(p.to_vec::<f64>()?, vec![0.5, 0.5, 0.5, 0.5]);
    /// let lp = x.log_softmax(-1)?;
    /// assert!((lp.to_vec::<f64>()?[0] - 0.5f64.ln()).abs() < 1e-12);
    /// # Ok::<(), fucina_autograd::Error>(())
    /// ```
    pub fn softmax(&self, axis: isize) -> Result<Tensor> {
        self.softmax_impl(axis, false, false)
    }

    /// Log-softmax along `axis`.
    pub fn log_softmax(&self, axis: isize) -> Result<Tensor> {
        self.softmax_impl(axis, true, false)
    }

    /// Softmax over the last axis with a causal mask: entry (.., i, j) with
    /// j > i + (cols − rows) gets probability 0.
    pub fn softmax_causal(&self) -> Result<Tensor> {
        self.softmax_impl(-1, false, true)
    }

    /// Log-softmax over the last axis with a causal mask (masked entries −∞).
    pub fn log_softmax_causal(&self) -> Result<Tensor> {
        self.softmax_impl(-1, true, true)
    }
}

/// The gradcheck rows: along the last axis and a leading one, log, causal.
pub(crate) fn cases() -> Vec<OpCase> {
    vec![
        row(
            "softmax",
            "lambda x: x[0].softmax(1)",
            vec![f(&[3, 5])],
            |x| x[0].softmax(1),
        ),
        row(
            "softmax_axis0",
            "lambda x: x[0].softmax(0)",
            vec![f(&[3, 5])],
            |x| x[0].softmax(0),
        ),
        row(
            "log_softmax",
            "lambda x: x[0].log_softmax(-1)",
            vec![f(&[3, 5])],
            |x| x[0].log_softmax(-1),
        ),
        row(
            "softmax_causal",
            "lambda x: x[0].masked_fill(causal_mask(*x[0].shape[-2:]), float('-inf')).softmax(-1)",
            vec![f(&[2, 4, 4])],
            |x| x[0].softmax_causal(),
        ),
        row(
            "log_softmax_causal",
            "lambda x: x[0].masked_fill(causal_mask(*x[0].shape[-2:]), float('-inf')).log_softmax(-1)",
            vec![f(&[2, 3, 4])],
            |x| x[0].log_softmax_causal(),
        ),
    ]
}
