//! The structured error type of fucina-nn (wraps autograd's and core's).
//!
//! Constructors validate their configuration and return
//! [`Error::InvalidConfig`] naming the module and the offending field;
//! forwards validate input shapes and return [`Error::BadInput`] naming the
//! module and the shapes; op failures pass through as `Autograd`/`Core`.
//!
//! One route per failure (ARCHITECTURE.md, "One error route"): a core error
//! is always [`Error::Core`], whether it came from a core call or through an
//! autograd op (the conversion from autograd's error unwraps
//! `fucina_autograd::Error::Core`), so [`Error::Autograd`] never holds one.

fucina_autograd::one_error_route! {
/// Errors raised by fucina-nn.
#[derive(Debug, Clone, PartialEq)]
pub enum Error {
    /// A module was configured with an invalid value.
    #[error("{module}: invalid config: {msg}")]
    InvalidConfig {
        /// The module (`Linear`, `GptConfig`, ...).
        module: &'static str,
        /// What was wrong, naming the field and its value.
        msg: String,
    },
    /// A forward got an input it cannot take.
    #[error("{module}: bad input: {msg} (got shape {shape:?})")]
    BadInput {
        /// The module whose forward failed.
        module: &'static str,
        /// What was expected.
        msg: String,
        /// The offending input's shape.
        shape: Vec<usize>,
    },
    /// A file that cannot be read or parsed (a `config.json`, an adapter
    /// config); safetensors errors pass through as `Autograd` and name the
    /// file and tensor themselves.
    #[error("{file}: {msg}")]
    File {
        /// The file.
        file: std::path::PathBuf,
        /// What is wrong.
        msg: String,
    },
    /// `gradcheck_module` found a gradient that disagrees with central
    /// differences: names the parameter (or `input.N`) and element;
    /// `failure` is autograd's full report (every failing element up to a
    /// cap as multi-indices, tolerance, layout), its inputs named by the
    /// parameter paths and its op by the module's type.
    #[error("gradcheck_module: {failure}")]
    GradcheckFailed {
        /// The parameter's dotted path, or `input.N` for the N-th input.
        name: String,
        /// The row-major element index.
        index: usize,
        /// The backward's value.
        analytical: f64,
        /// The central-difference value.
        numerical: f64,
        /// |analytical − numerical|.
        abs_err: f64,
        /// abs_err / max(|numerical|, |analytical|).
        rel_err: f64,
        /// The full report.
        failure: Box<fucina_autograd::gradcheck::GradcheckFailure>,
    },
}
}

impl Error {
    /// An [`Error::InvalidConfig`].
    pub fn config(module: &'static str, msg: impl Into<String>) -> Error {
        Error::InvalidConfig {
            module,
            msg: msg.into(),
        }
    }

    /// `Ok` when every named size is positive, else an
    /// [`Error::InvalidConfig`] of `module` listing them all:
    /// `"a (1), b (0) and c (4) must be positive"`.
    pub fn require_positive(module: &'static str, sizes: &[(&str, usize)]) -> Result<()> {
        if sizes.iter().all(|&(_, v)| v > 0) {
            return Ok(());
        }
        let listed: Vec<String> = sizes.iter().map(|(n, v)| format!("{n} ({v})")).collect();
        let names = match listed.split_last() {
            Some((last, [])) => last.clone(),
            Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
            None => String::new(),
        };
        Err(Error::config(module, format!("{names} must be positive")))
    }

    /// An [`Error::BadInput`].
    pub fn input(module: &'static str, msg: impl Into<String>, shape: &[usize]) -> Error {
        Error::BadInput {
            module,
            msg: msg.into(),
            shape: shape.to_vec(),
        }
    }
}

/// `Result` with fucina-nn's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
