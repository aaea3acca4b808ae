//! Crash-safe file writes (temporary name, fsync, rename, fsync the
//! directory) and read-only memory maps of whole files.
//!
//! A reader sees either the old file or the complete new one, never a torn
//! write; after a crash, stray `*.tmp-*` files are ignored by every reader.
//! [`write_atomic`] is the workspace's one atomic writer (fucina-optim's
//! state files and checkpoints, fucina-nn's JSON and adapter files all call
//! it). Its temporary name is unique per call (process id, thread id and a
//! process-wide counter, created with `create_new`), so concurrent saves of
//! one path, from threads or processes, never share a temporary file: each
//! save succeeds and the last rename wins.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use super::StateDictError;
use crate::error::Result;

/// Fsyncs a directory so a rename or unlink in it is durable.
pub fn sync_dir(dir: &Path) -> Result<()> {
    let d = File::open(dir).map_err(|e| StateDictError::io(dir, &e))?;
    d.sync_all().map_err(|e| StateDictError::io(dir, &e))?;
    Ok(())
}

/// Counts the temporary files of this process: with the process and thread
/// ids it makes every temporary name unique.
static TMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// The temporary name `<name>.tmp-<pid>-<thread>-<n>` of one write of `name`.
fn tmp_name(name: &std::ffi::OsStr) -> String {
    let thread: String = format!("{:?}", std::thread::current().id())
        .chars()
        .filter(char::is_ascii_digit)
        .collect();
    format!(
        "{}.tmp-{}-{}-{}",
        name.to_string_lossy(),
        std::process::id(),
        thread,
        TMP_COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// Writes `bytes` to `path` atomically (a temporary file of a unique name in
/// the same directory, `fsync`, `rename`, `fsync` of the directory): a
/// reader sees the old file or the complete new one, and concurrent writers
/// of one path each succeed (the last rename wins). On an error the
/// temporary file is removed and `path` is untouched.
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
    let tmp = dir.join(tmp_name(name));
    let written = (|| {
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)
            .map_err(|e| StateDictError::io(&tmp, &e))?;
        f.write_all(bytes)
            .map_err(|e| StateDictError::io(&tmp, &e))?;
        f.sync_all().map_err(|e| StateDictError::io(&tmp, &e))?;
        drop(f);
        std::fs::rename(&tmp, path).map_err(|e| StateDictError::io(path, &e))
    })();
    if let Err(e) = written {
        // Best effort: the name is ours alone, so removing it harms no one.
        let _ = std::fs::remove_file(&tmp);
        return Err(e.into());
    }
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

/// Maps `path` read-only: the workspace's one memory-map opener (what
/// `SafetensorsFile::open` and checkpoint verification read through). The
/// file must not be modified in place while mapped (fucina itself only ever
/// replaces files by rename, which leaves an open map on the old contents).
pub fn map_file(path: &Path) -> Result<MappedFile> {
    let f = File::open(path).map_err(|e| StateDictError::io(path, &e))?;
    let len = f
        .metadata()
        .map_err(|e| StateDictError::io(path, &e))?
        .len();
    if len == 0 {
        return Ok(MappedFile(None));
    }
    // SAFETY: read-only map owned by the returned value; the documented
    // contract is that the file is not modified in place while mapped (a
    // concurrent truncation could fault, as with any map).
    let m = unsafe { memmap2::Mmap::map(&f) }.map_err(|e| StateDictError::io(path, &e))?;
    Ok(MappedFile(Some(m)))
}
