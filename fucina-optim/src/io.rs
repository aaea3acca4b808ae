//! Crash-safe file writes: temporary name, fsync, rename, fsync the directory.
//!
//! One implementation for the workspace lives in
//! [`fucina_autograd::io`]; these wrappers return this crate's [`Error`].
//! A reader sees either the old file or the complete new one, never a torn
//! write; after a crash, stray `*.tmp-*` files are ignored by every reader.
//! Temporary names are unique per call, so concurrent saves of one path
//! (threads or processes) all succeed and the last one wins.

use std::path::Path;

use crate::error::{Error, Result};

/// Fsyncs a directory so a rename or unlink in it is durable.
pub(crate) fn sync_dir(dir: &Path) -> Result<()> {
    fucina_autograd::io::sync_dir(dir).map_err(Error::from)
}

/// Writes `bytes` to `path` atomically (temporary file in the same directory,
/// `fsync`, `rename`, `fsync` of the directory).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    fucina_autograd::io::write_atomic(path, bytes).map_err(Error::from)
}
