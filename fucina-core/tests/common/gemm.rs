//! Shared pieces of the GEMM path tests (`gemm_paths.rs`, `gemm_mixed.rs`): one problem
//! ([`Case`]) and its operands in the four layouts.

use fucina_core::{Element, ExecContext, RawTensor};

/// The betas the sweeps cycle through: C ignored, C added, C scaled.
pub const BETAS: [f64; 3] = [0.0, 1.0, -0.75];

/// One problem: shape, operand layouts and epilogue.
#[derive(Clone, Copy, Debug)]
pub struct Case {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    /// 0 row-major, 1 transposed (column-major), 2 narrowed window, 3 column-strided.
    pub a_layout: usize,
    /// As `a_layout`, for B.
    pub b_layout: usize,
    /// 0 row-major, 1 column-major (a transposed view).
    pub c_layout: usize,
    pub alpha: f64,
    pub beta: f64,
    pub bias: bool,
}

impl Case {
    /// `C (m × n) = alpha·A (m × k)·B (k × n) + beta·C (+ bias)` with the A, B, C layouts
    /// `[a, b, c]`.
    pub fn new(
        (m, n, k): (usize, usize, usize),
        [a_layout, b_layout, c_layout]: [usize; 3],
        alpha: f64,
        beta: f64,
        bias: bool,
    ) -> Case {
        Case {
            m,
            n,
            k,
            a_layout,
            b_layout,
            c_layout,
            alpha,
            beta,
            bias,
        }
    }
}

/// An `r × c` operand holding `v` (row-major), laid out as `layout`: 0 row-major, 1
/// column-major (a transposed view), 2 a window at (2, 3) of an (r + 3) × (c + 5) matrix,
/// 3 every other column of an r × 2c one. `filler(len)` gives the `len` values of the
/// larger matrix that layouts 2 and 3 place `v` in (called only for those).
pub fn operand<T: Element>(
    ctx: &ExecContext,
    v: &[T],
    (r, c): (usize, usize),
    layout: usize,
    filler: impl FnOnce(usize) -> Vec<T>,
) -> RawTensor {
    match layout {
        0 => ctx.from_slice(v, &[r, c]).unwrap(),
        1 => {
            let mut t = v.to_vec();
            for i in 0..r {
                for j in 0..c {
                    t[j * r + i] = v[i * c + j];
                }
            }
            ctx.from_slice(&t, &[c, r])
                .unwrap()
                .transpose(0, 1)
                .unwrap()
        }
        2 => {
            let mut big = filler((r + 3) * (c + 5));
            for i in 0..r {
                big[(i + 2) * (c + 5) + 3..][..c].copy_from_slice(&v[i * c..][..c]);
            }
            ctx.from_slice(&big, &[r + 3, c + 5])
                .unwrap()
                .narrow(0, 2, r)
                .unwrap()
                .narrow(1, 3, c)
                .unwrap()
        }
        _ => {
            let mut wide = filler(r * 2 * c);
            for i in 0..r {
                for j in 0..c {
                    wide[i * 2 * c + 2 * j] = v[i * c + j];
                }
            }
            ctx.from_slice(&wide, &[r, 2 * c])
                .unwrap()
                .view_with_strides(&[r, c], &[2 * c, 2], 0)
                .unwrap()
        }
    }
}
