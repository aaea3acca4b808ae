//! The structured error type of fucina-autograd (wraps fucina-core's).

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
    /// Reading or writing a state-dict file failed (names the file and tensor).
    #[error(transparent)]
    StateDict(Box<crate::io::StateDictError>),
    /// gradcheck was given no input that requires a gradient.
    #[error("gradcheck: no input requires a gradient")]
    NoVariableInputs,
    /// gradcheck found an analytical gradient that disagrees with finite differences.
    #[error(
        "gradcheck: input {input}, element {index}: analytical {analytical:e} vs numerical {numerical:e} (abs err {abs_err:e}, rel err {rel_err:e})"
    )]
    GradcheckFailed {
        /// The input position.
        input: usize,
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
    },
}

/// `Result` with autograd's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
