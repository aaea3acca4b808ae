//! Unary elementwise kernels (every op of the table in
//! `kernels/elementwise/unary_ops.rs`) vs their scalar reference, on awkward
//! sizes, strided views, f32 and f64; derivatives vs the reference and finite
//! differences; the PyTorch kink conventions.

use fucina_core::kernels::elementwise::reference as r;
use fucina_core::kernels::elementwise::{Domain, Saved, UnaryOp};
use fucina_core::testing::TestCtx;
use fucina_core::{Error, Float};

#[macro_use]
mod common;
use common::ew::{
    assert_bits, assert_close, assert_fd_close, assert_grad_close, central_diff, data,
};
use common::{make, Layout, LAYOUTS, SIZES};

/// Every op of the table (with its gradcheck parameters), plus other parameters.
fn all_unary() -> Vec<UnaryOp> {
    use UnaryOp::*;
    let mut ops = UnaryOp::EXAMPLES.to_vec();
    ops.extend([
        Elu(1.3),
        AddScalar(1.5),
        MulScalar(-2.5),
        PowScalar(2.0),
        PowScalar(1.7),
        PowScalar(0.0),
        PowScalar(-1.5),
        RSubScalar(3.0),
        Clamp(-0.5, 0.75),
    ]);
    ops
}

/// A domain for `op` where it is smooth enough to test: the table's range
/// where it has one (positive where needed), else [-4, 4).
fn domain(op: UnaryOp) -> (f64, f64) {
    match (op, op.domain()) {
        // Across softplus's threshold (x > 20 gives x).
        (UnaryOp::Softplus, _) => (-25.0, 25.0),
        (_, Domain::Range(lo, hi)) => (lo, hi),
        _ => (-4.0, 4.0),
    }
}

/// Bitwise equality, except GeluTanh: the kernel evaluates the same function
/// as x·σ(2u) (1 + tanh u = 2σ(2u)), which rounds differently from the
/// reference's literal 0.5x(1 + tanh u); the reference itself loses about
/// eps/(1 + tanh u) relative accuracy for negative x, hence the absolute term.
fn check_unary<T: Float>(op: UnaryOp, got: &[T], want: &[T], what: &str) {
    if op != UnaryOp::GeluTanh {
        return assert_bits(got, want, what);
    }
    let eps = T::EPSILON.to_f64();
    let g: Vec<f64> = got.iter().map(|v| v.to_f64()).collect();
    let w: Vec<f64> = want.iter().map(|v| v.to_f64()).collect();
    assert_close(&g, &w, 8.0 * eps, 8.0 * eps * 3.0, what);
}

fn unary_vs_reference<T: Float>() {
    let ctx = TestCtx::with_threads(2).unwrap();
    for op in all_unary() {
        let (lo, hi) = domain(op);
        for &n in &SIZES {
            for (shape, layouts) in [(vec![n], &LAYOUTS[..]), (vec![3, n], &LAYOUTS[..])] {
                for &lay in layouts {
                    let d = data(shape.iter().product(), n as u64, lo, hi);
                    let x = make::<T>(&ctx, &d, &shape, lay);
                    let y = ctx.unary(&x, op).unwrap();
                    assert_eq!(y.shape(), &shape[..]);
                    let want = r::unary::<T>(&x, op).unwrap();
                    check_unary::<T>(
                        op,
                        &y.to_vec::<T>().unwrap(),
                        &want,
                        &format!("{op:?} {shape:?} {lay:?}"),
                    );
                }
            }
        }
        // Past the parallel threshold, strided, so chunks start mid-row.
        let shape = [300, 257];
        let d = data(300 * 257, 9, lo, hi);
        let x = make::<T>(&ctx, &d, &shape, Layout::Reversed);
        let y = ctx.unary(&x, op).unwrap();
        check_unary::<T>(
            op,
            &y.to_vec::<T>().unwrap(),
            &r::unary::<T>(&x, op).unwrap(),
            &format!("{op:?} large"),
        );
    }
    assert_eq!(ctx.stats().outstanding, 0);
}

f32_f64_tests!(unary_vs_reference => unary_matches_reference_f32, unary_matches_reference_f64);

/// The kernel's unary_backward (through x or y as `op.saved()` says) equals gy·f'(x).
fn unary_backward_vs_reference<T: Float>(rtol: f64) {
    let ctx = TestCtx::with_threads(2).unwrap();
    for op in all_unary() {
        let (lo, hi) = domain(op);
        for &n in &[1usize, 17, 65, 257] {
            for &lay in &LAYOUTS {
                let shape = [3, n];
                let d = data(3 * n, 100 + n as u64, lo, hi);
                let g = data(3 * n, 200 + n as u64, -2.0, 2.0);
                let x = make::<T>(&ctx, &d, &shape, lay);
                let gy = make::<T>(&ctx, &g, &shape, lay);
                let saved = match op.saved() {
                    Saved::Input | Saved::Nothing => x.clone_view(),
                    Saved::Output => ctx.unary(&x, op).unwrap(),
                };
                let gx = ctx.unary_backward(&saved, &gy, op).unwrap();
                let xs = x.to_vec::<T>().unwrap();
                let gs = gy.to_vec::<T>().unwrap();
                let want: Vec<f64> = xs
                    .iter()
                    .zip(&gs)
                    .map(|(&x, &g)| g.to_f64() * r::unary_df(op, x).to_f64())
                    .collect();
                assert_grad_close::<T>(&gx, &want, rtol, &format!("{op:?} bwd {lay:?}"));
            }
        }
    }
    assert_eq!(ctx.stats().outstanding, 0);
}

f32_f64_tests!(unary_backward_vs_reference(2e-5; 1e-12) => unary_backward_matches_reference_f32, unary_backward_matches_reference_f64);

/// `unary_with_derivative` gives `unary`'s output bit for bit, and `gy·d` is bit for bit
/// `unary_backward`'s gradient (autograd relies on both for the ops that keep their
/// derivative), for every op, layout, size and past the parallel threshold.
fn with_derivative_is_bitwise<T: Float>() {
    let ctx = TestCtx::with_threads(2).unwrap();
    for op in all_unary() {
        let (lo, hi) = domain(op);
        for &(r, n) in &[(3usize, 1usize), (3, 17), (3, 65), (3, 257), (300, 257)] {
            for &lay in &LAYOUTS {
                let shape = [r, n];
                let x = make::<T>(&ctx, &data(r * n, 300 + n as u64, lo, hi), &shape, lay);
                let gy = make::<T>(&ctx, &data(r * n, 400 + n as u64, -2.0, 2.0), &shape, lay);
                let (y, d) = ctx.unary_with_derivative(&x, op).unwrap();
                let what = format!("{op:?} {shape:?} {lay:?}");
                let y_ref = ctx.unary(&x, op).unwrap();
                assert_bits(
                    &y.to_vec::<T>().unwrap(),
                    &y_ref.to_vec::<T>().unwrap(),
                    &what,
                );
                let saved = match op.saved() {
                    Saved::Input | Saved::Nothing => x.clone_view(),
                    Saved::Output => y_ref,
                };
                let want = ctx.unary_backward(&saved, &gy, op).unwrap();
                let got = ctx
                    .binary(&gy, &d, fucina_core::kernels::elementwise::BinaryOp::Mul)
                    .unwrap();
                assert_bits(
                    &got.to_vec::<T>().unwrap(),
                    &want.to_vec::<T>().unwrap(),
                    &what,
                );
            }
        }
    }
    assert_eq!(ctx.stats().outstanding, 0);
}

f32_f64_tests!(with_derivative_is_bitwise => unary_with_derivative_is_bitwise_f32, unary_with_derivative_is_bitwise_f64);

/// The reference derivative is the derivative: central differences in f64, away from kinks.
#[test]
fn unary_reference_df_matches_finite_differences() {
    let h = 1e-6;
    for op in all_unary() {
        let (lo, hi) = domain(op);
        let kinks: Vec<f64> = match op {
            UnaryOp::Clamp(a, b) => vec![a, b],
            UnaryOp::Softplus => vec![20.0],
            _ => vec![0.0],
        };
        for x in data(200, 5, lo, hi) {
            if kinks.iter().any(|k| (x - k).abs() < 1e-3) {
                continue;
            }
            let fd = central_diff(|x| r::unary_scalar(op, x), x, h);
            assert_fd_close(fd, r::unary_df(op, x), 1e-6, &format!("{op:?} at {x}"));
        }
    }
}

/// The kink conventions, on the kernels themselves.
#[test]
fn unary_backward_kink_conventions() {
    let ctx = TestCtx::with_threads(1).unwrap();
    let at = |op: UnaryOp, x: f64| -> f64 {
        let xt = ctx.scalar(x).unwrap();
        let saved = match op.saved() {
            Saved::Input | Saved::Nothing => xt.clone_view(),
            Saved::Output => ctx.unary(&xt, op).unwrap(),
        };
        let g = ctx.scalar(1.0f64).unwrap();
        ctx.unary_backward(&saved, &g, op)
            .unwrap()
            .item::<f64>()
            .unwrap()
    };
    assert_eq!(at(UnaryOp::Relu, 0.0), 0.0, "relu'(0) = 0");
    assert_eq!(at(UnaryOp::Relu, 1e-30), 1.0);
    assert_eq!(
        at(UnaryOp::LeakyRelu(0.2), 0.0),
        0.2,
        "leaky_relu'(0) = slope"
    );
    assert_eq!(at(UnaryOp::LeakyRelu(0.2), -1.0), 0.2);
    assert_eq!(at(UnaryOp::Abs, 0.0), 0.0, "abs'(0) = 0");
    assert_eq!(at(UnaryOp::Abs, -2.0), -1.0);
    assert_eq!(
        at(UnaryOp::Clamp(-1.0, 2.0), -1.0),
        1.0,
        "clamp lo inclusive"
    );
    assert_eq!(
        at(UnaryOp::Clamp(-1.0, 2.0), 2.0),
        1.0,
        "clamp hi inclusive"
    );
    assert_eq!(at(UnaryOp::Clamp(-1.0, 2.0), 2.5), 0.0);
    assert_eq!(at(UnaryOp::Clamp(-1.0, 2.0), -1.5), 0.0);
    assert_eq!(at(UnaryOp::Sign, 0.7), 0.0, "sign has zero gradient");
    assert_eq!(
        at(UnaryOp::Elu(1.5), 0.0),
        1.5,
        "elu'(0) = alpha (left branch)"
    );
    assert_eq!(at(UnaryOp::PowScalar(0.0), 0.0), 0.0, "d/dx x^0 = 0");
    assert_eq!(at(UnaryOp::PowScalar(3.0), 2.0), 12.0);
    assert_eq!(at(UnaryOp::Softplus, 25.0), 1.0, "softplus threshold");
    assert_eq!(at(UnaryOp::Sqrt, 4.0), 0.25, "sqrt' = 0.5/y");
    assert_eq!(at(UnaryOp::Exp, 0.0), 1.0);
    assert_eq!(at(UnaryOp::Tanh, 0.0), 1.0);
    assert_eq!(at(UnaryOp::Sigmoid, 0.0), 0.25);
    assert_eq!(at(UnaryOp::Hardswish, -3.0), -0.5, "hardswish'(-3) = -1/2");
    assert_eq!(at(UnaryOp::Hardswish, 3.0), 1.5, "hardswish'(3) = 3/2");
    assert_eq!(at(UnaryOp::Hardswish, -3.5), 0.0);
    assert_eq!(at(UnaryOp::Hardswish, 3.5), 1.0);
    assert_eq!(at(UnaryOp::LogSigmoid, 0.0), 0.5);
    assert_eq!(at(UnaryOp::Sign, 0.0), 0.0);
    // Forward conventions.
    let f = |op: UnaryOp, x: f64| {
        ctx.unary(&ctx.scalar(x).unwrap(), op)
            .unwrap()
            .item::<f64>()
            .unwrap()
    };
    assert_eq!(f(UnaryOp::Softplus, 30.0), 30.0);
    assert_eq!(f(UnaryOp::Sigmoid, -800.0), 0.0);
    assert_eq!(f(UnaryOp::Sigmoid, 800.0), 1.0);
    assert_eq!(
        f(UnaryOp::LogSigmoid, -800.0),
        -800.0,
        "logsigmoid is stable"
    );
    assert_eq!(f(UnaryOp::LogSigmoid, 800.0), 0.0);
    assert_eq!(f(UnaryOp::Mish, 800.0), 800.0, "mish overflows to x");
    assert_eq!(f(UnaryOp::Hardswish, 4.0), 4.0);
    assert_eq!(f(UnaryOp::Hardswish, -4.0), 0.0);
    assert_eq!(f(UnaryOp::Sign, -2.5), -1.0);
    assert_eq!(f(UnaryOp::Elu(2.0), -1.0), 2.0 * ((-1.0f64).exp() - 1.0));
    assert!(f(UnaryOp::Relu, f64::NAN).is_nan(), "relu propagates NaN");
    assert!(
        f(UnaryOp::Clamp(0.0, 1.0), f64::NAN).is_nan(),
        "clamp propagates NaN"
    );
    assert_eq!(UnaryOp::Exp.saved(), Saved::Output);
    assert_eq!(UnaryOp::Tanh.saved(), Saved::Output);
    assert_eq!(UnaryOp::MulScalar(2.0).saved(), Saved::Nothing);
    assert_eq!(UnaryOp::Sigmoid.saved(), Saved::Output);
    assert_eq!(UnaryOp::Sqrt.saved(), Saved::Output);
    assert_eq!(UnaryOp::Log.saved(), Saved::Input);
    assert_eq!(UnaryOp::Relu.name(), "relu");
    assert!(matches!(
        ctx.unary(&ctx.scalar(1.0f64).unwrap(), UnaryOp::Clamp(2.0, 1.0)),
        Err(Error::InvalidArgument { .. })
    ));
    assert_eq!(ctx.stats().outstanding, 0);
}
