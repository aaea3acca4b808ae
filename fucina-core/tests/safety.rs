//! Regression tests for issue 11 (core half): every reproducer of a crash,
//! an abort or an out-of-bounds read through the safe API now gets a clean
//! `Err`. Sizes computed from user input are checked; a view is bounded by
//! its tensor's extent, never the pooled block's capacity; allocation
//! failures are `OutOfMemory`; the memory limit bounds live bytes however
//! they were obtained. Every context ends with nothing outstanding.

use fucina_core::kernels::concat;
use fucina_core::testing::TestCtx;
use fucina_core::{DType, Error};

fn ctx() -> TestCtx {
    TestCtx::with_threads(1).expect("context")
}

#[test]
fn pad_with_overflowing_padding_is_an_error() {
    let ctx = ctx();
    let x = ctx.zeros(DType::F32, &[2, 3]).unwrap();
    for pads in [
        [(usize::MAX, 1), (0, 0)],
        [(0, usize::MAX), (0, 0)],
        [(0, 0), (usize::MAX - 2, 1)],
        [(usize::MAX / 2, usize::MAX / 2), (0, 0)],
    ] {
        let r = ctx.pad(&x, &pads, 0.0);
        assert!(
            matches!(r, Err(Error::SizeOverflow { op: "pad", .. })),
            "{pads:?}: {r:?}"
        );
    }
    // Padding whose extent fits but whose element count does not.
    let r = ctx.pad(&x, &[(1 << 40, 0), (1 << 40, 0)], 0.0);
    assert!(matches!(r, Err(Error::SizeOverflow { .. })), "{r:?}");
    // A large but representable pad fails on memory, not by corrupting it.
    let r = ctx.pad(&x, &[(1 << 50, 0), (0, 0)], 0.0);
    assert!(matches!(r, Err(Error::OutOfMemory { .. })), "{r:?}");
    drop(x);
}

#[test]
fn concat_of_huge_broadcast_views_is_an_error() {
    let ctx = ctx();
    let one = ctx.zeros(DType::F32, &[1]).unwrap();
    let a = one.broadcast_to(&[1 << 63]).unwrap();
    let r = ctx.concat(&[&a, &a], 0);
    assert!(
        matches!(r, Err(Error::SizeOverflow { op: "concat", .. })),
        "{r:?}"
    );
    // Fits in usize, not in memory.
    let b = one.broadcast_to(&[1 << 61]).unwrap();
    let r = ctx.concat(&[&b, &b], 0);
    assert!(matches!(r, Err(Error::OutOfMemory { .. })), "{r:?}");
    // stack goes through concat.
    let r = ctx.stack(&[&a, &a, &a], 0);
    assert!(r.is_err(), "{r:?}");
    drop((one, a, b));
}

#[test]
fn split_sizes_that_overflow_are_an_error() {
    let ctx = ctx();
    let x = ctx.zeros(DType::F32, &[4, 2]).unwrap();
    let r = concat::split(&x, 0, &[usize::MAX, 5]);
    assert!(
        matches!(r, Err(Error::SizeOverflow { op: "split", .. })),
        "{r:?}"
    );
    // A sum that wraps to the right total must not pass either.
    let r = concat::split(&x, 0, &[usize::MAX, 5, 0]);
    assert!(r.is_err(), "{r:?}");
    drop(x);
}

#[test]
fn to_vec_of_a_huge_broadcast_view_is_out_of_memory() {
    let ctx = ctx();
    let one = ctx.zeros(DType::F32, &[1, 1]).unwrap();
    let v = one.broadcast_to(&[1 << 40, 1 << 20]).unwrap();
    let r = v.to_vec::<f32>();
    assert!(matches!(r, Err(Error::OutOfMemory { .. })), "{r:?}");
    let r = ctx.to_vec::<f32>(&v);
    assert!(matches!(r, Err(Error::OutOfMemory { .. })), "{r:?}");
    // A contiguous copy of it is refused by the pool the same way.
    let r = ctx.copy(&v);
    assert!(matches!(r, Err(Error::OutOfMemory { .. })), "{r:?}");
    drop((one, v));
}

#[test]
fn cross_entropy_with_a_huge_broadcast_target_is_an_error() {
    use fucina_core::kernels::fused::loss::CrossEntropyOpts;
    let ctx = ctx();
    let t1 = ctx.from_slice(&[0i64], &[1]).unwrap();
    let t = t1.broadcast_to(&[1 << 36]).unwrap();
    let x1 = ctx.zeros(DType::F32, &[1, 2]).unwrap();
    let x = x1.broadcast_to(&[1 << 36, 2]).unwrap();
    let r = ctx.cross_entropy(&x, &t, CrossEntropyOpts::default());
    assert!(matches!(r, Err(Error::OutOfMemory { .. })), "{:?}", r.err());
    // The targets read back as a vector: refused, not aborted.
    let r = t.to_vec::<i64>();
    assert!(matches!(r, Err(Error::OutOfMemory { .. })), "{r:?}");
    drop((t1, t, x1, x));
}

#[test]
fn with_threads_refuses_absurd_counts() {
    for n in [1usize << 40, usize::MAX, fucina_core::exec::MAX_THREADS + 1] {
        let r = TestCtx::with_threads(n);
        assert!(
            matches!(r, Err(Error::InvalidArgument { .. })),
            "{n}: {r:?}"
        );
    }
    let ctx = TestCtx::with_threads(0).unwrap();
    assert_eq!(ctx.num_threads(), 1);
}

#[test]
fn reshape_whose_element_count_overflows_is_an_error() {
    let ctx = ctx();
    let x = ctx.zeros(DType::F32, &[4]).unwrap();
    for shape in [
        vec![1usize << 62, 1 << 62],
        vec![usize::MAX, 2],
        vec![1 << 32, 1 << 32, 4],
    ] {
        let r = ctx.reshape(&x, &shape);
        assert!(matches!(r, Err(Error::BadView { .. })), "{shape:?}: {r:?}");
        let r = x.reshape(&shape);
        assert!(matches!(r, Err(Error::BadView { .. })), "{shape:?}: {r:?}");
    }
    let r = x.broadcast_to(&[1 << 62, 1 << 62, 4]);
    assert!(r.is_err(), "{r:?}");
    // from_slice with a shape whose product wraps to the data length.
    let r = ctx.from_slice(&[0f32; 4], &[1 << 63, 1 << 63, 4]);
    assert!(r.is_err(), "{r:?}");
    drop(x);
}

#[test]
fn a_view_is_bounded_by_its_tensors_extent_not_the_blocks_capacity() {
    let ctx = ctx();
    let old = ctx.full::<f32>(&[16], 42.0).unwrap();
    let addr = old.buffer().as_ptr();
    drop(old);
    let z = ctx.zeros(DType::F32, &[6]).unwrap();
    // Same block back (LIFO), with capacity 16: the 42s are still in its tail.
    assert_eq!(z.buffer().as_ptr(), addr);
    assert!(z.buffer().capacity_bytes() >= 16 * 4);
    assert_eq!(z.extent(), 6);
    let r = z.view_with_strides(&[4, 4], &[4, 1], 0);
    assert!(matches!(r, Err(Error::BadView { .. })), "{r:?}");
    let r = z.view_with_strides(&[7], &[1], 0);
    assert!(r.is_err(), "{r:?}");
    let r = z.view_with_strides(&[1], &[1], 6);
    assert!(r.is_err(), "{r:?}");
    // The last in-bounds element is fine.
    let v = z.view_with_strides(&[2, 3], &[3, 1], 0).unwrap();
    assert_eq!(v.to_vec::<f32>().unwrap(), vec![0.0; 6]);
    assert_eq!(
        z.view_with_strides(&[1], &[1], 5)
            .unwrap()
            .item::<f32>()
            .unwrap(),
        0.0
    );
    // storage() stops at the extent, for every view of the buffer.
    assert_eq!(z.storage::<f32>().unwrap().len(), 6);
    assert_eq!(v.storage::<f32>().unwrap().len(), 6);
    assert!(z.storage::<f32>().unwrap().iter().all(|&x| x == 0.0));
    // A bit-cast view keeps the extent.
    assert_eq!(z.reinterpret(DType::U32).unwrap().extent(), 6);
    // Rebuilding a tensor over the same buffer is bounded the same way.
    let r = fucina_core::RawTensor::from_buffer(z.buffer().clone(), DType::F32, &[16]);
    assert!(r.is_err(), "{r:?}");
    drop((z, v));
}

#[test]
fn views_with_extreme_strides_stay_in_bounds() {
    let ctx = ctx();
    let x = ctx.zeros(DType::F32, &[6]).unwrap();
    // A size-1 axis may carry any stride; reshaping or unsqueezing it must not wrap.
    let v = x.view_with_strides(&[1, 6], &[usize::MAX, 1], 0).unwrap();
    if let Ok(r) = v.reshape(&[6]) {
        assert_eq!(r.to_vec::<f32>().unwrap(), vec![0.0; 6]);
    }
    let u = v.unsqueeze(0).unwrap();
    assert_eq!(u.shape(), &[1, 1, 6]);
    assert_eq!(u.to_vec::<f32>().unwrap(), vec![0.0; 6]);
    let r = x.view_with_strides(&[2, 2], &[usize::MAX, 1], 0);
    assert!(r.is_err(), "{r:?}");
    let r = x.view_with_strides(&[2], &[1], usize::MAX);
    assert!(r.is_err(), "{r:?}");
    drop((x, v, u));
}

#[test]
fn the_memory_limit_bounds_cache_hits_too() {
    let ctx = ctx();
    // Fill the cache with a block, then set the limit to what is live now.
    let a = ctx.zeros(DType::F32, &[1 << 16]).unwrap();
    let b = ctx.zeros(DType::F32, &[1 << 16]).unwrap();
    drop(b);
    let s = ctx.stats();
    assert_eq!(s.cached_buffers, 1);
    ctx.pool().set_memory_limit(Some(s.live_bytes));
    // Setting the limit evicted what no longer fits next to the live bytes.
    assert_eq!(ctx.stats().cached_bytes, 0);
    let r = ctx.zeros(DType::F32, &[1 << 16]);
    assert!(matches!(r, Err(Error::OutOfMemory { .. })), "{r:?}");
    // Live bytes cannot grow through the cache either: with room for one
    // block beside the live ones, a second same-size request fails.
    ctx.pool().set_memory_limit(None);
    let b = ctx.zeros(DType::F32, &[1 << 16]).unwrap();
    drop(b);
    assert_eq!(ctx.stats().cached_buffers, 1);
    ctx.pool().set_memory_limit(Some(s.live_bytes + (1 << 18)));
    assert_eq!(ctx.stats().cached_buffers, 1);
    let hit = ctx.zeros(DType::F32, &[1 << 16]).unwrap();
    assert_eq!(ctx.stats().hits, 1);
    let r = ctx.zeros(DType::F32, &[1 << 16]);
    assert!(matches!(r, Err(Error::OutOfMemory { .. })), "{r:?}");
    assert!(ctx.stats().live_bytes <= s.live_bytes + (1 << 18));
    ctx.pool().set_memory_limit(None);
    drop((a, hit));
}

#[test]
fn empty_tensors_with_huge_extents_are_handled() {
    // Found by the fuzz soak: a [0, 1 << 62, 1] tensor made the softmax
    // reference allocate a row of 1 << 62 indices (capacity overflow panic).
    use fucina_core::kernels::fused::softmax;
    let ctx = ctx();
    let x = ctx.zeros(DType::F32, &[0]).unwrap();
    let v = ctx
        .reshape(&x, &[0, 1 << 62])
        .unwrap()
        .unsqueeze(2)
        .unwrap();
    assert_eq!(v.numel(), 0);
    let y = ctx.softmax(&v, 1).unwrap();
    assert_eq!(y.shape(), &[0, 1 << 62, 1]);
    assert!(softmax::reference::softmax::<f32>(&[], v.shape(), 1).is_empty());
    assert!(softmax::reference::log_softmax::<f32>(&[], v.shape(), 1).is_empty());
    drop((x, v, y));
}

#[test]
fn a_matmul_of_many_empty_matrices_lists_none_of_them() {
    // Found by the full op soak: a batched matmul whose output had 2^62
    // batch items of [0, n] collected one view per item (capacity overflow
    // panic, then an abort on the 5e18-byte allocation).
    let ctx = ctx();
    let x = ctx.zeros(DType::F32, &[0]).unwrap();
    let a = ctx.reshape(&x, &[1 << 62, 0, 3]).unwrap();
    let b = ctx.zeros(DType::F32, &[3, 2]).unwrap();
    let c = ctx.matmul(&a, &b).unwrap();
    assert_eq!(c.shape(), &[1 << 62, 0, 2]);
    // The scalar reference too returns at once (it looped over 2^62 items).
    let r = fucina_core::kernels::matmul::reference::matmul::<f32>(&ctx, &a, &b).unwrap();
    assert_eq!(r.shape(), &[1 << 62, 0, 2]);
    let a = ctx.zeros(DType::F32, &[4, 0]).unwrap();
    let b = ctx.reshape(&x, &[1 << 62, 0, 5]).unwrap();
    // K = 0 but a non-empty [2^62, 4, 5] output: too large, a clean error.
    let e = ctx.matmul(&a, &b).unwrap_err().to_string();
    assert!(e.contains("more elements than usize can count"), "{e}");
    drop((x, a, b, c));
}

#[test]
fn narrowing_an_empty_tensor_keeps_the_view_inside_its_extent() {
    // Found by the fuzz soak: narrowing axis 1 of a [0, 2] tensor moved the
    // offset past the (empty) extent.
    let ctx = ctx();
    let x = ctx.zeros(DType::F32, &[0, 5]).unwrap();
    let v = x.narrow(1, 4, 1).unwrap();
    assert_eq!(v.shape(), &[0, 1]);
    assert!(v.offset() <= v.extent(), "{v:?} extent {}", v.extent());
    assert_eq!(v.to_vec::<f32>().unwrap(), Vec::<f32>::new());
    let s = x.select(1, 3).unwrap();
    assert!(s.offset() <= s.extent());
    drop((x, v, s));
}

#[test]
fn error_messages_print_the_values_and_ops_the_caller_used() {
    let ctx = ctx();
    let x = ctx.zeros(DType::F32, &[2, 3]).unwrap();
    // A usize::MAX start prints usize::MAX (and start + len exactly), not i64::MAX.
    let e = x.narrow(1, usize::MAX, 1).unwrap_err().to_string();
    assert!(e.contains("18446744073709551616"), "{e}");
    assert!(!e.contains(&i64::MAX.to_string()), "{e}");
    let e = x.narrow(usize::MAX, 0, 1).unwrap_err().to_string();
    assert!(
        e.contains(&usize::MAX.to_string()) && !e.contains("-1"),
        "{e}"
    );
    // select names itself and the index.
    let e = x.select(1, 3).unwrap_err();
    assert!(
        matches!(
            e,
            Error::OutOfRange {
                op: "select",
                what: "index",
                index: 3,
                bound: 3,
                ..
            }
        ),
        "{e:?}"
    );
    let e = x.select(5, 0).unwrap_err().to_string();
    assert!(e.starts_with("select:") && !e.contains("narrow"), "{e}");
    let e = x.select(1, usize::MAX).unwrap_err().to_string();
    assert!(e.contains(&usize::MAX.to_string()), "{e}");
    // An allocation failure with no limit set names no limit of 0 bytes.
    let e = Error::OutOfMemory {
        requested_bytes: 1 << 40,
        live_bytes: 0,
        limit_bytes: 0,
    }
    .to_string();
    assert!(!e.contains("limit of 0"), "{e}");
    assert!(e.contains("no memory limit"), "{e}");
    let e = fucina_core::tensor::try_vec_with_capacity::<u64>(usize::MAX / 4)
        .unwrap_err()
        .to_string();
    assert!(e.contains("no memory limit"), "{e}");
    // With a limit set the limit is named.
    ctx.pool().set_memory_limit(Some(4096));
    let e = ctx.zeros(DType::F32, &[1 << 20]).unwrap_err().to_string();
    ctx.pool().set_memory_limit(None);
    assert!(e.contains("exceeds the limit of 4096 bytes"), "{e}");
}
