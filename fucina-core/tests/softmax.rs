//! Softmax family: fast kernels vs the scalar reference at awkward sizes, on
//! non-contiguous views and non-last axes, backward vs central differences,
//! causal masking, thread-count determinism and input validation.

#[macro_use]
mod common;

use common::{
    assert_close_tol, assert_fd, assert_thread_invariant, finite_diff, randn, tensor, tensor_bits,
    vals, SIZES,
};
use fucina_core::kernels::fused::softmax::{exp_f32, exp_f64, reference as r};
use fucina_core::testing::TestCtx;
use fucina_core::{DType, Error, ExecContext, Float, RawTensor};

fn assert_close<T: Float>(got: &[T], want: &[T], what: &str) {
    assert_close_tol(got, want, [(2e-5, 2e-6), (1e-12, 1e-13)], what);
}

/// Checks every softmax-family op on view `x` along `axis` against the reference.
fn check_all<T: Float>(ctx: &ExecContext, x: &RawTensor, axis: usize, seed: u64, what: &str) {
    let shape = x.shape().to_vec();
    let xv = vals::<T>(x);
    let gyv: Vec<T> = randn(seed ^ 0x55, xv.len(), 1.0)
        .into_iter()
        .map(T::from_f64)
        .collect();
    let gy = ctx.from_slice(&gyv, &shape).unwrap();

    let y = ctx.softmax(x, axis).unwrap();
    assert_eq!(y.shape(), &shape[..]);
    let yr = r::softmax(&xv, &shape, axis);
    assert_close(&vals::<T>(&y), &yr, &format!("softmax {what}"));

    let ly = ctx.log_softmax(x, axis).unwrap();
    let lyr = r::log_softmax(&xv, &shape, axis);
    assert_close(&vals::<T>(&ly), &lyr, &format!("log_softmax {what}"));

    let lse = ctx.logsumexp(x, axis, false).unwrap();
    let mut s2 = shape.clone();
    s2.remove(axis);
    assert_eq!(lse.shape(), &s2[..]);
    let lser = r::logsumexp(&xv, &shape, axis);
    assert_close(&vals::<T>(&lse), &lser, &format!("logsumexp {what}"));
    let lsek = ctx.logsumexp(x, axis, true).unwrap();
    let mut s3 = shape.clone();
    s3[axis] = 1;
    assert_eq!(lsek.shape(), &s3[..]);
    assert_close(
        &vals::<T>(&lsek),
        &lser,
        &format!("logsumexp keepdim {what}"),
    );

    // Backward kernels are fed the reference forward so only the backward is under test.
    let yref = ctx.from_slice(&yr, &shape).unwrap();
    let g = ctx.softmax_backward(&yref, &gy, axis).unwrap();
    let gr = r::softmax_backward(&yr, &gyv, &shape, axis);
    assert_close(&vals::<T>(&g), &gr, &format!("softmax_backward {what}"));

    let lyref = ctx.from_slice(&lyr, &shape).unwrap();
    let lg = ctx.log_softmax_backward(&lyref, &gy, axis).unwrap();
    let lgr = r::log_softmax_backward(&lyr, &gyv, &shape, axis);
    assert_close(
        &vals::<T>(&lg),
        &lgr,
        &format!("log_softmax_backward {what}"),
    );
}

fn last_axis_sizes<T: Float>() {
    let ctx = TestCtx::with_threads(2).unwrap();
    for (k, &len) in SIZES.iter().enumerate() {
        for rows in [1, 3, 17] {
            let x = tensor::<T>(
                &ctx,
                &randn(k as u64 * 31 + rows as u64, rows * len, 4.0),
                &[rows, len],
            );
            check_all::<T>(&ctx, &x, 1, k as u64, &format!("[{rows}, {len}]"));
        }
    }
    for (k, &rows) in SIZES.iter().enumerate() {
        let x = tensor::<T>(&ctx, &randn(900 + k as u64, rows * 33, 4.0), &[rows, 33]);
        check_all::<T>(&ctx, &x, 1, k as u64, &format!("[{rows}, 33]"));
    }
}

f32_f64_tests!(last_axis_sizes => last_axis_matches_reference_f32, last_axis_matches_reference_f64);

fn other_axes_and_views<T: Float>() {
    let ctx = TestCtx::with_threads(2).unwrap();
    // Every axis of a rank-3 tensor.
    let x = tensor::<T>(&ctx, &randn(1, 5 * 7 * 3, 3.0), &[5, 7, 3]);
    for axis in 0..3 {
        check_all::<T>(&ctx, &x, axis, 2, &format!("[5,7,3] axis {axis}"));
    }
    drop(x);
    for &len in &SIZES {
        // Transposed: a [len, 6] base read as [6, len].
        let base = tensor::<T>(&ctx, &randn(len as u64, len * 6, 3.0), &[len, 6]);
        let xt = base.transpose(0, 1).unwrap();
        assert!(!xt.is_contiguous() || len == 1);
        check_all::<T>(&ctx, &xt, 1, 3, &format!("transposed len {len}"));
        check_all::<T>(&ctx, &xt, 0, 4, &format!("transposed axis 0 len {len}"));
        // Narrowed: columns 2..2+len of a [4, len + 5] base.
        let wide = tensor::<T>(
            &ctx,
            &randn(77 + len as u64, 4 * (len + 5), 3.0),
            &[4, len + 5],
        );
        let xn = wide.narrow(1, 2, len).unwrap();
        check_all::<T>(&ctx, &xn, 1, 5, &format!("narrowed len {len}"));
        // Broadcast: one row repeated 3 times (stride 0 on the row axis).
        let row = tensor::<T>(&ctx, &randn(99 + len as u64, len, 3.0), &[1, len]);
        let xb = row.broadcast_to(&[3, len]).unwrap();
        check_all::<T>(&ctx, &xb, 1, 6, &format!("broadcast len {len}"));
        check_all::<T>(&ctx, &xb, 0, 7, &format!("broadcast axis 0 len {len}"));
    }
}

f32_f64_tests!(other_axes_and_views => other_axes_and_views_f32, other_axes_and_views_f64);

#[test]
fn stable_for_large_and_infinite_logits() {
    let ctx = TestCtx::with_threads(1).unwrap();
    let x = ctx
        .from_slice(&[1000.0f32, 1001.0, f32::NEG_INFINITY, -1000.0], &[1, 4])
        .unwrap();
    let y = ctx.softmax(&x, 1).unwrap().to_vec::<f32>().unwrap();
    let e = (-1.0f64).exp();
    let want = [e / (1.0 + e), 1.0 / (1.0 + e), 0.0, 0.0];
    for (g, w) in y.iter().zip(want) {
        assert!((*g as f64 - w).abs() < 1e-6, "{y:?}");
    }
    let ly = ctx.log_softmax(&x, 1).unwrap().to_vec::<f32>().unwrap();
    assert!(ly.iter().take(2).all(|v| v.is_finite()));
    assert_eq!(ly[2], f32::NEG_INFINITY);
    let lse = ctx.logsumexp(&x, 1, false).unwrap().item::<f32>().unwrap();
    assert!((lse as f64 - (1001.0 + (1.0 + e).ln())).abs() < 1e-3);
    // All −∞ row: logsumexp −∞ (not NaN); +∞ present: +∞.
    let x2 = ctx
        .from_slice(
            &[f64::NEG_INFINITY, f64::NEG_INFINITY, 1.0, f64::INFINITY],
            &[2, 2],
        )
        .unwrap();
    let l2 = ctx
        .logsumexp(&x2, 1, false)
        .unwrap()
        .to_vec::<f64>()
        .unwrap();
    assert_eq!(l2, vec![f64::NEG_INFINITY, f64::INFINITY]);
    drop((x, x2));
}

/// The finite-difference tolerance of this file's backward checks.
const FD_ATOL: f64 = 1e-7;

/// Central-difference checks at `xv` with the upstream gradient `gyv`.
struct Fd<'a> {
    xv: &'a [f64],
    gyv: &'a [f64],
}

impl Fd<'_> {
    /// Asserts the f64 gradient `g` against the central differences of Σ gy·f(v).
    fn check(&self, g: fucina_core::Result<RawTensor>, f: impl Fn(&[f64]) -> Vec<f64>, what: &str) {
        let g = g.unwrap().to_vec::<f64>().unwrap();
        assert_fd(&g, &finite_diff(self.xv, self.gyv, f), FD_ATOL, what);
    }
}

#[test]
fn backward_matches_finite_differences() {
    let ctx = TestCtx::with_threads(1).unwrap();
    for (shape, axis) in [
        (vec![3usize, 5], 1usize),
        (vec![3, 5], 0),
        (vec![2, 3, 4], 1),
    ] {
        let n: usize = shape.iter().product();
        let xv = randn(11, n, 2.0);
        let gyv = randn(12, n, 1.0);
        let x = ctx.from_slice(&xv, &shape).unwrap();
        let gy = ctx.from_slice(&gyv, &shape).unwrap();
        let fd = Fd { xv: &xv, gyv: &gyv };

        let y = ctx.softmax(&x, axis).unwrap();
        fd.check(
            ctx.softmax_backward(&y, &gy, axis),
            |v| r::softmax(v, &shape, axis),
            "softmax_backward",
        );

        let ly = ctx.log_softmax(&x, axis).unwrap();
        fd.check(
            ctx.log_softmax_backward(&ly, &gy, axis),
            |v| r::log_softmax(v, &shape, axis),
            "log_softmax_backward",
        );
    }
    // Causal: softmax_backward on the causal output, and the causal log-softmax backward.
    for shape in [vec![4usize, 4], vec![2, 3, 5], vec![5, 3]] {
        let n: usize = shape.iter().product();
        let xv = randn(13, n, 2.0);
        let gyv = randn(14, n, 1.0);
        let x = ctx.from_slice(&xv, &shape).unwrap();
        let gy = ctx.from_slice(&gyv, &shape).unwrap();
        let last = shape.len() - 1;
        let y = ctx.softmax_causal(&x).unwrap();
        Fd { xv: &xv, gyv: &gyv }.check(
            ctx.softmax_backward(&y, &gy, last),
            |v| r::softmax_causal(v, &shape),
            "softmax_causal backward",
        );

        // The causal log-softmax has −∞ entries: differentiate only its finite part
        // (gy masked to 0 there, as a downstream op that ignores masked slots would).
        let ly = ctx.log_softmax_causal(&x).unwrap();
        let lyv = ly.to_vec::<f64>().unwrap();
        let gym: Vec<f64> = gyv
            .iter()
            .zip(&lyv)
            .map(|(&g, &l)| if l.is_finite() { g } else { 0.0 })
            .collect();
        let gyt = ctx.from_slice(&gym, &shape).unwrap();
        Fd { xv: &xv, gyv: &gym }.check(
            ctx.log_softmax_causal_backward(&ly, &gyt),
            |v| {
                r::log_softmax_causal(v, &shape)
                    .into_iter()
                    .map(|l| if l.is_finite() { l } else { 0.0 })
                    .collect()
            },
            "log_softmax_causal_backward",
        );
    }
}

fn causal_matches_reference<T: Float>() {
    let ctx = TestCtx::with_threads(2).unwrap();
    let mut shapes = vec![
        vec![2usize, 5, 5],
        vec![3, 4, 7],
        vec![1, 6, 3],
        vec![7, 1],
        vec![2, 2, 3, 9],
    ];
    for &n in &SIZES {
        shapes.push(vec![n, n]);
        shapes.push(vec![3, n]);
    }
    for (k, shape) in shapes.iter().enumerate() {
        let n: usize = shape.iter().product();
        let x = tensor::<T>(&ctx, &randn(k as u64, n, 3.0), shape);
        let xv = vals::<T>(&x);
        let y = vals::<T>(&ctx.softmax_causal(&x).unwrap());
        let yr = r::softmax_causal(&xv, shape);
        assert!(
            y.iter().all(|v| !v.is_nan()),
            "NaN in causal softmax {shape:?}"
        );
        assert_close(&y, &yr, &format!("softmax_causal {shape:?}"));
        let ly = ctx.log_softmax_causal(&x).unwrap();
        let lyv = vals::<T>(&ly);
        let lyr = r::log_softmax_causal(&xv, shape);
        assert!(
            lyv.iter().all(|v| !v.is_nan()),
            "NaN in causal log_softmax {shape:?}"
        );
        assert_close(&lyv, &lyr, &format!("log_softmax_causal {shape:?}"));
        let gyv: Vec<T> = randn(k as u64 + 500, n, 1.0)
            .into_iter()
            .map(T::from_f64)
            .collect();
        let gy = ctx.from_slice(&gyv, shape).unwrap();
        let g = vals::<T>(&ctx.log_softmax_causal_backward(&ly, &gy).unwrap());
        assert_close(
            &g,
            &r::log_softmax_causal_backward(&lyr, &gyv, shape),
            "causal bwd",
        );
        // Non-contiguous input: a transposed square block.
        if shape.len() == 2 && shape[0] == shape[1] {
            let xt = x.transpose(0, 1).unwrap();
            let y = vals::<T>(&ctx.softmax_causal(&xt).unwrap());
            assert_close(
                &y,
                &r::softmax_causal(&vals::<T>(&xt), shape),
                "causal transposed",
            );
        }
    }
    // rows > cols: the first rows − cols rows are fully masked and give zeros.
    let x = tensor::<T>(&ctx, &randn(3, 18, 1.0), &[6, 3]);
    let y = vals::<T>(&ctx.softmax_causal(&x).unwrap());
    assert!(y[..9].iter().all(|&v| v == T::ZERO));
    assert!((y[9].to_f64() - 1.0).abs() < 1e-6 && y[10] == T::ZERO);
    drop(x);
}

f32_f64_tests!(causal_matches_reference => causal_matches_reference_f32, causal_matches_reference_f64);

fn deterministic<T: Float>() {
    let (rows, cols) = (256, 300);
    let xv = randn(42, rows * cols, 5.0);
    let gyv = randn(43, rows * cols, 1.0);
    assert_thread_invariant(|ctx| {
        let x = tensor::<T>(ctx, &xv, &[rows, cols]);
        let gy = tensor::<T>(ctx, &gyv, &[rows, cols]);
        let y = ctx.softmax(&x, 1).unwrap();
        let ly = ctx.log_softmax(&x, 1).unwrap();
        let y0 = ctx.softmax(&x, 0).unwrap();
        vec![
            tensor_bits::<T>(&y),
            tensor_bits::<T>(&ly),
            tensor_bits::<T>(&y0),
            tensor_bits::<T>(&ctx.logsumexp(&x, 1, false).unwrap()),
            tensor_bits::<T>(&ctx.softmax_backward(&y, &gy, 1).unwrap()),
            tensor_bits::<T>(&ctx.log_softmax_backward(&ly, &gy, 1).unwrap()),
            tensor_bits::<T>(&ctx.softmax_causal(&x).unwrap()),
            tensor_bits::<T>(&ctx.log_softmax_causal(&x).unwrap()),
        ]
    });
}

f32_f64_tests!(deterministic => bitwise_identical_across_thread_counts);

#[test]
fn rejects_bad_inputs() {
    let ctx = TestCtx::with_threads(1).unwrap();
    let x = ctx.from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[2, 2]).unwrap();
    assert!(matches!(
        ctx.softmax(&x, 2),
        Err(Error::OutOfRange { what: "axis", .. })
    ));
    assert!(matches!(
        ctx.logsumexp(&x, 5, true),
        Err(Error::OutOfRange { .. })
    ));
    let xi = ctx.from_slice(&[1i64, 2], &[2]).unwrap();
    assert!(matches!(
        ctx.log_softmax(&xi, 0),
        Err(Error::UnsupportedDType { .. })
    ));
    let g64 = ctx.from_slice(&[1.0f64; 4], &[2, 2]).unwrap();
    assert!(matches!(
        ctx.softmax_backward(&x, &g64, 1),
        Err(Error::DTypeMismatch { .. })
    ));
    let g3 = ctx.from_slice(&[1.0f32; 6], &[2, 3]).unwrap();
    assert!(matches!(
        ctx.log_softmax_backward(&x, &g3, 1),
        Err(Error::ShapeMismatch { .. })
    ));
    let v = ctx.from_slice(&[1.0f32, 2.0], &[2]).unwrap();
    assert!(matches!(
        ctx.softmax_causal(&v),
        Err(Error::InvalidArgument { .. })
    ));
    // Empty tensors are fine.
    let e = ctx.zeros(DType::F32, &[0, 4]).unwrap();
    assert_eq!(ctx.softmax(&e, 1).unwrap().shape(), &[0, 4]);
    let e2 = ctx.zeros(DType::F64, &[3, 0]).unwrap();
    let l = ctx
        .logsumexp(&e2, 1, false)
        .unwrap()
        .to_vec::<f64>()
        .unwrap();
    assert_eq!(l, vec![f64::NEG_INFINITY; 3]);
    drop((x, xi, g64, g3, v, e, e2));
}

#[test]
fn vectorisable_exp_is_accurate() {
    // f32: within 3 ulp-ish of the correctly rounded value over the normal range.
    let mut worst = 0f64;
    let mut x = -87.0f32;
    while x < 88.7 {
        let want = (x as f64).exp();
        let got = exp_f32(x) as f64;
        worst = worst.max(((got - want) / want).abs());
        x += 0.0137;
    }
    assert!(worst < 3.0 * f32::EPSILON as f64, "exp_f32 rel err {worst}");
    // Subnormal results stay close in absolute terms; past the ends: 0 and +inf.
    assert!((exp_f32(-100.0) as f64 - (-100f64).exp()).abs() < 1e-44);
    assert_eq!(exp_f32(-105.0), 0.0);
    assert_eq!(exp_f32(f32::NEG_INFINITY), 0.0);
    assert_eq!(exp_f32(89.0), f32::INFINITY);
    assert_eq!(exp_f32(f32::INFINITY), f32::INFINITY);
    assert!(exp_f32(f32::NAN).is_nan());
    assert_eq!(exp_f32(0.0), 1.0);
    // f64: within a few ulp over the normal range.
    let mut worst = 0f64;
    let mut x = -708.0f64;
    while x < 709.0 {
        let want = x.exp();
        worst = worst.max(((exp_f64(x) - want) / want).abs());
        x += 0.0731;
    }
    assert!(worst < 4.0 * f64::EPSILON, "exp_f64 rel err {worst}");
    assert!((exp_f64(-740.0) - (-740f64).exp()).abs() < 1e-320);
    assert_eq!(exp_f64(-747.0), 0.0);
    assert_eq!(exp_f64(f64::NEG_INFINITY), 0.0);
    assert_eq!(exp_f64(f64::INFINITY), f64::INFINITY);
    assert!(exp_f64(f64::NAN).is_nan());
    assert_eq!(exp_f64(0.0), 1.0);
}
