//! The structured error type of fucina-core.
//!
//! Public entry points validate their inputs and return one of these; the
//! kernels behind them are unchecked (guarded by `debug_assert!`). Every
//! variant names the op and the offending shapes or values.

use crate::dtype::DType;

/// A shape, as carried by errors.
pub type ShapeVec = Vec<usize>;

/// Errors raised by fucina-core.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Error {
    /// Two operands have shapes the op cannot combine.
    #[error("{op}: shape mismatch between {lhs:?} and {rhs:?}")]
    ShapeMismatch {
        /// The op that failed.
        op: &'static str,
        /// Left (or first) shape.
        lhs: ShapeVec,
        /// Right (or second) shape.
        rhs: ShapeVec,
    },
    /// Shapes that cannot be broadcast together.
    #[error("{op}: shapes {lhs:?} and {rhs:?} cannot be broadcast together")]
    Broadcast {
        /// The op that failed.
        op: &'static str,
        /// Left shape.
        lhs: ShapeVec,
        /// Right shape (or the broadcast target).
        rhs: ShapeVec,
    },
    /// A reshape or view whose element count or strides do not fit.
    #[error("{op}: cannot view shape {from:?} as {to:?}")]
    BadView {
        /// The op that failed.
        op: &'static str,
        /// Source shape.
        from: ShapeVec,
        /// Requested shape.
        to: ShapeVec,
    },
    /// Operand dtypes differ where they must agree.
    #[error("{op}: dtype mismatch ({lhs} vs {rhs})")]
    DTypeMismatch {
        /// The op that failed.
        op: &'static str,
        /// Left dtype.
        lhs: DType,
        /// Right dtype.
        rhs: DType,
    },
    /// The op does not support this dtype.
    #[error("{op}: unsupported dtype {dtype}")]
    UnsupportedDType {
        /// The op that failed.
        op: &'static str,
        /// The dtype it was given.
        dtype: DType,
    },
    /// An axis, index or range outside its bound.
    #[error("{op}: {what} {index} out of range for bound {bound} (shape {shape:?})")]
    OutOfRange {
        /// The op that failed.
        op: &'static str,
        /// What was out of range ("axis", "index", "start", ...).
        what: &'static str,
        /// The offending value. One that does not fit in `i64` (a `usize`
        /// past `i64::MAX`) is reported as [`Error::InvalidArgument`] with
        /// the same text instead, so no value is ever printed wrongly
        /// ([`Error::out_of_range`]).
        index: i64,
        /// The exclusive bound it had to stay below.
        bound: usize,
        /// The shape it was checked against.
        shape: ShapeVec,
    },
    /// Any other invalid argument, with a message.
    #[error("{op}: {msg}")]
    InvalidArgument {
        /// The op that failed.
        op: &'static str,
        /// What was wrong.
        msg: String,
    },
    /// The op needs a contiguous tensor (use `contiguous()` first).
    #[error("{op}: tensor of shape {shape:?} is not contiguous")]
    NotContiguous {
        /// The op that failed.
        op: &'static str,
        /// The tensor's shape.
        shape: ShapeVec,
    },
    /// The buffer is shared, so it cannot be written in place.
    #[error("{op}: buffer is shared and cannot be written in place")]
    SharedBuffer {
        /// The op that failed.
        op: &'static str,
    },
    /// The pool's memory limit would be exceeded, or (`limit_bytes` 0, no
    /// limit set) the system allocator refused the request.
    #[error("{}", oom_message(*requested_bytes, *live_bytes, *limit_bytes))]
    OutOfMemory {
        /// Bytes the failed request needed (after rounding).
        requested_bytes: usize,
        /// Bytes held by live buffers at the time.
        live_bytes: usize,
        /// The configured limit; 0 when no limit is set (the system
        /// allocator refused).
        limit_bytes: usize,
    },
    /// A size computed from the inputs (element count, extent, padded or
    /// concatenated length, offset) does not fit in `usize`.
    #[error("{op}: {what} overflows usize (shape {shape:?})")]
    SizeOverflow {
        /// The op that failed.
        op: &'static str,
        /// Which size overflowed ("element count", "padded extent", ...).
        what: &'static str,
        /// The shape (or extents) it was computed from.
        shape: ShapeVec,
    },
    /// Buffers were still outstanding when the context was torn down.
    #[error("buffer leak: {outstanding} pool buffer(s) still outstanding")]
    Leak {
        /// How many buffers were still live.
        outstanding: usize,
    },
}

/// The text of [`Error::OutOfMemory`]: a limit is named only when one is set.
fn oom_message(requested_bytes: usize, live_bytes: usize, limit_bytes: usize) -> String {
    if limit_bytes == 0 {
        format!(
            "out of memory: the system could not allocate {requested_bytes} bytes \
             ({live_bytes} bytes live; no memory limit is set)"
        )
    } else {
        format!(
            "out of memory: a request of {requested_bytes} bytes with {live_bytes} bytes live \
             exceeds the limit of {limit_bytes} bytes"
        )
    }
}

impl Error {
    /// [`Error::Broadcast`]: `lhs` and `rhs` do not broadcast together (or `lhs` not to `rhs`).
    pub fn broadcast(op: &'static str, lhs: &[usize], rhs: &[usize]) -> Error {
        Error::Broadcast {
            op,
            lhs: lhs.to_vec(),
            rhs: rhs.to_vec(),
        }
    }

    /// [`Error::OutOfRange`] for an axis: `index` (as given, negative allowed) is not below
    /// `bound` for a tensor of `shape`.
    pub fn axis<I>(op: &'static str, index: I, bound: usize, shape: &[usize]) -> Error
    where
        I: TryInto<i64> + std::fmt::Display + Copy,
    {
        Error::out_of_range(op, "axis", index, bound, shape)
    }

    /// [`Error::OutOfRange`] for `index` of any integer type; a value that
    /// does not fit in its `i64` field (a `usize` past `i64::MAX`, a sum
    /// past `usize::MAX` given as `u128`) becomes [`Error::InvalidArgument`]
    /// with the same message, printing the exact value.
    pub fn out_of_range<I>(
        op: &'static str,
        what: &'static str,
        index: I,
        bound: usize,
        shape: &[usize],
    ) -> Error
    where
        I: TryInto<i64> + std::fmt::Display + Copy,
    {
        match index.try_into() {
            Ok(index) => Error::OutOfRange {
                op,
                what,
                index,
                bound,
                shape: shape.to_vec(),
            },
            Err(_) => Error::InvalidArgument {
                op,
                msg: format!("{what} {index} out of range for bound {bound} (shape {shape:?})"),
            },
        }
    }
}

/// `Result` with fucina-core's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
