//! Backward never reports success it did not have: a released root is
//! `TensorReleased`; an empty matmul gets empty gradients; a backward that
//! fails partway leaves every leaf gradient bit-identical; anomaly mode names
//! the op that produced the first NaN or infinity.

mod common;

use std::sync::Arc;

use common::{ctx, fn_op, grad_bits as bits, released};
use fucina_autograd::{
    custom_op, detect_anomaly, is_anomaly_enabled, CustomOp, Error, ScopeExt, Tensor,
};

#[test]
fn backward_on_a_loss_returned_out_of_its_closed_scope_is_released() {
    let ctx = ctx();
    let w = Tensor::variable(&ctx, &[1.0f64, 2.0], &[2]).unwrap();
    let loss = released(&ctx, || w.mul(&w)?.sum_all());
    assert_eq!(loss.backward(), Err(Error::TensorReleased));
    assert_eq!(
        fucina_autograd::grad(&loss, &[&w], None).err(),
        Some(Error::TensorReleased)
    );
    assert!(w.grad().is_none());
    assert!(loss.grad().is_none());
    drop((w, loss));
}

#[test]
fn matmul_with_an_empty_inner_dimension_has_empty_gradients() {
    let ctx = ctx();
    let a = Tensor::variable::<f32>(&ctx, &[], &[2, 0]).unwrap();
    let b = Tensor::variable::<f32>(&ctx, &[], &[0, 3]).unwrap();
    let y = a.matmul(&b).unwrap();
    assert_eq!(y.to_vec::<f32>().unwrap(), vec![0.0; 6]);
    y.sum_all().unwrap().backward().unwrap();
    assert_eq!(a.grad().unwrap().shape(), &[2, 0]);
    assert_eq!(b.grad().unwrap().shape(), &[0, 3]);
    // And the other empty case: [0,2]x[2,3] -> [0,3].
    let c = Tensor::variable::<f32>(&ctx, &[], &[0, 2]).unwrap();
    let d = Tensor::variable(&ctx, &[1.0f32; 6], &[2, 3]).unwrap();
    c.matmul(&d).unwrap().sum_all().unwrap().backward().unwrap();
    assert_eq!(c.grad().unwrap().shape(), &[0, 2]);
    assert_eq!(d.grad().unwrap().to_vec::<f32>().unwrap(), vec![0.0; 6]);
    drop((a, b, c, d, y));
}

/// An op whose backward fails (a user error), to make backward fail partway.
fn fails_in_backward() -> Arc<dyn CustomOp> {
    fn_op(
        "fails_in_backward",
        |ctx, inputs| Ok(ctx.copy(inputs[0])?),
        |_ctx, _inputs, _output, _gy, _needs| {
            Err(Error::NotDifferentiable {
                op: "fails_in_backward",
            })
        },
    )
}

#[test]
fn a_failed_backward_leaves_every_leaf_gradient_bit_identical() {
    let ctx = ctx();
    let w1 = Tensor::variable(&ctx, &[0.1f64, 0.2, 0.3], &[3]).unwrap();
    let w2 = Tensor::variable(&ctx, &[1.5f64, -2.5, 3.5], &[3]).unwrap();
    let x = Tensor::constant(&ctx, &[0.7f64, 1.1, 1.3], &[3]).unwrap();
    // A first, successful backward: both leaves have gradients to protect.
    {
        let _scope = ctx.scope();
        let loss = w1.mul(&x).unwrap().add(&w2.square().unwrap()).unwrap();
        loss.sum_all()
            .unwrap()
            .mul_scalar(1.0 / 3.0)
            .unwrap()
            .backward()
            .unwrap();
    }
    let (g1, g2) = (bits(&w1), bits(&w2));
    assert!(g1.is_some() && g2.is_some());
    {
        let _scope = ctx.scope();
        // Recorded first, so it runs last: by then w1 (via mul) and w2 (via
        // square) have had contributions staged.
        let bad = custom_op(fails_in_backward(), &[&w2]).unwrap();
        let a = w1.mul(&x).unwrap().add(&w2.square().unwrap()).unwrap();
        let loss = a.add(&bad).unwrap().sum_all().unwrap();
        assert_eq!(
            loss.backward(),
            Err(Error::NotDifferentiable {
                op: "fails_in_backward"
            })
        );
    }
    assert_eq!(bits(&w1), g1);
    assert_eq!(bits(&w2), g2);
    // A leaf with no gradient yet stays without one.
    let w3 = Tensor::variable(&ctx, &[1.0f64], &[1]).unwrap();
    {
        let _scope = ctx.scope();
        let bad = custom_op(fails_in_backward(), &[&w3]).unwrap();
        let loss = w3.exp().unwrap().add(&bad).unwrap().sum_all().unwrap();
        assert!(loss.backward().is_err());
    }
    assert!(w3.grad().is_none());
    drop((w1, w2, w3, x));
}

#[test]
fn staged_accumulation_adds_old_and_new_like_the_plain_sum() {
    // Two backward calls accumulate exactly old + new (IEEE addition commutes).
    let ctx = ctx();
    let w = Tensor::variable(&ctx, &[0.1f64, 0.7], &[2]).unwrap();
    let run = |k: f64| {
        let _scope = ctx.scope();
        w.mul_scalar(k)
            .unwrap()
            .sum_all()
            .unwrap()
            .backward()
            .unwrap();
    };
    run(0.3);
    let first = w.grad().unwrap().to_vec::<f64>().unwrap();
    run(0.6);
    let both = w.grad().unwrap().to_vec::<f64>().unwrap();
    assert_eq!(both, vec![first[0] + 0.6, first[1] + 0.6]);
    w.zero_grad();
    drop(w);
}

#[test]
fn anomaly_mode_names_sqrt_of_a_negative() {
    let ctx = ctx();
    let x = Tensor::variable(&ctx, &[-1.0f64, 4.0], &[2]).unwrap();
    let w = Tensor::variable(&ctx, &[2.0f64, 3.0], &[2]).unwrap();
    let c = Tensor::constant(&ctx, &[2.0f64, 3.0], &[2]).unwrap();
    {
        let _scope = ctx.scope();
        let m = x.sqrt().unwrap().mul(&c).unwrap(); // sqrt(-1) = NaN, c needs no gradient
        let q = w.square().unwrap(); // runs before sqrt's backward: w gets a staged gradient
        let loss = m.sum_all().unwrap().add(&q.sum_all().unwrap()).unwrap();
        assert!(!is_anomaly_enabled());
        let _anomaly = detect_anomaly();
        assert!(is_anomaly_enabled());
        match loss.backward() {
            Err(Error::Anomaly {
                op, input, what, ..
            }) => assert_eq!((op, input, what), ("sqrt", 0, "NaN")),
            other => panic!("expected an anomaly naming sqrt, got {other:?}"),
        }
    }
    assert!(!is_anomaly_enabled());
    // All or nothing: w's staged gradient was not committed.
    assert!(w.grad().is_none());
    assert!(x.grad().is_none());
    drop((x, w, c));
}

#[test]
fn anomaly_mode_names_log_of_zero_and_is_off_by_default() {
    let ctx = ctx();
    let x = Tensor::variable(&ctx, &[0.0f32, 1.0], &[2]).unwrap();
    let build = || x.log().unwrap().exp().unwrap().sum_all().unwrap();
    // Off: backward succeeds and the infinity reaches the gradient silently.
    build().backward().unwrap();
    let g = x.grad().unwrap().to_vec::<f32>().unwrap();
    assert!(!g[0].is_finite());
    x.zero_grad();
    // On: named, with a message that says where to look.
    let _anomaly = detect_anomaly();
    let err = build().backward().unwrap_err();
    match &err {
        Error::Anomaly { op, what, .. } => {
            assert_eq!(*op, "log");
            assert!(*what == "NaN" || *what == "infinity");
        }
        other => panic!("expected an anomaly naming log, got {other:?}"),
    }
    let msg = err.to_string();
    assert!(msg.contains("`log`"), "{msg}");
    assert!(x.grad().is_none());
    drop(x);
}

#[test]
fn anomaly_mode_passes_finite_graphs() {
    let ctx = ctx();
    let x = Tensor::variable(&ctx, &[1.0f64, 4.0], &[2]).unwrap();
    let _anomaly = detect_anomaly();
    x.sqrt().unwrap().sum_all().unwrap().backward().unwrap();
    assert_eq!(x.grad().unwrap().to_vec::<f64>().unwrap(), vec![0.5, 0.25]);
    x.zero_grad();
    drop(x);
}
