//! Elementwise comparisons, where and masked fill, in-place accumulation,
//! structured errors, thread-count determinism, empty and scalar tensors.
//! (Unary ops: `elementwise_unary.rs`; binary ops: `elementwise_binary.rs`.)

use fucina_core::kernels::elementwise::reference as r;
use fucina_core::kernels::elementwise::{BinaryOp, CmpOp, UnaryOp};
use fucina_core::testing::TestCtx;
use fucina_core::{DType, Error, ExecContext, Float, RawTensor};

#[macro_use]
mod common;
use common::ew::{all_binary, assert_bits, broadcast_pairs, data};
use common::{make, Layout, LAYOUTS, SIZES};

/// Zeros of `shape` (2-D) seen transposed: a non-contiguous tensor, which
/// an in-place accumulation refuses.
fn transposed_zeros(ctx: &ExecContext, dtype: DType, shape: &[usize]) -> RawTensor {
    ctx.zeros(dtype, shape).unwrap().transpose(0, 1).unwrap()
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
        assert_err!(ctx.binary(&a, &b, BinaryOp::Add) => Error::Broadcast { op: "add", .. });
        assert_err!(ctx.binary(&a, &c, BinaryOp::Mul) => Error::DTypeMismatch { .. });
        assert_err!(ctx.binary(&h, &h, BinaryOp::Mul) => Error::UnsupportedDType { .. });
        assert_err!(ctx.unary(&h, UnaryOp::Exp) => Error::UnsupportedDType { .. });
        assert_err!(ctx.unary(&m, UnaryOp::Exp) => Error::UnsupportedDType { .. });
        assert_err!(ctx.unary_backward(&a, &b, UnaryOp::Exp) => Error::ShapeMismatch { .. });
        assert_err!(ctx.unary_backward(&a, &c, UnaryOp::Exp) => Error::DTypeMismatch { .. });
        let gy_bad = ctx.zeros(DType::F32, &[2, 3]).unwrap();
        assert_err!(ctx.binary_backward(&a, &a, &a, &gy_bad, BinaryOp::Mul, [true, true])
            => Error::ShapeMismatch { .. });
        assert_err!(ctx.compare(&a, &b, CmpOp::Eq) => Error::Broadcast { .. });
        assert_err!(ctx.compare(&a, &c, CmpOp::Eq) => Error::DTypeMismatch { .. });
        assert_err!(ctx.compare(&h, &h, CmpOp::Eq) => Error::UnsupportedDType { .. });
        assert_err!(ctx.where_cond(&a, &a, &a) => Error::DTypeMismatch { .. });
        assert_err!(ctx.where_cond(&m, &a, &b) => Error::Broadcast { .. });
        // The mask must broadcast to x, not the other way round.
        let m23 = ctx.zeros(DType::U8, &[2, 3]).unwrap();
        assert_err!(ctx.masked_fill(&a, &m23, 1.0) => Error::Broadcast { .. });
        assert_err!(ctx.masked_fill(&a, &a, 1.0) => Error::DTypeMismatch { .. });
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
        assert_err!(ctx.add_assign(&mut acc, &g) => Error::SharedBuffer { .. });
        drop(view);
        let mut t = transposed_zeros(&ctx, DType::F64, &[2, 2]);
        let g2 = ctx.ones(DType::F64, &[2, 2]).unwrap();
        assert_err!(ctx.add_assign(&mut t, &g2) => Error::NotContiguous { .. });
        assert_err!(ctx.add_assign(&mut acc, &g2) => Error::ShapeMismatch { .. });
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

f32_f64_tests!(compare_and_select => compare_where_masked_fill_f32, compare_where_masked_fill_f64);

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

/// `add_assign_narrow` adds g into its window (`acc + g`, bit for bit) on every axis, any
/// layout of g, one and two threads past the parallel threshold; outside the window nothing
/// changes; bad windows, shapes, dtypes, a shared or strided `acc` are structured errors.
#[test]
fn add_assign_narrow_adds_into_the_window_only() {
    for threads in [1, 2] {
        let ctx = TestCtx::with_threads(threads).unwrap();
        {
            let shape = [6usize, 70, 300];
            let n: usize = shape.iter().product();
            let da = data(n, 3, -1.0, 1.0);
            for (axis, start, len) in [
                (0usize, 2usize, 3usize),
                (1, 10, 41),
                (2, 256, 44),
                (2, 0, 300),
            ] {
                let mut gshape = shape;
                gshape[axis] = len;
                let dg = data(gshape.iter().product(), 4, -1.0, 1.0);
                for lay in LAYOUTS {
                    let mut acc = make::<f32>(&ctx, &da, &shape, Layout::Contig);
                    let g = make::<f32>(&ctx, &dg, &gshape, lay);
                    ctx.add_assign_narrow(&mut acc, axis, start, &g).unwrap();
                    let got = acc.to_vec::<f32>().unwrap();
                    let mut want: Vec<f32> = da.iter().map(|&v| v as f32).collect();
                    let inner: usize = shape[axis + 1..].iter().product();
                    let ginner: usize = gshape[axis..].iter().product();
                    for (gi, &v) in dg.iter().enumerate() {
                        let (o, rest) = (gi / ginner, gi % ginner);
                        let i = o * shape[axis] * inner + start * inner + rest;
                        want[i] += v as f32;
                    }
                    assert_bits(&got, &want, &format!("axis {axis} {lay:?} {threads}t"));
                }
            }
            let mut acc = ctx.zeros(DType::F32, &[4, 6]).unwrap();
            let g = ctx.ones(DType::F32, &[4, 3]).unwrap();
            for (axis, start) in [(1usize, 4usize), (2, 0), (1, usize::MAX)] {
                assert!(ctx.add_assign_narrow(&mut acc, axis, start, &g).is_err());
            }
            let g3 = ctx.ones(DType::F32, &[3, 3]).unwrap();
            assert_err!(ctx.add_assign_narrow(&mut acc, 1, 0, &g3) => Error::ShapeMismatch { .. });
            let g64 = ctx.ones(DType::F64, &[4, 3]).unwrap();
            assert_err!(ctx.add_assign_narrow(&mut acc, 1, 0, &g64) => Error::DTypeMismatch { .. });
            let view = acc.clone_view();
            assert_err!(ctx.add_assign_narrow(&mut acc, 1, 0, &g) => Error::SharedBuffer { .. });
            drop(view);
            let mut t = transposed_zeros(&ctx, DType::F32, &[6, 4]);
            assert_err!(ctx.add_assign_narrow(&mut t, 1, 0, &g) => Error::NotContiguous { .. });
        }
    }
}
