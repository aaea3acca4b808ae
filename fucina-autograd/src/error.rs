//! The structured error types of fucina-autograd: [`Error`] (wraps
//! fucina-core's) and the state-dict file errors ([`StateDictError`],
//! [`KeyMismatch`], re-exported by `io`). All of them live here, so `error`
//! is a leaf that `io` builds on, never the other way round.

use std::path::PathBuf;

use fucina_core::DType;

/// Errors raised by autograd.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Error {
    /// A shape, dtype, range or memory error from the kernels.
    #[error(transparent)]
    Core(#[from] fucina_core::Error),
    /// `backward` ran a second time over a graph whose nodes were already consumed.
    #[error(
        "backward already ran over this graph (node `{op}` was consumed); build the graph again"
    )]
    BackwardAlreadyRun {
        /// The first consumed node found.
        op: &'static str,
    },
    /// `backward` on a non-scalar output without an explicit seed gradient.
    #[error("backward on a non-scalar output of shape {shape:?} needs an explicit gradient (backward_with)")]
    MissingOutputGradient {
        /// The output's shape.
        shape: Vec<usize>,
    },
    /// `backward` on a tensor that does not require a gradient.
    #[error("backward on a tensor that does not require a gradient")]
    NoGradient,
    /// The tensor's value was released when its exec scope closed.
    #[error("tensor used after its exec scope closed")]
    TensorReleased,
    /// The value was read or set while a `Tensor::update_value` closure
    /// held it (the value is taken out while the closure runs): from inside
    /// that closure, or from another thread while an optimizer's `step`
    /// updates this parameter in place (safe: the read is refused, never
    /// torn; order evaluation and `step`, or retry).
    #[error("tensor value in use: it is being updated in place by update_value; read it before or after the update")]
    ValueBusy,
    /// Anomaly mode: a backward produced a NaN or an infinity.
    #[error(
        "anomaly detected: the backward of `{op}` (tape node #{seq}, recorded by the forward op `{op}`) produced {what} in the gradient of its input {input} (shape {shape:?}); look at `{op}`'s inputs in the forward pass"
    )]
    Anomaly {
        /// The op whose backward produced it (the forward op that recorded the node).
        op: &'static str,
        /// The node's position on the tape (creation order).
        seq: u64,
        /// The input whose gradient is not finite.
        input: usize,
        /// `"NaN"` or `"infinity"`.
        what: &'static str,
        /// The gradient's shape.
        shape: Vec<usize>,
    },
    /// A backward returned no gradient for an input that needs one.
    #[error("{op}: backward returned no gradient for input {input}, which needs one")]
    MissingGradient {
        /// The op whose backward failed.
        op: &'static str,
        /// The input position.
        input: usize,
    },
    /// A backward returned a gradient whose shape does not fit its input.
    #[error("{op}: gradient for input {input} has shape {got:?}, expected {expected:?}")]
    GradientShapeMismatch {
        /// The op whose backward failed.
        op: &'static str,
        /// The input position.
        input: usize,
        /// The input's shape.
        expected: Vec<usize>,
        /// The gradient's shape.
        got: Vec<usize>,
    },
    /// The op has no derivative with respect to an input that requires one.
    #[error("{op}: not differentiable with respect to an input that requires a gradient")]
    NotDifferentiable {
        /// The op.
        op: &'static str,
    },
    /// A checkpointed block ran a checkpoint during its own recompute.
    #[error("nested checkpoint recompute is not supported")]
    NestedCheckpointRecompute,
    /// A checkpointed block's recompute reached a non-leaf tensor from outside
    /// the block that its forward run did not read.
    #[error(
        "checkpoint: the recompute reached a tensor requiring a gradient that the block's forward run did not read; a checkpointed block must run the same ops on the same tensors every time"
    )]
    CheckpointRecomputeMismatch,
    /// Reading or writing a state-dict file failed (names the file and tensor).
    #[error(transparent)]
    StateDict(Box<StateDictError>),
    /// gradcheck was given no input that requires a gradient.
    #[error("gradcheck: no input requires a gradient")]
    NoVariableInputs,
    /// gradcheck found an analytical gradient that disagrees with finite
    /// differences. `failure` holds the whole finding (every failing element
    /// up to a cap, as multi-indices, the tolerance, the input's layout, the
    /// op and input names when given); the other fields are its worst
    /// element, kept for existing matches.
    #[error("{failure}")]
    GradcheckFailed {
        /// The input position of the worst element.
        input: usize,
        /// Its row-major (flat) element index (0 when a fast-mode failure's
        /// element-wise re-check found no single failing element).
        index: usize,
        /// The backward's value (fast mode without a failing element: the
        /// projected value).
        analytical: f64,
        /// The central-difference value.
        numerical: f64,
        /// |analytical − numerical|.
        abs_err: f64,
        /// abs_err / max(|numerical|, |analytical|).
        rel_err: f64,
        /// The full report.
        failure: Box<crate::gradcheck_report::GradcheckFailure>,
    },
    /// gradcheck on f32 inputs with a finite-difference step too small for f32.
    #[error(
        "gradcheck: input {input} is {dtype} but eps = {eps:e} is below its resolution (the f64 \
         profile); pass GradcheckOpts::f32() (eps 1e-3, atol 1e-3, rtol 1e-2), or make the \
         inputs f64 to keep GradcheckOpts::f64()"
    )]
    GradcheckProfile {
        /// The first f32 input that requires a gradient.
        input: usize,
        /// Its dtype.
        dtype: fucina_core::DType,
        /// The step that was given.
        eps: f64,
    },
    /// A gradient was requested for a tensor whose dtype cannot carry one.
    #[error(
        "{op}: a tensor that requires a gradient needs a float dtype (f32 or f64), got {dtype}; \
         convert the data to f32/f64, or use Tensor::constant for integer data such as class indices"
    )]
    NonFloatVariable {
        /// The constructor or method that was asked for a gradient.
        op: &'static str,
        /// The tensor's dtype.
        dtype: fucina_core::DType,
    },
    /// A weight that requires a gradient whose dtype differs from the input's:
    /// only a frozen weight (no gradient) may be of another dtype (a bf16/f16
    /// base weight, widened inside the GEMM's packing).
    #[error(
        "{op}: the {arg} requires a gradient but is {weight} while the input is {input}; a \
         trainable {arg} must have the input's dtype (only a frozen one, requires_grad = false, \
         may be stored as bf16/f16)"
    )]
    TrainableDTypeMismatch {
        /// The op.
        op: &'static str,
        /// The argument's name ("weight", "table").
        arg: &'static str,
        /// The input's (compute) dtype.
        input: fucina_core::DType,
        /// The weight's dtype.
        weight: fucina_core::DType,
    },
    /// An argument has the wrong dtype for its role (for example one-hot
    /// float targets given to cross-entropy, which takes class indices).
    #[error("{op}: {arg} {expected}, got dtype {got} with shape {shape:?}; {hint}")]
    WrongArgumentDType {
        /// The op.
        op: &'static str,
        /// The argument's name.
        arg: &'static str,
        /// What the argument must be, as a phrase ("must be integer class indices").
        expected: &'static str,
        /// The dtype given.
        got: fucina_core::DType,
        /// The argument's shape.
        shape: Vec<usize>,
        /// What to do instead.
        hint: &'static str,
    },
    /// Two arguments that must have the same shape do not (no broadcasting).
    #[error("{op}: `{lhs_name}` has shape {lhs:?} but `{rhs_name}` has shape {rhs:?}; they must be equal (no broadcasting here: {hint})")]
    ArgumentShapeMismatch {
        /// The op.
        op: &'static str,
        /// The first argument's name.
        lhs_name: &'static str,
        /// Its shape.
        lhs: Vec<usize>,
        /// The second argument's name.
        rhs_name: &'static str,
        /// Its shape.
        rhs: Vec<usize>,
        /// What to do instead.
        hint: &'static str,
    },
    /// A backward with `create_graph` reached an op whose gradient cannot be
    /// built from differentiable ops (refused rather than silently first order).
    #[error(
        "create_graph: `{op}` has no differentiable backward, so its gradient cannot be \
         differentiated again; compute this part without create_graph, or express it with \
         ops that have one"
    )]
    NoDoubleBackward {
        /// The op.
        op: &'static str,
    },
    /// A backward with `create_graph` reached an op whose forward kept its
    /// derivative in place of its input (the fast first-order path).
    #[error(
        "create_graph: `{op}` kept f'(x) in place of x for a faster first-order backward, so \
         its second derivative is out of reach; record the forward under \
         `fucina_autograd::higher_order()` (the functional transforms and gradgradcheck do)"
    )]
    ForwardNotHigherOrder {
        /// The op.
        op: &'static str,
    },
}

/// `Result` with autograd's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A gradient of shape and dtype `got` for input `input` of `op` must have
/// `expected`'s (the tensor's it is the gradient of); otherwise it is
/// [`Error::GradientShapeMismatch`].
pub(crate) fn check_grad_fits(
    op: &'static str,
    input: usize,
    expected: (&[usize], DType),
    got: (&[usize], DType),
) -> Result<()> {
    if got != expected {
        return Err(Error::GradientShapeMismatch {
            op,
            input,
            expected: expected.0.to_vec(),
            got: got.0.to_vec(),
        });
    }
    Ok(())
}

/// A key present in both the file and the model whose shape or dtype do not fit.
#[derive(Debug, Clone, PartialEq)]
pub struct KeyMismatch {
    /// The model's name.
    pub key: String,
    /// The key as stored in the file (differs when a prefix rule applied).
    pub file_key: String,
    /// The stored dtype as the file spells it.
    pub file_dtype: String,
    /// The stored shape.
    pub file_shape: Vec<usize>,
    /// The parameter's dtype.
    pub param_dtype: DType,
    /// The parameter's shape.
    pub param_shape: Vec<usize>,
}

impl std::fmt::Display for KeyMismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "`{}`: file has {} {:?}, model has {} {:?}",
            self.file_key, self.file_dtype, self.file_shape, self.param_dtype, self.param_shape
        )
    }
}

/// What went wrong reading or writing a state-dict file. Every variant names
/// the file (`file`), and the tensor where one is concerned.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum StateDictError {
    /// The operating system refused a read, write, map or rename.
    #[error("{file}: {message} ({kind:?})")]
    Io {
        /// The file or directory.
        file: PathBuf,
        /// The OS error's kind.
        kind: std::io::ErrorKind,
        /// The OS error's message.
        message: String,
    },
    /// The file is not a (well-formed) safetensors file: too short for its
    /// header, a header that is not JSON, an entry that is not a tensor.
    #[error("{file}: not a valid safetensors file: {message}")]
    Format {
        /// The file.
        file: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// One tensor's entry or data is unusable (its bytes run past the end of
    /// a truncated file, its byte length does not match its shape, its dtype
    /// has no fucina equivalent, two names map to it).
    #[error("{file}: tensor `{tensor}`: {message}")]
    Tensor {
        /// The file.
        file: PathBuf,
        /// The tensor's name in the file.
        tensor: String,
        /// What is wrong.
        message: String,
    },
    /// A strict load whose keys do not match the model's (all lists at once).
    #[error(
        "{file}: state dict does not match the model: {}",
        keys_summary(missing, unexpected, mismatched)
    )]
    Keys {
        /// The file.
        file: PathBuf,
        /// Model names the file lacks.
        missing: Vec<String>,
        /// File keys (as stored) that name no model tensor.
        unexpected: Vec<String>,
        /// Keys present in both whose shape or dtype do not fit.
        mismatched: Vec<KeyMismatch>,
    },
    /// A tensor cannot be written (a name given twice, an unsupported dtype).
    #[error("{file}: cannot save tensor `{tensor}`: {message}")]
    Save {
        /// The file being written.
        file: PathBuf,
        /// The tensor's name.
        tensor: String,
        /// What is wrong.
        message: String,
    },
}

fn keys_summary(missing: &[String], unexpected: &[String], mismatched: &[KeyMismatch]) -> String {
    let mut parts = Vec::new();
    if !missing.is_empty() {
        parts.push(format!("missing keys {missing:?}"));
    }
    if !unexpected.is_empty() {
        parts.push(format!("unexpected keys {unexpected:?}"));
    }
    if !mismatched.is_empty() {
        let m: Vec<String> = mismatched.iter().map(|m| m.to_string()).collect();
        parts.push(format!("mismatched [{}]", m.join(", ")));
    }
    parts.join("; ")
}

impl StateDictError {
    pub(crate) fn io(file: impl Into<PathBuf>, e: &std::io::Error) -> StateDictError {
        StateDictError::Io {
            file: file.into(),
            kind: e.kind(),
            message: e.to_string(),
        }
    }

    /// The file the error concerns.
    pub fn file(&self) -> &std::path::Path {
        match self {
            StateDictError::Io { file, .. }
            | StateDictError::Format { file, .. }
            | StateDictError::Tensor { file, .. }
            | StateDictError::Keys { file, .. }
            | StateDictError::Save { file, .. } => file,
        }
    }
}

impl From<StateDictError> for Error {
    fn from(e: StateDictError) -> Self {
        Error::StateDict(Box::new(e))
    }
}

/// The error enum of a crate above fucina-autograd, with its one route
/// (ARCHITECTURE.md, "One error route"): a failure is wrapped once, under
/// the crate that raised it. The invocation is the enum as the crate would
/// write it, holding only its own variants, then (optionally) `wraps { .. }`,
/// the variants of the lower crates above autograd whose errors it wraps,
/// each `Variant(crate::Error)` with its doc. The macro declares the enum
/// with, first, the variants every such error has:
///
/// - `Core(fucina_core::Error)`, `#[from]` (so `From<fucina_core::Error>`);
/// - `Autograd(fucina_autograd::Error)`, whose `From` unwraps autograd's
///   `Core(c)` into `Core(c)`;
///
/// then each wrapped variant, whose `From` lifts that crate's `Core` and
/// `Autograd` (a crate whose error has them: one declared by this macro)
/// into this error's own and anything else into `Variant(e)`; then the
/// crate's own. The macro derives `thiserror::Error` itself (the crate
/// depends on thiserror) and every generated variant is
/// `#[error(transparent)]`: thiserror matches the `transparent` of a variant
/// with its own derive by hygiene, so the two come from one place, here; the
/// crate's variants keep their `#[error(..)]` messages.
///
/// ```
/// fucina_autograd::one_error_route! {
///     /// A crate's error.
///     #[derive(Debug)]
///     pub enum Error {
///         /// Its own failure.
///         #[error("bad: {0}")]
///         Bad(String),
///     }
/// }
/// let c = fucina_core::Error::InvalidArgument { op: "probe", msg: "x".into() };
/// assert!(matches!(Error::from(fucina_autograd::Error::Core(c)), Error::Core(_)));
/// ```
#[macro_export]
macro_rules! one_error_route {
    (
        $(#[$meta:meta])*
        $vis:vis enum $E:ident { $($own:tt)* }
        $(wraps { $($(#[$vmeta:meta])* $Var:ident($($lower:ident)::+)),+ $(,)? })?
    ) => {
        $(#[$meta])*
        #[derive(thiserror::Error)]
        $vis enum $E {
            /// A shape, dtype, bounds or memory error from the core kernels.
            #[error(transparent)]
            Core(#[from] fucina_core::Error),
            /// A graph, scope, gradient or state-dict error from autograd
            /// (a released tensor, a gradient of the wrong shape, a bad
            /// file, ...); never `fucina_autograd::Error::Core`, which
            /// arrives as `Core`.
            #[error(transparent)]
            Autograd($crate::Error),
            $($(
                $(#[$vmeta])*
                #[doc = ""]
                #[doc = concat!(
                    "Never `", stringify!($($lower)::+),
                    "`'s `Core` or `Autograd`, which arrive as this error's own."
                )]
                #[error(transparent)]
                $Var($($lower)::+),
            )+)?
            $($own)*
        }

        impl From<$crate::Error> for $E {
            /// Autograd's errors, with a core error unwrapped to `Core`.
            fn from(e: $crate::Error) -> Self {
                match e {
                    $crate::Error::Core(c) => $E::Core(c),
                    e => $E::Autograd(e),
                }
            }
        }
        $($(
            impl From<$($lower)::+> for $E {
                /// That crate's own errors under its variant; its core and
                /// autograd errors under this error's own.
                fn from(e: $($lower)::+) -> Self {
                    match e {
                        $($lower)::+::Core(c) => $E::Core(c),
                        $($lower)::+::Autograd(a) => a.into(),
                        e => $E::$Var(e),
                    }
                }
            }
        )+)?
    };
}
