//! fucina-autograd: the differentiable [`Tensor`], the tape and its backward
//! nodes, the backward engine, exec scopes, no-grad, checkpointing, custom
//! ops and [`gradcheck()`].
//!
//! Backward nodes `clone_view` exactly the inputs their formula needs, so
//! buffer refcounts pin the activations until the node runs; exec scopes own
//! a step's intermediates and return them to the pool when they close.
//!
//! ```
//! use fucina_autograd::{ScopeExt, Tensor};
//! use fucina_core::ExecContext;
//! let ctx = ExecContext::with_threads(1)?;
//! let w = Tensor::variable(&ctx, &[1.0f64, -2.0, 0.5, 3.0], &[2, 2])?;
//! let x = Tensor::constant(&ctx, &[1.0f64, 1.0], &[1, 2])?;
//! {
//!     let _scope = ctx.scope();
//!     let loss = x.matmul(&w)?.tanh()?.sum_all()?;
//!     loss.backward()?;
//! }
//! assert_eq!(w.grad().unwrap().shape(), &[2, 2]);
//! # Ok::<(), fucina_autograd::Error>(())
//! ```
#![warn(missing_docs)]

pub mod anomaly;
pub mod checkpoint;
mod convert;
pub mod creation;
pub mod custom;
pub mod dims;
pub mod display;
pub mod error;
pub mod functional;
pub mod grad_mode;
pub mod gradcheck;
pub mod gradcheck_report;
pub mod gradgradcheck;
#[cfg(feature = "ndarray")]
pub mod interop;
pub mod io;
pub mod operators;
pub mod ops;
pub mod samples;
pub mod suite;
pub mod tape;
pub mod testing;

pub use anomaly::{all_finite, detect_anomaly, is_anomaly_enabled, AnomalyGuard};
pub use checkpoint::{checkpoint, Block};
pub use custom::{custom_function, custom_op, CustomFunction, CustomOp};
pub use dims::{DimArg, IntoShape};
pub use error::{Error, Result};
pub use fucina_core::kernels::elementwise::{BinaryOp, CmpOp, UnaryOp};
pub use fucina_core::kernels::fused::loss::{CrossEntropyOpts, Reduction};
pub use fucina_core::{DType, ExecContext, RawTensor};
pub use grad_mode::{
    higher_order, is_grad_enabled, is_higher_order, no_grad, HigherOrderGuard, NoGradGuard,
};
pub use gradcheck::{gradcheck, GradcheckOpts, GradcheckReport};
pub use gradgradcheck::gradgradcheck;
pub use io::{
    load_state_dict, save_state_dict, LoadOptions, LoadReport, SafetensorsFile, SaveOptions,
    StateDictError,
};
pub use tape::engine::{backward_with_ready_hook, grad, ReadyHook};
pub use tape::graph::{live_nodes, Backward, Grads, SavedTensors, TensorGrads};
pub use tape::higher::{grad_with, GradOpts};
pub use tape::scope::{scope_depth, ExecScope, ScopeExt};
pub use tape::tensor::Tensor;

/// The `ndarray` crate fucina's interop is built against (re-exported so the
/// versions cannot mismatch).
#[cfg(feature = "ndarray")]
pub use ndarray;
