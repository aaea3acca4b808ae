//! One error for programs that use several fucina crates: each crate's
//! structured error converts into it with `?`, and its message is the inner
//! error's, unchanged.

/// Any fucina error: core (shapes, dtypes, memory), autograd (graph and
/// scope misuse), nn (modules and state dicts) or optim (optimizers and
/// checkpoints).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A shape, dtype, bounds or memory error from the kernels.
    #[error(transparent)]
    Core(#[from] fucina_core::Error),
    /// A graph, scope or gradient error from autograd.
    #[error(transparent)]
    Autograd(#[from] fucina_autograd::Error),
    /// A module, layer or init error from nn.
    #[error(transparent)]
    Nn(#[from] fucina_nn::Error),
    /// An optimizer, schedule or checkpoint error.
    #[error(transparent)]
    Optim(#[from] fucina_optim::Error),
}

/// `Result` with fucina's umbrella [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
