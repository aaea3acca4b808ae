//! Shared helpers for the kernel tests: the awkward sizes and the strided
//! layouts every fast kernel is compared with its reference on.
#![allow(dead_code)]

#[macro_use]
mod errors;
#[macro_use]
mod macros;
pub mod ew;
pub mod gemm;

use fucina_core::rng::SplitMix64;
use fucina_core::testing::TestCtx;
use fucina_core::{DType, Element, ExecContext, Float, RawTensor};

pub const SIZES: [usize; 12] = [1, 3, 7, 15, 16, 17, 31, 33, 63, 65, 127, 257];

/// True when `FUCINA_REDUCED_SIZES` is set: the valgrind run
/// (`tools/valgrind-kernels.sh`) shrinks the problems it checks.
pub fn reduced() -> bool {
    std::env::var_os("FUCINA_REDUCED_SIZES").is_some()
}

/// The awkward sizes, or their first eight (up to 33) when [`reduced`].
pub fn sizes() -> &'static [usize] {
    if reduced() {
        &SIZES[..8]
    } else {
        &SIZES
    }
}

#[derive(Clone, Copy, Debug)]
pub enum Layout {
    Contig,
    Reversed,
    Narrowed,
}
pub const LAYOUTS: [Layout; 3] = [Layout::Contig, Layout::Reversed, Layout::Narrowed];

/// A tensor of logical `shape` holding `data` (row-major) in the given layout.
pub fn make<T: Element>(
    ctx: &ExecContext,
    data: &[f64],
    shape: &[usize],
    layout: Layout,
) -> RawTensor {
    let v: Vec<T> = data.iter().map(|&x| T::from_f64(x)).collect();
    let rank = shape.len();
    let n = v.len();
    match layout {
        Layout::Contig => ctx.from_slice(&v, shape).unwrap(),
        Layout::Reversed if rank < 2 => {
            let mut buf = vec![T::from_f64(-777.0); 2 * n.max(1)];
            for i in 0..n {
                buf[2 * i] = v[i];
            }
            let base = ctx.from_slice(&buf, &[buf.len()]).unwrap();
            base.view_with_strides(shape, &vec![2; rank], 0).unwrap()
        }
        Layout::Reversed => {
            // base has the reversed shape; permuting all axes back gives `shape`.
            let rev: Vec<usize> = shape.iter().rev().copied().collect();
            let mut buf = vec![T::from_f64(0.0); n];
            for i in 0..n {
                let mut rem = i;
                let mut idx = vec![0; rank];
                for d in (0..rank).rev() {
                    idx[d] = rem % shape[d];
                    rem /= shape[d];
                }
                let mut lin = 0;
                for d in (0..rank).rev() {
                    lin = lin * shape[d] + idx[d];
                }
                buf[lin] = v[i];
            }
            let base = ctx.from_slice(&buf, &rev).unwrap();
            let perm: Vec<usize> = (0..rank).rev().collect();
            base.permute(&perm).unwrap()
        }
        Layout::Narrowed if rank == 0 => ctx.from_slice(&v, shape).unwrap(),
        Layout::Narrowed => {
            let mut ps = shape.to_vec();
            ps[rank - 1] += 3;
            let inner = shape[rank - 1];
            let mut buf = vec![T::from_f64(-777.0); ps.iter().product()];
            for i in 0..n {
                let (row, j) = (i / inner, i % inner);
                buf[row * (inner + 3) + 1 + j] = v[i];
            }
            let base = ctx.from_slice(&buf, &ps).unwrap();
            base.narrow(rank - 1, 1, inner).unwrap()
        }
    }
}

/// A 1-thread and a 2-thread test context (each checks on drop that no pool buffer is out).
pub fn one_and_two_threads() -> (TestCtx, TestCtx) {
    (
        TestCtx::with_threads(1).unwrap(),
        TestCtx::with_threads(2).unwrap(),
    )
}

/// Asserts that `got` holds exactly the bits of `want` (through f64).
#[track_caller]
pub fn assert_bits_eq<T: Element>(got: &RawTensor, want: &[T]) {
    assert_eq!(bits(&got.to_vec::<T>().unwrap()), bits(want));
}

/// Asserts that `op` gives a tensor of `shape` on the 1-thread context `c1`, and exactly
/// the bits of `want` on `c1` and on the 2-thread context `c2`.
#[track_caller]
pub fn assert_threads_bits_eq<T: Element>(
    c1: &ExecContext,
    c2: &ExecContext,
    shape: &[usize],
    want: &[T],
    op: impl Fn(&ExecContext) -> RawTensor,
) {
    let (y1, y2) = (op(c1), op(c2));
    assert_eq!(y1.shape(), shape);
    assert_bits_eq::<T>(&y1, want);
    assert_bits_eq::<T>(&y2, want);
}

/// Asserts that `run` gives the same bit patterns on a 1-thread and on a 2-thread
/// context (both live for the whole check, each ending with no pool buffer out).
pub fn assert_thread_invariant(run: impl Fn(&ExecContext) -> Vec<Vec<u64>>) {
    let (c1, c2) = one_and_two_threads();
    assert_eq!(run(&c1), run(&c2));
}

/// The bit patterns of `v` (through f64), for bitwise thread-count comparisons.
pub fn bits<T: Element>(v: &[T]) -> Vec<u64> {
    v.iter().map(|x| x.to_f64().to_bits()).collect()
}

/// The bit patterns of `t`'s elements (through f64), for bitwise comparisons.
pub fn tensor_bits<T: Float>(t: &RawTensor) -> Vec<u64> {
    bits(&vals::<T>(t))
}

/// A contiguous tensor of `shape` with values uniform in [-2, 2).
pub fn rand_t<T: Element>(ctx: &ExecContext, rng: &mut SplitMix64, shape: &[usize]) -> RawTensor {
    rand_in::<T>(ctx, rng, shape, -2.0, 2.0)
}

/// A contiguous tensor of `shape` with values uniform in [lo, hi).
pub fn rand_in<T: Element>(
    ctx: &ExecContext,
    rng: &mut SplitMix64,
    shape: &[usize],
    lo: f64,
    hi: f64,
) -> RawTensor {
    let n: usize = shape.iter().product();
    let v: Vec<T> = rng
        .vec_uniform(n, lo, hi)
        .into_iter()
        .map(T::from_f64)
        .collect();
    ctx.from_slice(&v, shape).unwrap()
}

/// `n` draws of `scale · N(0, 1)` from the stream `seed`.
pub fn randn(seed: u64, n: usize, scale: f64) -> Vec<f64> {
    let mut g = SplitMix64::new(seed);
    (0..n).map(|_| scale * g.next_normal()).collect()
}

/// `0, 1, 2, …` in a contiguous f32 tensor of `shape` (`arange`, reshaped).
pub fn arange_f32(ctx: &ExecContext, shape: &[usize]) -> RawTensor {
    let n: usize = shape.iter().product();
    ctx.arange::<f32>(0.0, n as f64, 1.0)
        .unwrap()
        .reshape(shape)
        .unwrap()
}

/// A contiguous tensor of `shape` holding `v` rounded to `T`.
pub fn tensor<T: Float>(ctx: &ExecContext, v: &[f64], shape: &[usize]) -> RawTensor {
    let d: Vec<T> = v.iter().map(|&x| T::from_f64(x)).collect();
    ctx.from_slice(&d, shape).unwrap()
}

/// The elements of `t` in logical order.
pub fn vals<T: Float>(t: &RawTensor) -> Vec<T> {
    t.to_vec::<T>().unwrap()
}

/// Asserts `|got − want| ≤ atol + rtol·|want|` element by element (equal values, equal
/// infinities included, always pass); `tol` is `(rtol, atol)` for f32, then for f64.
pub fn assert_close_tol<T: Float>(got: &[T], want: &[T], tol: [(f64, f64); 2], what: &str) {
    let (rtol, atol) = if T::DTYPE == DType::F32 {
        tol[0]
    } else {
        tol[1]
    };
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let (g, w) = (g.to_f64(), w.to_f64());
        let ok = (g == w) || (g - w).abs() <= atol + rtol * w.abs();
        assert!(ok, "{what}[{i}]: got {g}, want {w}");
    }
}

/// Central differences (step 1e-6) of L(v) = Σ gy · f(v) with respect to
/// every element of `v`: the numeric side of a backward check.
pub fn finite_diff(v: &[f64], gy: &[f64], f: impl Fn(&[f64]) -> Vec<f64>) -> Vec<f64> {
    let loss = |p: &[f64]| -> f64 { f(p).iter().zip(gy).map(|(a, b)| a * b).sum() };
    fd_of(v, loss)
}

/// Central differences (step 1e-6) of the scalar `loss` at `v`.
pub fn fd_of(v: &[f64], loss: impl Fn(&[f64]) -> f64) -> Vec<f64> {
    let h = 1e-6;
    (0..v.len())
        .map(|i| {
            let mut p = v.to_vec();
            p[i] += h;
            let lp = loss(&p);
            p[i] -= 2.0 * h;
            (lp - loss(&p)) / (2.0 * h)
        })
        .collect()
}

/// Asserts an analytic gradient against central differences:
/// `|got − want| ≤ atol + 1e-6·|want|` element by element.
pub fn assert_fd(got: &[f64], want: &[f64], atol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= atol + 1e-6 * w.abs(),
            "{what}[{i}]: analytic {g}, numeric {w}"
        );
    }
}
