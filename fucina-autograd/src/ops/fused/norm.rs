//! Normalisation over the last axis: layer_norm (affine) and rms_norm, their
//! backward nodes and their gradcheck rows. Statistics (mean, rstd) are saved
//! by the forward kernel (`fucina-core/src/kernels/fused/norm.rs`).

use fucina_core::{ExecContext, RawTensor};

use super::row;
use crate::error::Result;
use crate::suite::case::{f, OpCase};
use crate::tape::graph::{record, Backward, Grads, SavedTensors, TensorGrads};
use crate::tape::higher::rederive;
use crate::tape::tensor::Tensor;

/// x̂ = (x − μ)·r, y = x̂·w + b:
/// gx = r·(g̃ − mean(g̃) − x̂·mean(g̃ ⊙ x̂)) with g̃ = gy ⊙ w; gw = Σ gy ⊙ x̂; gb = Σ gy.
struct LayerNormBackward {
    x: RawTensor,
    w: Option<RawTensor>,
    mean: RawTensor,
    rstd: RawTensor,
    has_bias: bool,
    /// The bias itself is not needed (gb = Σ gy); its shape is w's.
    eps: f64,
}

impl Backward for LayerNormBackward {
    fn backward(&self, ctx: &ExecContext, gy: &RawTensor, needs: &[bool]) -> Result<Grads> {
        let nw = self.w.is_some() && needs.get(1).copied().unwrap_or(false);
        let nb_idx = if self.w.is_some() { 2 } else { 1 };
        let nb = self.has_bias && needs.get(nb_idx).copied().unwrap_or(false);
        let (gx, gw, gb) = ctx.layer_norm_backward(
            &self.x,
            self.w.as_ref(),
            &self.mean,
            &self.rstd,
            gy,
            needs[0],
            nw,
            nb,
        )?;
        let mut out: Grads = smallvec::smallvec![gx];
        if self.w.is_some() {
            out.push(gw);
        }
        if self.has_bias {
            out.push(gb);
        }
        Ok(out)
    }
    /// Re-derived from the decomposed forward (the bias enters linearly, so a
    /// zero stands in for its value).
    fn backward_graph(&self, saved: &SavedTensors<'_>, gy: &Tensor) -> Result<TensorGrads> {
        let mut inputs = lifted_x_w(saved, &self.x, self.w.as_ref());
        if self.has_bias {
            let zeros = saved.ctx().zeros(self.x.dtype(), &[*self.x.shape().last().unwrap_or(&0)])?;
            inputs.push(saved.input(inputs.len(), &zeros));
        }
        let (has_w, eps) = (self.w.is_some(), self.eps);
        rederive(&inputs, gy, saved.needs_input_grad(), |x| {
            let mu = x[0].mean(&[-1], true)?;
            let xc = x[0].sub(&mu)?;
            let var = xc.square()?.mean(&[-1], true)?;
            let mut y = xc.mul(&var.add_scalar(eps)?.rsqrt()?)?;
            if has_w {
                y = y.mul(&x[1])?;
            }
            if x.len() > usize::from(has_w) + 1 {
                y = y.add(&x[x.len() - 1])?;
            }
            Ok(y)
        })
    }
}

/// x and, when the norm has one, its weight (inputs 0 and 1) lifted back onto
/// the tape, for a `backward_graph` to re-derive from.
fn lifted_x_w(saved: &SavedTensors<'_>, x: &RawTensor, w: Option<&RawTensor>) -> Vec<Tensor> {
    let mut inputs = vec![saved.input(0, x)];
    inputs.extend(w.map(|w| saved.input(1, w)));
    inputs
}

/// y = x·r·w with r = 1/√(mean(x²) + ε):
/// gx = r·(g̃ − x·r²·mean(g̃ ⊙ x)) with g̃ = gy ⊙ w; gw = Σ gy ⊙ x·r.
struct RmsNormBackward {
    x: RawTensor,
    w: Option<RawTensor>,
    rstd: RawTensor,
    eps: f64,
}

impl Backward for RmsNormBackward {
    fn backward(&self, ctx: &ExecContext, gy: &RawTensor, needs: &[bool]) -> Result<Grads> {
        let nw = self.w.is_some() && needs.get(1).copied().unwrap_or(false);
        let (gx, gw) =
            ctx.rms_norm_backward(&self.x, self.w.as_ref(), &self.rstd, gy, needs[0], nw)?;
        let mut out: Grads = smallvec::smallvec![gx];
        if self.w.is_some() {
            out.push(gw);
        }
        Ok(out)
    }
    /// Re-derived from the decomposed forward.
    fn backward_graph(&self, saved: &SavedTensors<'_>, gy: &Tensor) -> Result<TensorGrads> {
        let inputs = lifted_x_w(saved, &self.x, self.w.as_ref());
        let eps = self.eps;
        rederive(&inputs, gy, saved.needs_input_grad(), |x| {
            let r = x[0].square()?.mean(&[-1], true)?.add_scalar(eps)?.rsqrt()?;
            let y = x[0].mul(&r)?;
            match x.get(1) {
                Some(w) => y.mul(w),
                None => Ok(y),
            }
        })
    }
}

impl Tensor {
    /// Layer norm over the last axis (biased variance), with optional affine
    /// weight and bias of shape `[D]`.
    ///
    /// ```
    /// use fucina_autograd::Tensor;
    /// let ctx = fucina_core::ExecContext::with_threads(1)?;
    /// let x = Tensor::constant(&ctx, &[1.0f64, 3.0, 2.0, 6.0], &[2, 2])?;
    /// let w = Tensor::variable(&ctx, &[1.0f64, 1.0], &[2])?;
    /// let y = x.layer_norm(Some(&w), None, 0.0)?; // each row → [-1, 1]
    /// assert_eq!(y.to_vec::<f64>()?, vec![-1.0, 1.0, -1.0, 1.0]);
    /// assert_eq!(x.rms_norm(None, 1e-6)?.shape(), &[2, 2]);
    /// # Ok::<(), fucina_autograd::Error>(())
    /// ```
    pub fn layer_norm(
        &self,
        weight: Option<&Tensor>,
        bias: Option<&Tensor>,
        eps: f64,
    ) -> Result<Tensor> {
        let ctx = self.ctx();
        let x = self.raw()?;
        let w = weight.map(|w| w.raw()).transpose()?;
        let b = bias.map(|b| b.raw()).transpose()?;
        let (y, mean, rstd) = ctx.layer_norm(&x, w.as_ref(), b.as_ref(), eps)?;
        let mut inputs: Vec<&Tensor> = vec![self];
        inputs.extend(weight);
        inputs.extend(bias);
        let has_bias = bias.is_some();
        Ok(record(ctx, "layer_norm", y, &inputs, |_| {
            Box::new(LayerNormBackward {
                x,
                w,
                mean,
                rstd,
                has_bias,
                eps,
            })
        }))
    }

    /// RMS norm over the last axis: x / √(mean(x²) + ε) · w.
    pub fn rms_norm(&self, weight: Option<&Tensor>, eps: f64) -> Result<Tensor> {
        let ctx = self.ctx();
        let x = self.raw()?;
        let w = weight.map(|w| w.raw()).transpose()?;
        let (y, rstd) = ctx.rms_norm(&x, w.as_ref(), eps)?;
        let mut inputs: Vec<&Tensor> = vec![self];
        inputs.extend(weight);
        Ok(record(ctx, "rms_norm", y, &inputs, |_| {
            Box::new(RmsNormBackward { x, w, rstd, eps })
        }))
    }
}

/// The gradcheck rows (with and without the affine parameters).
pub(crate) fn cases() -> Vec<OpCase> {
    vec![
        row(
            "layer_norm",
            "lambda x: F.layer_norm(x[0], (6,), x[1], x[2], 1e-5)",
            vec![f(&[3, 6]), f(&[6]), f(&[6])],
            |x| x[0].layer_norm(Some(&x[1]), Some(&x[2]), 1e-5),
        ),
        row(
            "layer_norm_plain",
            "lambda x: F.layer_norm(x[0], (6,), None, None, 1e-5)",
            vec![f(&[2, 3, 6])],
            |x| x[0].layer_norm(None, None, 1e-5),
        ),
        row(
            "rms_norm",
            "lambda x: x[0] * torch.rsqrt(x[0].square().mean(-1, keepdim=True) + 1e-6) * x[1]",
            vec![f(&[3, 6]), f(&[6])],
            |x| x[0].rms_norm(Some(&x[1]), 1e-6),
        ),
    ]
}
