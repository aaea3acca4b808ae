//! Shared helpers of the elementwise kernel tests (`elementwise*.rs`):
//! bitwise and tolerance comparisons, f64 views, uniform test data.

use fucina_core::kernels::elementwise::BinaryOp;
use fucina_core::rng::SplitMix64;
use fucina_core::{Element, Float, RawTensor};

pub fn same(a: f64, b: f64) -> bool {
    (a.is_nan() && b.is_nan()) || a.to_bits() == b.to_bits()
}

pub fn assert_bits<T: Float>(got: &[T], want: &[T], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            same(g.to_f64(), w.to_f64()),
            "{what}: element {i}: got {g:?}, want {w:?}"
        );
    }
}

pub fn assert_close(got: &[f64], want: &[f64], rtol: f64, atol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        if g.is_nan() && w.is_nan() {
            continue;
        }
        assert!(
            (g - w).abs() <= atol + rtol * w.abs(),
            "{what}: element {i}: got {g}, want {w}"
        );
    }
}

/// A backward's gradient `got` (in `T`) against `want`: [`assert_close`] with `rtol`
/// relative and `rtol · max(1, max|want|)` absolute tolerance.
pub fn assert_grad_close<T: Element>(got: &RawTensor, want: &[f64], rtol: f64, what: &str) {
    let scale = want.iter().fold(1.0f64, |m, v| m.max(v.abs()));
    assert_close(&f64s::<T>(got), want, rtol, rtol * scale, what);
}

pub fn f64s<T: Element>(t: &RawTensor) -> Vec<f64> {
    t.to_vec::<T>()
        .unwrap()
        .iter()
        .map(|v| v.to_f64())
        .collect()
}

pub fn data(n: usize, seed: u64, lo: f64, hi: f64) -> Vec<f64> {
    SplitMix64::new(seed).vec_uniform(n, lo, hi)
}

/// Every op of the binary table.
pub fn all_binary() -> impl Iterator<Item = BinaryOp> {
    BinaryOp::ALL.iter().copied()
}

/// (a shape, b shape) pairs covering same-shape, scalar, row, column and mixed broadcasts.
pub fn broadcast_pairs(n: usize) -> Vec<(Vec<usize>, Vec<usize>)> {
    vec![
        (vec![n], vec![n]),
        (vec![3, n], vec![3, n]),
        (vec![n], vec![1]),
        (vec![], vec![n]),
        (vec![3, n], vec![n]),
        (vec![3, n], vec![3, 1]),
        (vec![1, n], vec![4, 1]),
        (vec![2, 1, n], vec![3, n]),
    ]
}

/// The central difference `(f(x + h) − f(x − h)) / 2h`.
pub fn central_diff(f: impl Fn(f64) -> f64, x: f64, h: f64) -> f64 {
    (f(x + h) - f(x - h)) / (2.0 * h)
}

/// Asserts a reference derivative `df` against its central difference `fd`:
/// `|fd − df| ≤ tol·(1 + |df|)`.
#[track_caller]
pub fn assert_fd_close(fd: f64, df: f64, tol: f64, what: &str) {
    assert!(
        (fd - df).abs() <= tol * (1.0 + df.abs()),
        "{what}: fd {fd} vs df {df}"
    );
}
