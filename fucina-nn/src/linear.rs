//! `Linear`: `y = x·Wᵀ + b` over the last axis, PyTorch's layout
//! (`weight [out, in]`, `bias [out]`) and default init (uniform on
//! `±1/√in` for both). The product runs through autograd's fused `linear`.
//! A frozen weight may be stored as bf16/f16 (its bias and the activations
//! stay f32/f64): the GEMM widens it while packing.
//!
//! LoRA lives in the `lora` submodule (re-exported as `fucina_nn::linear::lora`):
//! the layer holds its adapter and the adapter's functions walk layers, so
//! the two are one unit, a parent and its child, not two modules in a cycle.

pub mod lora;

use fucina_autograd::Tensor;
use fucina_core::DType;

use crate::error::{Error, Result};
use crate::init::{Dist, Init};
use crate::module::Forward;

/// A fully connected layer: `weight [out, in]`, optional `bias [out]`.
///
/// ```
/// use fucina_nn::{Init, Linear, Module};
/// let ctx = fucina_core::ExecContext::with_threads(1).unwrap();
/// let mut init = Init::new(&ctx, fucina_core::DType::F32, 0);
/// let lin = Linear::new(&mut init, 3, 2, true).unwrap();
/// let x = fucina_autograd::Tensor::constant(&ctx, &[1.0f32; 12], &[2, 2, 3]).unwrap();
/// assert_eq!(lin.forward(&x).unwrap().shape(), &[2, 2, 2]);
/// assert_eq!(lin.num_parameters(), 3 * 2 + 2);
/// ```
#[derive(Clone, Debug, fucina_nn_derive::Module)]
pub struct Linear {
    /// `[out_features, in_features]`.
    pub weight: Tensor,
    /// `[out_features]`, if the layer has a bias.
    pub bias: Option<Tensor>,
    /// A LoRA adapter (`crate::linear::lora`), when one is attached: its parameters
    /// are `lora_A.weight` and `lora_B.weight` beside `weight`.
    #[module(flatten)]
    pub lora: Option<lora::LoraAdapter>,
}

impl Linear {
    /// PyTorch's default init: weight and bias uniform on `±1/√in`.
    pub fn new(
        init: &mut Init,
        in_features: usize,
        out_features: usize,
        bias: bool,
    ) -> Result<Linear> {
        let d = Dist::kaiming_uniform(in_features);
        Self::with_dist(init, in_features, out_features, bias, d, d)
    }

    /// A linear layer with explicit weight and bias distributions (GPT:
    /// `Dist::normal(0.02)` and `Dist::Zeros`).
    pub fn with_dist(
        init: &mut Init,
        in_features: usize,
        out_features: usize,
        bias: bool,
        weight: Dist,
        bias_dist: Dist,
    ) -> Result<Linear> {
        Error::require_positive(
            "Linear",
            &[("in_features", in_features), ("out_features", out_features)],
        )?;
        let w = init.param(&[out_features, in_features], weight)?;
        let b = if bias {
            Some(init.param(&[out_features], bias_dist)?)
        } else {
            None
        };
        Ok(Linear {
            weight: w,
            bias: b,
            lora: None,
        })
    }

    /// A layer over existing tensors (`weight [out, in]`, `bias [out]`).
    pub fn from_tensors(weight: Tensor, bias: Option<Tensor>) -> Result<Linear> {
        if weight.rank() != 2 {
            return Err(Error::config(
                "Linear",
                format!("weight must be [out, in], got {:?}", weight.shape()),
            ));
        }
        if let Some(b) = &bias {
            // A frozen bf16/f16 weight keeps its bias in the compute dtype.
            let low = matches!(weight.dtype(), DType::BF16 | DType::F16);
            let dtype_ok = b.dtype() == weight.dtype() || (low && b.dtype().is_compute_float());
            if b.shape() != [weight.shape()[0]] || !dtype_ok {
                return Err(Error::config(
                    "Linear",
                    format!(
                        "bias must be [{}] {:?}, got {:?} {:?}",
                        weight.shape()[0],
                        weight.dtype(),
                        b.shape(),
                        b.dtype()
                    ),
                ));
            }
        }
        Ok(Linear {
            weight,
            bias,
            lora: None,
        })
    }

    /// The input width.
    pub fn in_features(&self) -> usize {
        self.weight.shape()[1]
    }

    /// The output width.
    pub fn out_features(&self) -> usize {
        self.weight.shape()[0]
    }

    /// `x [..., in] -> [..., out]`.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        if x.rank() == 0 || x.shape()[x.rank() - 1] != self.in_features() {
            return Err(Error::input(
                "Linear",
                format!("expected [..., {}]", self.in_features()),
                x.shape(),
            ));
        }
        let y = x.linear(&self.weight, self.bias.as_ref())?;
        match &self.lora {
            // Unmerged adapter: y + scale·B(A(dropout(x))), PEFT's order.
            Some(l) if !l.is_merged() => Ok(y.add(&l.delta(x)?)?),
            _ => Ok(y),
        }
    }
}

impl Forward for Linear {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        Linear::forward(self, x)
    }
}
