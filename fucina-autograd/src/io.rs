//! State dicts in safetensors: the one implementation of model I/O for the
//! workspace (fucina-nn's modules and fucina-optim's training checkpoints
//! both call it).
//!
//! - [`SafetensorsFile`] reads a file through a memory map (`memmap2`): the
//!   header is parsed and every entry validated (dtype, shape, byte range
//!   inside the file) before any tensor is read, and a tensor is copied once,
//!   from the map into a pooled buffer.
//! - [`load_state_dict`] assigns named tensors from a file to named leaves.
//!   Strict by default: one [`StateDictError::Keys`] lists every missing,
//!   unexpected and mismatched key. Non-strict loads what fits and returns
//!   the same lists in a [`LoadReport`]. Keys can be rewritten by prefix
//!   ([`LoadOptions::map_prefix`], e.g. strip `bert.`); stored f16/bf16 (and
//!   f32) tensors widen into f32/f64 parameters ([`DtypePolicy`]).
//! - [`save_state_dict`] writes named tensors atomically, optionally storing
//!   every float tensor as f16/bf16/f32 ([`SaveOptions::float_dtype`]).
//!
//! Invariants: every error names the file and, where one is concerned, the
//! tensor; a failed load leaves every target tensor exactly as it was (all
//! tensors are validated and staged first, then assigned together).

mod file;
mod fs;
mod state_dict;

pub use crate::error::{KeyMismatch, StateDictError};
pub use file::{st_name, SafetensorsFile, TensorInfo};
pub use fs::{map_file, sync_dir, write_atomic, MappedFile};
pub use state_dict::{
    load_state_dict, load_state_dict_bytes, load_state_dict_from, save_state_dict,
    state_dict_bytes, DtypePolicy, LoadOptions, LoadReport, SaveOptions,
};
