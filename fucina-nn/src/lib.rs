//! fucina-nn: the [`Module`] trait and its `#[derive(Module)]`, parameter
//! init from the counter-based RNG, layers (linear, embedding, norms,
//! dropout, activations, sequential, MLP, attention, transformer blocks),
//! a nanoGPT-layout [`Gpt`], and whole-module gradcheck.
//!
//! A layer is a plain struct of `Tensor` parameters and sub-layers with a
//! `forward`; `#[derive(Module)]` names its parameters by dotted path from
//! the field names, so a user's own model gets `named_parameters`, modes,
//! freezing and param groups from one line. Layers are built through an
//! [`Init`] (context, dtype, seed): same seed, same weights.
//!
//! ```
//! use fucina_nn::{Activation, Init, Linear, Module};
//! use fucina_core::{DType, ExecContext};
//!
//! #[derive(Module)]
//! struct Mlp {
//!     fc1: Linear,
//!     fc2: Linear,
//! }
//!
//! let ctx = ExecContext::with_threads(1)?;
//! let mut init = Init::new(&ctx, DType::F32, 0);
//! let mlp = Mlp { fc1: Linear::new(&mut init, 2, 8, true)?, fc2: Linear::new(&mut init, 8, 3, true)? };
//! let x = fucina_autograd::Tensor::constant(&ctx, &[0.5f32, -1.0], &[1, 2])?;
//! let y = mlp.fc2.forward(&Activation::Tanh.forward(&mlp.fc1.forward(&x)?)?)?;
//! assert_eq!(y.shape(), &[1, 3]);
//! assert_eq!(mlp.named_parameters()[2].0, "fc2.weight");
//! # Ok::<(), fucina_nn::Error>(())
//! ```
#![warn(missing_docs)]

// The derive names `::fucina_nn`; this makes the path resolve inside this crate too.
extern crate self as fucina_nn;

pub mod activation;
pub mod attention;
pub mod buffer;
pub mod dropout;
pub mod embedding;
pub mod error;
pub mod generation;
pub mod gradcheck;
pub mod hf;
pub mod init;
pub mod kv_cache;
pub mod linear;
pub mod models;
pub mod module;
pub mod norm;
pub mod rope;
pub mod sequential;
mod setters;
pub mod state;
pub mod transformer;

pub use activation::Activation;
pub use attention::SelfAttention;
pub use buffer::Buffer;
pub use dropout::Dropout;
pub use embedding::Embedding;
pub use error::{Error, Result};
pub use fucina_autograd::Tensor;
pub use fucina_nn_derive::Module;
pub use generation::{GenerateOptions, Generated, Sampling};
pub use gradcheck::{gradcheck_module, gradcheck_module_with, ModuleGradcheckReport};
pub use init::{Dist, Init};
pub use kv_cache::KvCache;
pub use linear::lora::{
    apply_lora, load_adapter, save_adapter, InitLoraWeights, LoraAdapter, LoraConfig, TargetModules,
};
pub use linear::Linear;
pub use models::{mean_pool, BertConfig, BertModel, CausalLm, Gpt, GptConfig};
pub use module::{Forward, Layer, Mode, Module};
pub use norm::{LayerNorm, RmsNorm};
pub use rope::{Llama3Scaling, Rope, RopeScaling};
pub use sequential::{Mlp, Sequential};
pub use state::StateDict;
/// The `tokenizers` crate behind [`hf::Tokenizer`] (re-exported so the
/// versions cannot mismatch).
pub use tokenizers;
pub use transformer::{BlockConfig, BlockInit, FeedForward, TransformerBlock};
