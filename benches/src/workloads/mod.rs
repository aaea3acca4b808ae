//! The workload registry of `fucina-bench`: names, options and constructors.
//!
//! Each workload mirrors the one of the same name in `reference/torch_workloads.py`
//! (same shapes, same step structure). Add a module here and a line in [`build`].

pub mod gemm;
pub mod train_mlp;

use fucina_core::{ExecContext, Result};

use crate::Workload;

/// Workloads this build implements, in `--workload all` order.
pub const AVAILABLE: &[&str] = &["tiny", "mlp", "gemm"];

/// Workloads of `torch_workloads.py` not implemented yet.
pub const PLANNED: &[&str] = &["gpt", "minilm"];

/// Per-workload options from the command line.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// gemm: `M x K x N` (default 1024³, the torch workload's shape).
    pub gemm_shape: Option<(usize, usize, usize)>,
    /// gemm: operand layout, `nn` (default), `tn` (Aᵀ·B) or `nt` (A·Bᵀ).
    pub gemm_layout: gemm::Layout,
}

/// Builds workload `name`, or `None` when the name is not available.
pub fn build(name: &str, ctx: &ExecContext, opts: &Options) -> Option<Result<Box<dyn Workload>>> {
    match name {
        "gemm" => Some(
            gemm::Gemm::new(ctx, opts.gemm_shape, opts.gemm_layout)
                .map(|w| Box::new(w) as Box<dyn Workload>),
        ),
        "tiny" => Some(
            train_mlp::MlpTrain::tiny(ctx)
                .map(|w| Box::new(w) as Box<dyn Workload>)
                .map_err(train_mlp::core_error),
        ),
        "mlp" => Some(
            train_mlp::MlpTrain::mlp(ctx)
                .map(|w| Box::new(w) as Box<dyn Workload>)
                .map_err(train_mlp::core_error),
        ),
        _ => None,
    }
}
