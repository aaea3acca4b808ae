//! One error for programs that use several fucina crates: each crate's
//! structured error converts into it with `?`, and its message is the inner
//! error's, unchanged.
//!
//! One route per failure (ARCHITECTURE.md, "One error route"): an error is
//! filed under the crate that raised it, wrapped once. A core error is
//! always [`Error::Core`] and an autograd error [`Error::Autograd`], whether
//! it reached `?` from that crate or through nn's or optim's error (the
//! conversions unwrap those), so [`Error::Nn`] and [`Error::Optim`] hold only
//! their crate's own errors.

fucina_autograd::one_error_route! {
/// Any fucina error: core (shapes, dtypes, memory), autograd (graph and
/// scope misuse), nn (modules and state dicts) or optim (optimizers and
/// checkpoints).
#[derive(Debug)]
pub enum Error {}
wraps {
    /// A module, layer or init error from nn.
    Nn(fucina_nn::Error),
    /// An optimizer, schedule or checkpoint error.
    Optim(fucina_optim::Error),
}
}

/// The one `Result` of a fucina program, exported by the prelude: the error
/// defaults to the umbrella [`Error`]; a trait impl whose signature fixes a
/// crate's error (`Forward::forward` returns nn's, `CustomOp` autograd's)
/// names it as the second parameter, `Result<Tensor, nn::Error>`, and `?`
/// turns it into the umbrella's at the call site.
pub type Result<T, E = Error> = std::result::Result<T, E>;
