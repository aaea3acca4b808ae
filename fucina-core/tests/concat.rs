//! Concat / stack / pad vs the scalar reference (awkward sizes, non-contiguous and
//! broadcast inputs, several dtypes), split / chunk views, and argument errors.

use fucina_core::kernels::concat::{chunk, reference, split};
use fucina_core::rng::SplitMix64;
use fucina_core::{DType, Element, Error, ExecContext, Float, RawTensor};

#[macro_use]
mod common;
use common::{
    arange_f32, assert_bits_eq, assert_threads_bits_eq, bits, one_and_two_threads, rand_t, sizes,
};
use fucina_core::testing::TestCtx;

/// A view of logical `shape` whose axes 0 and `rank-1` are swapped in storage.
fn transposed<T: Element>(ctx: &ExecContext, rng: &mut SplitMix64, shape: &[usize]) -> RawTensor {
    let r = shape.len();
    let mut s = shape.to_vec();
    s.swap(0, r - 1);
    rand_t::<T>(ctx, rng, &s).transpose(0, r - 1).unwrap()
}

fn concat_case<T: Float>() {
    let ctx = TestCtx::with_threads(2).unwrap();
    let mut rng = SplitMix64::new(11);
    for &n in sizes() {
        for axis in 0..3 {
            let mut s1 = vec![3, 4, 5];
            let mut s2 = s1.clone();
            let mut s3 = s1.clone();
            s1[axis] = n;
            s2[axis] = 1 + n % 4;
            s3[axis] = 2;
            let a = rand_t::<T>(&ctx, &mut rng, &s1);
            let b = transposed::<T>(&ctx, &mut rng, &s2);
            // A broadcast input (stride 0 on its first two axes).
            let mut base_shape = s3.clone();
            base_shape[0] = 1;
            base_shape[1] = 1;
            let c = rand_t::<T>(&ctx, &mut rng, &base_shape)
                .broadcast_to(&s3)
                .unwrap();
            let y = ctx.concat(&[&a, &b, &c], axis).unwrap();
            let (va, vb, vc) = (
                a.to_vec::<T>().unwrap(),
                b.to_vec::<T>().unwrap(),
                c.to_vec::<T>().unwrap(),
            );
            let want = reference::concat(&[&va, &vb, &vc], &[&s1, &s2, &s3], axis);
            let mut oshape = s1.clone();
            oshape[axis] = s1[axis] + s2[axis] + s3[axis];
            assert_eq!(y.shape(), oshape.as_slice());
            assert_bits_eq::<T>(&y, &want);
            // Splitting back gives views equal to the inputs.
            let parts = split(&y, axis, &[s1[axis], s2[axis], s3[axis]]).unwrap();
            assert_bits_eq::<T>(&parts[0], &va);
            assert_bits_eq::<T>(&parts[1], &vb);
            assert_bits_eq::<T>(&parts[2], &vc);
        }
    }
}

f32_f64_tests!(concat_case => concat_matches_reference_f32, concat_matches_reference_f64);

#[test]
fn concat_large_is_thread_invariant_and_any_dtype() {
    let (c1, c2) = one_and_two_threads();
    let mut rng = SplitMix64::new(12);
    let a = transposed::<f32>(&c1, &mut rng, &[300, 7, 40]);
    let b = rand_t::<f32>(&c1, &mut rng, &[300, 5, 40]);
    let y1 = c1.concat(&[&a, &b], 1).unwrap();
    let y2 = c2.concat(&[&a, &b], 1).unwrap();
    assert_eq!(
        bits(&y1.to_vec::<f32>().unwrap()),
        bits(&y2.to_vec::<f32>().unwrap())
    );
    let want = reference::concat(
        &[&a.to_vec::<f32>().unwrap(), &b.to_vec::<f32>().unwrap()],
        &[&[300, 7, 40], &[300, 5, 40]],
        1,
    );
    assert_bits_eq::<f32>(&y1, &want);
    let i = c1.from_slice(&[1i64, 2, 3, 4], &[2, 2]).unwrap();
    let j = c1.from_slice(&[5i64, 6], &[1, 2]).unwrap();
    let k = c1.concat(&[&i, &j], 0).unwrap();
    assert_eq!(k.to_vec::<i64>().unwrap(), vec![1, 2, 3, 4, 5, 6]);
    let h = c1.to_dtype(&a, DType::F16).unwrap();
    let hh = c1.concat(&[&h, &h], 2).unwrap();
    assert_eq!(hh.shape(), &[300, 7, 80]);
    let hv = h.to_vec::<fucina_core::f16>().unwrap();
    let want = reference::concat(&[&hv, &hv], &[&[300, 7, 40], &[300, 7, 40]], 2);
    assert_eq!(hh.to_vec::<fucina_core::f16>().unwrap(), want);
    drop((a, b, y1, y2, i, j, k, h, hh));
}

#[test]
fn stack_inserts_an_axis() {
    let ctx = TestCtx::with_threads(2).unwrap();
    let mut rng = SplitMix64::new(13);
    for &n in sizes() {
        let a = rand_t::<f64>(&ctx, &mut rng, &[n, 3]);
        let b = transposed::<f64>(&ctx, &mut rng, &[n, 3]);
        for axis in 0..3 {
            let y = ctx.stack(&[&a, &b], axis).unwrap();
            let mut want_shape = vec![n, 3];
            want_shape.insert(axis, 2);
            assert_eq!(y.shape(), want_shape.as_slice());
            assert_eq!(
                y.select(axis, 0).unwrap().to_vec::<f64>().unwrap(),
                a.to_vec::<f64>().unwrap()
            );
            assert_eq!(
                y.select(axis, 1).unwrap().to_vec::<f64>().unwrap(),
                b.to_vec::<f64>().unwrap()
            );
        }
    }
}

fn pad_case<T: Float>() {
    let ctx = TestCtx::with_threads(2).unwrap();
    let mut rng = SplitMix64::new(14);
    for &n in sizes() {
        for pads in [
            [(0usize, 0usize), (1, 2), (0, 3)],
            [(2, 1), (0, 0), (3, 0)],
            [(1, 1), (1, 1), (1, 1)],
        ] {
            let shape = [3usize, n, 4];
            let x = rand_t::<T>(&ctx, &mut rng, &shape);
            let xt = transposed::<T>(&ctx, &mut rng, &shape);
            for x in [&x, &xt] {
                let y = ctx.pad(x, &pads, -1.5).unwrap();
                let want =
                    reference::pad(&x.to_vec::<T>().unwrap(), &shape, &pads, T::from_f64(-1.5));
                assert_bits_eq::<T>(&y, &want);
            }
        }
    }
}

f32_f64_tests!(pad_case => pad_matches_reference_f32, pad_matches_reference_f64);

#[test]
fn pad_large_and_integer() {
    let (c1, c2) = one_and_two_threads();
    let mut rng = SplitMix64::new(15);
    let x = transposed::<f32>(&c1, &mut rng, &[257, 300]);
    let pads = [(3, 4), (5, 0)];
    let want = reference::pad(&x.to_vec::<f32>().unwrap(), &[257, 300], &pads, 0.0);
    assert_threads_bits_eq::<f32>(&c1, &c2, &[264, 305], &want, |c| {
        c.pad(&x, &pads, 0.0).unwrap()
    });
    let i = c1.from_slice(&[1i32, 2, 3], &[3]).unwrap();
    let p = c1.pad(&i, &[(1, 2)], 7.0).unwrap();
    assert_eq!(p.to_vec::<i32>().unwrap(), vec![7, 1, 2, 3, 7, 7]);
    let s = c1.scalar(4.0f64).unwrap();
    assert_eq!(c1.pad(&s, &[], 0.0).unwrap().item::<f64>().unwrap(), 4.0);
    let e = c1.zeros(DType::F32, &[0, 2]).unwrap();
    let pe = c1.pad(&e, &[(1, 0), (0, 1)], 2.0).unwrap();
    assert_eq!(pe.to_vec::<f32>().unwrap(), vec![2.0; 3]);
    drop((x, i, p, s, e, pe));
}

#[test]
fn split_and_chunk_are_views_with_torch_semantics() {
    let ctx = TestCtx::with_threads(1).unwrap();
    let x = arange_f32(&ctx, &[2, 10]);
    let parts = chunk(&x, 1, 3).unwrap();
    let sizes: Vec<usize> = parts.iter().map(|p| p.shape()[1]).collect();
    assert_eq!(sizes, vec![4, 4, 2]);
    assert!(parts.iter().all(|p| p.buffer().same_as(x.buffer())));
    assert_eq!(parts[2].to_vec::<f32>().unwrap(), vec![8., 9., 18., 19.]);
    // torch.chunk may return fewer chunks: 6 elements into 4 → sizes 2, 2, 2.
    let y = x.narrow(1, 0, 6).unwrap();
    let sizes: Vec<usize> = chunk(&y, 1, 4)
        .unwrap()
        .iter()
        .map(|p| p.shape()[1])
        .collect();
    assert_eq!(sizes, vec![2, 2, 2]);
    let e = x.narrow(1, 0, 0).unwrap();
    assert_eq!(chunk(&e, 1, 3).unwrap().len(), 3);
    assert!(matches!(
        split(&x, 1, &[3, 3]),
        Err(Error::InvalidArgument { .. })
    ));
    assert!(matches!(
        chunk(&x, 1, 0),
        Err(Error::InvalidArgument { .. })
    ));
    assert!(matches!(chunk(&x, 2, 2), Err(Error::OutOfRange { .. })));
    drop((x, parts, y, e));
}

#[test]
fn concat_argument_errors() {
    let ctx = TestCtx::with_threads(1).unwrap();
    let a = ctx.zeros(DType::F32, &[2, 3]).unwrap();
    let b = ctx.zeros(DType::F32, &[3, 3]).unwrap();
    let c = ctx.zeros(DType::F64, &[2, 3]).unwrap();
    assert!(matches!(
        ctx.concat(&[&a, &b], 1),
        Err(Error::ShapeMismatch { .. })
    ));
    assert_eq!(ctx.concat(&[&a, &b], 0).unwrap().shape(), &[5, 3]);
    assert!(matches!(
        ctx.concat(&[&a, &c], 0),
        Err(Error::DTypeMismatch { .. })
    ));
    assert!(matches!(
        ctx.concat(&[&a], 2),
        Err(Error::OutOfRange { .. })
    ));
    assert!(matches!(
        ctx.concat(&[], 0),
        Err(Error::InvalidArgument { .. })
    ));
    assert!(matches!(
        ctx.stack(&[&a, &b], 0),
        Err(Error::ShapeMismatch { .. })
    ));
    assert!(matches!(
        ctx.pad(&a, &[(1, 1)], 0.0),
        Err(Error::InvalidArgument { .. })
    ));
    drop((a, b, c));
}
