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
    /// The value was read or set from inside its own `Tensor::update_value`
    /// closure (the value is taken out while the closure runs).
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
}

/// `Result` with autograd's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
