//! Activations as a parameter-free module (`Activation`), so a model's
//! config can name one and `Sequential` can hold one. Each variant is one
//! autograd pointwise op (whose backward carries its derivative).

use fucina_autograd::Tensor;
use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::module::{Forward, Module};

/// A pointwise activation. Serde names are Hugging Face's `hidden_act`
/// strings (`"gelu"` is the exact erf form, `"gelu_new"` /
/// `"gelu_pytorch_tanh"` the tanh approximation).
///
/// ```
/// use fucina_nn::Activation;
/// let ctx = fucina_core::ExecContext::with_threads(1).unwrap();
/// let x = fucina_autograd::Tensor::constant(&ctx, &[-1.0f64, 2.0], &[2]).unwrap();
/// assert_eq!(Activation::Relu.forward(&x).unwrap().to_vec::<f64>().unwrap(), vec![0.0, 2.0]);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Activation {
    /// max(x, 0) (relu'(0) = 0, as PyTorch).
    Relu,
    /// GELU, exact: x·Φ(x).
    Gelu,
    /// GELU, tanh approximation (PyTorch `approximate="tanh"`, GPT-2).
    #[serde(alias = "gelu_new", alias = "gelu_pytorch_tanh")]
    GeluTanh,
    /// tanh(x).
    Tanh,
    /// 1 / (1 + e⁻ˣ).
    Sigmoid,
    /// x·sigmoid(x) (swish).
    #[serde(alias = "swish")]
    Silu,
    /// ln(1 + eˣ) (PyTorch's beta 1, threshold 20).
    Softplus,
    /// x·tanh(softplus(x)).
    Mish,
    /// x·min(max(x + 3, 0), 6)/6 (`"hardswish"`).
    Hardswish,
    /// x.
    Identity,
}

impl Activation {
    /// Applies the activation.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        Ok(match self {
            Activation::Relu => x.relu()?,
            Activation::Gelu => x.gelu_erf()?,
            Activation::GeluTanh => x.gelu()?,
            Activation::Tanh => x.tanh()?,
            Activation::Sigmoid => x.sigmoid()?,
            Activation::Silu => x.silu()?,
            Activation::Softplus => x.softplus()?,
            Activation::Mish => x.mish()?,
            Activation::Hardswish => x.hardswish()?,
            Activation::Identity => x.clone(),
        })
    }
}

/// No parameters and no mode; reported by `visit_modules`.
impl Module for Activation {
    fn visit_params(&self, _prefix: &str, _f: &mut dyn FnMut(&str, &Tensor)) {}
    fn visit_params_mut(&mut self, _prefix: &str, _f: &mut dyn FnMut(&str, &mut Tensor)) {}
    fn visit_buffers(&self, _prefix: &str, _f: &mut dyn FnMut(&str, &crate::buffer::Buffer)) {}
    fn visit_modules(&self, prefix: &str, f: &mut dyn FnMut(&str, &dyn std::any::Any)) {
        f(prefix, self);
    }
    fn visit_modules_mut(&mut self, prefix: &str, f: &mut dyn FnMut(&str, &mut dyn std::any::Any)) {
        f(prefix, self);
    }
    fn set_training(&self, _training: bool) {}
}

impl Forward for Activation {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        Activation::forward(self, x)
    }
}
