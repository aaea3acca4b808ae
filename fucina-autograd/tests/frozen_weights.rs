//! Frozen low-precision weights under f32 activations: `linear` and `matmul` with a bf16/f16
//! weight that needs no gradient (dx bitwise the one of the widened weight, no dW, the input
//! not pinned by the node), the clear error for a trainable weight of another dtype, and the
//! embedding lookup of a frozen bf16 table into f32 rows. Every context ends with no buffer
//! outstanding and no graph node alive.

mod common;

use common::{bits, on_one_and_two_threads, uniform_f32};
use fucina_autograd::testing::TestCtx;
use fucina_autograd::{Error, Tensor};
use fucina_core::rng::SplitMix64;
use fucina_core::DType;

/// A frozen `[n, k]` weight as bf16 and as the same values in f32 (both `requires_grad` off).
fn weights(ctx: &TestCtx, rng: &mut SplitMix64, n: usize, k: usize) -> (Tensor, Tensor) {
    let v = uniform_f32(rng, n * k, -1.0, 1.0);
    let w32 = ctx.from_slice(&v, &[n, k]).unwrap();
    let w16 = ctx.to_dtype(&w32, DType::BF16).unwrap();
    let wide = ctx.to_dtype(&w16, DType::F32).unwrap();
    (
        Tensor::from_raw(ctx, w16, false).unwrap(),
        Tensor::from_raw(ctx, wide, false).unwrap(),
    )
}

/// y = x·Wᵀ + b and y = x·W with a frozen bf16 W: forward and the gradients of x and b are
/// bitwise those with the widened f32 W, W gets no gradient, on 1 and 2 threads.
#[test]
fn frozen_bf16_linear_and_matmul_match_the_widened_weight() {
    on_one_and_two_threads(|ctx| {
        let threads = ctx.num_threads();
        let mut rng = SplitMix64::new(3);
        let (b, t, k, n) = (2, 9, 70, 33);
        let xv = uniform_f32(&mut rng, b * t * k, -1.0, 1.0);
        let (w16, w32) = weights(ctx, &mut rng, n, k);
        let bias_v: Vec<f32> = (0..n).map(|i| i as f32 * 0.25 - 2.0).collect();
        let run = |w: &Tensor| {
            let x = Tensor::variable(ctx, &xv, &[b, t, k]).unwrap();
            let bias = Tensor::variable(ctx, &bias_v, &[n]).unwrap();
            let y = x.linear(w, Some(&bias)).unwrap();
            // matmul's right operand: x [b, t, k] @ Wᵀ-shaped [k, n] view of the frozen W.
            let z = x.matmul(&w.transpose(0, 1).unwrap()).unwrap();
            let loss = y.mul(&y).unwrap().sum_all().unwrap();
            let loss = loss.add(&z.sum_all().unwrap()).unwrap();
            loss.backward().unwrap();
            assert!(w.grad().is_none(), "a frozen weight gets no gradient");
            (
                bits(&y),
                bits(&z),
                bits(&x.grad().unwrap()),
                bits(&bias.grad().unwrap()),
            )
        };
        let got = run(&w16);
        let want = run(&w32);
        assert!(got.0 == want.0, "linear forward, {threads} threads");
        assert!(got.1 == want.1, "matmul forward, {threads} threads");
        assert!(got.2 == want.2, "dx, {threads} threads");
        assert!(got.3 == want.3, "db, {threads} threads");
    });
}

/// A linear whose weight is frozen keeps W, not x: the input's buffer is released with the
/// input (its last other handle), while the graph is still alive; a trainable weight keeps
/// x until backward.
#[test]
fn a_frozen_linear_does_not_pin_its_input() {
    let ctx = TestCtx::with_threads(1).unwrap();
    let mut rng = SplitMix64::new(4);
    let (w16, _) = weights(&ctx, &mut rng, 5, 8);
    let a = Tensor::variable(&ctx, &[0.5f32; 24], &[3, 8]).unwrap();
    // h is an intermediate (mul_scalar keeps nothing): only the linear node could pin it.
    let h = a.mul_scalar(2.0).unwrap();
    let hv = h.raw().unwrap();
    let y = h.linear(&w16, None).unwrap();
    drop(h);
    assert!(hv.buffer().is_unique(), "the frozen linear kept its input");
    drop(hv);
    y.sum_all().unwrap().backward().unwrap();
    assert_eq!(a.grad().unwrap().shape(), &[3, 8]);

    let w = Tensor::variable(&ctx, &[0.25f32; 40], &[5, 8]).unwrap();
    let h = a.mul_scalar(2.0).unwrap();
    let hv = h.raw().unwrap();
    let y = h.linear(&w, None).unwrap();
    drop(h);
    assert!(
        !hv.buffer().is_unique(),
        "a trainable linear must keep x for dW"
    );
    drop(hv);
    y.sum_all().unwrap().backward().unwrap();
    assert_eq!(w.grad().unwrap().shape(), &[5, 8]);
}

/// A weight that requires a gradient must have the input's dtype: an f64 trainable weight
/// under f32 x is `TrainableDTypeMismatch` naming the op and both dtypes (linear, matmul).
#[test]
fn a_trainable_weight_of_another_dtype_is_a_clear_error() {
    let ctx = TestCtx::with_threads(1).unwrap();
    let x = Tensor::variable(&ctx, &[1.0f32; 6], &[2, 3]).unwrap();
    let w = Tensor::variable(&ctx, &[1.0f64; 12], &[4, 3]).unwrap();
    let e = x.linear(&w, None).unwrap_err();
    assert!(
        matches!(
            e,
            Error::TrainableDTypeMismatch {
                op: "linear",
                input: DType::F32,
                weight: DType::F64,
                ..
            }
        ),
        "{e}"
    );
    let msg = e.to_string();
    assert!(
        msg.contains("linear") && msg.contains("f64") && msg.contains("f32"),
        "{msg}"
    );
    let e = x.matmul(&w.transpose(0, 1).unwrap()).unwrap_err();
    assert!(
        matches!(e, Error::TrainableDTypeMismatch { op: "matmul", .. }),
        "{e}"
    );
    // A frozen f64 weight under f32 x is no widening: the core's DTypeMismatch.
    let wf = w.detach().unwrap();
    assert!(matches!(
        x.linear(&wf, None),
        Err(Error::Core(fucina_core::Error::DTypeMismatch {
            op: "linear",
            ..
        }))
    ));
}

/// A frozen bf16 table gathered into f32 rows: the rows are the widened table's rows, the
/// result is a constant (no gradient flows to the table), a trainable table of another dtype
/// is `TrainableDTypeMismatch`, and the tied head `h·Eᵀ` with the bf16 table is the linear of
/// the widened one, bitwise, with dh equal too.
#[test]
fn frozen_bf16_embedding_and_tied_head() {
    let ctx = TestCtx::with_threads(2).unwrap();
    let mut rng = SplitMix64::new(9);
    let (v, d) = (50, 24);
    let (e16, e32) = weights(&ctx, &mut rng, v, d);
    let ids = Tensor::constant(&ctx, &[3i64, 0, 49, 3, 7, 7], &[2, 3]).unwrap();
    let rows = e16.embedding_to(&ids, DType::F32).unwrap();
    assert_eq!(rows.dtype(), DType::F32);
    assert_eq!(rows.shape(), &[2, 3, d]);
    assert!(!rows.requires_grad());
    assert!(bits(&rows) == bits(&e32.embedding(&ids).unwrap()));
    // Same dtype: the plain lookup.
    assert!(bits(&e32.embedding_to(&ids, DType::F32).unwrap()) == bits(&rows));
    let trainable = Tensor::variable(&ctx, &vec![0.0f64; v * d], &[v, d]).unwrap();
    assert!(matches!(
        trainable.embedding_to(&ids, DType::F32),
        Err(Error::TrainableDTypeMismatch {
            op: "embedding",
            ..
        })
    ));
    let head = |e: &Tensor| {
        let h = Tensor::variable(&ctx, &rows.to_vec::<f32>().unwrap(), &[2, 3, d]).unwrap();
        let logits = h.linear(e, None).unwrap();
        logits
            .mul(&logits)
            .unwrap()
            .sum_all()
            .unwrap()
            .backward()
            .unwrap();
        (bits(&logits), bits(&h.grad().unwrap()))
    };
    assert!(head(&e16) == head(&e32));
}
