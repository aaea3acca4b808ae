//! Every view op on non-contiguous inputs, checked element by element against
//! hand-written index math over the original data, plus the structured error
//! of each invalid call. Views never allocate: each test counts buffers, and
//! ends with nothing outstanding.

#[macro_use]
mod common;
use common::one_and_two_threads;
use fucina_core::testing::TestCtx;
use fucina_core::{bf16, f16, DType, Element, Error, ExecContext, RawTensor};

fn ctx() -> TestCtx {
    TestCtx::with_threads(1).expect("context")
}

/// Value of the base data at linear index `i`: distinct, and exact in every
/// dtype used here (integers; bf16 holds them exactly below 256).
fn val(i: usize) -> f64 {
    i as f64 - 7.0
}

/// A contiguous base tensor of `shape` holding `val(0..)` in dtype `T`.
fn base<T: Element>(ctx: &ExecContext, shape: &[usize]) -> RawTensor {
    let n: usize = shape.iter().product();
    let data: Vec<T> = (0..n).map(|i| T::from_f64(val(i))).collect();
    ctx.from_slice(&data, shape).unwrap()
}

/// Checks every element of `t` (shape `shape`) against `want(multi_index)`,
/// reading it twice: through `to_vec` (logical order) and through the raw
/// storage with `offset + sum(index * stride)`.
fn check<T: Element>(t: &RawTensor, shape: &[usize], want: impl Fn(&[usize]) -> f64) {
    assert_eq!(t.shape(), shape, "shape");
    let got = t.to_vec::<T>().unwrap();
    let n: usize = shape.iter().product();
    assert_eq!(got.len(), n);
    let storage = t.storage::<T>().unwrap();
    let mut idx = vec![0usize; shape.len()];
    for (k, g) in got.iter().enumerate() {
        // The multi-index of logical element k, row-major.
        let mut rem = k;
        for d in (0..shape.len()).rev() {
            idx[d] = rem % shape[d];
            rem /= shape[d];
        }
        let w = want(&idx);
        assert_eq!(g.to_f64(), w, "element {idx:?} via to_vec");
        let off = t.offset()
            + idx
                .iter()
                .zip(t.strides())
                .map(|(i, s)| i * s)
                .sum::<usize>();
        assert_eq!(storage[off].to_f64(), w, "element {idx:?} via strides");
    }
}

/// A [4, 5, 6] base permuted to [6, 4, 5]: element (a, b, c) = base(b, c, a).
fn permuted<T: Element>(ctx: &ExecContext) -> RawTensor {
    let t = base::<T>(ctx, &[4, 5, 6]).permute(&[2, 0, 1]).unwrap();
    assert!(!t.is_contiguous());
    t
}
fn permuted_at(a: usize, b: usize, c: usize) -> f64 {
    val(b * 30 + c * 6 + a)
}

fn views_in<T: Element>() {
    let ctx = ctx();
    let p = permuted::<T>(&ctx);
    check::<T>(&p, &[6, 4, 5], |i| permuted_at(i[0], i[1], i[2]));

    // clone_view: same buffer, same values, one more reference.
    let c = p.clone_view();
    assert!(c.buffer().same_as(p.buffer()));
    assert_eq!(p.buffer().ref_count(), 2);
    check::<T>(&c, &[6, 4, 5], |i| permuted_at(i[0], i[1], i[2]));
    drop(c);

    // narrow on a permuted view: axis 1 rows 1..4, then axis 2 cols 2..4.
    let nr = p.narrow(1, 1, 3).unwrap().narrow(2, 2, 2).unwrap();
    check::<T>(&nr, &[6, 3, 2], |i| permuted_at(i[0], i[1] + 1, i[2] + 2));
    let empty = p.narrow(0, 6, 0).unwrap();
    assert_eq!(empty.numel(), 0);
    assert!(empty.to_vec::<T>().unwrap().is_empty());

    // select removes the axis.
    let s = p.select(2, 3).unwrap();
    check::<T>(&s, &[6, 4], |i| permuted_at(i[0], i[1], 3));
    let s0 = nr.select(0, 5).unwrap();
    check::<T>(&s0, &[3, 2], |i| permuted_at(5, i[0] + 1, i[1] + 2));

    // permute of a narrowed (non-contiguous) view.
    let pn = nr.permute(&[2, 0, 1]).unwrap();
    check::<T>(&pn, &[2, 6, 3], |i| permuted_at(i[1], i[2] + 1, i[0] + 2));

    // transpose of a narrowed view, and transpose(a, a) is the identity.
    let tr = nr.transpose(0, 2).unwrap();
    check::<T>(&tr, &[2, 3, 6], |i| permuted_at(i[2], i[1] + 1, i[0] + 2));
    let same = nr.transpose(1, 1).unwrap();
    check::<T>(&same, &[6, 3, 2], |i| permuted_at(i[0], i[1] + 1, i[2] + 2));

    // unsqueeze at every position, then squeeze back.
    for ax in 0..=3 {
        let u = nr.unsqueeze(ax).unwrap();
        let mut shape = vec![6, 3, 2];
        shape.insert(ax, 1);
        check::<T>(&u, &shape, |i| {
            let mut j = i.to_vec();
            j.remove(ax);
            permuted_at(j[0], j[1] + 1, j[2] + 2)
        });
        let back = u.squeeze(ax).unwrap();
        check::<T>(&back, &[6, 3, 2], |i| permuted_at(i[0], i[1] + 1, i[2] + 2));
    }
    let one = p.narrow(1, 2, 1).unwrap(); // [6, 1, 5]
    let sq = one.squeeze(1).unwrap();
    check::<T>(&sq, &[6, 5], |i| permuted_at(i[0], 2, i[1]));

    // broadcast_to of a non-contiguous view: new leading axis, size-1 axis expanded.
    let b = one.broadcast_to(&[2, 6, 3, 5]).unwrap();
    check::<T>(&b, &[2, 6, 3, 5], |i| permuted_at(i[1], 2, i[3]));
    assert_eq!(b.strides()[0], 0);
    assert_eq!(b.strides()[2], 0);
    let b2 = sq.unsqueeze(2).unwrap().broadcast_to(&[6, 5, 4]).unwrap();
    check::<T>(&b2, &[6, 5, 4], |i| permuted_at(i[0], 2, i[1]));

    // reshape views of a non-contiguous tensor where the strides allow it:
    // split axis 0 (6 = 2 x 3) of the permuted view, and merge its last two
    // axes (contiguous among themselves: stride 30 and 6 do not merge, but
    // 4 x 5 of base axes (0, 1) with strides (30, 6) do: 30 = 5 * 6).
    let r = p.reshape(&[2, 3, 4, 5]).unwrap();
    assert!(r.buffer().same_as(p.buffer()));
    check::<T>(&r, &[2, 3, 4, 5], |i| {
        permuted_at(i[0] * 3 + i[1], i[2], i[3])
    });
    let m = p.reshape(&[6, 20]).unwrap();
    check::<T>(&m, &[6, 20], |i| permuted_at(i[0], i[1] / 5, i[1] % 5));
    let m1 = p.reshape(&[6, 1, 20, 1]).unwrap();
    check::<T>(&m1, &[6, 1, 20, 1], |i| {
        permuted_at(i[0], i[2] / 5, i[2] % 5)
    });
    // reshape of a narrowed view: rows of 6 columns, 4 kept, split 4 = 2 x 2.
    let base2 = base::<T>(&ctx, &[5, 6]);
    let n2 = base2.narrow(1, 1, 4).unwrap();
    let r2 = n2.reshape(&[5, 2, 2]).unwrap();
    check::<T>(&r2, &[5, 2, 2], |i| val(i[0] * 6 + 1 + i[1] * 2 + i[2]));

    // view_with_strides over the raw buffer: any in-bounds layout.
    let v = base2.view_with_strides(&[3, 4], &[1, 7], 2).unwrap();
    check::<T>(&v, &[3, 4], |i| val(2 + i[0] + 7 * i[1]));
    let v0 = base2.view_with_strides(&[4, 3], &[0, 2], 5).unwrap();
    check::<T>(&v0, &[4, 3], |i| val(5 + 2 * i[1]));

    // ctx.contiguous: a copy for non-contiguous input, a view otherwise.
    let cp = ctx.contiguous(&pn).unwrap();
    assert!(cp.is_contiguous() && !cp.buffer().same_as(pn.buffer()));
    check::<T>(&cp, &[2, 6, 3], |i| permuted_at(i[1], i[2] + 1, i[0] + 2));
    let cb = ctx.contiguous(&b).unwrap();
    check::<T>(&cb, &[2, 6, 3, 5], |i| permuted_at(i[1], 2, i[3]));
    let cv = ctx.contiguous(&base2).unwrap();
    assert!(cv.buffer().same_as(base2.buffer()));

    // ctx.reshape: a view when possible, a copy when the strides forbid it.
    let flat = ctx.reshape(&p, &[120]).unwrap();
    assert!(!flat.buffer().same_as(p.buffer()));
    check::<T>(&flat, &[120], |i| {
        let (a, b, c) = (i[0] / 20, (i[0] / 5) % 4, i[0] % 5);
        permuted_at(a, b, c)
    });
    let tr2 = ctx.reshape(&tr, &[3, 2, 2, 3]).unwrap();
    check::<T>(&tr2, &[3, 2, 2, 3], |i| {
        let k = ((i[0] * 2 + i[1]) * 2 + i[2]) * 3 + i[3];
        let (x, y, z) = (k / 18, (k / 6) % 3, k % 6);
        permuted_at(z, y + 1, x + 2)
    });
    let rv = ctx.reshape(&p, &[3, 2, 20]).unwrap();
    assert!(rv.buffer().same_as(p.buffer()));
    check::<T>(&rv, &[3, 2, 20], |i| {
        permuted_at(i[0] * 2 + i[1], i[2] / 5, i[2] % 5)
    });

    // Buffers: base, base2, and the copies cp, cb, flat, tr2.
    assert_eq!(ctx.stats().outstanding, 6);
    drop((p, nr, empty, s, s0, pn, tr, same, one, sq, b, b2, r, m, m1));
    drop((base2, n2, r2, v, v0, cp, cb, cv, flat, tr2, rv));
}

f32_f64_tests!(views_in => views_f32, views_f64);

#[test]
fn views_f16_bf16_i64_i32() {
    // Views and copies are dtype-agnostic (copies move bytes by width).
    views_in::<f16>();
    views_in::<bf16>();
    views_in::<i64>();
    views_in::<i32>();
}

#[test]
fn views_u8() {
    // u8 cannot hold the negative base values; use a small positive pattern.
    let ctx = ctx();
    let data: Vec<u8> = (0..60).map(|i| (i * 3 % 251) as u8).collect();
    let t = ctx.from_slice(&data, &[3, 4, 5]).unwrap();
    let v = t.permute(&[2, 0, 1]).unwrap().narrow(0, 1, 3).unwrap();
    let c = ctx.contiguous(&v).unwrap();
    check::<u8>(&c, &[3, 3, 4], |i| {
        data[i[1] * 20 + i[2] * 5 + i[0] + 1] as f64
    });
    drop((t, v, c));
}

#[test]
fn large_transposed_copy_matches_reference_and_is_thread_independent() {
    // Above the copy kernel's parallel threshold (65 536 elements).
    let (c1, c2) = one_and_two_threads();
    let (r, c) = (300, 257);
    let a1 = base::<f32>(&c1, &[r, c]);
    let a2 = base::<f32>(&c2, &[r, c]);
    let t1 = c1.contiguous(&a1.transpose(0, 1).unwrap()).unwrap();
    let t2 = c2.contiguous(&a2.transpose(0, 1).unwrap()).unwrap();
    check::<f32>(&t1, &[c, r], |i| val(i[1] * c + i[0]));
    let f32_bits = |t: &RawTensor| -> Vec<u32> {
        t.as_slice::<f32>()
            .unwrap()
            .iter()
            .map(|v| v.to_bits())
            .collect()
    };
    assert_eq!(f32_bits(&t1), f32_bits(&t2));
    drop((a1, a2, t1, t2));
}

/// The `(op, what, index, bound, shape)` of the [`Error::OutOfRange`] that `r` must be.
fn out_of_range<T>(r: Result<T, Error>) -> (&'static str, &'static str, i64, usize, Vec<usize>) {
    match r.err() {
        Some(Error::OutOfRange {
            op,
            what,
            index,
            bound,
            shape,
        }) => (op, what, index, bound, shape),
        other => panic!("expected OutOfRange, got {other:?}"),
    }
}

#[test]
fn view_errors_are_structured() {
    let ctx = ctx();
    let t = base::<f32>(&ctx, &[4, 5, 6]).transpose(0, 2).unwrap(); // [6, 5, 4]

    let shape = vec![6, 5, 4];
    // Bad axes.
    let oor = out_of_range(t.narrow(3, 0, 1));
    assert_eq!(oor, ("narrow", "axis", 3, 3, shape.clone()));
    let oor = out_of_range(t.transpose(0, 3));
    assert_eq!(oor, ("transpose", "axis", 3, 3, shape.clone()));
    // select names itself, not the narrow it is made of.
    let oor = out_of_range(t.select(5, 0));
    assert_eq!((oor.0, oor.1), ("select", "axis"));
    let oor = out_of_range(t.unsqueeze(4));
    assert_eq!(oor, ("unsqueeze", "axis", 4, 4, shape.clone()));
    assert!(matches!(
        t.squeeze(3),
        Err(Error::InvalidArgument { op: "squeeze", .. })
    ));
    assert!(matches!(
        t.squeeze(0),
        Err(Error::InvalidArgument { op: "squeeze", .. })
    ));

    // Narrow / select out of range, including start + len overflowing usize.
    let oor = out_of_range(t.narrow(1, 3, 3));
    assert_eq!(oor, ("narrow", "end", 6, 6, shape.clone()));
    assert_eq!(out_of_range(t.narrow(1, 6, 0)).0, "narrow");
    // An end past i64::MAX cannot sit in OutOfRange's i64 field: it is an
    // InvalidArgument with the same text and the exact value.
    let e = t.narrow(1, usize::MAX, 2).unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument { op: "narrow", .. })
            && e.to_string()
                .contains("end 18446744073709551617 out of range"),
        "{e}"
    );
    let oor = out_of_range(t.select(0, 6));
    assert_eq!((oor.0, oor.1, oor.2, oor.3), ("select", "index", 6, 6));

    // Bad permutations: duplicate, wrong length, out of range.
    for perm in [
        &[0, 0, 1][..],
        &[0, 1][..],
        &[0, 1, 3][..],
        &[2, 1, 0, 3][..],
    ] {
        assert!(
            matches!(
                t.permute(perm),
                Err(Error::InvalidArgument { op: "permute", .. })
            ),
            "permute {perm:?}"
        );
    }

    // Impossible reshape views: a transposed tensor cannot be flattened, a
    // wrong element count never reshapes, and an overflowing shape is rejected.
    assert_eq!(
        t.reshape(&[120]).unwrap_err(),
        Error::BadView {
            op: "reshape",
            from: vec![6, 5, 4],
            to: vec![120]
        }
    );
    assert!(matches!(
        t.reshape(&[6, 20]),
        Err(Error::BadView { op: "reshape", .. })
    ));
    assert!(matches!(
        t.reshape(&[7, 20]),
        Err(Error::BadView { op: "reshape", .. })
    ));
    assert!(matches!(
        ctx.reshape(&t, &[121]),
        Err(Error::BadView { op: "reshape", .. })
    ));
    let small = ctx.zeros(DType::F32, &[4]).unwrap();
    let huge = [1usize << 32, 1 << 32, 4];
    assert!(matches!(small.reshape(&huge), Err(Error::BadView { .. })));

    // Broadcast mismatch: a non-1 axis that differs, and a target of lower rank.
    assert_eq!(
        t.broadcast_to(&[6, 5, 3]).unwrap_err(),
        Error::Broadcast {
            op: "broadcast_to",
            lhs: vec![6, 5, 4],
            rhs: vec![6, 5, 3]
        }
    );
    assert!(matches!(
        t.broadcast_to(&[5, 4]),
        Err(Error::Broadcast { .. })
    ));
    assert!(small.broadcast_to(&[1 << 40, 1 << 40, 4]).is_err());

    // view_with_strides out of the buffer, rank mismatch, overflowing strides.
    assert!(matches!(
        t.view_with_strides(&[2, 64], &[64, 1], 1),
        Err(Error::BadView {
            op: "view_with_strides",
            ..
        })
    ));
    assert!(matches!(
        t.view_with_strides(&[2, 3], &[1], 0),
        Err(Error::BadView {
            op: "view_with_strides",
            ..
        })
    ));
    assert!(matches!(
        t.view_with_strides(&[3, 2], &[usize::MAX / 2, 1], 0),
        Err(Error::BadView {
            op: "view_with_strides",
            ..
        })
    ));
    assert!(matches!(
        t.view_with_strides(&[1], &[1], usize::MAX),
        Err(Error::BadView {
            op: "view_with_strides",
            ..
        })
    ));

    // Reading a view with the wrong dtype or as a slice while strided.
    assert!(matches!(
        t.to_vec::<f64>(),
        Err(Error::DTypeMismatch { .. })
    ));
    assert!(matches!(
        t.as_slice::<f32>(),
        Err(Error::NotContiguous { op: "as_slice", .. })
    ));
    // Writing through a shared buffer is refused.
    let mut v = small.clone_view();
    assert!(matches!(
        v.as_mut_slice::<f32>(),
        Err(Error::SharedBuffer { .. })
    ));

    drop((t, small, v));
}
