//! What every Hugging Face model family shares: reading `config.json`
//! ([`config`], one serde struct per family, normalised to one
//! [`DecoderConfig`]), single and sharded safetensors checkpoints
//! ([`checkpoint`]), `generation_config.json` ([`generation_config`]), the
//! tokenizer ([`tokenizer`], through the `tokenizers` crate) and the files
//! `save_pretrained` writes ([`save`]).
//!
//! Every reader takes a path and fails with an error naming the file and the
//! field or tensor; none allocates from a size it has not checked (a JSON
//! file is read only when it is a regular file below [`MAX_JSON_BYTES`]).

pub mod checkpoint;
pub mod config;
pub mod generation_config;
pub mod save;
pub mod tokenizer;

pub use checkpoint::Checkpoint;
pub use config::{DecoderConfig, ModelType};
pub use generation_config::GenerationConfig;
pub use tokenizer::Tokenizer;

use std::path::Path;

use crate::error::{Error, Result};

/// The largest JSON file (config, index, generation config) the readers
/// accept: real ones are a few kB (a sharded index of a 70B model ~100 kB).
pub const MAX_JSON_BYTES: u64 = 16 << 20;

/// An [`Error::File`] for `file`.
pub(crate) fn file_err(file: &Path, msg: impl Into<String>) -> Error {
    Error::File {
        file: file.to_path_buf(),
        msg: msg.into(),
    }
}

/// Reads a JSON file as text: only a regular file (not a FIFO, a device
/// or a directory) of at most `limit` bytes.
pub(crate) fn read_small_file(path: &Path, limit: u64) -> Result<String> {
    let meta = std::fs::metadata(path).map_err(|e| file_err(path, e.to_string()))?;
    if !meta.is_file() {
        return Err(file_err(path, "not a regular file"));
    }
    if meta.len() > limit {
        return Err(file_err(
            path,
            format!("{} bytes is larger than the {limit}-byte limit", meta.len()),
        ));
    }
    let bytes = std::fs::read(path).map_err(|e| file_err(path, e.to_string()))?;
    if bytes.len() as u64 > limit {
        return Err(file_err(path, "grew past the size limit while being read"));
    }
    String::from_utf8(bytes).map_err(|e| file_err(path, format!("not UTF-8: {e}")))
}

/// Parses a JSON file read with [`read_small_file`].
pub(crate) fn read_json(path: &Path) -> Result<serde_json::Value> {
    let text = read_small_file(path, MAX_JSON_BYTES)?;
    serde_json::from_str(&text).map_err(|e| file_err(path, format!("not valid JSON: {e}")))
}
