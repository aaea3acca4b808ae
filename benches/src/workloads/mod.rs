//! The workload registry of `fucina-bench`: names, options and constructors.
//!
//! Each workload mirrors the one of the same name in `reference/torch_workloads.py`
//! (same shapes, layers, init scheme, optimizer and step structure). Add a module here
//! and a line in [`build`].

pub mod gemm;
pub mod gpt;
pub mod llama;
pub mod minilm;
pub mod train;
pub mod train_mlp;

use std::path::PathBuf;

use fucina::Result;
use fucina_core::ExecContext;

use crate::Workload;

/// Workloads this build implements, in `--workload all` order (the reference's).
pub const AVAILABLE: &[&str] = &[
    "tiny",
    "mlp",
    "gpt",
    "minilm",
    "gemm",
    "llama",
    "llama-lora",
    "llama-lora-bf16",
];

/// Per-workload options from the command line.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// gemm: `M x K x N` (default 1024³, the torch workload's shape).
    pub gemm_shape: Option<(usize, usize, usize)>,
    /// gemm: operand layout, `nn` (default), `tn` (Aᵀ·B) or `nt` (A·Bᵀ).
    pub gemm_layout: gemm::Layout,
    /// minilm: the checkpoint directory (default: `$FUCINA_CACHE/all-MiniLM-L6-v2`
    /// when present, else random init).
    pub minilm_dir: Option<PathBuf>,
}

fn boxed<W: Workload + 'static>(w: Result<W>) -> Result<Box<dyn Workload>> {
    w.map(|w| Box::new(w) as Box<dyn Workload>)
}

/// Builds workload `name`, or `None` when the name is not available.
pub fn build(name: &str, ctx: &ExecContext, opts: &Options) -> Option<Result<Box<dyn Workload>>> {
    Some(match name {
        "gemm" => boxed(
            gemm::Gemm::new(ctx, opts.gemm_shape, opts.gemm_layout).map_err(fucina::Error::from),
        ),
        "tiny" => boxed(train_mlp::MlpTrain::tiny(ctx)),
        "mlp" => boxed(train_mlp::MlpTrain::mlp(ctx)),
        "gpt" => boxed(gpt::GptTrain::workload(ctx)),
        "llama" => boxed(llama::LlamaTrain::workload(ctx, false)),
        "llama-lora" => boxed(llama::LlamaTrain::workload(ctx, true)),
        "llama-lora-bf16" => boxed(llama::LlamaTrain::lora_bf16(ctx)),
        "minilm" => boxed(minilm::MiniLmTrain::workload(
            ctx,
            opts.minilm_dir.as_deref(),
        )),
        _ => return None,
    })
}
