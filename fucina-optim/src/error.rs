//! The structured error type of fucina-optim.
//!
//! Wraps autograd's and core's errors and adds I/O, file-format and
//! state-mismatch variants. Nothing in this crate panics on a bad file: a
//! missing, truncated or mismatched file is one of these errors.
//!
//! One route per failure: a core error is always [`Error::Core`], whether it
//! came from a core call or through an autograd op (the conversion from
//! autograd's error unwraps `fucina_autograd::Error::Core`), so
//! [`Error::Autograd`] never holds a core error.

use std::path::PathBuf;

fucina_autograd::one_error_route! {
/// Errors raised by optimizers, schedules, clipping and checkpoints.
#[derive(Debug)]
pub enum Error {
    /// A file system error, with the path it concerns.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A safetensors file that does not parse (truncated, corrupt header, ...).
    #[error("safetensors: {0}")]
    Safetensors(String),
    /// A JSON document (trainer state, optimizer metadata) that does not parse.
    #[error("json: {0}")]
    Json(#[from] serde_json::Error),
    /// A hyperparameter out of its valid range.
    #[error("{optimizer}: invalid hyperparameter: {msg}")]
    InvalidConfig {
        /// The optimizer or schedule.
        optimizer: &'static str,
        /// What is wrong.
        msg: String,
    },
    /// Saved state that does not fit the optimizer or model it is loaded into
    /// (wrong optimizer, group/param counts, names, shapes or dtypes).
    #[error("state mismatch: {0}")]
    StateMismatch(String),
    /// A parameter group index out of range.
    #[error("param group {index} out of range ({len} groups)")]
    NoSuchGroup {
        /// The requested group.
        index: usize,
        /// How many groups there are.
        len: usize,
    },
    /// A parameter that does not require a gradient: it would never get one,
    /// so the optimizer would silently never update it.
    #[error(
        "{optimizer}: parameter {index} of group {group} (shape {shape:?}) does not require a \
         gradient, so it would never be updated; create it with Tensor::variable (or call \
         .requires_grad_(true) on it), or leave it out of the optimizer if it is frozen"
    )]
    NotTrainable {
        /// The optimizer's name.
        optimizer: &'static str,
        /// The parameter group.
        group: usize,
        /// The parameter's position in its group.
        index: usize,
        /// The parameter's shape.
        shape: Vec<usize>,
    },
    /// A checkpoint file whose contents are wrong: a marker that does not
    /// parse, a payload whose size or checksum differs from the marker's.
    #[error("{file}: damaged checkpoint: {reason}")]
    BadCheckpoint {
        /// The file.
        file: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A checkpoint directory without its marker (a save that did not finish).
    #[error("{dir}: incomplete checkpoint (no trainer_state.json marker)")]
    IncompleteCheckpoint {
        /// The directory.
        dir: PathBuf,
    },
    /// An error while reading the optimizer state file `file`.
    #[error("{file}: {source}")]
    InFile {
        /// The file.
        file: PathBuf,
        /// The error.
        #[source]
        source: Box<Error>,
    },
    /// A failure injected by a test at a named point of a checkpoint save
    /// (feature `fault-injection`, for crash-safety tests only).
    #[cfg(feature = "fault-injection")]
    #[error("injected failure at `{0}`")]
    Injected(&'static str),
}
}

impl From<safetensors::SafeTensorError> for Error {
    fn from(e: safetensors::SafeTensorError) -> Self {
        Error::Safetensors(e.to_string())
    }
}

impl Error {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Error {
        Error::Io {
            path: path.into(),
            source,
        }
    }

    pub(crate) fn config(optimizer: &'static str, msg: impl Into<String>) -> Error {
        Error::InvalidConfig {
            optimizer,
            msg: msg.into(),
        }
    }
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
