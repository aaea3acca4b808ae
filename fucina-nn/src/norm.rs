//! Normalisation layers over the last axis: `LayerNorm` (affine weight and
//! optional bias, biased variance, PyTorch's eps 1e-5 by convention) and
//! `RMSNorm`. Scales start at ones, biases at zeros (PyTorch's defaults).

use fucina_autograd::Tensor;

use crate::error::{Error, Result};
use crate::init::{Dist, Init};
use crate::module::Forward;

fn check(module: &'static str, dim: usize, eps: f64) -> Result<()> {
    if dim == 0 || !(eps.is_finite() && eps >= 0.0) {
        return Err(Error::config(
            module,
            format!("dim ({dim}) must be positive and eps ({eps}) finite and ≥ 0"),
        ));
    }
    Ok(())
}

fn check_input(module: &'static str, x: &Tensor, dim: usize) -> Result<()> {
    if x.rank() == 0 || x.shape()[x.rank() - 1] != dim {
        return Err(Error::input(
            module,
            format!("expected [..., {dim}]"),
            x.shape(),
        ));
    }
    Ok(())
}

/// Layer normalisation over the last axis: `weight [dim]` (ones), optional
/// `bias [dim]` (zeros).
///
/// ```
/// use fucina_nn::{Init, LayerNorm};
/// let ctx = fucina_core::ExecContext::with_threads(1).unwrap();
/// let mut init = Init::new(&ctx, fucina_core::DType::F64, 0);
/// let ln = LayerNorm::new(&mut init, 2, 1e-5).unwrap();
/// let x = fucina_autograd::Tensor::constant(&ctx, &[1.0f64, 3.0], &[1, 2]).unwrap();
/// let y = ln.forward(&x).unwrap().to_vec::<f64>().unwrap();
/// assert!((y[0] + 1.0).abs() < 1e-4 && (y[1] - 1.0).abs() < 1e-4);
/// ```
#[derive(Clone, Debug, fucina_nn_derive::Module)]
pub struct LayerNorm {
    /// The scale `[dim]`.
    pub weight: Tensor,
    /// The shift `[dim]`, if any.
    pub bias: Option<Tensor>,
    /// Added to the variance.
    #[module(skip)]
    pub eps: f64,
}

impl LayerNorm {
    /// A layer norm with weight and bias.
    pub fn new(init: &mut Init, dim: usize, eps: f64) -> Result<LayerNorm> {
        Self::with_bias(init, dim, eps, true)
    }

    /// A layer norm with or without a bias.
    pub fn with_bias(init: &mut Init, dim: usize, eps: f64, bias: bool) -> Result<LayerNorm> {
        check("LayerNorm", dim, eps)?;
        let weight = init.param(&[dim], Dist::Ones)?;
        let bias = if bias {
            Some(init.param(&[dim], Dist::Zeros)?)
        } else {
            None
        };
        Ok(LayerNorm { weight, bias, eps })
    }

    /// The normalised width.
    pub fn dim(&self) -> usize {
        self.weight.numel()
    }

    /// `x [..., dim] -> [..., dim]`.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        check_input("LayerNorm", x, self.dim())?;
        Ok(x.layer_norm(Some(&self.weight), self.bias.as_ref(), self.eps)?)
    }
}

impl Forward for LayerNorm {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        LayerNorm::forward(self, x)
    }
}

/// RMS normalisation over the last axis: `x / √(mean(x²) + eps) · weight`
/// (`weight [dim]`, ones).
///
/// ```
/// use fucina_nn::{Init, RmsNorm};
/// let ctx = fucina_core::ExecContext::with_threads(1).unwrap();
/// let mut init = Init::new(&ctx, fucina_core::DType::F64, 0);
/// let n = RmsNorm::new(&mut init, 2, 0.0).unwrap();
/// let x = fucina_autograd::Tensor::constant(&ctx, &[3.0f64, 4.0], &[2]).unwrap();
/// let y = n.forward(&x).unwrap().to_vec::<f64>().unwrap();
/// let r = (12.5f64).sqrt();
/// assert!((y[0] - 3.0 / r).abs() < 1e-12);
/// ```
#[derive(Clone, Debug, fucina_nn_derive::Module)]
pub struct RmsNorm {
    /// The scale `[dim]`.
    pub weight: Tensor,
    /// Added to the mean square.
    #[module(skip)]
    pub eps: f64,
}

impl RmsNorm {
    /// An RMS norm with a ones scale.
    pub fn new(init: &mut Init, dim: usize, eps: f64) -> Result<RmsNorm> {
        check("RmsNorm", dim, eps)?;
        Ok(RmsNorm {
            weight: init.param(&[dim], Dist::Ones)?,
            eps,
        })
    }

    /// The normalised width.
    pub fn dim(&self) -> usize {
        self.weight.numel()
    }

    /// `x [..., dim] -> [..., dim]`.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        check_input("RmsNorm", x, self.dim())?;
        Ok(x.rms_norm(Some(&self.weight), self.eps)?)
    }
}

impl Forward for RmsNorm {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        RmsNorm::forward(self, x)
    }
}
