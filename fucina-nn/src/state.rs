//! Module state dicts in safetensors, for any [`Module`]: its
//! [`Module::state_dict`] (the parameters, then the persistent buffers)
//! saved and loaded by dotted name through
//! `fucina_autograd::io` (the workspace's one state-dict implementation:
//! strict by default with one error listing missing, unexpected and
//! mismatched keys, prefix rules, f16/bf16 widening, memory-mapped reads,
//! errors naming file and tensor, and a failed load changes nothing).

use std::path::Path;

use fucina_autograd::io::{self as sdio, LoadOptions, LoadReport, SaveOptions};

use crate::error::Result;
use crate::module::Module;

/// Saving and loading a module's parameters by name (implemented for every
/// [`Module`]).
///
/// ```
/// use fucina_nn::{Init, Linear, StateDict};
/// use fucina_autograd::LoadOptions;
/// let ctx = fucina_core::ExecContext::with_threads(1)?;
/// let a = Linear::new(&mut Init::new(&ctx, fucina_core::DType::F32, 1), 3, 2, true)?;
/// let b = Linear::new(&mut Init::new(&ctx, fucina_core::DType::F32, 2), 3, 2, true)?;
/// let path = std::env::temp_dir().join(format!("fucina-doc-module-{}.safetensors", std::process::id()));
/// a.save_state_dict(&path)?;
/// let report = b.load_state_dict(&path, &LoadOptions::new())?;
/// assert_eq!(report.loaded, ["weight", "bias"]);
/// assert_eq!(a.weight.to_vec::<f32>()?, b.weight.to_vec::<f32>()?);
/// # std::fs::remove_file(&path).ok();
/// # Ok::<(), fucina_nn::Error>(())
/// ```
pub trait StateDict: Module {
    /// Writes every parameter and persistent buffer to `path` (atomically),
    /// each in its own dtype.
    fn save_state_dict(&self, path: &Path) -> Result<()> {
        self.save_state_dict_with(path, &SaveOptions::default())
    }

    /// Writes every parameter and persistent buffer to `path` with `opts`
    /// (e.g. stored as bf16).
    fn save_state_dict_with(&self, path: &Path, opts: &SaveOptions) -> Result<()> {
        Ok(sdio::save_state_dict(path, &self.state_dict(), opts)?)
    }

    /// Loads parameters and persistent buffers from `path` by name (see
    /// [`LoadOptions`]).
    fn load_state_dict(&self, path: &Path, opts: &LoadOptions) -> Result<LoadReport> {
        Ok(sdio::load_state_dict(path, &self.state_dict(), opts)?)
    }

    /// Loads the parameters alone from `path` (a file made elsewhere, e.g.
    /// by PyTorch, holds no fucina buffer such as a dropout counter); strict
    /// about the parameters as [`StateDict::load_state_dict`] is.
    fn load_parameters(&self, path: &Path, opts: &LoadOptions) -> Result<LoadReport> {
        Ok(sdio::load_state_dict(path, &self.named_parameters(), opts)?)
    }
}

impl<M: Module + ?Sized> StateDict for M {}
