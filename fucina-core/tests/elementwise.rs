//! Elementwise kernels vs their scalar reference, on awkward sizes, strided
//! and broadcast views, f32 and f64; derivatives vs finite differences and
//! the PyTorch kink conventions; errors; thread-count determinism.

use fucina_core::kernels::elementwise::reference as r;
use fucina_core::kernels::elementwise::{BinaryOp, CmpOp, Saved, UnaryOp};
use fucina_core::rng::SplitMix64;
use fucina_core::testing::TestCtx;
use fucina_core::{DType, Element, Error, ExecContext, Float, RawTensor};

mod common;
use common::{make, Layout, LAYOUTS, SIZES};

fn same(a: f64, b: f64) -> bool {
    (a.is_nan() && b.is_nan()) || a.to_bits() == b.to_bits()
}

fn assert_bits<T: Float>(got: &[T], want: &[T], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            same(g.to_f64(), w.to_f64()),
            "{what}: element {i}: got {g:?}, want {w:?}"
        );
    }
}

fn assert_close(got: &[f64], want: &[f64], rtol: f64, atol: f64, what: &str) {
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

fn f64s<T: Element>(t: &RawTensor) -> Vec<f64> {
    t.to_vec::<T>()
        .unwrap()
        .iter()
        .map(|v| v.to_f64())
        .collect()
}

fn all_unary() -> Vec<UnaryOp> {
    use UnaryOp::*;
    vec![
        Neg,
        Abs,
        Sqrt,
        Rsqrt,
        Exp,
        Log,
        Log1p,
        Sin,
        Cos,
        Tanh,
        Sigmoid,
        Relu,
        LeakyRelu(0.1),
        Elu(1.3),
        GeluTanh,
        GeluErf,
        Silu,
        Softplus,
        Square,
        Recip,
        Sign,
        AddScalar(1.5),
        MulScalar(-2.5),
        PowScalar(2.0),
        PowScalar(1.7),
        PowScalar(0.0),
        PowScalar(-1.5),
        RSubScalar(3.0),
        RDivScalar(2.0),
        Clamp(-0.5, 0.75),
    ]
}

/// A domain for `op` where it is smooth enough to test (positive where needed).
fn domain(op: UnaryOp) -> (f64, f64) {
    use UnaryOp::*;
    match op {
        Sqrt | Rsqrt | Log | PowScalar(_) | Recip | RDivScalar(_) => (0.2, 3.0),
        Log1p => (-0.5, 3.0),
        Softplus => (-25.0, 25.0),
        _ => (-3.0, 3.0),
    }
}

fn data(n: usize, seed: u64, lo: f64, hi: f64) -> Vec<f64> {
    SplitMix64::new(seed).vec_uniform(n, lo, hi)
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

#[test]
fn unary_matches_reference_f32() {
    unary_vs_reference::<f32>();
}

#[test]
fn unary_matches_reference_f64() {
    unary_vs_reference::<f64>();
}

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
                    Saved::Input => x.clone_view(),
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
                let scale = want.iter().fold(1.0f64, |m, v| m.max(v.abs()));
                assert_close(
                    &f64s::<T>(&gx),
                    &want,
                    rtol,
                    rtol * scale,
                    &format!("{op:?} bwd {lay:?}"),
                );
            }
        }
    }
    assert_eq!(ctx.stats().outstanding, 0);
}

#[test]
fn unary_backward_matches_reference_f32() {
    unary_backward_vs_reference::<f32>(2e-5);
}

#[test]
fn unary_backward_matches_reference_f64() {
    unary_backward_vs_reference::<f64>(1e-12);
}

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
            let fd = (r::unary_scalar(op, x + h) - r::unary_scalar(op, x - h)) / (2.0 * h);
            let df = r::unary_df(op, x);
            assert!(
                (fd - df).abs() <= 1e-6 * (1.0 + df.abs()),
                "{op:?} at {x}: fd {fd} vs df {df}"
            );
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
            Saved::Input => xt.clone_view(),
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
    assert_eq!(f(UnaryOp::Elu(2.0), -1.0), 2.0 * ((-1.0f64).exp() - 1.0));
    assert!(f(UnaryOp::Relu, f64::NAN).is_nan(), "relu propagates NaN");
    assert!(
        f(UnaryOp::Clamp(0.0, 1.0), f64::NAN).is_nan(),
        "clamp propagates NaN"
    );
    assert_eq!(UnaryOp::Exp.saved(), Saved::Output);
    assert_eq!(UnaryOp::Tanh.saved(), Saved::Output);
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

fn all_binary() -> [BinaryOp; 7] {
    use BinaryOp::*;
    [Add, Sub, Mul, Div, Pow, Maximum, Minimum]
}

/// (a shape, b shape) pairs covering same-shape, scalar, row, column and mixed broadcasts.
fn broadcast_pairs(n: usize) -> Vec<(Vec<usize>, Vec<usize>)> {
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

fn binary_vs_reference<T: Float>() {
    let ctx = TestCtx::with_threads(2).unwrap();
    for op in all_binary() {
        let (lo, hi) = if op == BinaryOp::Pow {
            (0.2, 2.5)
        } else {
            (-3.0, 3.0)
        };
        for &n in &SIZES {
            for (sa, sb) in broadcast_pairs(n) {
                for (la, lb) in [
                    (Layout::Contig, Layout::Contig),
                    (Layout::Reversed, Layout::Narrowed),
                    (Layout::Narrowed, Layout::Reversed),
                ] {
                    let da = data(sa.iter().product(), 1 + n as u64, lo, hi);
                    // Round b's values so Maximum/Minimum see exact ties sometimes.
                    let mut db = data(sb.iter().product(), 2 + n as u64, lo, hi);
                    for (i, v) in db.iter_mut().enumerate() {
                        if i % 3 == 0 {
                            *v = da.get(i).copied().unwrap_or(*v);
                        }
                    }
                    let a = make::<T>(&ctx, &da, &sa, la);
                    let b = make::<T>(&ctx, &db, &sb, lb);
                    let y = ctx.binary(&a, &b, op).unwrap();
                    let (shape, want) = r::binary::<T>(&a, &b, op).unwrap();
                    assert_eq!(y.shape(), &shape[..]);
                    assert_bits(
                        &y.to_vec::<T>().unwrap(),
                        &want,
                        &format!("{op:?} {sa:?} {sb:?} {la:?}/{lb:?}"),
                    );
                }
            }
        }
        // Large broadcast (parallel, chunks start mid-row).
        let a = make::<T>(
            &ctx,
            &data(300 * 257, 3, lo, hi),
            &[300, 257],
            Layout::Reversed,
        );
        let b = make::<T>(&ctx, &data(257, 4, lo, hi), &[257], Layout::Narrowed);
        let y = ctx.binary(&a, &b, op).unwrap();
        assert_bits(
            &y.to_vec::<T>().unwrap(),
            &r::binary::<T>(&a, &b, op).unwrap().1,
            "large",
        );
    }
    assert_eq!(ctx.stats().outstanding, 0);
}

#[test]
fn binary_matches_reference_f32() {
    binary_vs_reference::<f32>();
}

#[test]
fn binary_matches_reference_f64() {
    binary_vs_reference::<f64>();
}

fn binary_backward_vs_reference<T: Float>(rtol: f64) {
    let ctx = TestCtx::with_threads(2).unwrap();
    for op in all_binary() {
        let (lo, hi) = if op == BinaryOp::Pow {
            (0.2, 2.5)
        } else {
            (-3.0, 3.0)
        };
        for &n in &[1usize, 16, 33, 257] {
            for (sa, sb) in broadcast_pairs(n) {
                let da = data(sa.iter().product(), 7 + n as u64, lo, hi);
                let mut db = data(sb.iter().product(), 8 + n as u64, lo, hi);
                for (i, v) in db.iter_mut().enumerate() {
                    if i % 4 == 0 {
                        *v = da.get(i).copied().unwrap_or(*v);
                    }
                }
                let a = make::<T>(&ctx, &da, &sa, Layout::Reversed);
                let b = make::<T>(&ctx, &db, &sb, Layout::Narrowed);
                let out = ctx.binary(&a, &b, op).unwrap();
                let g = data(out.numel(), 9, -2.0, 2.0);
                let gy = make::<T>(&ctx, &g, out.shape(), Layout::Reversed);
                for needs in [[true, true], [true, false], [false, true], [false, false]] {
                    let (ga, gb) = ctx.binary_backward(&a, &b, &out, &gy, op, needs).unwrap();
                    assert_eq!(ga.is_some(), needs[0]);
                    assert_eq!(gb.is_some(), needs[1]);
                    let (_, parts) = r::broadcast_eval::<T, (f64, f64)>(&[&a, &b, &gy], |v| {
                        let (pa, pb) = r::binary_partials(op, v[0], v[1]);
                        (v[2].to_f64() * pa.to_f64(), v[2].to_f64() * pb.to_f64())
                    })
                    .unwrap();
                    for (k, gt) in [ga, gb].into_iter().enumerate() {
                        if let Some(gt) = gt {
                            assert_eq!(gt.shape(), out.shape());
                            let want: Vec<f64> = parts
                                .iter()
                                .map(|p| if k == 0 { p.0 } else { p.1 })
                                .collect();
                            let scale = want.iter().fold(1.0f64, |m, v| m.max(v.abs()));
                            assert_close(
                                &f64s::<T>(&gt),
                                &want,
                                rtol,
                                rtol * scale,
                                &format!("{op:?} grad {k} {sa:?} {sb:?}"),
                            );
                        }
                    }
                }
            }
        }
    }
    assert_eq!(ctx.stats().outstanding, 0);
}

#[test]
fn binary_backward_matches_reference_f32() {
    binary_backward_vs_reference::<f32>(2e-5);
}

#[test]
fn binary_backward_matches_reference_f64() {
    binary_backward_vs_reference::<f64>(1e-12);
}

#[test]
fn binary_reference_partials_match_finite_differences() {
    let h = 1e-6;
    for op in all_binary() {
        let (lo, hi) = if op == BinaryOp::Pow {
            (0.2, 2.5)
        } else {
            (-3.0, 3.0)
        };
        let av = data(100, 11, lo, hi);
        let bv = data(100, 12, lo, hi);
        for (&a, &b) in av.iter().zip(&bv) {
            if (a - b).abs() < 1e-3 || (op == BinaryOp::Div && b.abs() < 0.1) {
                continue;
            }
            let f = |a: f64, b: f64| r::binary_scalar(op, a, b);
            let fa = (f(a + h, b) - f(a - h, b)) / (2.0 * h);
            let fb = (f(a, b + h) - f(a, b - h)) / (2.0 * h);
            let (pa, pb) = r::binary_partials(op, a, b);
            assert!(
                (fa - pa).abs() <= 1e-5 * (1.0 + pa.abs()),
                "{op:?} d/da at ({a},{b})"
            );
            assert!(
                (fb - pb).abs() <= 1e-5 * (1.0 + pb.abs()),
                "{op:?} d/db at ({a},{b})"
            );
        }
    }
}

#[test]
fn maximum_minimum_split_ties_and_pow_conventions() {
    let ctx = TestCtx::with_threads(1).unwrap();
    {
        let a = ctx.from_slice(&[1.0f64, 2.0, 3.0], &[3]).unwrap();
        let b = ctx.from_slice(&[1.0f64, 5.0, -1.0], &[3]).unwrap();
        let gy = ctx.from_slice(&[4.0f64, 4.0, 4.0], &[3]).unwrap();
        for (op, wa, wb) in [
            (BinaryOp::Maximum, [2.0, 0.0, 4.0], [2.0, 4.0, 0.0]),
            (BinaryOp::Minimum, [2.0, 4.0, 0.0], [2.0, 0.0, 4.0]),
        ] {
            let out = ctx.binary(&a, &b, op).unwrap();
            let (ga, gb) = ctx
                .binary_backward(&a, &b, &out, &gy, op, [true, true])
                .unwrap();
            assert_eq!(ga.unwrap().to_vec::<f64>().unwrap(), wa, "{op:?} ga");
            assert_eq!(gb.unwrap().to_vec::<f64>().unwrap(), wb, "{op:?} gb");
        }
        let nan = ctx.from_slice(&[f64::NAN, 1.0], &[2]).unwrap();
        let one = ctx.from_slice(&[1.0f64, f64::NAN], &[2]).unwrap();
        let m = ctx
            .binary(&nan, &one, BinaryOp::Maximum)
            .unwrap()
            .to_vec::<f64>()
            .unwrap();
        assert!(m[0].is_nan() && m[1].is_nan(), "maximum propagates NaN");
        // Pow: d/db = out·ln a, and 0 at a == 0 with b >= 0; d/da = 0 where b == 0.
        let a = ctx.from_slice(&[0.0f64, 2.0, 3.0], &[3]).unwrap();
        let b = ctx.from_slice(&[2.0f64, 0.0, 2.0], &[3]).unwrap();
        let out = ctx.binary(&a, &b, BinaryOp::Pow).unwrap();
        let g1 = ctx.ones(DType::F64, &[3]).unwrap();
        let (ga, gb) = ctx
            .binary_backward(&a, &b, &out, &g1, BinaryOp::Pow, [true, true])
            .unwrap();
        assert_eq!(ga.unwrap().to_vec::<f64>().unwrap(), vec![0.0, 0.0, 6.0]);
        let gb = gb.unwrap().to_vec::<f64>().unwrap();
        assert_eq!(gb[0], 0.0);
        assert_eq!(gb[1], 2.0f64.ln());
        assert_eq!(gb[2], 9.0 * 3.0f64.ln());
    }
    assert_eq!(ctx.stats().outstanding, 0);
}

#[test]
fn structured_errors() {
    let ctx = TestCtx::with_threads(1).unwrap();
    {
        let a = ctx.zeros(DType::F32, &[3]).unwrap();
        let b = ctx.zeros(DType::F32, &[4]).unwrap();
        let c = ctx.zeros(DType::F64, &[3]).unwrap();
        let h = ctx.zeros(DType::F16, &[3]).unwrap();
        let m = ctx.zeros(DType::U8, &[3]).unwrap();
        assert!(matches!(
            ctx.binary(&a, &b, BinaryOp::Add),
            Err(Error::Broadcast { op: "add", .. })
        ));
        assert!(matches!(
            ctx.binary(&a, &c, BinaryOp::Mul),
            Err(Error::DTypeMismatch { .. })
        ));
        assert!(matches!(
            ctx.binary(&h, &h, BinaryOp::Mul),
            Err(Error::UnsupportedDType { .. })
        ));
        assert!(matches!(
            ctx.unary(&h, UnaryOp::Exp),
            Err(Error::UnsupportedDType { .. })
        ));
        assert!(matches!(
            ctx.unary(&m, UnaryOp::Exp),
            Err(Error::UnsupportedDType { .. })
        ));
        assert!(matches!(
            ctx.unary_backward(&a, &b, UnaryOp::Exp),
            Err(Error::ShapeMismatch { .. })
        ));
        assert!(matches!(
            ctx.unary_backward(&a, &c, UnaryOp::Exp),
            Err(Error::DTypeMismatch { .. })
        ));
        let gy_bad = ctx.zeros(DType::F32, &[2, 3]).unwrap();
        assert!(matches!(
            ctx.binary_backward(&a, &a, &a, &gy_bad, BinaryOp::Mul, [true, true]),
            Err(Error::ShapeMismatch { .. })
        ));
        assert!(matches!(
            ctx.compare(&a, &b, CmpOp::Eq),
            Err(Error::Broadcast { .. })
        ));
        assert!(matches!(
            ctx.compare(&a, &c, CmpOp::Eq),
            Err(Error::DTypeMismatch { .. })
        ));
        assert!(matches!(
            ctx.compare(&h, &h, CmpOp::Eq),
            Err(Error::UnsupportedDType { .. })
        ));
        assert!(matches!(
            ctx.where_cond(&a, &a, &a),
            Err(Error::DTypeMismatch { .. })
        ));
        assert!(matches!(
            ctx.where_cond(&m, &a, &b),
            Err(Error::Broadcast { .. })
        ));
        // The mask must broadcast to x, not the other way round.
        let m23 = ctx.zeros(DType::U8, &[2, 3]).unwrap();
        assert!(matches!(
            ctx.masked_fill(&a, &m23, 1.0),
            Err(Error::Broadcast { .. })
        ));
        assert!(matches!(
            ctx.masked_fill(&a, &a, 1.0),
            Err(Error::DTypeMismatch { .. })
        ));
    }
    assert_eq!(ctx.stats().outstanding, 0);
}

#[test]
fn add_assign_any_strides_and_ownership_rules() {
    let ctx = TestCtx::with_threads(2).unwrap();
    {
        for &(rows, cols) in &[(1usize, 1usize), (3, 17), (257, 129), (300, 257)] {
            let da = data(rows * cols, 1, -1.0, 1.0);
            let dg = data(rows * cols, 2, -1.0, 1.0);
            for lay in LAYOUTS {
                let mut acc = make::<f32>(&ctx, &da, &[rows, cols], Layout::Contig);
                let g = make::<f32>(&ctx, &dg, &[rows, cols], lay);
                ctx.add_assign(&mut acc, &g).unwrap();
                let want: Vec<f32> = da
                    .iter()
                    .zip(&dg)
                    .map(|(&a, &b)| a as f32 + b as f32)
                    .collect();
                assert_bits(
                    &acc.to_vec::<f32>().unwrap(),
                    &want,
                    &format!("add_assign {lay:?}"),
                );
                ctx.scale_add_assign(&mut acc, 0.5, &g, -2.0).unwrap();
                let want2: Vec<f32> = want
                    .iter()
                    .zip(&dg)
                    .map(|(&a, &b)| a * 0.5 + b as f32 * -2.0)
                    .collect();
                assert_bits(&acc.to_vec::<f32>().unwrap(), &want2, "scale_add_assign");
            }
        }
        let mut acc = ctx.zeros(DType::F64, &[4]).unwrap();
        let g = ctx.ones(DType::F64, &[4]).unwrap();
        let view = acc.clone_view();
        assert!(matches!(
            ctx.add_assign(&mut acc, &g),
            Err(Error::SharedBuffer { .. })
        ));
        drop(view);
        let mut t = ctx
            .zeros(DType::F64, &[2, 2])
            .unwrap()
            .transpose(0, 1)
            .unwrap();
        let g2 = ctx.ones(DType::F64, &[2, 2]).unwrap();
        assert!(matches!(
            ctx.add_assign(&mut t, &g2),
            Err(Error::NotContiguous { .. })
        ));
        assert!(matches!(
            ctx.add_assign(&mut acc, &g2),
            Err(Error::ShapeMismatch { .. })
        ));
        ctx.add_assign(&mut acc, &g).unwrap();
        assert_eq!(acc.to_vec::<f64>().unwrap(), vec![1.0; 4]);
    }
    assert_eq!(ctx.stats().outstanding, 0);
}

fn compare_and_select<T: Float>() {
    let ctx = TestCtx::with_threads(2).unwrap();
    let ops = [
        CmpOp::Eq,
        CmpOp::Ne,
        CmpOp::Lt,
        CmpOp::Le,
        CmpOp::Gt,
        CmpOp::Ge,
    ];
    for &n in &SIZES {
        for (sa, sb) in broadcast_pairs(n) {
            // Small integers so equality happens often.
            let da: Vec<f64> = data(sa.iter().product(), n as u64, -3.0, 3.0)
                .iter()
                .map(|v| v.round())
                .collect();
            let db: Vec<f64> = data(sb.iter().product(), 1 + n as u64, -3.0, 3.0)
                .iter()
                .map(|v| v.round())
                .collect();
            let a = make::<T>(&ctx, &da, &sa, Layout::Reversed);
            let b = make::<T>(&ctx, &db, &sb, Layout::Narrowed);
            for op in ops {
                let m = ctx.compare(&a, &b, op).unwrap();
                assert_eq!(m.dtype(), DType::U8);
                assert_eq!(
                    m.to_vec::<u8>().unwrap(),
                    r::compare::<T>(&a, &b, op).unwrap(),
                    "{op:?}"
                );
                let ms = ctx.compare_scalar(&a, 0.0, op).unwrap();
                let want: Vec<u8> = a
                    .to_vec::<T>()
                    .unwrap()
                    .iter()
                    .map(|&v| op.eval(v, T::ZERO) as u8)
                    .collect();
                assert_eq!(ms.to_vec::<u8>().unwrap(), want, "{op:?} scalar");
            }
            // where(cond, a, b) and masked_fill, broadcasting everything.
            let cond = ctx.compare(&a, &b, CmpOp::Gt).unwrap();
            let w = ctx.where_cond(&cond, &a, &b).unwrap();
            let (_, want) =
                r::broadcast_eval::<T, T>(&[&a, &b], |v| if v[0] > v[1] { v[0] } else { v[1] })
                    .unwrap();
            assert_bits(&w.to_vec::<T>().unwrap(), &want, "where");
            let mask = ctx.compare_scalar(&b, 0.0, CmpOp::Lt).unwrap();
            if let Ok(f) = ctx.masked_fill(&a, &mask, -9.0) {
                let (_, want) = r::broadcast_eval::<T, T>(&[&a, &b], |v| {
                    if v[1] < T::ZERO {
                        T::from_f64(-9.0)
                    } else {
                        v[0]
                    }
                })
                .unwrap();
                assert_eq!(f.shape(), a.shape());
                assert_bits(&f.to_vec::<T>().unwrap(), &want, "masked_fill");
            } else {
                // Only when b's shape does not broadcast to a's.
                assert!(fucina_core::shape::broadcast_strides(
                    "t",
                    b.shape(),
                    b.strides(),
                    a.shape()
                )
                .is_err());
            }
        }
    }
    assert_eq!(ctx.stats().outstanding, 0);
}

#[test]
fn compare_where_masked_fill_f32() {
    compare_and_select::<f32>();
}

#[test]
fn compare_where_masked_fill_f64() {
    compare_and_select::<f64>();
}

#[test]
fn compare_integers_and_nan() {
    let ctx = TestCtx::with_threads(1).unwrap();
    {
        let a = ctx.from_slice(&[1i64, 5, -3], &[3]).unwrap();
        let b = ctx.from_slice(&[1i64, 4, 0], &[3]).unwrap();
        assert_eq!(
            ctx.compare(&a, &b, CmpOp::Eq)
                .unwrap()
                .to_vec::<u8>()
                .unwrap(),
            vec![1, 0, 0]
        );
        assert_eq!(
            ctx.compare_scalar(&a, 2.5, CmpOp::Gt)
                .unwrap()
                .to_vec::<u8>()
                .unwrap(),
            vec![0, 1, 0]
        );
        let x = ctx.from_slice(&[f32::NAN, 0.1], &[2]).unwrap();
        assert_eq!(
            ctx.compare_scalar(&x, 0.1, CmpOp::Eq)
                .unwrap()
                .to_vec::<u8>()
                .unwrap(),
            vec![0, 1]
        );
        assert_eq!(
            ctx.compare(&x, &x, CmpOp::Ne)
                .unwrap()
                .to_vec::<u8>()
                .unwrap(),
            vec![1, 0]
        );
    }
    assert_eq!(ctx.stats().outstanding, 0);
}

#[test]
fn thread_count_determinism() {
    let c1 = TestCtx::with_threads(1).unwrap();
    let c2 = TestCtx::with_threads(2).unwrap();
    let da = data(600 * 301, 1, -2.0, 2.0);
    let db = data(301, 2, -2.0, 2.0);
    let run = |ctx: &ExecContext| -> Vec<Vec<f32>> {
        let a = make::<f32>(ctx, &da, &[600, 301], Layout::Reversed);
        let b = make::<f32>(ctx, &db, &[301], Layout::Narrowed);
        let mut outs = vec![];
        for op in all_binary() {
            outs.push(ctx.binary(&a, &b, op).unwrap().to_vec::<f32>().unwrap());
        }
        outs.push(
            ctx.unary(&a, UnaryOp::GeluErf)
                .unwrap()
                .to_vec::<f32>()
                .unwrap(),
        );
        let out = ctx.binary(&a, &b, BinaryOp::Div).unwrap();
        let (ga, gb) = ctx
            .binary_backward(&a, &b, &out, &a, BinaryOp::Div, [true, true])
            .unwrap();
        outs.push(ga.unwrap().to_vec::<f32>().unwrap());
        outs.push(gb.unwrap().to_vec::<f32>().unwrap());
        outs
    };
    let (o1, o2) = (run(&c1), run(&c2));
    for (x, y) in o1.iter().zip(&o2) {
        assert!(x.iter().zip(y).all(|(p, q)| p.to_bits() == q.to_bits()));
    }
    assert_eq!(c1.stats().outstanding, 0);
    assert_eq!(c2.stats().outstanding, 0);
}

#[test]
fn empty_and_scalar_tensors() {
    let ctx = TestCtx::with_threads(2).unwrap();
    {
        let e = ctx.zeros(DType::F32, &[0, 5]).unwrap();
        assert_eq!(ctx.unary(&e, UnaryOp::Exp).unwrap().shape(), &[0, 5]);
        let row = ctx.ones(DType::F32, &[5]).unwrap();
        assert_eq!(
            ctx.binary(&e, &row, BinaryOp::Add).unwrap().shape(),
            &[0, 5]
        );
        let s = ctx.scalar(2.0f32).unwrap();
        let y = ctx.binary(&s, &row, BinaryOp::Mul).unwrap();
        assert_eq!(y.to_vec::<f32>().unwrap(), vec![2.0; 5]);
        assert_eq!(
            ctx.unary(&s, UnaryOp::Square)
                .unwrap()
                .item::<f32>()
                .unwrap(),
            4.0
        );
    }
    assert_eq!(ctx.stats().outstanding, 0);
}
