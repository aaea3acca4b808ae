//! Activations as a parameter-free module (`Activation`), so a model's
//! config can name one and `Sequential` can hold one. Each variant is one
//! autograd pointwise op (whose backward carries its derivative), generated
//! from the core unary op table's `activation:` entries.

use fucina_autograd::Tensor;
use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::module::{Forward, Module};

/// Generates [`Activation`] and its `forward` from the unary op table
/// (`fucina-core/src/kernels/elementwise/unary_ops.rs`): one variant per
/// entry with an `activation:` hook, applying that entry's `Tensor` method,
/// plus `Identity`.
macro_rules! activation_enum {
    ($( {
        $docs:tt $V:ident $params:tt $name:literal $method:ident $saved:ident $dom:tt $f:tt $df:tt
        $rf:tt $rdf:tt $torch:literal $special:tt $fwd:tt $bwd:tt $wd:tt
        [$( $Act:ident $( ( $($alias:literal),+ ) )? )?]
    } )*) => {
        /// A pointwise activation: the unary ops the table marks `activation:`,
        /// and `Identity`. Serde names are Hugging Face's `hidden_act` strings
        /// (`"gelu"` is the exact erf form, `"gelu_new"` / `"gelu_pytorch_tanh"`
        /// the tanh approximation).
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
            $($(
                #[doc = concat!("`Tensor::", stringify!($method), "`: the table's `", $name, "` (PyTorch `", $torch, "`).")]
                $( #[serde($(alias = $alias),+)] )?
                $Act,
            )?)*
            /// x.
            Identity,
        }

        impl Activation {
            /// Applies the activation.
            pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
                Ok(match self {
                    $($( Activation::$Act => x.$method()?, )?)*
                    Activation::Identity => x.clone(),
                })
            }
        }
    };
}
fucina_core::for_each_unary_op!(activation_enum);

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
