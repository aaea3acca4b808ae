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

use std::path::PathBuf;

pub use file::{SafetensorsFile, TensorInfo};
pub use fs::{sync_dir, write_atomic};
pub use state_dict::{
    load_state_dict, load_state_dict_bytes, load_state_dict_from, save_state_dict,
    state_dict_bytes, DtypePolicy, KeyMismatch, LoadOptions, LoadReport, SaveOptions,
};

/// What went wrong reading or writing a state-dict file. Every variant names
/// the file (`file`), and the tensor where one is concerned.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum StateDictError {
    /// The operating system refused a read, write, map or rename.
    #[error("{file}: {message} ({kind:?})")]
    Io {
        /// The file or directory.
        file: PathBuf,
        /// The OS error's kind.
        kind: std::io::ErrorKind,
        /// The OS error's message.
        message: String,
    },
    /// The file is not a (well-formed) safetensors file: too short for its
    /// header, a header that is not JSON, an entry that is not a tensor.
    #[error("{file}: not a valid safetensors file: {message}")]
    Format {
        /// The file.
        file: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// One tensor's entry or data is unusable (its bytes run past the end of
    /// a truncated file, its byte length does not match its shape, its dtype
    /// has no fucina equivalent, two names map to it).
    #[error("{file}: tensor `{tensor}`: {message}")]
    Tensor {
        /// The file.
        file: PathBuf,
        /// The tensor's name in the file.
        tensor: String,
        /// What is wrong.
        message: String,
    },
    /// A strict load whose keys do not match the model's (all lists at once).
    #[error(
        "{file}: state dict does not match the model: {}",
        keys_summary(missing, unexpected, mismatched)
    )]
    Keys {
        /// The file.
        file: PathBuf,
        /// Model names the file lacks.
        missing: Vec<String>,
        /// File keys (as stored) that name no model tensor.
        unexpected: Vec<String>,
        /// Keys present in both whose shape or dtype do not fit.
        mismatched: Vec<KeyMismatch>,
    },
    /// A tensor cannot be written (a name given twice, an unsupported dtype).
    #[error("{file}: cannot save tensor `{tensor}`: {message}")]
    Save {
        /// The file being written.
        file: PathBuf,
        /// The tensor's name.
        tensor: String,
        /// What is wrong.
        message: String,
    },
}

fn keys_summary(missing: &[String], unexpected: &[String], mismatched: &[KeyMismatch]) -> String {
    let mut parts = Vec::new();
    if !missing.is_empty() {
        parts.push(format!("missing keys {missing:?}"));
    }
    if !unexpected.is_empty() {
        parts.push(format!("unexpected keys {unexpected:?}"));
    }
    if !mismatched.is_empty() {
        let m: Vec<String> = mismatched.iter().map(|m| m.to_string()).collect();
        parts.push(format!("mismatched [{}]", m.join(", ")));
    }
    parts.join("; ")
}

impl StateDictError {
    pub(crate) fn io(file: impl Into<PathBuf>, e: &std::io::Error) -> StateDictError {
        StateDictError::Io {
            file: file.into(),
            kind: e.kind(),
            message: e.to_string(),
        }
    }

    /// The file the error concerns.
    pub fn file(&self) -> &std::path::Path {
        match self {
            StateDictError::Io { file, .. }
            | StateDictError::Format { file, .. }
            | StateDictError::Tensor { file, .. }
            | StateDictError::Keys { file, .. }
            | StateDictError::Save { file, .. } => file,
        }
    }
}

impl From<StateDictError> for crate::Error {
    fn from(e: StateDictError) -> Self {
        crate::Error::StateDict(Box::new(e))
    }
}
