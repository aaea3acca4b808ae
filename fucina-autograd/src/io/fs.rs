//! Crash-safe file writes: temporary name, fsync, rename, fsync the directory.
//!
//! A reader sees either the old file or the complete new one, never a torn
//! write; after a crash, stray `*.tmp-*` files are ignored by every reader.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use super::StateDictError;
use crate::error::Result;

/// Fsyncs a directory so a rename or unlink in it is durable.
pub fn sync_dir(dir: &Path) -> Result<()> {
    let d = File::open(dir).map_err(|e| StateDictError::io(dir, &e))?;
    d.sync_all().map_err(|e| StateDictError::io(dir, &e))?;
    Ok(())
}

/// Writes `bytes` to `path` atomically (temporary file in the same directory,
/// `fsync`, `rename`, `fsync` of the directory).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let Some(name) = path.file_name() else {
        return Err(StateDictError::Io {
            file: path.to_path_buf(),
            kind: std::io::ErrorKind::InvalidInput,
            message: "no file name".into(),
        }
        .into());
    };
    let tmp = dir.join(format!(
        "{}.tmp-{}",
        name.to_string_lossy(),
        std::process::id()
    ));
    {
        let mut f = File::create(&tmp).map_err(|e| StateDictError::io(&tmp, &e))?;
        f.write_all(bytes)
            .map_err(|e| StateDictError::io(&tmp, &e))?;
        f.sync_all().map_err(|e| StateDictError::io(&tmp, &e))?;
    }
    std::fs::rename(&tmp, path).map_err(|e| StateDictError::io(path, &e))?;
    sync_dir(&dir)
}
