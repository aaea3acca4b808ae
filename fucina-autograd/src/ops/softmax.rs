//! Softmax family along an axis (optionally causal), and logsumexp.

use fucina_core::{ExecContext, RawTensor};

use crate::error::Result;
use crate::ops::axis_of;
use crate::tape::graph::{record, Backward, Grads};
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
    fn name(&self) -> &'static str {
        if self.log {
            "log_softmax"
        } else {
            "softmax"
        }
    }
    fn backward(&self, ctx: &ExecContext, gy: &RawTensor, _needs: &[bool]) -> Result<Grads> {
        let g = match (self.log, self.causal) {
            // Masked entries (y = −∞) must not pass gy through.
            (true, true) => ctx.log_softmax_causal_backward(&self.y, gy)?,
            (true, false) => ctx.log_softmax_backward(&self.y, gy, self.axis)?,
            (false, _) => ctx.softmax_backward(&self.y, gy, self.axis)?,
        };
        Ok(smallvec::smallvec![Some(g)])
    }
}

/// lse = log Σ eˣ: gx = gy ⊙ exp(x − lse).
struct LogsumexpBackward {
    x: RawTensor,
    lse_keepdim: RawTensor,
}

impl Backward for LogsumexpBackward {
    fn name(&self) -> &'static str {
        "logsumexp"
    }
    fn backward(&self, ctx: &ExecContext, gy: &RawTensor, _needs: &[bool]) -> Result<Grads> {
        use fucina_core::kernels::elementwise::{BinaryOp, UnaryOp};
        let p = ctx.unary(
            &ctx.binary(&self.x, &self.lse_keepdim, BinaryOp::Sub)?,
            UnaryOp::Exp,
        )?;
        let gy = ctx.reshape(gy, self.lse_keepdim.shape())?;
        Ok(smallvec::smallvec![Some(ctx.binary(
            &p,
            &gy,
            BinaryOp::Mul
        )?)])
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

    /// log Σ exp(x) along `axis`, computed stably.
    pub fn logsumexp(&self, axis: isize, keepdim: bool) -> Result<Tensor> {
        let a = axis_of("logsumexp", self, axis)?;
        let ctx = self.ctx();
        let x = self.raw()?;
        let y = ctx.logsumexp(&x, a, keepdim)?;
        Ok(record(ctx, "logsumexp", y, &[self], |y| {
            let mut kd: Vec<usize> = x.shape().to_vec();
            kd[a] = 1;
            let lse_keepdim = match y.reshape(&kd) {
                Ok(v) => v,
                Err(_) => y.clone(),
            };
            Box::new(LogsumexpBackward { x, lse_keepdim })
        }))
    }
}
