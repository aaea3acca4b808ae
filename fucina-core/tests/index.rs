//! Index-select / embedding / gather and their adjoints vs the scalar reference:
//! awkward sizes, non-contiguous inputs, duplicates, bad indices, thread determinism.

use fucina_core::kernels::index::reference;
use fucina_core::rng::SplitMix64;
use fucina_core::{DType, Element, Error, ExecContext, Float, RawTensor};

#[macro_use]
mod common;
use common::{assert_bits_eq, assert_threads_bits_eq, bits, one_and_two_threads, rand_t, sizes};
use fucina_core::testing::TestCtx;

fn rand_ids(rng: &mut SplitMix64, n: usize, bound: usize) -> Vec<i64> {
    (0..n).map(|_| rng.below(bound as u64) as i64).collect()
}

/// A transposed view with logical shape `shape` (made from a contiguous [.., b, a] tensor).
fn transposed<T: Element>(
    ctx: &ExecContext,
    rng: &mut SplitMix64,
    shape: &[usize],
    a: usize,
    b: usize,
) -> RawTensor {
    let mut s = shape.to_vec();
    s.swap(a, b);
    rand_t::<T>(ctx, rng, &s).transpose(a, b).unwrap()
}

/// `(a, n, axis, shape)` for every awkward size `a`, index count `n` in `counts` and axis of
/// `[3, 4, 5]` (nested in that order), `shape` being `[3, 4, 5]` with size `a` on `axis`.
fn axis_cases(counts: &'static [usize]) -> impl Iterator<Item = (usize, usize, usize, Vec<usize>)> {
    sizes().iter().flat_map(move |&a| {
        counts.iter().flat_map(move |&n| {
            (0..3).map(move |axis| {
                let mut shape = vec![3, 4, 5];
                shape[axis] = a;
                (a, n, axis, shape)
            })
        })
    })
}

fn index_select_case<T: Float>() {
    let ctx = TestCtx::with_threads(2).unwrap();
    let mut rng = SplitMix64::new(1);
    for (a, n, axis, shape) in axis_cases(&[1, 7, 33]) {
        let x = rand_t::<T>(&ctx, &mut rng, &shape);
        let ids = rand_ids(&mut rng, n, a);
        let idx = ctx.from_slice(&ids, &[n]).unwrap();
        let y = ctx.index_select(&x, axis, &idx).unwrap();
        let mut want_shape = shape.clone();
        want_shape[axis] = n;
        assert_eq!(y.shape(), want_shape.as_slice());
        let want = reference::index_select(&x.to_vec::<T>().unwrap(), &shape, axis, &ids).unwrap();
        assert_bits_eq::<T>(&y, &want);
        // Non-contiguous x (axes 0 and 2 swapped) and i32 indices.
        let xt = transposed::<T>(&ctx, &mut rng, &shape, 0, 2);
        let idx32: Vec<i32> = ids.iter().map(|&i| i as i32).collect();
        let idx32 = ctx.from_slice(&idx32, &[n]).unwrap();
        let y = ctx.index_select(&xt, axis, &idx32).unwrap();
        let want = reference::index_select(&xt.to_vec::<T>().unwrap(), &shape, axis, &ids).unwrap();
        assert_bits_eq::<T>(&y, &want);
    }
}

f32_f64_tests!(index_select_case => index_select_matches_reference_f32, index_select_matches_reference_f64);

#[test]
fn index_select_any_dtype_and_strided_index() {
    let ctx = TestCtx::with_threads(2).unwrap();
    let mut rng = SplitMix64::new(2);
    let shape = [17usize, 6];
    // A stride-2 index view (every other element of a longer index).
    let ids_full = rand_ids(&mut rng, 14, 17);
    let idx_full = ctx.from_slice(&ids_full, &[7, 2]).unwrap();
    let idx = idx_full.select(1, 0).unwrap();
    assert!(!idx.is_contiguous());
    let ids: Vec<i64> = idx.to_vec::<i64>().unwrap();
    let xi = rand_t::<i64>(&ctx, &mut rng, &shape);
    let yi = ctx.index_select(&xi, 0, &idx).unwrap();
    let want = reference::index_select(&xi.to_vec::<i64>().unwrap(), &shape, 0, &ids).unwrap();
    assert_eq!(yi.to_vec::<i64>().unwrap(), want);
    let xu: Vec<u8> = (0..102).map(|i| (i * 7 % 251) as u8).collect();
    let xu = ctx.from_slice(&xu, &shape).unwrap();
    let yu = ctx.index_select(&xu, 0, &idx).unwrap();
    let want = reference::index_select(&xu.to_vec::<u8>().unwrap(), &shape, 0, &ids).unwrap();
    assert_eq!(yu.to_vec::<u8>().unwrap(), want);
    let xh = ctx
        .to_dtype(&rand_t::<f32>(&ctx, &mut rng, &shape), DType::BF16)
        .unwrap();
    let y = ctx.index_select(&xh, 0, &idx).unwrap();
    assert_eq!(y.dtype(), DType::BF16);
    let want = reference::index_select(&xh.to_vec::<fucina_core::bf16>().unwrap(), &shape, 0, &ids)
        .unwrap();
    assert_eq!(y.to_vec::<fucina_core::bf16>().unwrap(), want);
    drop((idx_full, idx, xi, xu, xh, y, yi, yu));
}

fn embedding_case<T: Float>() {
    let ctx = TestCtx::with_threads(2).unwrap();
    let mut rng = SplitMix64::new(3);
    for &v in sizes() {
        for &d in &[1usize, 16, 33] {
            let w = rand_t::<T>(&ctx, &mut rng, &[v, d]);
            let ids = rand_ids(&mut rng, 6, v);
            let idx = ctx.from_slice(&ids, &[2, 3]).unwrap();
            let y = ctx.embedding(&w, &idx).unwrap();
            assert_eq!(y.shape(), &[2, 3, d]);
            let want =
                reference::index_select(&w.to_vec::<T>().unwrap(), &[v, d], 0, &ids).unwrap();
            assert_bits_eq::<T>(&y, &want);
            // Transposed weight view: [D, V] storage read as [V, D].
            let wt = transposed::<T>(&ctx, &mut rng, &[v, d], 0, 1);
            let y = ctx.embedding(&wt, &idx).unwrap();
            let want =
                reference::index_select(&wt.to_vec::<T>().unwrap(), &[v, d], 0, &ids).unwrap();
            assert_bits_eq::<T>(&y, &want);
        }
    }
}

f32_f64_tests!(embedding_case => embedding_matches_reference_f32, embedding_matches_reference_f64);

fn index_add_case<T: Float>() {
    let (c1, c2) = one_and_two_threads();
    let mut rng = SplitMix64::new(4);
    for (a, n, axis, shape) in axis_cases(&[1, 17, 257]) {
        let mut sshape = shape.clone();
        sshape[axis] = n;
        // Few destinations for many sources: heavy duplicates.
        let ids = rand_ids(&mut rng, n, a.min(3));
        let idx = c1.from_slice(&ids, &[n]).unwrap();
        let src = transposed::<T>(&c1, &mut rng, &sshape, 1, 2);
        let want = reference::index_add(&shape, axis, &ids, &src.to_vec::<T>().unwrap()).unwrap();
        // Same summation order as the reference: bitwise equal.
        assert_threads_bits_eq::<T>(&c1, &c2, &shape, &want, |c| {
            c.index_add(&shape, axis, &idx, &src).unwrap()
        });
    }
}

f32_f64_tests!(index_add_case => index_add_matches_reference_and_threads_f32, index_add_matches_reference_and_threads_f64);

#[test]
fn index_add_duplicate_sums_are_exact() {
    let ctx = TestCtx::with_threads(2).unwrap();
    let src = ctx
        .from_slice(&[1.0f64, 2.0, 4.0, 8.0, 16.0, 32.0], &[6, 1])
        .unwrap();
    let idx = ctx.from_slice(&[2i64, 0, 2, 2, 0, 1], &[6]).unwrap();
    let y = ctx.index_add(&[4, 1], 0, &idx, &src).unwrap();
    assert_eq!(y.to_vec::<f64>().unwrap(), vec![18.0, 32.0, 13.0, 0.0]);
    drop((src, idx, y));
}

fn embedding_backward_case<T: Float>() {
    let (c1, c2) = one_and_two_threads();
    let mut rng = SplitMix64::new(5);
    for &v in sizes() {
        for &d in &[1usize, 16, 65] {
            let ids = rand_ids(&mut rng, 2 * 33, v);
            let idx = c1.from_slice(&ids, &[2, 33]).unwrap();
            let g = rand_t::<T>(&c1, &mut rng, &[2, 33, d]);
            let want = reference::index_add(&[v, d], 0, &ids, &g.to_vec::<T>().unwrap()).unwrap();
            assert_threads_bits_eq::<T>(&c1, &c2, &[v, d], &want, |c| {
                c.embedding_backward(v, &idx, &g).unwrap()
            });
            // Non-contiguous grad (batch axes transposed) and transposed ids.
            let gt = transposed::<T>(&c1, &mut rng, &[33, 2, d], 0, 1);
            let idt = idx.transpose(0, 1).unwrap();
            let ids_t = idt.to_vec::<i64>().unwrap();
            let want =
                reference::index_add(&[v, d], 0, &ids_t, &gt.to_vec::<T>().unwrap()).unwrap();
            let y = c2.embedding_backward(v, &idt, &gt).unwrap();
            assert_bits_eq::<T>(&y, &want);
        }
    }
}

f32_f64_tests!(embedding_backward_case => embedding_backward_matches_reference_and_threads_f32, embedding_backward_matches_reference_and_threads_f64);

#[test]
fn embedding_backward_large_is_thread_invariant() {
    let (c1, c2) = one_and_two_threads();
    let mut rng = SplitMix64::new(6);
    let ids = rand_ids(&mut rng, 2048, 65);
    let idx = c1.from_slice(&ids, &[8, 256]).unwrap();
    let g = rand_t::<f32>(&c1, &mut rng, &[8, 256, 96]);
    let y1 = c1.embedding_backward(65, &idx, &g).unwrap();
    let y2 = c2.embedding_backward(65, &idx, &g).unwrap();
    assert_eq!(
        bits(&y1.to_vec::<f32>().unwrap()),
        bits(&y2.to_vec::<f32>().unwrap())
    );
    drop((idx, g, y1, y2));
}

fn gather_scatter_case<T: Float>() {
    let (c1, c2) = one_and_two_threads();
    let mut rng = SplitMix64::new(7);
    for &a in sizes() {
        for axis in 0..3 {
            let mut shape = vec![3, 4, 5];
            shape[axis] = a;
            // idx is smaller than x off the axis, and of any length along it.
            let mut ishape = vec![2, 3, 4];
            ishape[axis] = [1, 7, 33][a % 3];
            let n: usize = ishape.iter().product();
            let ids = rand_ids(&mut rng, n, a);
            let idx = c1.from_slice(&ids, &ishape).unwrap();
            let x = transposed::<T>(&c1, &mut rng, &shape, 0, 2);
            let want =
                reference::gather(&x.to_vec::<T>().unwrap(), &shape, axis, &ids, &ishape).unwrap();
            let y = c2.gather(&x, axis, &idx).unwrap();
            assert_eq!(y.shape(), ishape.as_slice());
            assert_bits_eq::<T>(&y, &want);
            // scatter_add: src is larger than idx (only the idx-shaped corner counts),
            // and non-contiguous.
            let sshape: Vec<usize> = ishape.iter().map(|d| d + 1).collect();
            let src_big = transposed::<T>(&c1, &mut rng, &sshape, 1, 2);
            let mut src = src_big.clone();
            for (d, &len) in ishape.iter().enumerate() {
                src = src.narrow(d, 0, len).unwrap();
            }
            let want =
                reference::scatter_add(&shape, axis, &ids, &ishape, &src.to_vec::<T>().unwrap())
                    .unwrap();
            assert_threads_bits_eq::<T>(&c1, &c2, &shape, &want, |c| {
                c.scatter_add(&shape, axis, &idx, &src_big).unwrap()
            });
        }
    }
}

f32_f64_tests!(gather_scatter_case => gather_scatter_add_match_reference_f32, gather_scatter_add_match_reference_f64);

#[test]
fn scatter_add_large_parallel_paths_are_thread_invariant() {
    let (c1, c2) = one_and_two_threads();
    let mut rng = SplitMix64::new(8);
    // Long rows (k*inner >= chunk: j-blocks) and short rows (o groups).
    for (shape, ishape, axis) in [
        (vec![9usize, 3000], vec![40usize, 3000], 0usize),
        (vec![3000, 9], vec![3000, 5], 1),
    ] {
        let n: usize = ishape.iter().product();
        let ids = rand_ids(&mut rng, n, shape[axis]);
        let idx = c1.from_slice(&ids, &ishape).unwrap();
        let src = rand_t::<f32>(&c1, &mut rng, &ishape);
        let want =
            reference::scatter_add(&shape, axis, &ids, &ishape, &src.to_vec::<f32>().unwrap())
                .unwrap();
        let y1 = c1.scatter_add(&shape, axis, &idx, &src).unwrap();
        let y2 = c2.scatter_add(&shape, axis, &idx, &src).unwrap();
        assert_bits_eq::<f32>(&y1, &want);
        assert_bits_eq::<f32>(&y2, &want);
        let g = c2.gather(&y2, axis, &idx).unwrap();
        let want_g =
            reference::gather(&y2.to_vec::<f32>().unwrap(), &shape, axis, &ids, &ishape).unwrap();
        assert_bits_eq::<f32>(&g, &want_g);
    }
}

#[test]
fn gather_any_dtype() {
    let ctx = TestCtx::with_threads(1).unwrap();
    let x = ctx
        .from_slice(&[10i32, 11, 12, 20, 21, 22], &[2, 3])
        .unwrap();
    let idx = ctx.from_slice(&[2i64, 2, 0, 1], &[2, 2]).unwrap();
    let y = ctx.gather(&x, 1, &idx).unwrap();
    assert_eq!(y.to_vec::<i32>().unwrap(), vec![12, 12, 20, 21]);
    drop((x, idx, y));
}

#[test]
fn one_hot_matches_reference() {
    let ctx = TestCtx::with_threads(1).unwrap();
    let mut rng = SplitMix64::new(9);
    for &c in sizes() {
        let ids = rand_ids(&mut rng, 6, c);
        let idx = ctx.from_slice(&ids, &[3, 2]).unwrap();
        let y = ctx.one_hot(&idx, c, DType::F32).unwrap();
        assert_eq!(y.shape(), &[3, 2, c]);
        assert_eq!(
            y.to_vec::<f32>().unwrap(),
            reference::one_hot::<f32>(&ids, c).unwrap()
        );
        let y = ctx.one_hot(&idx, c, DType::U8).unwrap();
        assert_eq!(
            y.to_vec::<u8>().unwrap(),
            reference::one_hot::<u8>(&ids, c).unwrap()
        );
    }
}

fn is_out_of_range<T: std::fmt::Debug>(r: Result<T, Error>, bad: i64) {
    match r {
        Err(Error::OutOfRange { what, index, .. }) => {
            assert_eq!(what, "index");
            assert_eq!(index, bad);
        }
        other => panic!("expected OutOfRange for index {bad}, got {other:?}"),
    }
}

#[test]
fn bad_indices_are_errors() {
    let ctx = TestCtx::with_threads(2).unwrap();
    let x = ctx.zeros(DType::F32, &[4, 3]).unwrap();
    for bad in [-1i64, 4, 1 << 40, i64::MIN] {
        let idx = ctx.from_slice(&[0i64, bad, 1], &[3]).unwrap();
        is_out_of_range(ctx.index_select(&x, 0, &idx), bad);
        is_out_of_range(ctx.embedding(&x, &idx), bad);
        let src = ctx.zeros(DType::F32, &[3, 3]).unwrap();
        is_out_of_range(ctx.index_add(&[4, 3], 0, &idx, &src), bad);
        let g = ctx.zeros(DType::F32, &[3, 5]).unwrap();
        is_out_of_range(ctx.embedding_backward(4, &idx, &g), bad);
        is_out_of_range(ctx.one_hot(&idx, 4, DType::F32), bad);
        let idx2 = ctx.from_slice(&[0i64, bad, 1], &[3, 1]).unwrap();
        is_out_of_range(ctx.gather(&x, 0, &idx2), bad);
        let src2 = ctx.zeros(DType::F32, &[3, 1]).unwrap();
        is_out_of_range(ctx.scatter_add(&[4, 3], 0, &idx2, &src2), bad);
    }
    let idx32 = ctx.from_slice(&[-3i32], &[1]).unwrap();
    is_out_of_range(ctx.index_select(&x, 1, &idx32), -3);
    let fidx = ctx.from_slice(&[0.0f32], &[1]).unwrap();
    assert!(matches!(
        ctx.index_select(&x, 0, &fidx),
        Err(Error::UnsupportedDType { .. })
    ));
    let idx = ctx.from_slice(&[0i64, 1], &[2]).unwrap();
    assert!(matches!(
        ctx.index_select(&x, 2, &idx),
        Err(Error::OutOfRange { what: "axis", .. })
    ));
    let wrong = ctx.zeros(DType::F32, &[3, 3]).unwrap();
    assert!(matches!(
        ctx.index_add(&[4, 3], 0, &idx, &wrong),
        Err(Error::ShapeMismatch { .. })
    ));
    let big = ctx.from_slice(&[0i64; 15], &[5, 3]).unwrap();
    assert!(matches!(
        ctx.gather(&x, 1, &big),
        Err(Error::ShapeMismatch { .. })
    ));
    let xi = ctx.zeros(DType::I64, &[2, 3]).unwrap();
    assert!(matches!(
        ctx.index_add(&[2, 3], 0, &idx, &xi),
        Err(Error::UnsupportedDType { .. })
    ));
    drop((x, idx32, fidx, idx, wrong, big, xi));
}
