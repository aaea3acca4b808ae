//! What a training loop uses, in one import: `use fucina::prelude::*;`.
//!
//! Tensors and the context, the scope trait, no-grad, the option structs of
//! the ops, gradcheck, the optimizers with their configs, schedules and
//! clipping, checkpoints, and the umbrella `Result`.

pub use crate::{Error, Result};
pub use fucina_autograd::{
    checkpoint, gradcheck, no_grad, CrossEntropyOpts, GradcheckOpts, IntoShape, Reduction,
    ScopeExt, Tensor,
};
pub use fucina_core::kernels::attention::AttentionOpts;
pub use fucina_core::{DType, ExecContext, RawTensor};
pub use fucina_optim::{
    clip_grad_norm, clip_grad_value, load_checkpoint, load_latest, save_checkpoint, Adam,
    AdamConfig, AdamW, Lion, LionConfig, Muon, MuonConfig, Optimizer, ParamGroup, RmsProp,
    RmsPropConfig, Schedule, Sgd, SgdConfig,
};
