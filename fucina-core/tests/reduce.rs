//! Reductions vs their f64 scalar reference on awkward sizes and strided
//! views, f32 and f64; empty-axis rules; errors; bitwise thread-count
//! determinism of sums (1M elements, all-axes and per-axis) and cumsum.

use fucina_core::kernels::reduce::reference as r;
use fucina_core::kernels::reduce::ReduceOp;
use fucina_core::rng::SplitMix64;
use fucina_core::{DType, Element, Error, ExecContext, Float, RawTensor};

#[macro_use]
mod common;
use common::{make, one_and_two_threads, Layout, LAYOUTS, SIZES};
use fucina_core::testing::TestCtx;
const OPS: [ReduceOp; 4] = [ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max, ReduceOp::Min];

fn data(n: usize, seed: u64, lo: f64, hi: f64) -> Vec<f64> {
    SplitMix64::new(seed).vec_uniform(n, lo, hi)
}

fn f64s<T: Element>(t: &RawTensor) -> Vec<f64> {
    t.to_vec::<T>()
        .unwrap()
        .iter()
        .map(|v| v.to_f64())
        .collect()
}

/// Every subset of `0..rank` (the empty one means "all axes").
fn subsets(rank: usize) -> Vec<Vec<usize>> {
    (0..1usize << rank)
        .map(|m| (0..rank).filter(|&d| m >> d & 1 == 1).collect())
        .collect()
}

fn expected_shape(shape: &[usize], axes: &[usize], keepdim: bool) -> Vec<usize> {
    (0..shape.len())
        .filter_map(|d| {
            let red = axes.is_empty() || axes.contains(&d);
            match (red, keepdim) {
                (false, _) => Some(shape[d]),
                (true, true) => Some(1),
                (true, false) => None,
            }
        })
        .collect()
}

fn reduce_vs_reference<T: Float>(eps: f64) {
    let ctx = TestCtx::with_threads(2).unwrap();
    for &n in &SIZES {
        let shapes: Vec<Vec<usize>> = vec![
            vec![n],
            vec![3, n],
            vec![n, 5],
            vec![2, 3, n],
            vec![n, 1, 4],
        ];
        for shape in shapes {
            let d = data(shape.iter().product(), n as u64, -2.0, 2.0);
            for lay in LAYOUTS {
                let x = make::<T>(&ctx, &d, &shape, lay);
                for axes in subsets(shape.len()) {
                    // Bound on the rounding error of any fixed summation order.
                    let count: usize = if axes.is_empty() {
                        shape.iter().product()
                    } else {
                        axes.iter().map(|&a| shape[a]).product()
                    };
                    for op in OPS {
                        for keepdim in [false, true] {
                            let y = ctx.reduce(&x, op, &axes, keepdim).unwrap();
                            assert_eq!(y.shape(), &expected_shape(&shape, &axes, keepdim)[..]);
                            let want = r::reduce::<T>(&x, op, &axes).unwrap();
                            let got = f64s::<T>(&y);
                            let tol = match op {
                                ReduceOp::Sum => eps * 2.0 * count as f64,
                                ReduceOp::Mean => eps * 2.0 + eps,
                                _ => 0.0,
                            };
                            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                                assert!(
                                    (g - w).abs() <= tol + eps * w.abs(),
                                    "{op:?} {shape:?} axes {axes:?} {lay:?} [{i}]: {g} vs {w}"
                                );
                            }
                        }
                    }
                }
            }
        }
    }
}

f32_f64_tests!(reduce_vs_reference(f32::EPSILON as f64; f64::EPSILON) => reduce_matches_reference_f32, reduce_matches_reference_f64);

#[test]
fn reduce_large_matches_reference() {
    let ctx = TestCtx::with_threads(2).unwrap();
    // Long runs (block partials), tall columns (row blocks), and a general permuted case.
    for (shape, axes) in [
        (vec![200_000], vec![]),
        (vec![3, 70_000], vec![1]),
        (vec![70_000, 3], vec![0]),
        (vec![2000, 300], vec![0]),
        (vec![40, 50, 60], vec![0, 2]),
    ] {
        let d = data(shape.iter().product(), 3, -1.0, 1.0);
        for lay in [Layout::Contig, Layout::Reversed] {
            let x = make::<f32>(&ctx, &d, &shape, lay);
            for op in OPS {
                let y = ctx.reduce(&x, op, &axes, false).unwrap();
                let want = r::reduce::<f32>(&x, op, &axes).unwrap();
                let count = if axes.is_empty() {
                    x.numel()
                } else {
                    axes.iter().map(|&a| shape[a]).product()
                } as f64;
                // A blocked sum's error grows like log/blocks, far below count·eps.
                let tol = if matches!(op, ReduceOp::Sum) {
                    1e-6 * count.sqrt() * 8.0
                } else {
                    1e-6
                };
                for (g, w) in f64s::<f32>(&y).iter().zip(&want) {
                    assert!(
                        (g - w).abs() <= tol,
                        "{op:?} {shape:?} {axes:?} {lay:?}: {g} vs {w}"
                    );
                }
            }
        }
    }
}

#[test]
fn empty_axes_nan_and_errors() {
    let ctx = TestCtx::with_threads(1).unwrap();
    {
        let e = ctx.zeros(DType::F32, &[3, 0]).unwrap();
        let s = ctx.reduce(&e, ReduceOp::Sum, &[1], false).unwrap();
        assert_eq!(s.to_vec::<f32>().unwrap(), vec![0.0; 3]);
        let m = ctx.reduce(&e, ReduceOp::Mean, &[1], false).unwrap();
        assert!(m.to_vec::<f32>().unwrap().iter().all(|v| v.is_nan()));
        assert!(matches!(
            ctx.reduce(&e, ReduceOp::Max, &[1], false),
            Err(Error::InvalidArgument { .. })
        ));
        assert!(matches!(
            ctx.reduce(&e, ReduceOp::Min, &[], false),
            Err(Error::InvalidArgument { .. })
        ));
        // Reducing the non-empty axis of an empty tensor gives an empty result.
        assert_eq!(
            ctx.reduce(&e, ReduceOp::Max, &[0], false).unwrap().shape(),
            &[0]
        );
        assert!(matches!(
            ctx.argmax(&e, 1, false),
            Err(Error::InvalidArgument { .. })
        ));

        let x = ctx
            .from_slice(&[1.0f64, f64::NAN, 3.0, -1.0], &[2, 2])
            .unwrap();
        let mx = ctx
            .reduce(&x, ReduceOp::Max, &[1], false)
            .unwrap()
            .to_vec::<f64>()
            .unwrap();
        assert!(mx[0].is_nan() && mx[1] == 3.0, "max propagates NaN: {mx:?}");
        let mn = ctx
            .reduce(&x, ReduceOp::Min, &[], false)
            .unwrap()
            .item::<f64>()
            .unwrap();
        assert!(mn.is_nan());

        assert!(matches!(
            ctx.reduce(&x, ReduceOp::Sum, &[2], false),
            Err(Error::OutOfRange { .. })
        ));
        assert!(matches!(
            ctx.reduce(&x, ReduceOp::Sum, &[0, 0], false),
            Err(Error::InvalidArgument { .. })
        ));
        assert!(matches!(
            ctx.variance(&x, &[1, 1], 0, false),
            Err(Error::InvalidArgument { .. })
        ));
        assert!(matches!(
            ctx.argmax(&x, 2, false),
            Err(Error::OutOfRange { .. })
        ));
        assert!(matches!(ctx.cumsum(&x, 2), Err(Error::OutOfRange { .. })));
        let h = ctx.zeros(DType::F16, &[4]).unwrap();
        assert!(matches!(
            ctx.reduce(&h, ReduceOp::Sum, &[], false),
            Err(Error::UnsupportedDType { .. })
        ));
        assert!(matches!(
            ctx.sum_to_shape(&h, &[1]),
            Err(Error::UnsupportedDType { .. })
        ));
        assert!(matches!(
            ctx.argmax(&h, 0, false),
            Err(Error::UnsupportedDType { .. })
        ));
        assert!(matches!(
            ctx.cumsum(&h, 0),
            Err(Error::UnsupportedDType { .. })
        ));
        // A scalar reduces to itself.
        let s = ctx.scalar(4.5f32).unwrap();
        assert_eq!(
            ctx.reduce(&s, ReduceOp::Mean, &[], false)
                .unwrap()
                .item::<f32>()
                .unwrap(),
            4.5
        );
    }
}

#[test]
fn sum_to_shape_is_the_broadcast_adjoint() {
    let ctx = TestCtx::with_threads(2).unwrap();
    {
        let shape = [4, 3, 5];
        let d = data(60, 7, -1.0, 1.0);
        for lay in LAYOUTS {
            let x = make::<f64>(&ctx, &d, &shape, lay);
            for target in [
                vec![4, 3, 5],
                vec![3, 5],
                vec![3, 1],
                vec![5],
                vec![1, 1, 1],
                vec![],
                vec![4, 1, 5],
                vec![1, 3, 1],
            ] {
                let y = ctx.sum_to_shape(&x, &target).unwrap();
                assert_eq!(y.shape(), &target[..]);
                // <sum_to_shape(x), v> == <x, broadcast(v)> for any v of the target shape.
                let vv = data(target.iter().product(), 8, -1.0, 1.0);
                let v = make::<f64>(&ctx, &vv, &target, Layout::Contig);
                let vb = v.broadcast_to(&shape).unwrap();
                let lhs: f64 = y
                    .to_vec::<f64>()
                    .unwrap()
                    .iter()
                    .zip(&vv)
                    .map(|(a, b)| a * b)
                    .sum();
                let rhs: f64 = x
                    .to_vec::<f64>()
                    .unwrap()
                    .iter()
                    .zip(vb.to_vec::<f64>().unwrap())
                    .map(|(a, b)| a * b)
                    .sum();
                assert!(
                    (lhs - rhs).abs() < 1e-12,
                    "{target:?} {lay:?}: {lhs} vs {rhs}"
                );
            }
            for bad in [vec![2], vec![4, 3, 5, 1], vec![2, 5]] {
                assert!(
                    matches!(ctx.sum_to_shape(&x, &bad), Err(Error::Broadcast { .. })),
                    "{bad:?}"
                );
            }
        }
    }
}

fn arg_vs_reference<T: Float>() {
    let ctx = TestCtx::with_threads(2).unwrap();
    for &n in &SIZES {
        for shape in [vec![n], vec![3, n], vec![n, 4]] {
            // Coarse values so ties are common: the first extremum must win.
            let mut d: Vec<f64> = data(shape.iter().product(), n as u64, -3.0, 3.0)
                .iter()
                .map(|v| v.round())
                .collect();
            if d.len() > 5 {
                d[5] = f64::NAN;
            }
            for lay in LAYOUTS {
                let x = make::<T>(&ctx, &d, &shape, lay);
                for axis in 0..shape.len() {
                    for keepdim in [false, true] {
                        let mx = ctx.argmax(&x, axis, keepdim).unwrap();
                        let mn = ctx.argmin(&x, axis, keepdim).unwrap();
                        let mut es = shape.clone();
                        if keepdim {
                            es[axis] = 1;
                        } else {
                            es.remove(axis);
                        }
                        assert_eq!(mx.shape(), &es[..]);
                        assert_eq!(mx.dtype(), DType::I64);
                        assert_eq!(
                            mx.to_vec::<i64>().unwrap(),
                            r::arg_extreme::<T>(&x, axis, true).unwrap()
                        );
                        assert_eq!(
                            mn.to_vec::<i64>().unwrap(),
                            r::arg_extreme::<T>(&x, axis, false).unwrap()
                        );
                    }
                }
            }
        }
    }
}

f32_f64_tests!(arg_vs_reference => argmax_argmin_f32, argmax_argmin_f64);

#[test]
fn argmax_first_of_ties() {
    let ctx = TestCtx::with_threads(1).unwrap();
    {
        let x = ctx
            .from_slice(&[1.0f32, 3.0, 3.0, -2.0, -2.0, 0.0], &[6])
            .unwrap();
        assert_eq!(ctx.argmax(&x, 0, false).unwrap().item::<i64>().unwrap(), 1);
        assert_eq!(
            ctx.argmin(&x, 0, true).unwrap().to_vec::<i64>().unwrap(),
            vec![3]
        );
    }
}

fn variance_vs_reference<T: Float>(tol: f64) {
    let ctx = TestCtx::with_threads(2).unwrap();
    for &n in &SIZES {
        for shape in [vec![n], vec![3, n], vec![2, n, 3]] {
            let d = data(shape.iter().product(), n as u64, 1.0, 3.0);
            for lay in LAYOUTS {
                let x = make::<T>(&ctx, &d, &shape, lay);
                for axes in subsets(shape.len()) {
                    for ddof in [0, 1] {
                        let v = ctx.variance(&x, &axes, ddof, false).unwrap();
                        assert_eq!(v.shape(), &expected_shape(&shape, &axes, false)[..]);
                        let want = r::variance::<T>(&x, &axes, ddof).unwrap();
                        for (g, w) in f64s::<T>(&v).iter().zip(&want) {
                            if w.is_nan() || w.is_infinite() {
                                assert!(g.is_nan() || g.is_infinite(), "{g} vs {w}");
                            } else {
                                assert!(
                                    (g - w).abs() <= tol * (1.0 + w.abs()),
                                    "{shape:?} {axes:?} {ddof}: {g} vs {w}"
                                );
                            }
                        }
                        let vk = ctx.variance(&x, &axes, ddof, true).unwrap();
                        assert_eq!(vk.shape(), &expected_shape(&shape, &axes, true)[..]);
                    }
                }
            }
        }
    }
}

f32_f64_tests!(variance_vs_reference(1e-5; 1e-12) => variance_f32, variance_f64);

fn cumsum_vs_reference<T: Float>() {
    let ctx = TestCtx::with_threads(2).unwrap();
    for &n in &SIZES {
        for shape in [vec![n], vec![3, n], vec![n, 5], vec![2, n, 3]] {
            let d = data(shape.iter().product(), n as u64, -1.0, 1.0);
            for lay in LAYOUTS {
                let x = make::<T>(&ctx, &d, &shape, lay);
                for axis in 0..shape.len() {
                    for reverse in [false, true] {
                        let y = if reverse {
                            ctx.cumsum_reverse(&x, axis).unwrap()
                        } else {
                            ctx.cumsum(&x, axis).unwrap()
                        };
                        assert_eq!(y.shape(), &shape[..]);
                        let want = r::cumsum::<T>(&x, axis, reverse).unwrap();
                        let got = y.to_vec::<T>().unwrap();
                        assert!(
                            got.iter()
                                .zip(&want)
                                .all(|(g, w)| g.to_f64().to_bits() == w.to_f64().to_bits()),
                            "{shape:?} axis {axis} rev {reverse} {lay:?}"
                        );
                    }
                }
            }
        }
    }
}

f32_f64_tests!(cumsum_vs_reference => cumsum_f32, cumsum_f64);

#[test]
fn cumsum_reverse_is_the_adjoint() {
    let ctx = TestCtx::with_threads(1).unwrap();
    {
        let shape = [4, 9, 3];
        let xd = data(108, 1, -1.0, 1.0);
        let yd = data(108, 2, -1.0, 1.0);
        let x = ctx.from_slice(&xd, &shape).unwrap();
        let y = ctx.from_slice(&yd, &shape).unwrap();
        for axis in 0..3 {
            let cx = ctx.cumsum(&x, axis).unwrap().to_vec::<f64>().unwrap();
            let ry = ctx
                .cumsum_reverse(&y, axis)
                .unwrap()
                .to_vec::<f64>()
                .unwrap();
            let lhs: f64 = cx.iter().zip(&yd).map(|(a, b)| a * b).sum();
            let rhs: f64 = xd.iter().zip(&ry).map(|(a, b)| a * b).sum();
            assert!((lhs - rhs).abs() < 1e-12);
        }
    }
}

/// The acceptance test of determinism: 1M-element sums, all-axes and per-axis,
/// in every layout path, and cumsum, bitwise equal on 1 and 2 threads.
#[test]
fn thread_count_determinism_1m() {
    let (c1, c2) = one_and_two_threads();
    let d = data(1 << 20, 42, -1.0, 1.0);
    let run = |ctx: &ExecContext| -> Vec<Vec<u64>> {
        let mut outs = vec![];
        let bits32 = |t: RawTensor| {
            t.to_vec::<f32>()
                .unwrap()
                .iter()
                .map(|v| v.to_bits() as u64)
                .collect::<Vec<_>>()
        };
        let bits64 = |t: RawTensor| {
            t.to_vec::<f64>()
                .unwrap()
                .iter()
                .map(|v| v.to_bits())
                .collect::<Vec<_>>()
        };
        let flat = make::<f32>(ctx, &d, &[1 << 20], Layout::Contig);
        outs.push(bits32(
            ctx.reduce(&flat, ReduceOp::Sum, &[], false).unwrap(),
        ));
        let flat64 = make::<f64>(ctx, &d, &[1 << 20], Layout::Contig);
        outs.push(bits64(
            ctx.reduce(&flat64, ReduceOp::Sum, &[], false).unwrap(),
        ));
        for lay in [Layout::Contig, Layout::Reversed] {
            let m = make::<f32>(ctx, &d, &[1024, 1024], lay);
            for axes in [vec![], vec![0], vec![1]] {
                for op in OPS {
                    outs.push(bits32(ctx.reduce(&m, op, &axes, false).unwrap()));
                }
            }
            outs.push(bits32(ctx.variance(&m, &[0], 1, false).unwrap()));
            outs.push(bits32(ctx.cumsum(&m, 0).unwrap()));
            outs.push(bits32(ctx.cumsum_reverse(&m, 1).unwrap()));
            let t = make::<f32>(ctx, &d, &[64, 128, 128], lay);
            outs.push(bits32(
                ctx.reduce(&t, ReduceOp::Sum, &[0, 2], false).unwrap(),
            ));
            outs.push(bits32(ctx.sum_to_shape(&t, &[128, 1]).unwrap()));
            let tall = make::<f32>(ctx, &d, &[1 << 18, 4], lay);
            outs.push(bits32(
                ctx.reduce(&tall, ReduceOp::Sum, &[0], false).unwrap(),
            ));
            outs.push(
                ctx.argmax(&tall, 0, false)
                    .unwrap()
                    .to_vec::<i64>()
                    .unwrap()
                    .iter()
                    .map(|&v| v as u64)
                    .collect(),
            );
        }
        outs
    };
    let (o1, o2) = (run(&c1), run(&c2));
    assert_eq!(o1.len(), o2.len());
    for (i, (x, y)) in o1.iter().zip(&o2).enumerate() {
        assert_eq!(x, y, "output {i} differs between 1 and 2 threads");
    }
}
