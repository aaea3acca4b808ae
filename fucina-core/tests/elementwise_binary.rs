//! Binary elementwise kernels vs their scalar reference under every
//! broadcast pattern, strided views, f32 and f64; partial derivatives vs the
//! reference and finite differences; tie and pow conventions.

use fucina_core::kernels::elementwise::reference as r;
use fucina_core::kernels::elementwise::BinaryOp;
use fucina_core::testing::TestCtx;
use fucina_core::{DType, Float};

#[macro_use]
mod common;
use common::ew::{
    all_binary, assert_bits, assert_fd_close, assert_grad_close, broadcast_pairs, central_diff,
    data,
};
use common::{make, Layout, SIZES};

/// The range `op`'s operands are drawn from: pow's base stays positive.
fn domain(op: BinaryOp) -> (f64, f64) {
    if op == BinaryOp::Pow {
        (0.2, 2.5)
    } else {
        (-3.0, 3.0)
    }
}

fn binary_vs_reference<T: Float>() {
    let ctx = TestCtx::with_threads(2).unwrap();
    for op in all_binary() {
        let (lo, hi) = domain(op);
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

f32_f64_tests!(binary_vs_reference => binary_matches_reference_f32, binary_matches_reference_f64);

fn binary_backward_vs_reference<T: Float>(rtol: f64) {
    let ctx = TestCtx::with_threads(2).unwrap();
    for op in all_binary() {
        let (lo, hi) = domain(op);
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
                            assert_grad_close::<T>(
                                &gt,
                                &want,
                                rtol,
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

f32_f64_tests!(binary_backward_vs_reference(2e-5; 1e-12) => binary_backward_matches_reference_f32, binary_backward_matches_reference_f64);

#[test]
fn binary_reference_partials_match_finite_differences() {
    let h = 1e-6;
    for op in all_binary() {
        let (lo, hi) = domain(op);
        let av = data(100, 11, lo, hi);
        let bv = data(100, 12, lo, hi);
        for (&a, &b) in av.iter().zip(&bv) {
            if (a - b).abs() < 1e-3 || (op == BinaryOp::Div && b.abs() < 0.1) {
                continue;
            }
            let f = |a: f64, b: f64| r::binary_scalar(op, a, b);
            let fa = central_diff(|a| f(a, b), a, h);
            let fb = central_diff(|b| f(a, b), b, h);
            let (pa, pb) = r::binary_partials(op, a, b);
            assert_fd_close(fa, pa, 1e-5, &format!("{op:?} d/da at ({a},{b})"));
            assert_fd_close(fb, pb, 1e-5, &format!("{op:?} d/db at ({a},{b})"));
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
