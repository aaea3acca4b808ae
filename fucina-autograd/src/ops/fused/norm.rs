//! Normalisation over the last axis: layer_norm (affine) and rms_norm, their
//! backward nodes and their gradcheck rows. Statistics (mean, rstd) are saved
//! by the forward kernel (`fucina-core/src/kernels/fused/norm.rs`).

use fucina_core::{ExecContext, RawTensor};

use super::row;
use crate::error::Result;
use crate::suite::case::{f, OpCase};
use crate::tape::graph::{record, Backward, Grads};
use crate::tape::tensor::Tensor;

/// x̂ = (x − μ)·r, y = x̂·w + b:
/// gx = r·(g̃ − mean(g̃) − x̂·mean(g̃ ⊙ x̂)) with g̃ = gy ⊙ w; gw = Σ gy ⊙ x̂; gb = Σ gy.
struct LayerNormBackward {
    x: RawTensor,
    w: Option<RawTensor>,
    mean: RawTensor,
    rstd: RawTensor,
    has_bias: bool,
}

impl Backward for LayerNormBackward {
    fn name(&self) -> &'static str {
        "layer_norm"
    }
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
}

/// y = x·r·w with r = 1/√(mean(x²) + ε):
/// gx = r·(g̃ − x·r²·mean(g̃ ⊙ x)) with g̃ = gy ⊙ w; gw = Σ gy ⊙ x·r.
struct RmsNormBackward {
    x: RawTensor,
    w: Option<RawTensor>,
    rstd: RawTensor,
}

impl Backward for RmsNormBackward {
    fn name(&self) -> &'static str {
        "rms_norm"
    }
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
            Box::new(RmsNormBackward { x, w, rstd })
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
