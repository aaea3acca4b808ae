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
pub use exec::ExecContext;
pub use half::{bf16, f16};
pub use pool::{BufferPool, PoolStats};
pub use storage::Buffer;
pub use tensor::RawTensor;

/// Runs `$body` with `$T` bound to the Rust type of any dtype.
#[macro_export]
macro_rules! dispatch_any {
    ($dtype:expr, $T:ident => $body:expr) => {
        match $dtype {
            $crate::DType::F32 => {
                type $T = f32;
                $body
            }
            $crate::DType::F64 => {
                type $T = f64;
                $body
            }
            $crate::DType::F16 => {
                type $T = $crate::f16;
                $body
            }
            $crate::DType::BF16 => {
                type $T = $crate::bf16;
                $body
            }
            $crate::DType::I32 => {
                type $T = i32;
                $body
            }
            $crate::DType::I64 => {
                type $T = i64;
                $body
            }
            $crate::DType::U32 => {
                type $T = u32;
                $body
            }
            $crate::DType::U8 => {
                type $T = u8;
                $body
            }
        }
    };
}

/// Runs `$body` with `$T` bound to f32 or f64; any other dtype is
/// [`Error::UnsupportedDType`] naming `$op`.
#[macro_export]
macro_rules! dispatch_float {
    ($dtype:expr, $op:expr, $T:ident => $body:expr) => {
        match $dtype {
            $crate::DType::F32 => {
                type $T = f32;
                $body
            }
            $crate::DType::F64 => {
                type $T = f64;
                $body
            }
            d => Err($crate::Error::UnsupportedDType { op: $op, dtype: d }),
        }
    };
}
