//! Rotary position embedding: the kernel and its backward vs the scalar
//! reference at awkward head dims and lengths, on permuted, narrowed and
//! reversed views of x, broadcast and I32 positions; the backward as the
//! rotation's transpose; thread-count determinism; validation errors.

#[macro_use]
mod common;

use common::{make, randn, tensor, tensor_bits, vals, Layout};
use fucina_core::kernels::fused::rope::reference as r;
use fucina_core::testing::TestCtx;
use fucina_core::{DType, Error, ExecContext, Float, RawTensor};

/// HF's default tables `[p, d/2]` for theta 10000, in f64.
fn tables(p: usize, d: usize) -> (Vec<f64>, Vec<f64>) {
    let half = d / 2;
    let (mut c, mut s) = (Vec::new(), Vec::new());
    for pos in 0..p {
        for i in 0..half {
            let inv = 1.0 / 10000f64.powf((2 * i) as f64 / d as f64);
            let a = pos as f64 * inv;
            c.push(a.cos());
            s.push(a.sin());
        }
    }
    (c, s)
}

/// Positions `[b, t]`, not an arange: each batch starts at a different offset
/// and repeats some entries (left padding), all in `0..p`.
fn positions(b: usize, t: usize, p: usize) -> Vec<i64> {
    (0..b * t)
        .map(|i| {
            let (bb, tt) = (i / t, i % t);
            ((tt.saturating_sub(bb) * 3 + bb) % p) as i64
        })
        .collect()
}

/// Forward on view `x` and backward on the upstream `gy` (`[x, gy]`), with the tables
/// `[cos, sin]` at positions `pos` (logical values `posv`), against the reference, bitwise.
fn check<T: Float>(
    ctx: &ExecContext,
    [x, gy]: [&RawTensor; 2],
    [cos, sin]: [&RawTensor; 2],
    (pos, posv): (&RawTensor, &[i64]),
    what: &str,
) {
    let s = x.shape();
    let shape = [s[0], s[1], s[2], s[3]];
    let (cv, sv) = (vals::<T>(cos), vals::<T>(sin));
    let y = ctx.rope(x, cos, sin, pos).unwrap();
    assert!(y.is_contiguous(), "{what}: output contiguous");
    assert_eq!(y.shape(), x.shape(), "{what}: output shape");
    let want = r::rope(&vals::<T>(x), shape, &cv, &sv, posv);
    assert_eq!(
        tensor_bits::<T>(&y),
        common::bits(&want),
        "{what}: forward vs reference"
    );
    let gx = ctx.rope_backward(gy, cos, sin, pos).unwrap();
    assert!(gx.is_contiguous(), "{what}: gx contiguous");
    let want = r::rope_backward(&vals::<T>(gy), shape, &cv, &sv, posv);
    assert_eq!(
        tensor_bits::<T>(&gx),
        common::bits(&want),
        "{what}: backward vs reference"
    );
}

fn sizes_and_views<T: Float>() {
    let ctx = TestCtx::with_threads(2).unwrap();
    let (b, h) = (2, 3);
    for (k, &d) in [2usize, 6, 16, 34, 130].iter().enumerate() {
        for &t in &[1usize, 3, 17] {
            let p = t + 5;
            let (cv, sv) = tables(p, d);
            let cos = tensor::<T>(&ctx, &cv, &[p, d / 2]);
            let sin = tensor::<T>(&ctx, &sv, &[p, d / 2]);
            let posv = positions(b, t, p);
            let pos = ctx.from_slice(&posv, &[b, t]).unwrap();
            let n = b * t * h * d;
            let xv = randn(10 * k as u64 + t as u64, n, 1.0);
            let gv = randn(1000 + 10 * k as u64 + t as u64, n, 1.0);
            let shape = [b, t, h, d];
            let tag = format!("[{b}, {t}, {h}, {d}]");
            // `check` with this size's tables.
            let check_at =
                |x: &RawTensor, gy: &RawTensor, pos: &RawTensor, posv: &[i64], what: &str| {
                    check::<T>(&ctx, [x, gy], [&cos, &sin], (pos, posv), what)
                };
            for layout in [Layout::Contig, Layout::Reversed, Layout::Narrowed] {
                let x = make::<T>(&ctx, &xv, &shape, layout);
                let gy = make::<T>(&ctx, &gv, &shape, layout);
                check_at(&x, &gy, &pos, &posv, &format!("{tag} {layout:?}"));
            }
            // A permuted view: x stored as [B, H, T, D] (HF's layout), seen as [B, T, H, D].
            let bhtd = tensor::<T>(&ctx, &xv, &[b, h, t, d]);
            let xp = bhtd.permute(&[0, 2, 1, 3]).unwrap();
            let gy = tensor::<T>(&ctx, &gv, &shape);
            check_at(&xp, &gy, &pos, &posv, &format!("{tag} permuted"));
            // Broadcast [1, T] positions, and the same positions as I32.
            let row: Vec<i64> = positions(1, t, p);
            let bpos = ctx
                .from_slice(&row, &[1, t])
                .unwrap()
                .broadcast_to(&[b, t])
                .unwrap();
            let bposv: Vec<i64> = (0..b).flat_map(|_| row.iter().copied()).collect();
            let x = tensor::<T>(&ctx, &xv, &shape);
            check_at(
                &x,
                &gy,
                &bpos,
                &bposv,
                &format!("{tag} broadcast positions"),
            );
            let pos32: Vec<i32> = posv.iter().map(|&v| v as i32).collect();
            let pos32 = ctx.from_slice(&pos32, &[b, t]).unwrap();
            check_at(&x, &gy, &pos32, &posv, &format!("{tag} i32 positions"));
        }
    }
}

f32_f64_tests!(sizes_and_views => matches_reference_f32, matches_reference_f64);

/// A quarter turn by hand: `(1, 0) → (0, 1)` and `(0, 1) → (−1, 0)` per pair.
#[test]
fn quarter_turn_by_hand() {
    let ctx = TestCtx::with_threads(1).unwrap();
    // D = 4: pairs (x0, x2) and (x1, x3); pair 0 turns by π/2, pair 1 by 0.
    let x = ctx
        .from_slice(&[1.0f64, 2.0, 3.0, 4.0], &[1, 1, 1, 4])
        .unwrap();
    let cos = ctx.from_slice(&[0.0f64, 1.0], &[1, 2]).unwrap();
    let sin = ctx.from_slice(&[1.0f64, 0.0], &[1, 2]).unwrap();
    let pos = ctx.from_slice(&[0i64], &[1, 1]).unwrap();
    let y = ctx.rope(&x, &cos, &sin, &pos).unwrap();
    // y0 = x0·0 − x2·1 = −3, y2 = x2·0 + x0·1 = 1; pair 1 unchanged.
    assert_eq!(y.to_vec::<f64>().unwrap(), vec![-3.0, 2.0, 1.0, 4.0]);
    let gx = ctx.rope_backward(&y, &cos, &sin, &pos).unwrap();
    assert_eq!(gx.to_vec::<f64>().unwrap(), vec![1.0, 2.0, 3.0, 4.0]);
}

/// The backward is the forward's transpose: ⟨rope(x), g⟩ = ⟨x, rope_backward(g)⟩,
/// and (a rotation) it inverts the forward.
#[test]
fn backward_is_the_transpose() {
    let ctx = TestCtx::with_threads(1).unwrap();
    let (b, t, h, d, p) = (2, 7, 2, 10, 9);
    let (cv, sv) = tables(p, d);
    let cos = ctx.from_slice(&cv, &[p, d / 2]).unwrap();
    let sin = ctx.from_slice(&sv, &[p, d / 2]).unwrap();
    let pos = ctx.from_slice(&positions(b, t, p), &[b, t]).unwrap();
    let n = b * t * h * d;
    let (xv, gv) = (randn(1, n, 1.0), randn(2, n, 1.0));
    let x = ctx.from_slice(&xv, &[b, t, h, d]).unwrap();
    let g = ctx.from_slice(&gv, &[b, t, h, d]).unwrap();
    let y = ctx
        .rope(&x, &cos, &sin, &pos)
        .unwrap()
        .to_vec::<f64>()
        .unwrap();
    let gx = ctx
        .rope_backward(&g, &cos, &sin, &pos)
        .unwrap()
        .to_vec::<f64>()
        .unwrap();
    let lhs: f64 = y.iter().zip(&gv).map(|(a, b)| a * b).sum();
    let rhs: f64 = xv.iter().zip(&gx).map(|(a, b)| a * b).sum();
    assert!(
        (lhs - rhs).abs() < 1e-12 * lhs.abs().max(1.0),
        "{lhs} vs {rhs}"
    );
    let yt = ctx.from_slice(&y, &[b, t, h, d]).unwrap();
    let back = ctx.rope_backward(&yt, &cos, &sin, &pos).unwrap();
    for (a, w) in back.to_vec::<f64>().unwrap().iter().zip(&xv) {
        assert!((a - w).abs() < 1e-12, "inverse: {a} vs {w}");
    }
}

fn run_threads<T: Float>(threads: usize) -> (Vec<u64>, Vec<u64>) {
    let ctx = TestCtx::with_threads(threads).unwrap();
    // 2·64·4·130 = 66 560 elements: parallel, several chunks.
    let (b, t, h, d, p) = (2, 64, 4, 130, 80);
    let (cv, sv) = tables(p, d);
    let cos = tensor::<T>(&ctx, &cv, &[p, d / 2]);
    let sin = tensor::<T>(&ctx, &sv, &[p, d / 2]);
    let pos = ctx.from_slice(&positions(b, t, p), &[b, t]).unwrap();
    let n = b * t * h * d;
    let x = tensor::<T>(&ctx, &randn(5, n, 1.0), &[b, h, t, d])
        .permute(&[0, 2, 1, 3])
        .unwrap();
    let y = ctx.rope(&x, &cos, &sin, &pos).unwrap();
    let gx = ctx.rope_backward(&x, &cos, &sin, &pos).unwrap();
    (tensor_bits::<T>(&y), tensor_bits::<T>(&gx))
}

#[test]
fn bitwise_identical_for_any_thread_count() {
    assert_eq!(run_threads::<f32>(1), run_threads::<f32>(2));
    assert_eq!(run_threads::<f64>(1), run_threads::<f64>(2));
    assert_eq!(run_threads::<f64>(1), run_threads::<f64>(3));
}

#[test]
fn bad_inputs_are_errors_naming_the_op() {
    let ctx = TestCtx::with_threads(1).unwrap();
    let x = ctx.zeros(DType::F32, &[2, 3, 1, 4]).unwrap();
    let cos = ctx.zeros(DType::F32, &[5, 2]).unwrap();
    let sin = ctx.zeros(DType::F32, &[5, 2]).unwrap();
    let pos = ctx.zeros(DType::I64, &[2, 3]).unwrap();
    assert!(ctx.rope(&x, &cos, &sin, &pos).is_ok());
    // (error kind, op) of a failing call.
    let kind_op = |e: Error| match e {
        Error::InvalidArgument { op, .. } => ("InvalidArgument", op),
        Error::ShapeMismatch { op, .. } => ("ShapeMismatch", op),
        Error::DTypeMismatch { op, .. } => ("DTypeMismatch", op),
        Error::UnsupportedDType { op, .. } => ("UnsupportedDType", op),
        Error::OutOfRange { op, .. } => ("OutOfRange", op),
        other => panic!("unexpected error {other:?}"),
    };
    let rope_err = |x: &RawTensor, c: &RawTensor, s: &RawTensor, p: &RawTensor| {
        kind_op(ctx.rope(x, c, s, p).unwrap_err())
    };
    // Only the op, where any of the structured kinds will do.
    let rope = |x: &RawTensor, c: &RawTensor, s: &RawTensor, p: &RawTensor| rope_err(x, c, s, p).1;
    let rope_bwd = |x: &RawTensor, c: &RawTensor, s: &RawTensor, p: &RawTensor| {
        kind_op(ctx.rope_backward(x, c, s, p).unwrap_err()).1
    };
    // Rank 3 x, odd D, an integer or f16 x.
    let x3 = ctx.zeros(DType::F32, &[2, 3, 4]).unwrap();
    assert_eq!(rope(&x3, &cos, &sin, &pos), "rope");
    assert_eq!(rope_bwd(&x3, &cos, &sin, &pos), "rope_backward");
    let odd = ctx.zeros(DType::F32, &[2, 3, 1, 5]).unwrap();
    assert_eq!(rope(&odd, &cos, &sin, &pos), "rope");
    let xi = ctx.zeros(DType::I64, &[2, 3, 1, 4]).unwrap();
    assert_eq!(
        rope_err(&xi, &cos, &sin, &pos),
        ("UnsupportedDType", "rope")
    );
    let xh = ctx.zeros(DType::F16, &[2, 3, 1, 4]).unwrap();
    assert_eq!(
        rope_err(&xh, &cos, &sin, &pos),
        ("UnsupportedDType", "rope")
    );
    // Tables: wrong width, wrong rank, wrong dtype, cos and sin disagreeing.
    let wide = ctx.zeros(DType::F32, &[5, 4]).unwrap();
    assert_eq!(rope(&x, &wide, &sin, &pos), "rope");
    assert_eq!(rope(&x, &cos, &wide, &pos), "rope");
    let flat = ctx.zeros(DType::F32, &[10]).unwrap();
    assert_eq!(rope(&x, &flat, &sin, &pos), "rope");
    let c64 = ctx.zeros(DType::F64, &[5, 2]).unwrap();
    assert_eq!(rope_err(&x, &c64, &sin, &pos), ("DTypeMismatch", "rope"));
    let short = ctx.zeros(DType::F32, &[4, 2]).unwrap();
    assert_eq!(rope_err(&x, &cos, &short, &pos), ("ShapeMismatch", "rope"));
    // Positions: wrong shape, float dtype, out of range, negative.
    let pos_bad = ctx.zeros(DType::I64, &[3, 2]).unwrap();
    assert_eq!(
        rope_err(&x, &cos, &sin, &pos_bad),
        ("ShapeMismatch", "rope")
    );
    let pos_f = ctx.zeros(DType::F32, &[2, 3]).unwrap();
    assert_eq!(
        rope_err(&x, &cos, &sin, &pos_f),
        ("UnsupportedDType", "rope")
    );
    let far = ctx.from_slice(&[0i64, 1, 2, 3, 4, 5], &[2, 3]).unwrap();
    assert!(matches!(
        ctx.rope(&x, &cos, &sin, &far),
        Err(Error::OutOfRange {
            op: "rope",
            index: 5,
            bound: 5,
            ..
        })
    ));
    assert!(matches!(
        ctx.rope_backward(&x, &cos, &sin, &far),
        Err(Error::OutOfRange {
            op: "rope_backward",
            ..
        })
    ));
    let neg = ctx.from_slice(&[0i32, 1, -1, 3, 4, 0], &[2, 3]).unwrap();
    assert!(matches!(
        ctx.rope(&x, &cos, &sin, &neg),
        Err(Error::OutOfRange {
            op: "rope",
            index: -1,
            ..
        })
    ));
    let msg = ctx.rope(&x, &cos, &sin, &far).unwrap_err().to_string();
    assert!(msg.starts_with("rope:"), "{msg}");
}

/// Zero-sized batch or sequence axes give empty outputs, not errors.
#[test]
fn empty_axes() {
    let ctx = TestCtx::with_threads(2).unwrap();
    let cos = ctx.zeros(DType::F64, &[3, 2]).unwrap();
    let sin = ctx.zeros(DType::F64, &[3, 2]).unwrap();
    let x = ctx.zeros(DType::F64, &[2, 0, 3, 4]).unwrap();
    let pos = ctx.zeros(DType::I64, &[2, 0]).unwrap();
    assert_eq!(
        ctx.rope(&x, &cos, &sin, &pos).unwrap().shape(),
        &[2, 0, 3, 4]
    );
    let x = ctx.zeros(DType::F64, &[1, 2, 0, 4]).unwrap();
    let pos = ctx.zeros(DType::I64, &[1, 2]).unwrap();
    let gx = ctx.rope_backward(&x, &cos, &sin, &pos).unwrap();
    assert_eq!(gx.shape(), &[1, 2, 0, 4]);
}
