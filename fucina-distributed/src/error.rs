//! The structured error type of fucina-distributed.
//!
//! Wraps core's, autograd's and optim's errors and adds the failures of a
//! distributed job: a peer that stopped answering (named, with the operation
//! and how long this rank waited), a peer that is gone, a message of the
//! wrong size, ranks whose models differ, and a failure on rank 0 that every
//! rank reports.
//!
//! One route per failure (ARCHITECTURE.md, "One error route"): an error is
//! filed under the crate that raised it, wrapped once. A core error is
//! always [`Error::Core`] and an autograd error [`Error::Autograd`], whether
//! it came straight from that crate or through fucina-optim's error (the
//! conversions unwrap it), so [`Error::Optim`] holds only optim's own.

fucina_autograd::one_error_route! {
/// Errors raised by the transports, the gradient averaging, the sampler and
/// the rank-0 checkpoints.
#[derive(Debug)]
pub enum Error {
    /// Peers that did not deliver their part of a collective before the deadline.
    #[error("rank {rank}: `{what}`: no message from rank(s) {missing:?} after {waited_s:.1} s; those ranks have failed or stalled")]
    PeerTimeout {
        /// This rank.
        rank: usize,
        /// The operation (e.g. `gradient bucket 2 reduce-scatter`).
        what: String,
        /// The ranks whose message never came.
        missing: Vec<usize>,
        /// Seconds this rank waited.
        waited_s: f64,
    },
    /// A peer whose end of the transport is gone (its process or thread ended).
    #[error("rank {rank}: `{what}`: rank {peer} has exited (its connection is closed)")]
    PeerGone {
        /// This rank.
        rank: usize,
        /// The operation.
        what: String,
        /// The rank that is gone.
        peer: usize,
    },
    /// A message whose length is not the one this rank expected (ranks out of step).
    #[error("rank {rank}: `{what}`: rank {peer} sent {got} bytes, expected {expected}")]
    SizeMismatch {
        /// This rank.
        rank: usize,
        /// The operation.
        what: String,
        /// The sender.
        peer: usize,
        /// The expected length in bytes.
        expected: usize,
        /// The received length in bytes.
        got: usize,
    },
    /// Ranks whose parameters differ in count, shape or dtype (or, after a
    /// step, in value: see `DataParallel::check_in_sync`).
    #[error("rank {rank}: parameters differ across ranks: {detail}")]
    ParamMismatch {
        /// This rank.
        rank: usize,
        /// Which ranks and what differs.
        detail: String,
    },
    /// An operation that rank 0 performed for everyone (checkpoint save or
    /// load) failed there; every rank returns this error.
    #[error("rank {rank}: `{what}` failed on rank 0: {message}")]
    Rank0Failed {
        /// This rank.
        rank: usize,
        /// The operation.
        what: String,
        /// Rank 0's error, as text.
        message: String,
    },
    /// The communication thread of an overlapped averaging
    /// (`DataParallel::backward_overlapped`) panicked: a bug, reported as an
    /// error on the calling thread instead of a panic crossing threads.
    #[error("rank {rank}: `{what}`: the communication thread panicked: {message}")]
    CommThreadPanicked {
        /// This rank.
        rank: usize,
        /// The operation.
        what: String,
        /// The panic's message.
        message: String,
    },
    /// An invalid argument (bucket size, world size, rank, batch size, ...).
    #[error("invalid config: {0}")]
    InvalidConfig(String),
    /// A message over MPI's 2^31 − 1 element limit, or an MPI start-up failure.
    #[error("mpi: {0}")]
    Mpi(String),
}
wraps {
    /// An error from an optimizer or a checkpoint file.
    Optim(fucina_optim::Error),
}
}

/// Result alias of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
