//! Crash-safe file writes (temporary name, fsync, rename, fsync the
//! directory) and read-only memory maps of whole files.
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

/// A whole file mapped read-only (an empty file is an empty slice). Reading
/// it costs page faults, not a heap copy: checkpoint verification hashes a
/// payload this way before the load maps it again from the page cache.
pub struct MappedFile(Option<memmap2::Mmap>);

impl std::ops::Deref for MappedFile {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match &self.0 {
            Some(m) => m,
            None => &[],
        }
    }
}

/// Maps `path` read-only. Same contract as `SafetensorsFile::open`: the
/// file must not be modified in place while mapped.
pub fn map_file(path: &Path) -> Result<MappedFile> {
    let f = File::open(path).map_err(|e| StateDictError::io(path, &e))?;
    let len = f
        .metadata()
        .map_err(|e| StateDictError::io(path, &e))?
        .len();
    if len == 0 {
        return Ok(MappedFile(None));
    }
    // SAFETY: read-only map owned by the returned value; see the contract above.
    let m = unsafe { memmap2::Mmap::map(&f) }.map_err(|e| StateDictError::io(path, &e))?;
    Ok(MappedFile(Some(m)))
}
