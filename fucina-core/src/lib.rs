//! fucina-core: dtypes, refcounted buffers, the buffer pool, tensors and
//! views, the exec context, and the numeric kernels.
//!
//! Layering inside the crate: `dtype`, `storage`, `pool` and `shape` are
//! leaves; `tensor` sits on them; `exec` (the context: pool, threads,
//! creation) on `tensor`; `kernels` on both, adding their entry points to
//! `ExecContext` (exec names no kernel). `testing` is the test fixture. See
//! `ARCHITECTURE.md` at the workspace root.
//!
//! ```
//! use fucina_core::{DType, ExecContext};
//! let ctx = ExecContext::with_threads(1)?;
//! let x = ctx.arange::<f32>(0.0, 6.0, 1.0)?.reshape(&[2, 3])?;
//! let xt = x.transpose(0, 1)?; // a view: no copy
//! assert_eq!(xt.shape(), &[3, 2]);
//! assert_eq!(ctx.contiguous(&xt)?.to_vec::<f32>()?, vec![0., 3., 1., 4., 2., 5.]);
//! # Ok::<(), fucina_core::Error>(())
//! ```
#![warn(missing_docs)]

pub mod dtype;
pub mod error;
pub mod exec;
#[cfg(feature = "ndarray")]
pub mod interop;
pub mod kernels;
pub mod pool;
pub mod rng;
pub mod shape;
pub mod storage;
mod team;
pub mod testing;
pub mod vmath;

/// The worker team, exposed only to the loom model check
/// (`RUSTFLAGS="--cfg loom"`, `fucina-core/tests/loom_team.rs`).
#[cfg(loom)]
#[doc(hidden)]
pub mod loom_team {
    /// A team of `n` threads (the caller plus `n - 1` workers).
    pub struct Team(crate::team::Team);

    impl Team {
        /// Starts the workers.
        pub fn new(n: usize) -> std::io::Result<Team> {
            crate::team::Team::new(n).map(Team)
        }

        /// Runs `f(0..n_chunks)` over the team (see the team's docs).
        pub fn run(&self, n_chunks: usize, f: &(dyn Fn(usize) + Sync)) {
            self.0.run(n_chunks, f)
        }
    }
}
pub mod tensor;

pub use dtype::{DType, Element, Float};
pub use error::{Error, Result};
pub use exec::{ExecContext, ZipMut};
pub use half::{bf16, f16};
pub use pool::{BufferPool, PoolStats};
pub use storage::Buffer;
pub use tensor::RawTensor;

/// The dtype dispatchers, one family named by the set each covers: each runs
/// `$body` with `$T` bound to the Rust type of a runtime [`DType`].
///
/// - [`dispatch_any!`]`(dtype, T => body)`: every dtype (exhaustive).
/// - [`dispatch_float!`]`(dtype, op, T => body)`: f32 and f64 (the compute floats).
/// - [`dispatch_select!`]`(dtype, op, T => body)`: f32, f64 and the integer types
///   (what comparisons and selections support).
///
/// Outside its set, `dispatch_float!` and `dispatch_select!` give
/// `Err(Error::UnsupportedDType { op, dtype }.into())`, so the body returns a
/// `Result` whose error converts from [`Error`].
///
/// ```
/// use fucina_core::{dispatch_any, dispatch_float, DType, Element, Error};
/// let size = |d: DType| -> Result<usize, Error> {
///     dispatch_float!(d, "size", T => Ok(std::mem::size_of::<T>()))
/// };
/// assert_eq!(size(DType::F64)?, 8);
/// assert!(size(DType::I32).is_err());
/// assert_eq!(dispatch_any!(DType::U8, T => <T as Element>::DTYPE), DType::U8);
/// # Ok::<(), Error>(())
/// ```
#[macro_export]
macro_rules! dispatch_any {
    ($dtype:expr, $T:ident => $body:expr) => {
        $crate::__dispatch_arms!($dtype, $T => $body;
            [F32 => f32, F64 => f64, F16 => $crate::f16, BF16 => $crate::bf16,
             I32 => i32, I64 => i64, U32 => u32, U8 => u8])
    };
}

/// The [`dispatch_any!`] family over f32 and f64; any other dtype is
/// [`Error::UnsupportedDType`] naming `$op`.
#[macro_export]
macro_rules! dispatch_float {
    ($dtype:expr, $op:expr, $T:ident => $body:expr) => {
        $crate::__dispatch_arms!($dtype, $T => $body; [F32 => f32, F64 => f64]
            d => Err($crate::Error::UnsupportedDType { op: $op, dtype: d }.into()),)
    };
}

/// The [`dispatch_any!`] family over f32, f64 and the integer types (what
/// comparisons and selections support); f16/bf16 are
/// [`Error::UnsupportedDType`] naming `$op`.
#[macro_export]
macro_rules! dispatch_select {
    ($dtype:expr, $op:expr, $T:ident => $body:expr) => {
        $crate::__dispatch_arms!($dtype, $T => $body;
            [F32 => f32, F64 => f64, I32 => i32, I64 => i64, U32 => u32, U8 => u8]
            d => Err($crate::Error::UnsupportedDType { op: $op, dtype: d }.into()),)
    };
}

/// The match the `dispatch_*!` family expands to (not for direct use).
#[doc(hidden)]
#[macro_export]
macro_rules! __dispatch_arms {
    ($dtype:expr, $T:ident => $body:expr; [$($D:ident => $R:ty),+] $($rest:tt)*) => {
        match $dtype {
            $($crate::DType::$D => {
                type $T = $R;
                $body
            })+
            $($rest)*
        }
    };
}
