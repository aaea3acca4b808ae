//! Writing a model directory that transformers' `from_pretrained` reads:
//! JSON files and the tokenizer's files, each replaced atomically (a reader
//! sees the old file or the whole new one; the weights are written before
//! the config that describes them).

use std::path::Path;

use fucina_autograd::io::write_atomic;
use serde_json::Value;

use super::file_err;
use crate::error::Result;

/// The tokenizer files a model directory may carry, copied as they are.
pub const TOKENIZER_FILES: [&str; 5] = [
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.json",
    "merges.txt",
];

/// Creates `dir` (and its parents) if needed.
pub fn create_dir(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| file_err(dir, format!("creating the directory: {e}")))
}

/// Writes `v` to `path` as pretty JSON, atomically.
pub fn write_json(path: &Path, v: &Value) -> Result<()> {
    let mut text = serde_json::to_string_pretty(v).map_err(|e| file_err(path, e.to_string()))?;
    text.push('\n');
    Ok(write_atomic(path, text.as_bytes())?)
}

/// Copies every [`TOKENIZER_FILES`] entry of `from` into `to` (atomically
/// each); returns the names copied. Copying a directory onto itself is a no-op.
pub fn copy_tokenizer_files(from: &Path, to: &Path) -> Result<Vec<&'static str>> {
    let same = match (from.canonicalize(), to.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    };
    let mut copied = Vec::new();
    for name in TOKENIZER_FILES {
        let src = from.join(name);
        if !src.is_file() {
            continue;
        }
        if !same {
            let bytes = std::fs::read(&src).map_err(|e| file_err(&src, e.to_string()))?;
            write_atomic(&to.join(name), &bytes)?;
        }
        copied.push(name);
    }
    Ok(copied)
}
