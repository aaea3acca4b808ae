//! What a row of the op suite is: an op's name, its inputs (shape and how
//! they are drawn), the computation, and its torch side when the project
//! writes it. A leaf of the suite: the rows themselves live in `suite.rs`
//! (hand-written and op-table rows) and in each fused op's file
//! (`ops/fused/<op>.rs`), which build them from the constructors here.

use crate::error::Result;
use crate::tape::tensor::Tensor;

/// How one input of a case is generated.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum InputKind {
    /// A float variable, uniform in [lo, hi).
    Float(f64, f64),
    /// A float variable, uniform in ±[lo, hi) (away from 0).
    NonZero(f64, f64),
    /// An I64 constant, uniform in 0..n.
    Index(i64),
    /// A U8 constant mask, 1 with probability ½.
    Mask,
}

/// One input: shape and kind.
#[derive(Clone, Debug, PartialEq)]
pub struct InputSpec {
    /// The input's shape.
    pub shape: Vec<usize>,
    /// How it is generated.
    pub kind: InputKind,
}

/// The op under test: inputs in, one tensor out.
pub type CaseFn = fn(&[Tensor]) -> Result<Tensor>;

/// A row of the suite.
#[derive(Clone, Debug)]
pub struct OpCase {
    /// The op's name (a `Tensor` method, or a variant `method_suffix`).
    pub name: &'static str,
    /// Its inputs.
    pub inputs: Vec<InputSpec>,
    /// The computation.
    pub f: CaseFn,
    /// The PyTorch side, where the project writes it (the golden generator
    /// has a lambda for every other row). Either a dotted function name
    /// (`torch.nn.functional.mish`: rows of the unary and binary op tables, which the
    /// generator checks resolves), or a Python lambda over the inputs
    /// `x` (`lambda x: F.layer_norm(x[0], ...)`: fused ops' rows, which the
    /// generator evaluates as the row's torch side).
    pub torch: Option<&'static str>,
}

/// A float input of `shape`, uniform in [−1.5, 1.5).
pub(crate) fn f(shape: &[usize]) -> InputSpec {
    InputSpec {
        shape: shape.to_vec(),
        kind: InputKind::Float(-1.5, 1.5),
    }
}

/// A float input of `shape`, uniform in [lo, hi).
pub(crate) fn fr(shape: &[usize], lo: f64, hi: f64) -> InputSpec {
    InputSpec {
        shape: shape.to_vec(),
        kind: InputKind::Float(lo, hi),
    }
}

/// A float input of `shape`, uniform in ±[0.1, 1.5).
pub(crate) fn nz(shape: &[usize]) -> InputSpec {
    InputSpec {
        shape: shape.to_vec(),
        kind: InputKind::NonZero(0.1, 1.5),
    }
}

/// An index input of `shape`, uniform in 0..n.
pub(crate) fn idx(shape: &[usize], n: i64) -> InputSpec {
    InputSpec {
        shape: shape.to_vec(),
        kind: InputKind::Index(n),
    }
}

/// A U8 mask input of `shape`.
pub(crate) fn mask(shape: &[usize]) -> InputSpec {
    InputSpec {
        shape: shape.to_vec(),
        kind: InputKind::Mask,
    }
}
