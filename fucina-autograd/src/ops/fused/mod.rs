//! Fused ops: one file per op (or op family) holding its `Tensor` method(s),
//! its backward node with the math, and its gradcheck rows with their torch
//! side; registered once, in the `fused_ops!` list below.
//!
//! Each file mirrors the core file of the same name in
//! `fucina-core/src/kernels/fused/`, which holds the forward kernel, the
//! backward kernel and the scalar reference. The list below declares the
//! modules and gathers their rows into `cases`, which the suite
//! (`suite::cases`), the torch parity test and the `op_table` export (read
//! by `tools/gen_op_goldens.py`) all read: no fused row is listed anywhere
//! else. Order matters for the goldens only: the generator draws the fused
//! rows' inputs in this order, so a new family goes at the end.

use crate::suite::case::{CaseFn, InputSpec, OpCase};

/// A fused op's gradcheck row: its name, its torch side as a Python lambda
/// over the inputs `x` (`"lambda x: F.layer_norm(x[0], ...)"`, evaluated by
/// `tools/gen_op_goldens.py` with `torch`, `F`, `math` and the generator's
/// helpers in scope), its inputs and the computation.
pub(crate) fn row(
    name: &'static str,
    torch: &'static str,
    inputs: Vec<InputSpec>,
    f: CaseFn,
) -> OpCase {
    OpCase {
        name,
        inputs,
        f,
        torch: Some(torch),
    }
}

/// Declares the fused families (one `pub mod` each) and gathers their rows.
macro_rules! fused_ops {
    ($($family:ident),* $(,)?) => {
        $(pub mod $family;)*

        /// The registered families, in registration order (a test checks that
        /// every file of `ops/fused/` is one of them).
        pub const FAMILIES: &[&str] = &[$(stringify!($family)),*];

        /// Every fused op's gradcheck rows, family by family in registration order.
        pub(crate) fn cases() -> Vec<OpCase> {
            let mut rows = Vec::new();
            $(rows.extend($family::cases());)*
            rows
        }
    };
}

fused_ops! {
    softmax,
    norm,
    loss,
    attention,
    rope,
}
