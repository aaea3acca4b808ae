//! Chains of one-input layers: `Sequential` (any `Layer`s, boxed, named
//! `0`, `1`, ... as PyTorch's `nn.Sequential`) and `Mlp` (linear layers
//! with an activation between them, optional dropout after each hidden
//! activation).

use fucina_autograd::Tensor;

use crate::activation::Activation;
use crate::dropout::Dropout;
use crate::error::{Error, Result};
use crate::init::Init;
use crate::linear::Linear;
use crate::module::{Forward, Layer};

/// Layers applied in order. Parameters are named by position, as PyTorch's
/// `nn.Sequential` (`0.weight`, `2.bias`, ...; activations hold none).
///
/// ```
/// use fucina_nn::{Activation, Init, Linear, Module, Sequential};
/// let ctx = fucina_core::ExecContext::with_threads(1).unwrap();
/// let mut init = Init::new(&ctx, fucina_core::DType::F32, 0);
/// let net = Sequential::new()
///     .with(Linear::new(&mut init, 2, 8, true).unwrap())
///     .with(Activation::Tanh)
///     .with(Linear::new(&mut init, 8, 3, true).unwrap());
/// assert_eq!(net.named_parameters()[2].0, "2.weight");
/// let x = fucina_autograd::Tensor::constant(&ctx, &[1.0f32, 0.0], &[1, 2]).unwrap();
/// assert_eq!(net.forward(&x).unwrap().shape(), &[1, 3]);
/// ```
#[derive(fucina_nn_derive::Module, Default)]
pub struct Sequential {
    /// The layers, in application order.
    #[module(flatten)]
    pub layers: Vec<Box<dyn Layer>>,
}

impl std::fmt::Debug for Sequential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sequential")
            .field("layers", &self.layers.len())
            .finish()
    }
}

impl Sequential {
    /// An empty chain (the identity).
    pub fn new() -> Sequential {
        Sequential { layers: Vec::new() }
    }

    /// The chain with `layer` appended.
    pub fn with<L: Layer + 'static>(mut self, layer: L) -> Sequential {
        self.layers.push(Box::new(layer));
        self
    }

    /// Appends `layer`.
    pub fn push<L: Layer + 'static>(&mut self, layer: L) {
        self.layers.push(Box::new(layer));
    }

    /// The number of layers.
    pub fn len(&self) -> usize {
        self.layers.len()
    }

    /// True with no layers.
    pub fn is_empty(&self) -> bool {
        self.layers.is_empty()
    }

    /// Applies every layer in order.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let mut h = x.clone();
        for l in &self.layers {
            h = l.forward(&h)?;
        }
        Ok(h)
    }
}

impl Forward for Sequential {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        Sequential::forward(self, x)
    }
}

/// A multi-layer perceptron: `widths = [in, h1, ..., out]` gives
/// `widths.len() − 1` linear layers (`layers.0`, `layers.1`, ...) with
/// `activation` (and dropout, if any) after every one but the last.
///
/// ```
/// use fucina_nn::{Activation, Init, Mlp, Module};
/// let ctx = fucina_core::ExecContext::with_threads(1).unwrap();
/// let mut init = Init::new(&ctx, fucina_core::DType::F32, 0);
/// let mlp = Mlp::new(&mut init, &[2, 64, 64, 3], Activation::Tanh).unwrap();
/// assert_eq!(mlp.num_parameters(), 2 * 64 + 64 + 64 * 64 + 64 + 64 * 3 + 3);
/// assert_eq!(mlp.named_parameters()[4].0, "layers.2.weight");
/// ```
#[derive(Debug, fucina_nn_derive::Module)]
pub struct Mlp {
    /// The linear layers.
    pub layers: Vec<Linear>,
    /// Applied after every layer but the last.
    pub activation: Activation,
    /// Applied after every hidden activation, if any.
    pub dropout: Option<Dropout>,
}

impl Mlp {
    /// An MLP with PyTorch's default init and no dropout.
    pub fn new(init: &mut Init, widths: &[usize], activation: Activation) -> Result<Mlp> {
        if widths.len() < 2 {
            return Err(Error::config(
                "Mlp",
                format!("widths needs at least [in, out], got {widths:?}"),
            ));
        }
        let layers = widths
            .windows(2)
            .map(|w| Linear::new(init, w[0], w[1], true))
            .collect::<Result<Vec<_>>>()?;
        Ok(Mlp {
            layers,
            activation,
            dropout: None,
        })
    }

    /// The MLP with dropout `p` after each hidden activation.
    pub fn with_dropout(mut self, init: &mut Init, p: f64) -> Result<Mlp> {
        self.dropout = Some(Dropout::new(init, p)?);
        Ok(self)
    }

    /// `x [..., in] -> [..., out]`.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let n = self.layers.len();
        let mut h = x.clone();
        for (i, l) in self.layers.iter().enumerate() {
            h = l.forward(&h)?;
            if i + 1 < n {
                h = self.activation.forward(&h)?;
                if let Some(d) = &self.dropout {
                    h = d.forward(&h)?;
                }
            }
        }
        Ok(h)
    }
}

impl Forward for Mlp {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        Mlp::forward(self, x)
    }
}
