//! The examples' one error type: every failure a user can cause (a bad
//! argument, unreadable data, missing model files) or a library error,
//! each with a message that says what to do. `main` prints it and exits 1.

use std::path::{Path, PathBuf};

/// Why an example stopped.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A command-line value that cannot work (names the flag and the value).
    #[error("invalid argument {flag}: {msg}")]
    Arg {
        /// The flag, e.g. `--n-embd`.
        flag: &'static str,
        /// What is wrong with its value.
        msg: String,
    },
    /// A file that cannot be read or parsed.
    #[error("{}: {msg}", path.display())]
    Data {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        msg: String,
    },
    /// Model files that are not there (says which fetch script to run).
    #[error("{}: missing ({what}). Fetch the model first: `bash scripts/fetch-minilm.sh` (it fills $FUCINA_CACHE, default ~/.cache/fucina)", path.display())]
    MissingModel {
        /// The missing file or directory.
        path: PathBuf,
        /// Which part of the model it is.
        what: &'static str,
    },
    /// A checkpoint that does not fit this run.
    #[error("resume from {}: {msg}", dir.display())]
    Resume {
        /// The checkpoint directory.
        dir: PathBuf,
        /// What does not match.
        msg: String,
    },
    /// Writing the loss-curve or decision-boundary picture failed.
    #[error("plot {}: {msg}", path.display())]
    Plot {
        /// The PNG being written.
        path: PathBuf,
        /// The backend's message.
        msg: String,
    },
    /// The tokenizer failed to load or encode.
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    /// An error from the fucina library crates (core, autograd, nn, optim),
    /// in the umbrella's one shape: a core error is always
    /// `Fucina(fucina::Error::Core(..))`, however it reached `?` (boxed:
    /// the umbrella's error is the largest variant).
    #[error(transparent)]
    Fucina(Box<fucina::Error>),
    /// An error of fucina-train's own (loader, metrics, checkpoint policy);
    /// never a lower crate's, which arrives as [`Error::Fucina`].
    #[error(transparent)]
    Train(fucina_train::Error),
}

impl From<fucina_train::Error> for Error {
    /// The kit's errors, with the library crates' unwrapped into [`Error::Fucina`].
    fn from(e: fucina_train::Error) -> Error {
        match e {
            fucina_train::Error::Core(c) => c.into(),
            fucina_train::Error::Autograd(a) => a.into(),
            fucina_train::Error::Nn(n) => n.into(),
            e => Error::Train(e),
        }
    }
}

impl Error {
    /// An I/O error on `path`.
    pub fn io(path: &Path, e: std::io::Error) -> Error {
        Error::Data {
            path: path.to_path_buf(),
            msg: e.to_string(),
        }
    }

    /// A bad value for `flag`.
    pub fn arg(flag: &'static str, msg: impl Into<String>) -> Error {
        Error::Arg {
            flag,
            msg: msg.into(),
        }
    }
}

/// `Ok` when `v` is finite and positive, else an error naming `flag`.
pub fn positive(flag: &'static str, v: f64) -> Result<()> {
    if v > 0.0 && v.is_finite() {
        Ok(())
    } else {
        Err(Error::arg(flag, format!("must be positive, got {v}")))
    }
}

/// `Ok` when `v` lies in `range` (written `shown`, e.g. `"[0, 1)"`), else an
/// error naming `flag` (NaN is never in range).
pub fn within(
    flag: &'static str,
    v: f64,
    range: impl std::ops::RangeBounds<f64>,
    shown: &str,
) -> Result<()> {
    if range.contains(&v) {
        Ok(())
    } else {
        Err(Error::arg(flag, format!("must be in {shown}, got {v}")))
    }
}

/// `Ok` when `--n-head` divides `--n-embd` and, for a layout with key/value
/// heads (`kv_heads`), `--n-kv-head` divides `--n-head`; else an error naming
/// the first flag that does not fit.
pub fn heads_divide(width: usize, heads: usize, kv_heads: Option<usize>) -> Result<()> {
    if heads == 0 || !width.is_multiple_of(heads) {
        return Err(Error::arg(
            "--n-embd",
            format!("{width} is not a multiple of --n-head {heads}"),
        ));
    }
    match kv_heads {
        Some(kv) if kv == 0 || !heads.is_multiple_of(kv) => Err(Error::arg(
            "--n-kv-head",
            format!("{kv} does not divide --n-head {heads}"),
        )),
        _ => Ok(()),
    }
}

/// `Ok` when the warmup ends before the last step.
pub fn warmup_below_steps(warmup: u64, steps: u64) -> Result<()> {
    if warmup < steps {
        Ok(())
    } else {
        Err(Error::arg(
            "--warmup",
            format!("{warmup} must be below --steps {steps}"),
        ))
    }
}

/// `Ok` when `--weight-decay` and `--grad-clip` are both non-negative.
pub fn decay_and_clip_non_negative(weight_decay: f64, grad_clip: f64) -> Result<()> {
    if weight_decay >= 0.0 && grad_clip >= 0.0 {
        Ok(())
    } else {
        Err(Error::arg(
            "--weight-decay/--grad-clip",
            "must be non-negative",
        ))
    }
}

macro_rules! via_umbrella {
    ($($t:ty),*) => {$(
        impl From<$t> for Error {
            fn from(e: $t) -> Error {
                Error::Fucina(Box::new(e.into()))
            }
        }
    )*};
}
via_umbrella!(
    fucina::Error,
    fucina_core::Error,
    fucina_autograd::Error,
    fucina_nn::Error,
    fucina_optim::Error
);

/// `Result` with the examples' [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Runs an example's body: on error prints `error: ...` to stderr and exits 1.
pub fn exit_on_error(r: Result<()>) {
    if let Err(e) = r {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}
