//! What a training loop uses, in one import: `use fucina::prelude::*;`.
//!
//! Tensors and the context, the scope trait, no-grad, the option structs of
//! the ops, gradcheck, the `Module` trait with its derive and the nn layers,
//! the optimizers with their configs, schedules and
//! clipping, checkpoints with their `TrainerState` (whose `extra` field is
//! a `serde_json::Value`: `fucina::serde_json`), the Hugging Face
//! `Tokenizer`, the attention head helpers `split_heads`/`merge_heads`, and
//! the umbrella `Result`.
//!
//! ```
//! use fucina::prelude::*;
//!
//! #[derive(Module)]
//! struct Classifier {
//!     body: Linear,
//!     head: Linear,
//! }
//!
//! // A crate that depends on `fucina` only gets `::fucina::nn` paths from
//! // the derive automatically; the attribute spells it out.
//! #[derive(Module)]
//! #[module(crate = "fucina::nn")]
//! struct Wrapper {
//!     inner: Classifier,
//! }
//!
//! fn main() -> fucina::Result<()> {
//!     let ctx = ExecContext::with_threads(1)?;
//!     let mut init = Init::new(&ctx, DType::F32, 0);
//!     let m = Wrapper {
//!         inner: Classifier { body: Linear::new(&mut init, 2, 4, true)?, head: Linear::new(&mut init, 4, 3, true)? },
//!     };
//!     assert_eq!(m.named_parameters()[2].0, "inner.head.weight");
//!     let mut opt = AdamW::single(m.parameters(), AdamConfig::adamw(1e-3))?;
//!     {
//!         let _scope = ctx.scope();
//!         let x = Tensor::constant(&ctx, &[0.5f32, -0.5], &[1, 2])?;
//!         let y = m.inner.head.forward(&m.inner.body.forward(&x)?.tanh()?)?;
//!         y.square()?.mean_all()?.backward()?;
//!     }
//!     opt.step()?;
//!     Ok(())
//! }
//! ```

pub use crate::{Error, Result};
pub use fucina_autograd::{
    checkpoint, gradcheck, no_grad, CrossEntropyOpts, GradcheckOpts, IntoShape, LoadOptions,
    Reduction, SaveOptions, ScopeExt, Tensor,
};
pub use fucina_core::kernels::fused::attention::AttentionOpts;
pub use fucina_core::{DType, ExecContext, RawTensor};
pub use fucina_nn::attention::{merge_heads, split_heads};
pub use fucina_nn::hf::Tokenizer;
pub use fucina_nn::{
    apply_lora, load_adapter, mean_pool, save_adapter, BertConfig, BertModel, LoraConfig, StateDict,
};
pub use fucina_nn::{
    gradcheck_module, gradcheck_module_with, Activation, BlockConfig, Dist, Dropout, Embedding,
    FeedForward, Forward, Gpt, GptConfig, Init, Layer, LayerNorm, Linear, Mlp, Mode, Module,
    RmsNorm, SelfAttention, Sequential, TransformerBlock,
};
pub use fucina_optim::{
    clip_grad_norm, clip_grad_value, load_checkpoint, load_latest, save_checkpoint, AdamConfig,
    AdamW, Lion, LionConfig, Muon, MuonConfig, Optimizer, ParamGroup, RmsProp, RmsPropConfig,
    Schedule, Sgd, SgdConfig, TrainerState,
};
