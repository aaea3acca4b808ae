//! Layer norm and RMS norm: fast kernels vs the scalar reference at awkward
//! sizes and on non-contiguous inputs, backward vs central differences,
//! thread-count determinism (including the gw/gb row reductions), validation.

#[macro_use]
mod common;

use common::{
    assert_close_tol, assert_fd, assert_thread_invariant, finite_diff, tensor, tensor_bits, vals,
    SIZES,
};
use fucina_core::kernels::fused::norm::reference as r;
use fucina_core::testing::TestCtx;
use fucina_core::{Error, ExecContext, Float, RawTensor};

const EPS: f64 = 1e-5;

/// `shift + scale · N(0, 1)` draws from the stream `seed`.
fn randn(seed: u64, n: usize, scale: f64, shift: f64) -> Vec<f64> {
    common::randn(seed, n, scale)
        .into_iter()
        .map(|x| shift + x)
        .collect()
}

fn assert_close<T: Float>(got: &[T], want: &[T], what: &str) {
    // Row sums run in a different (lane) order than the reference's serial sums;
    // gw/gb sum over rows, so their tolerance grows with the row count.
    assert_close_tol(got, want, [(1e-4, 1e-4), (1e-11, 1e-11)], what);
}

/// Checks layer norm and RMS norm, forward and backward, on view `x` `[.., d]`
/// with optional (possibly strided) weight and bias views.
fn check<T: Float>(
    ctx: &ExecContext,
    x: &RawTensor,
    w: Option<&RawTensor>,
    b: Option<&RawTensor>,
    seed: u64,
    what: &str,
) {
    let shape = x.shape().to_vec();
    let d = *shape.last().unwrap();
    let lead = &shape[..shape.len() - 1];
    let xv = vals::<T>(x);
    let wv = w.map(vals::<T>);
    let bv = b.map(vals::<T>);
    let gyv: Vec<T> = randn(seed, xv.len(), 1.0, 0.0)
        .into_iter()
        .map(T::from_f64)
        .collect();
    let gy = ctx.from_slice(&gyv, &shape).unwrap();

    let (y, mean, rstd) = ctx.layer_norm(x, w, b, EPS).unwrap();
    assert_eq!((mean.shape(), rstd.shape()), (lead, lead));
    let (yr, mr, rr) = r::layer_norm(&xv, d, wv.as_deref(), bv.as_deref(), EPS);
    assert_close(&vals::<T>(&y), &yr, &format!("layer_norm y {what}"));
    assert_close(&vals::<T>(&mean), &mr, &format!("layer_norm mean {what}"));
    assert_close(&vals::<T>(&rstd), &rr, &format!("layer_norm rstd {what}"));

    // Backward from the reference statistics, so only the backward is under test.
    let mt = ctx.from_slice(&mr, lead).unwrap();
    let rt = ctx.from_slice(&rr, lead).unwrap();
    let (gx, gw, gb) = ctx
        .layer_norm_backward(x, w, &mt, &rt, &gy, true, true, true)
        .unwrap();
    let (gxr, gwr, gbr) = r::layer_norm_backward(&xv, d, wv.as_deref(), &mr, &rr, &gyv);
    assert_close(
        &vals::<T>(&gx.unwrap()),
        &gxr,
        &format!("layer_norm gx {what}"),
    );
    assert_eq!(gw.is_some(), w.is_some(), "gw present iff weight");
    if let Some(gw) = gw {
        assert_close(&vals::<T>(&gw), &gwr, &format!("layer_norm gw {what}"));
    }
    assert_close(
        &vals::<T>(&gb.unwrap()),
        &gbr,
        &format!("layer_norm gb {what}"),
    );
    // Only what is asked for is computed.
    let (gx, gw, gb) = ctx
        .layer_norm_backward(x, w, &mt, &rt, &gy, false, true, false)
        .unwrap();
    assert!(gx.is_none() && gb.is_none() && gw.is_some() == w.is_some());

    let (y, rstd) = ctx.rms_norm(x, w, EPS).unwrap();
    let (yr, rr) = r::rms_norm(&xv, d, wv.as_deref(), EPS);
    assert_close(&vals::<T>(&y), &yr, &format!("rms_norm y {what}"));
    assert_close(&vals::<T>(&rstd), &rr, &format!("rms_norm rstd {what}"));
    let rt = ctx.from_slice(&rr, lead).unwrap();
    let (gx, gw) = ctx.rms_norm_backward(x, w, &rt, &gy, true, true).unwrap();
    let (gxr, gwr) = r::rms_norm_backward(&xv, d, wv.as_deref(), &rr, &gyv);
    assert_close(
        &vals::<T>(&gx.unwrap()),
        &gxr,
        &format!("rms_norm gx {what}"),
    );
    assert_eq!(gw.is_some(), w.is_some());
    if let Some(gw) = gw {
        assert_close(&vals::<T>(&gw), &gwr, &format!("rms_norm gw {what}"));
    }
}

fn sizes_and_views<T: Float>() {
    let ctx = TestCtx::with_threads(2).unwrap();
    for (k, &d) in SIZES.iter().enumerate() {
        let w = tensor::<T>(&ctx, &randn(500 + k as u64, d, 0.5, 1.0), &[d]);
        let b = tensor::<T>(&ctx, &randn(600 + k as u64, d, 0.5, 0.0), &[d]);
        for rows in [1, 3, 17] {
            let x = tensor::<T>(
                &ctx,
                &randn(k as u64 * 7 + rows as u64, rows * d, 2.0, 1.5),
                &[rows, d],
            );
            let tag = format!("[{rows}, {d}]");
            check::<T>(&ctx, &x, Some(&w), Some(&b), k as u64, &tag);
            check::<T>(&ctx, &x, None, None, k as u64, &tag);
            check::<T>(&ctx, &x, Some(&w), None, k as u64, &tag);
            check::<T>(&ctx, &x, None, Some(&b), k as u64, &tag);
        }
        // Non-contiguous: transposed x, narrowed x, rank-3 x, strided weight.
        let base = tensor::<T>(&ctx, &randn(700 + k as u64, d * 5, 1.0, 0.0), &[d, 5]);
        let xt = base.transpose(0, 1).unwrap();
        check::<T>(
            &ctx,
            &xt,
            Some(&w),
            Some(&b),
            1,
            &format!("transposed d {d}"),
        );
        let wide = tensor::<T>(
            &ctx,
            &randn(800 + k as u64, 4 * (d + 3), 1.0, 0.0),
            &[4, d + 3],
        );
        let xn = wide.narrow(1, 1, d).unwrap();
        let wbase = tensor::<T>(&ctx, &randn(900 + k as u64, d * 2, 0.5, 1.0), &[d, 2]);
        let ws = wbase.select(1, 1).unwrap();
        check::<T>(&ctx, &xn, Some(&ws), None, 2, &format!("narrowed d {d}"));
        let x3 = tensor::<T>(&ctx, &randn(950 + k as u64, 6 * d, 1.0, 0.0), &[2, 3, d]);
        check::<T>(&ctx, &x3, Some(&w), Some(&b), 3, &format!("rank 3 d {d}"));
    }
    for (k, &rows) in SIZES.iter().enumerate() {
        let x = tensor::<T>(
            &ctx,
            &randn(1000 + k as u64, rows * 33, 1.0, -2.0),
            &[rows, 33],
        );
        let w = tensor::<T>(&ctx, &randn(1100, 33, 0.5, 1.0), &[33]);
        let b = tensor::<T>(&ctx, &randn(1200, 33, 0.5, 0.0), &[33]);
        check::<T>(&ctx, &x, Some(&w), Some(&b), 4, &format!("[{rows}, 33]"));
    }
}

f32_f64_tests!(sizes_and_views => matches_reference_f32, matches_reference_f64);

/// The finite-difference tolerance of this file's backward checks.
const FD_ATOL: f64 = 1e-6;

/// Asserts the (requested, so present) f64 gradient `g` against the central differences `fd`.
fn assert_grad_fd(g: Option<RawTensor>, fd: &[f64], what: &str) {
    assert_fd(&g.unwrap().to_vec::<f64>().unwrap(), fd, FD_ATOL, what);
}

#[test]
fn backward_matches_finite_differences() {
    let ctx = TestCtx::with_threads(1).unwrap();
    let (rows, d) = (4, 6);
    let xv = randn(1, rows * d, 1.5, 0.5);
    let wv = randn(2, d, 0.5, 1.0);
    let bv = randn(3, d, 0.5, 0.0);
    let gyv = randn(4, rows * d, 1.0, 0.0);
    let x = ctx.from_slice(&xv, &[rows, d]).unwrap();
    let w = ctx.from_slice(&wv, &[d]).unwrap();
    let b = ctx.from_slice(&bv, &[d]).unwrap();
    let gy = ctx.from_slice(&gyv, &[rows, d]).unwrap();
    let eps = 1e-3;

    let (_, mean, rstd) = ctx.layer_norm(&x, Some(&w), Some(&b), eps).unwrap();
    let (gx, gw, gb) = ctx
        .layer_norm_backward(&x, Some(&w), &mean, &rstd, &gy, true, true, true)
        .unwrap();
    let fx = finite_diff(&xv, &gyv, |v| {
        r::layer_norm(v, d, Some(&wv), Some(&bv), eps).0
    });
    let fw = finite_diff(&wv, &gyv, |v| {
        r::layer_norm(&xv, d, Some(v), Some(&bv), eps).0
    });
    let fb = finite_diff(&bv, &gyv, |v| {
        r::layer_norm(&xv, d, Some(&wv), Some(v), eps).0
    });
    assert_grad_fd(gx, &fx, "layer_norm gx");
    assert_grad_fd(gw, &fw, "layer_norm gw");
    assert_grad_fd(gb, &fb, "layer_norm gb");
    // Without weight.
    let (_, mean0, rstd0) = ctx.layer_norm(&x, None, None, eps).unwrap();
    let (gx0, _, _) = ctx
        .layer_norm_backward(&x, None, &mean0, &rstd0, &gy, true, false, false)
        .unwrap();
    let fx0 = finite_diff(&xv, &gyv, |v| r::layer_norm(v, d, None, None, eps).0);
    assert_grad_fd(gx0, &fx0, "layer_norm gx (no affine)");

    let (_, rrstd) = ctx.rms_norm(&x, Some(&w), eps).unwrap();
    let (gx, gw) = ctx
        .rms_norm_backward(&x, Some(&w), &rrstd, &gy, true, true)
        .unwrap();
    let fx = finite_diff(&xv, &gyv, |v| r::rms_norm(v, d, Some(&wv), eps).0);
    let fw = finite_diff(&wv, &gyv, |v| r::rms_norm(&xv, d, Some(v), eps).0);
    assert_grad_fd(gx, &fx, "rms_norm gx");
    assert_grad_fd(gw, &fw, "rms_norm gw");
    let (_, rrstd0) = ctx.rms_norm(&x, None, eps).unwrap();
    let (gx0, gw0) = ctx
        .rms_norm_backward(&x, None, &rrstd0, &gy, true, true)
        .unwrap();
    assert!(gw0.is_none());
    let fx0 = finite_diff(&xv, &gyv, |v| r::rms_norm(v, d, None, eps).0);
    assert_grad_fd(gx0, &fx0, "rms_norm gx (no weight)");
    drop((x, w, b, gy, mean, rstd, mean0, rstd0, rrstd, rrstd0));
}

fn deterministic<T: Float>() {
    let (rows, d) = (1030, 96);
    let xv = randn(5, rows * d, 2.0, 1.0);
    let gyv = randn(6, rows * d, 1.0, 0.0);
    let wv = randn(7, d, 0.5, 1.0);
    assert_thread_invariant(|ctx| {
        let x = tensor::<T>(ctx, &xv, &[rows, d]);
        let gy = tensor::<T>(ctx, &gyv, &[rows, d]);
        let w = tensor::<T>(ctx, &wv, &[d]);
        let (y, mean, rstd) = ctx.layer_norm(&x, Some(&w), Some(&w), EPS).unwrap();
        let (gx, gw, gb) = ctx
            .layer_norm_backward(&x, Some(&w), &mean, &rstd, &gy, true, true, true)
            .unwrap();
        let (ry, rr) = ctx.rms_norm(&x, Some(&w), EPS).unwrap();
        let (rgx, rgw) = ctx
            .rms_norm_backward(&x, Some(&w), &rr, &gy, true, true)
            .unwrap();
        vec![
            tensor_bits::<T>(&y),
            tensor_bits::<T>(&mean),
            tensor_bits::<T>(&rstd),
            tensor_bits::<T>(&gx.unwrap()),
            tensor_bits::<T>(&gw.unwrap()),
            tensor_bits::<T>(&gb.unwrap()),
            tensor_bits::<T>(&ry),
            tensor_bits::<T>(&rr),
            tensor_bits::<T>(&rgx.unwrap()),
            tensor_bits::<T>(&rgw.unwrap()),
        ]
    });
}

f32_f64_tests!(deterministic => bitwise_identical_across_thread_counts);

#[test]
fn rejects_bad_inputs() {
    let ctx = TestCtx::with_threads(1).unwrap();
    let x = ctx.from_slice(&[1.0f32; 6], &[2, 3]).unwrap();
    let w4 = ctx.from_slice(&[1.0f32; 4], &[4]).unwrap();
    let w64 = ctx.from_slice(&[1.0f64; 3], &[3]).unwrap();
    assert!(matches!(
        ctx.layer_norm(&x, Some(&w4), None, EPS),
        Err(Error::ShapeMismatch { .. })
    ));
    assert!(matches!(
        ctx.layer_norm(&x, None, Some(&w64), EPS),
        Err(Error::DTypeMismatch { .. })
    ));
    assert!(matches!(
        ctx.rms_norm(&x, Some(&w4), EPS),
        Err(Error::ShapeMismatch { .. })
    ));
    assert!(matches!(
        ctx.layer_norm(&x, None, None, -1.0),
        Err(Error::InvalidArgument { .. })
    ));
    assert!(matches!(
        ctx.rms_norm(&x, None, f64::NAN),
        Err(Error::InvalidArgument { .. })
    ));
    let s = ctx.scalar(1.0f32).unwrap();
    assert!(matches!(
        ctx.layer_norm(&s, None, None, EPS),
        Err(Error::InvalidArgument { .. })
    ));
    let xi = ctx.from_slice(&[1i32; 6], &[2, 3]).unwrap();
    assert!(matches!(
        ctx.rms_norm(&xi, None, EPS),
        Err(Error::UnsupportedDType { .. })
    ));
    let (_, mean, rstd) = ctx.layer_norm(&x, None, None, EPS).unwrap();
    let bad = ctx.from_slice(&[1.0f32; 3], &[3]).unwrap();
    assert!(matches!(
        ctx.layer_norm_backward(&x, None, &bad, &rstd, &x, true, false, false),
        Err(Error::ShapeMismatch { .. })
    ));
    assert!(matches!(
        ctx.layer_norm_backward(&x, None, &mean, &rstd, &bad, true, false, false),
        Err(Error::ShapeMismatch { .. })
    ));
    assert!(matches!(
        ctx.rms_norm_backward(&x, None, &bad, &x, true, false),
        Err(Error::ShapeMismatch { .. })
    ));
    // Constant rows: variance 0, rstd = 1/sqrt(eps), y = 0 (no NaN).
    let (y, _, _) = ctx.layer_norm(&x, None, None, EPS).unwrap();
    assert!(y.to_vec::<f32>().unwrap().iter().all(|&v| v == 0.0));
    drop((x, w4, w64, s, xi, mean, rstd, bad, y));
}
