//! The backward engine: accumulation, diamonds, re-runs, seeds, no-grad.

mod common;

use common::{ctx, on_one_and_two_threads};
use fucina_autograd::testing::TestCtx;
use fucina_autograd::{live_nodes, no_grad, CrossEntropyOpts, Error, Result, Tensor};
use fucina_core::DType;

/// The gradient of `sum(f(x))` at the f64 vector `x`.
fn grad_of_sum(ctx: &TestCtx, x: &[f64], f: impl Fn(&Tensor) -> Result<Tensor>) -> Vec<f64> {
    let x = Tensor::variable(ctx, x, &[x.len()]).unwrap();
    f(&x).unwrap().sum_all().unwrap().backward().unwrap();
    x.grad().unwrap().to_vec::<f64>().unwrap()
}

#[test]
fn a_plus_a_accumulates_both_paths() {
    let ctx = ctx();
    let g = grad_of_sum(&ctx, &[1.0, -2.0, 3.0], |a| a.add(a));
    assert_eq!(g, vec![2.0, 2.0, 2.0]);
}

#[test]
fn x_times_x_is_two_x() {
    let ctx = ctx();
    let g = grad_of_sum(&ctx, &[1.5, -2.0, 0.0], |x| x.mul(x));
    assert_eq!(g, vec![3.0, -4.0, 0.0]);
}

#[test]
fn diamond_graph() {
    // y = exp(x); z = y*y + tanh(y)  => dz/dx = (2y + 1 - tanh(y)^2) * y
    let ctx = ctx();
    let xs = [0.1f64, -0.4, 0.7];
    let x = Tensor::variable(&ctx, &xs, &[3]).unwrap();
    let y = x.exp().unwrap();
    let z = y.mul(&y).unwrap().add(&y.tanh().unwrap()).unwrap();
    z.sum_all().unwrap().backward().unwrap();
    let g = x.grad().unwrap().to_vec::<f64>().unwrap();
    for (i, &xv) in xs.iter().enumerate() {
        let y = xv.exp();
        let want = (2.0 * y + 1.0 - y.tanh().powi(2)) * y;
        assert!((g[i] - want).abs() < 1e-12, "{} vs {}", g[i], want);
    }
}

#[test]
fn broadcast_gradients_are_reduced_by_the_engine() {
    let ctx = ctx();
    let a = Tensor::variable(&ctx, &[1.0f64, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]).unwrap();
    let b = Tensor::variable(&ctx, &[10.0f64, 20.0, 30.0], &[3]).unwrap();
    a.mul(&b).unwrap().sum_all().unwrap().backward().unwrap();
    assert_eq!(
        b.grad().unwrap().to_vec::<f64>().unwrap(),
        vec![5.0, 7.0, 9.0]
    );
    assert_eq!(
        a.grad().unwrap().to_vec::<f64>().unwrap(),
        vec![10.0, 20.0, 30.0, 10.0, 20.0, 30.0]
    );
}

#[test]
fn gradients_accumulate_over_two_backward_calls_until_zero_grad() {
    let ctx = ctx();
    let x = Tensor::variable(&ctx, &[1.0f64, 2.0], &[2]).unwrap();
    let backward_of_3x = || x.mul_scalar(3.0)?.sum_all()?.backward();
    for _ in 0..2 {
        backward_of_3x().unwrap();
    }
    assert_eq!(x.grad().unwrap().to_vec::<f64>().unwrap(), vec![6.0, 6.0]);
    x.zero_grad();
    assert!(x.grad().is_none());
    backward_of_3x().unwrap();
    assert_eq!(x.grad().unwrap().to_vec::<f64>().unwrap(), vec![3.0, 3.0]);
}

#[test]
fn second_backward_over_same_graph_is_an_error_and_changes_nothing() {
    let ctx = ctx();
    let x = Tensor::variable(&ctx, &[1.0f64, 2.0], &[2]).unwrap();
    let loss = x.tanh().unwrap().sum_all().unwrap();
    loss.backward().unwrap();
    let before = x.grad().unwrap().to_vec::<f64>().unwrap();
    match loss.backward() {
        Err(Error::BackwardAlreadyRun { .. }) => {}
        other => panic!("expected BackwardAlreadyRun, got {other:?}"),
    }
    assert_eq!(x.grad().unwrap().to_vec::<f64>().unwrap(), before);
}

#[test]
fn non_scalar_backward_needs_a_seed() {
    let ctx = ctx();
    let x = Tensor::variable(&ctx, &[1.0f64, 2.0], &[2]).unwrap();
    let y = x.mul_scalar(2.0).unwrap();
    assert!(matches!(
        y.backward(),
        Err(Error::MissingOutputGradient { .. })
    ));
    let seed = ctx.from_slice(&[1.0f64, 10.0], &[2]).unwrap();
    y.backward_with(&seed).unwrap();
    assert_eq!(x.grad().unwrap().to_vec::<f64>().unwrap(), vec![2.0, 20.0]);
}

#[test]
fn backward_on_constant_is_an_error() {
    let ctx = ctx();
    let c = Tensor::constant(&ctx, &[1.0f64], &[1]).unwrap();
    assert!(matches!(
        c.exp().unwrap().backward(),
        Err(Error::NoGradient)
    ));
}

#[test]
fn no_grad_forward_records_no_node_and_allocates_no_node_memory() {
    let ctx = ctx();
    let w = Tensor::variable(&ctx, &[0.5f64; 6], &[2, 3]).unwrap();
    let x = Tensor::constant(&ctx, &[1.0f64; 6], &[3, 2]).unwrap();
    let nodes_before = live_nodes();
    let y = {
        let _g = no_grad();
        w.matmul(&x).unwrap().tanh().unwrap().sum_all().unwrap()
    };
    assert_eq!(live_nodes(), nodes_before);
    assert!(!y.requires_grad());
    assert!(y.grad_fn_name().is_none());
    // With grad mode on, nodes exist, and go away with the graph.
    let z = w.matmul(&x).unwrap().tanh().unwrap().sum_all().unwrap();
    assert_eq!(live_nodes(), nodes_before + 3);
    drop(z);
    assert_eq!(live_nodes(), nodes_before);
}

#[test]
fn constants_only_record_nothing() {
    let ctx = ctx();
    let a = Tensor::constant(&ctx, &[1.0f32, 2.0], &[2]).unwrap();
    let n = live_nodes();
    let b = a.exp().unwrap().mul(&a).unwrap();
    assert_eq!(live_nodes(), n);
    assert!(!b.requires_grad());
}

#[test]
fn detach_cuts_the_graph() {
    let ctx = ctx();
    let x = Tensor::variable(&ctx, &[2.0f64], &[1]).unwrap();
    let y = x.mul(&x).unwrap();
    let z = y.detach().unwrap().mul(&x).unwrap().sum_all().unwrap(); // d/dx = y (held constant) = 4
    z.backward().unwrap();
    assert_eq!(x.grad().unwrap().to_vec::<f64>().unwrap(), vec![4.0]);
}

#[test]
fn matmul_linear_and_cross_entropy_backward_shapes() {
    let ctx = ctx();
    let x = Tensor::variable(&ctx, &[0.1f64, 0.2, 0.3, 0.4, 0.5, 0.6], &[2, 3]).unwrap();
    let w = Tensor::variable(&ctx, &[0.1f64; 12], &[4, 3]).unwrap();
    let b = Tensor::variable(&ctx, &[0.0f64; 4], &[4]).unwrap();
    let t = Tensor::from_raw(&ctx, ctx.from_slice(&[1i64, 3], &[2]).unwrap(), false).unwrap();
    let loss = x
        .linear(&w, Some(&b))
        .unwrap()
        .cross_entropy(&t, CrossEntropyOpts::default())
        .unwrap();
    loss.backward().unwrap();
    assert_eq!(w.grad().unwrap().shape(), &[4, 3]);
    assert_eq!(b.grad().unwrap().shape(), &[4]);
    assert_eq!(x.grad().unwrap().shape(), &[2, 3]);
    // The bias gradient of mean CE is mean(softmax - onehot) over rows: sums to 0.
    let gb: f64 = b.grad().unwrap().to_vec::<f64>().unwrap().iter().sum();
    assert!(gb.abs() < 1e-12);
}

#[test]
fn dtype_mismatch_is_a_structured_error() {
    let ctx = ctx();
    let a = Tensor::variable(&ctx, &[1.0f64], &[1]).unwrap();
    let b = Tensor::variable(&ctx, &[1.0f32], &[1]).unwrap();
    assert!(matches!(
        a.add(&b),
        Err(Error::Core(fucina_core::Error::DTypeMismatch { .. }))
    ));
    let z = Tensor::zeros(&ctx, DType::F64, &[2]).unwrap();
    assert!(matches!(a.matmul(&z), Err(Error::Core(_))));
}

#[test]
fn the_fixture_fails_a_test_that_leaves_graph_nodes_alive() {
    let mut kept = None;
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let ctx = TestCtx::with_threads(1).unwrap();
        let x = Tensor::variable(&ctx, &[0.5f64, 1.0], &[2]).unwrap();
        kept = Some(x.exp().unwrap()); // one node, and its buffers, outlive the context
    }));
    let p = r.expect_err("the fixture must fail the test");
    let msg = p.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(msg.contains("1 graph node(s)"), "{msg}");
    drop(kept);
    assert_eq!(live_nodes(), 0);
}

/// A narrow view of an interior tensor adds its gradient into the input's in place
/// (`Backward::narrow_window`); anomaly mode takes the general path (zero-padded gradient,
/// then a full add). Both give the same bits: a three-way split as GPT's qkv, a split on
/// the first axis, overlapping windows mixed with a direct use, a lone strided narrow; on
/// one and two threads, past the kernels' parallel threshold.
#[test]
fn narrow_gradients_added_in_place_match_the_padded_path_bitwise() {
    on_one_and_two_threads(|ctx| {
        let threads = ctx.num_threads();
        for case in 0..4 {
            let run = |anomaly: bool| -> Vec<f32> {
                let _guard = anomaly.then(fucina_autograd::detect_anomaly);
                let x = Tensor::randn(ctx, DType::F32, &[8, 50, 96], 7)
                    .unwrap()
                    .requires_grad_(true)
                    .unwrap();
                let h = x.mul_scalar(1.5).unwrap();
                let loss = match case {
                    0 => {
                        let p = h.split(2, &[32, 32, 32]).unwrap();
                        let qk = p[0].mul(&p[1]).unwrap();
                        qk.add(&p[2].tanh().unwrap()).unwrap().sum_all().unwrap()
                    }
                    1 => {
                        let p = h.split(0, &[3, 5]).unwrap();
                        let a = p[0].exp().unwrap().sum_all().unwrap();
                        a.add(&p[1].sin().unwrap().sum_all().unwrap()).unwrap()
                    }
                    2 => {
                        let a = h.narrow(1, 10, 30).unwrap().sum_all().unwrap();
                        let b = h.narrow(1, 0, 20).unwrap().square().unwrap();
                        let c = h.cos().unwrap().sum_all().unwrap();
                        a.add(&b.sum_all().unwrap()).unwrap().add(&c).unwrap()
                    }
                    _ => {
                        let n = h.narrow(2, 5, 40).unwrap().transpose(0, 1).unwrap();
                        n.contiguous().unwrap().tanh().unwrap().sum_all().unwrap()
                    }
                };
                loss.backward().unwrap();
                x.grad().unwrap().to_vec::<f32>().unwrap()
            };
            let (fast, padded) = (run(false), run(true));
            assert_eq!(fast.len(), padded.len());
            for (i, (a, b)) in fast.iter().zip(&padded).enumerate() {
                assert_eq!(
                    a.to_bits(),
                    b.to_bits(),
                    "case {case}, {threads} threads, element {i}"
                );
            }
        }
    });
}
