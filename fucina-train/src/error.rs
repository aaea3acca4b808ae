//! The kit's error: bad configuration, bad data, I/O naming the file, and
//! the lower layers' errors wrapped once.
//!
//! One route per failure (ARCHITECTURE.md, "One error route"): an error is
//! filed under the crate that raised it. A core error is always
//! [`Error::Core`] and an autograd error [`Error::Autograd`], whether it came
//! straight from that crate or through fucina-nn's error (the conversions
//! unwrap it), so [`Error::Nn`] holds only nn's own.

use std::path::PathBuf;

fucina_autograd::one_error_route! {
/// A failure of the training kit.
#[derive(Debug)]
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
}
wraps {
    /// A module, layer or state-dict error from fucina-nn.
    Nn(fucina_nn::Error),
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
