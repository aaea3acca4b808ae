//! The kit's error: bad configuration, bad data, I/O naming the file, and
//! the lower layers' errors wrapped once.

use std::path::PathBuf;

/// A failure of the training kit.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A loader, dataset or policy was configured wrongly.
    #[error("{what}: invalid config: {msg}")]
    InvalidConfig {
        /// The type (`DataLoader`, `TextWindows`, ...).
        what: &'static str,
        /// What is wrong, naming the field and its value.
        msg: String,
    },
    /// A file could not be read or written, or holds bad data.
    #[error("{}: {msg}", file.display())]
    File {
        /// The file.
        file: PathBuf,
        /// What is wrong (with the line number for JSONL).
        msg: String,
    },
    /// A worker thread panicked or went away while prefetching.
    #[error("data loader: {0}")]
    Worker(String),
    /// From the layers below (tensors, autograd, modules), wrapped once:
    /// fucina-nn's error already carries fucina-autograd's and
    /// fucina-core's.
    #[error(transparent)]
    Nn(#[from] fucina_nn::Error),
}

impl From<fucina_autograd::Error> for Error {
    fn from(e: fucina_autograd::Error) -> Self {
        Error::Nn(e.into())
    }
}

impl From<fucina_core::Error> for Error {
    fn from(e: fucina_core::Error) -> Self {
        Error::Nn(e.into())
    }
}

impl Error {
    pub(crate) fn config(what: &'static str, msg: impl Into<String>) -> Error {
        Error::InvalidConfig {
            what,
            msg: msg.into(),
        }
    }

    pub(crate) fn file(file: &std::path::Path, msg: impl Into<String>) -> Error {
        Error::File {
            file: file.to_path_buf(),
            msg: msg.into(),
        }
    }
}

/// The kit's result.
pub type Result<T> = std::result::Result<T, Error>;
