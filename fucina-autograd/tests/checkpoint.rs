//! Activation checkpointing: bitwise-equal gradients, fewer retained buffers.

mod common;

use std::sync::Arc;

use common::{grad_bits, on_one_and_two_threads, uniform_f32};
use fucina_autograd::testing::TestCtx;
use fucina_autograd::{checkpoint, Block, Error, ScopeExt, Tensor};
use fucina_core::rng::SplitMix64;
use fucina_core::{ExecContext, RawTensor};

fn block() -> Block {
    Arc::new(|xs: &[Tensor]| {
        let h = xs[0].matmul(&xs[1])?.tanh()?;
        let h = h.mul(&h)?.add(&xs[0])?;
        h.exp()?.mul_scalar(0.1)
    })
}

fn run(ctx: &ExecContext, use_checkpoint: bool) -> (Vec<u64>, Vec<u64>, usize) {
    let mut g = SplitMix64::new(7);
    let xv = uniform_f32(&mut g, 16 * 16, -1.0, 1.0);
    let wv = uniform_f32(&mut g, 16 * 16, -0.5, 0.5);
    let x = Tensor::variable(ctx, &xv, &[16, 16]).unwrap();
    let w = Tensor::variable(ctx, &wv, &[16, 16]).unwrap();
    let retained;
    {
        let _s = ctx.scope();
        let mut h = x.clone();
        for _ in 0..4 {
            h = if use_checkpoint {
                checkpoint(block(), &[&h, &w]).unwrap()
            } else {
                block()(&[h.clone(), w.clone()]).unwrap()
            };
        }
        let loss = h.sum_all().unwrap();
        retained = ctx.stats().outstanding;
        loss.backward().unwrap();
    }
    (grad_bits(&x).unwrap(), grad_bits(&w).unwrap(), retained)
}

#[test]
fn checkpoint_gradients_are_bitwise_equal_and_retain_fewer_buffers() {
    let ctx = TestCtx::with_threads(1).unwrap();
    let (gx_plain, gw_plain, kept_plain) = run(&ctx, false);
    let (gx_ck, gw_ck, kept_ck) = run(&ctx, true);
    assert_eq!(gx_plain, gx_ck);
    assert_eq!(gw_plain, gw_ck);
    assert!(
        kept_ck < kept_plain,
        "checkpoint kept {kept_ck}, plain {kept_plain}"
    );
}

#[test]
fn nested_checkpoint_recompute_is_an_error() {
    let ctx = TestCtx::with_threads(1).unwrap();
    let x = Tensor::variable(&ctx, &[0.5f64, 1.0], &[2]).unwrap();
    let inner: Block = Arc::new(|xs: &[Tensor]| xs[0].exp());
    let outer: Block = Arc::new(move |xs: &[Tensor]| checkpoint(inner.clone(), &[&xs[0]]));
    let y = checkpoint(outer, &[&x]).unwrap();
    // Bound first: a temporary in the tail expression would outlive `ctx`.
    let r = y.sum_all().unwrap().backward();
    match r {
        Err(Error::NestedCheckpointRecompute) => {}
        other => panic!("expected NestedCheckpointRecompute, got {other:?}"),
    }
}

/// A `[n]`-element f32 variable of uniform draws in `[-1, 1)`.
fn var(ctx: &ExecContext, seed: u64, shape: &[usize]) -> Tensor {
    common::uniform_var(ctx, &mut SplitMix64::new(seed), shape)
}

/// `block` over `inputs`: through [`checkpoint`] when `ck`, else called
/// plainly (on the same tensors).
fn run_block(block: Block, inputs: &[&Tensor], ck: bool) -> Tensor {
    if ck {
        checkpoint(block, inputs).unwrap()
    } else {
        let inputs: Vec<Tensor> = inputs.iter().map(|&t| t.clone()).collect();
        block(&inputs).unwrap()
    }
}

/// Runs `f` once plainly and once with `wrap` = true, resetting the gradients of
/// `leaves` in between, and asserts each leaf got bitwise the same gradient
/// (or none in both runs). Returns the plain gradients.
fn assert_same_grads(leaves: &[&Tensor], f: impl Fn(bool) -> Tensor) -> Vec<Option<Vec<u64>>> {
    let mut runs = Vec::new();
    for ck in [false, true] {
        for l in leaves {
            l.zero_grad();
        }
        f(ck).backward().unwrap();
        runs.push(leaves.iter().map(|l| grad_bits(l)).collect::<Vec<_>>());
    }
    for (i, (p, c)) in runs[0].iter().zip(&runs[1]).enumerate() {
        assert_eq!(
            p.is_some(),
            c.is_some(),
            "leaf {i}: plain has a gradient: {}, checkpoint: {}",
            p.is_some(),
            c.is_some()
        );
        assert_eq!(p, c, "leaf {i}: gradients differ");
    }
    for l in leaves {
        l.zero_grad();
    }
    runs.swap_remove(0)
}

/// The example: a parameter the block captures (not an input) gets
/// its gradient, bitwise the plain run's (it got none before).
#[test]
fn a_captured_parameter_gets_the_plain_runs_gradient() {
    on_one_and_two_threads(|ctx| {
        let x = var(ctx, 1, &[5, 8]);
        let w = var(ctx, 2, &[6, 8]);
        let b = var(ctx, 3, &[6]);
        let grads = assert_same_grads(&[&x, &w, &b], |ck| {
            let (wc, bc) = (w.clone(), b.clone());
            let block: Block = Arc::new(move |xs: &[Tensor]| xs[0].linear(&wc, Some(&bc))?.tanh());
            let y = run_block(block, &[&x], ck);
            y.square().unwrap().sum_all().unwrap()
        });
        assert!(grads.iter().all(|g| g.is_some()));
    });
}

/// A captured non-leaf that requires a gradient (computed outside the block
/// from a leaf) passes its gradient on to that leaf.
#[test]
fn a_captured_intermediate_propagates_to_its_leaf() {
    let ctx = TestCtx::with_threads(1).unwrap();
    let x = var(&ctx, 4, &[4, 4]);
    let a = var(&ctx, 5, &[4, 4]);
    let grads = assert_same_grads(&[&x, &a], |ck| {
        let h = a.tanh().unwrap().mul_scalar(2.0).unwrap(); // outside the block
        let hc = h.clone();
        let block: Block = Arc::new(move |xs: &[Tensor]| xs[0].matmul(&hc)?.exp());
        let y = run_block(block, &[&x], ck);
        // h is also used after the block: its gradient sums both paths.
        y.add(&h).unwrap().sum_all().unwrap()
    });
    assert!(grads[1].is_some());
}

/// A parameter used twice inside the block and also before and after it: its
/// contributions are added in the plain run's order, so the sum is bitwise
/// the same (a checkpoint that summed the block's part first would differ).
#[test]
fn a_parameter_used_inside_and_outside_sums_in_the_plain_order() {
    on_one_and_two_threads(|ctx| {
        let x = var(ctx, 6, &[8, 8]);
        let w = var(ctx, 7, &[8, 8]);
        assert_same_grads(&[&x, &w], |ck| {
            let h0 = x.matmul(&w).unwrap().tanh().unwrap();
            let wc = w.clone();
            let block: Block = Arc::new(move |xs: &[Tensor]| {
                let h = xs[0].matmul(&wc)?.sin()?;
                h.matmul(&wc)?.mul_scalar(0.3)
            });
            let h1 = run_block(block, &[&h0], ck);
            h1.matmul(&w).unwrap().exp().unwrap().sum_all().unwrap()
        });
    });
}

/// A chain of checkpoints over shared captured parameters, as a model's
/// layers are: every gradient bitwise equal on 1 and 2 threads.
#[test]
fn a_chain_of_checkpoints_over_captured_parameters() {
    let mut results = Vec::new();
    on_one_and_two_threads(|ctx| {
        let x = var(ctx, 8, &[6, 16]);
        let ws: Vec<Tensor> = (0..3).map(|i| var(ctx, 10 + i, &[16, 16])).collect();
        let leaves: Vec<&Tensor> = std::iter::once(&x).chain(ws.iter()).collect();
        results.push(assert_same_grads(&leaves, |ck| {
            let mut h = x.clone();
            for w in &ws {
                let wc = w.clone();
                let block: Block = Arc::new(move |xs: &[Tensor]| {
                    let z = xs[0].linear(&wc, None)?.tanh()?;
                    z.mul(&z)?.add(&xs[0])
                });
                h = run_block(block, &[&h], ck);
            }
            h.sum_all().unwrap()
        }));
    });
    assert_eq!(results[0], results[1]);
}

/// An input the block ignores gets no gradient, as in the plain run (it
/// used to get zeros).
#[test]
fn an_ignored_input_gets_no_gradient() {
    let ctx = TestCtx::with_threads(1).unwrap();
    let x = var(&ctx, 20, &[3]);
    let unused = var(&ctx, 21, &[3]);
    let grads = assert_same_grads(&[&x, &unused], |ck| {
        let block: Block = Arc::new(|xs: &[Tensor]| xs[0].exp());
        let y = run_block(block, &[&x, &unused], ck);
        y.sum_all().unwrap()
    });
    assert!(grads[0].is_some() && grads[1].is_none());
}

/// A tensor the block reads only under its own `no_grad` gets no gradient,
/// as in the plain run; one it returns unchanged gets the output's.
#[test]
fn no_grad_inside_the_block_and_a_returned_capture() {
    let ctx = TestCtx::with_threads(1).unwrap();
    let x = var(&ctx, 22, &[3]);
    let hidden = var(&ctx, 23, &[3]);
    let grads = assert_same_grads(&[&x, &hidden], |ck| {
        let hc = hidden.clone();
        let block: Block = Arc::new(move |xs: &[Tensor]| {
            let c = {
                let _ng = fucina_autograd::no_grad();
                hc.exp()?
            };
            xs[0].mul(&c)
        });
        let y = run_block(block, &[&x], ck);
        y.sum_all().unwrap()
    });
    assert!(grads[0].is_some() && grads[1].is_none());

    let w = var(&ctx, 24, &[3]);
    assert_same_grads(&[&x, &w], |ck| {
        let wc = w.clone();
        let block: Block = Arc::new(move |_: &[Tensor]| Ok(wc.clone()));
        let y = run_block(block, &[&x], ck);
        y.square().unwrap().sum_all().unwrap()
    });
}

/// The functional `grad` reaches captured parameters too, and backward
/// under `no_grad` still recomputes (recording) and gives the gradients.
#[test]
fn functional_grad_and_backward_under_no_grad() {
    let ctx = TestCtx::with_threads(1).unwrap();
    let x = var(&ctx, 30, &[4, 4]);
    let w = var(&ctx, 31, &[4, 4]);
    let make = |w: &Tensor| -> Block {
        let wc = w.clone();
        Arc::new(move |xs: &[Tensor]| xs[0].matmul(&wc)?.tanh())
    };
    let plain = make(&w)(std::slice::from_ref(&x))
        .unwrap()
        .sum_all()
        .unwrap();
    let want = fucina_autograd::grad(&plain, &[&x, &w], None).unwrap();
    drop(plain);
    let ck = checkpoint(make(&w), &[&x]).unwrap().sum_all().unwrap();
    let got = fucina_autograd::grad(&ck, &[&x, &w], None).unwrap();
    drop(ck);
    let bits = |t: &Option<RawTensor>| {
        t.as_ref().map(|t| {
            t.to_vec::<f32>()
                .unwrap()
                .iter()
                .map(|v| v.to_bits())
                .collect::<Vec<_>>()
        })
    };
    for (a, b) in want.iter().zip(&got) {
        assert!(a.is_some());
        assert_eq!(bits(a), bits(b));
    }
    assert!(x.grad().is_none() && w.grad().is_none());

    let y = checkpoint(make(&w), &[&x]).unwrap().sum_all().unwrap();
    {
        let _ng = fucina_autograd::no_grad();
        y.backward().unwrap();
    }
    drop(y);
    assert!(w.grad_raw().is_some());
    assert_eq!(bits(&w.grad_raw()), bits(&got[1]));
}

/// Anomaly mode names the op inside the block whose backward went bad.
#[test]
fn anomaly_inside_a_checkpoint_names_the_inner_op() {
    let ctx = TestCtx::with_threads(1).unwrap();
    let x = Tensor::variable(&ctx, &[-1.0f64, 4.0], &[2]).unwrap();
    let w = Tensor::variable(&ctx, &[1.0f64, 1.0], &[2]).unwrap();
    let wc = w.clone();
    let y = checkpoint(Arc::new(move |xs: &[Tensor]| xs[0].mul(&wc)?.sqrt()), &[&x]).unwrap();
    let loss = y.sum_all().unwrap();
    let _anomaly = fucina_autograd::detect_anomaly();
    match loss.backward() {
        Err(Error::Anomaly { op, .. }) => assert_eq!(op, "sqrt"),
        other => panic!("expected an anomaly in sqrt, got {other:?}"),
    }
    assert!(x.grad().is_none() && w.grad().is_none());
}
