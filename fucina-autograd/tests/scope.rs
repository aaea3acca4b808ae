//! Exec scopes: adoption, release at close, nesting, failure mid-forward.

mod common;

use common::ctx;
use fucina_autograd::{scope_depth, Error, ScopeExt, Tensor};
use fucina_core::ExecContext;

fn chain(ctx: &ExecContext) -> (Tensor, usize) {
    let mut x = Tensor::constant(ctx, &vec![0.5f32; 4096], &[64, 64]).unwrap();
    let mut peak = ctx.stats().outstanding;
    for i in 0..16 {
        let y = if i % 2 == 0 {
            x.neg().unwrap()
        } else {
            x.mul_scalar(0.5).unwrap()
        };
        peak = peak.max(ctx.stats().outstanding);
        x = y; // drops the previous handle as it goes
    }
    (x, peak)
}

#[test]
fn sixteen_op_chain_without_scope_holds_at_most_two_buffers() {
    let ctx = ctx();
    let (x, peak) = chain(&ctx);
    assert!(peak <= 2, "peak {peak}");
    assert_eq!(ctx.stats().outstanding, 1);
    drop(x);
}

#[test]
fn a_scope_frees_a_result_when_its_last_handle_goes_and_releases_the_held_ones_at_close() {
    let ctx = ctx();
    {
        let scope = ctx.scope();
        // Dropping each handle as the chain goes frees it at once, as
        // without a scope: the working set stays O(1).
        let (x, peak) = chain(&ctx);
        assert!(peak <= 2, "peak {peak}");
        assert_eq!(scope.len(), 16);
        drop(x);
        assert_eq!(ctx.stats().outstanding, 0);
        // Results whose handles are still held stay until the scope closes.
        let mut held = vec![Tensor::constant(&ctx, &vec![0.5f32; 4096], &[64, 64]).unwrap()];
        for _ in 0..16 {
            let y = held.last().unwrap().neg().unwrap();
            held.push(y);
        }
        assert_eq!(ctx.stats().outstanding, 17);
        let results = held.split_off(1);
        drop(scope);
        assert_eq!(ctx.stats().outstanding, 1, "the constant is not adopted");
        assert!(results.iter().all(|t| t.is_released()));
        drop((held, results));
    }
    assert_eq!(ctx.stats().outstanding, 0);
    assert_eq!(scope_depth(), 0);
}

#[test]
fn nested_scope_releases_only_its_suffix() {
    let ctx = ctx();
    let x = Tensor::constant(&ctx, &[1.0f64; 8], &[8]).unwrap();
    let outer = ctx.scope();
    let a = x.exp().unwrap();
    let b = a.tanh().unwrap();
    let base = ctx.stats().outstanding;
    {
        let _inner = ctx.scope();
        let c = b.mul(&b).unwrap();
        let _d = c.add(&a).unwrap();
        assert_eq!(ctx.stats().outstanding, base + 2);
    }
    assert_eq!(ctx.stats().outstanding, base);
    assert!(!a.is_released() && !b.is_released());
    assert_eq!(b.to_vec::<f64>().unwrap().len(), 8);
    drop(outer);
    assert!(a.is_released());
    drop((a, b, x));
}

#[test]
fn using_a_tensor_after_its_scope_closed_is_an_error() {
    let ctx = ctx();
    let x = Tensor::constant(&ctx, &[1.0f64, 2.0], &[2]).unwrap();
    let y = common::released(&ctx, || x.exp());
    assert!(matches!(y.to_vec::<f64>(), Err(Error::TensorReleased)));
    assert!(matches!(y.tanh(), Err(Error::TensorReleased)));
    assert_eq!(y.shape(), &[2]); // metadata survives
    drop(x);
}

#[test]
fn an_op_failing_mid_forward_leaks_nothing() {
    let ctx = ctx();
    let w = Tensor::variable(&ctx, &[0.5f64; 6], &[2, 3]).unwrap();
    let start = ctx.stats().outstanding;
    {
        let _s = ctx.scope();
        let h = w.tanh().unwrap().exp().unwrap();
        let bad = Tensor::constant(&ctx, &[1.0f64; 4], &[4]).unwrap();
        assert!(h.matmul(&bad).is_err()); // shape mismatch mid-forward
        assert!(h.add(&bad).is_err());
    }
    assert_eq!(ctx.stats().outstanding, start);
    drop(w);
}

#[test]
fn training_in_a_scope_frees_graph_and_keeps_leaf_grads() {
    let ctx = ctx();
    let w = Tensor::variable(&ctx, &[0.1f64, 0.2, 0.3], &[3]).unwrap();
    {
        let _s = ctx.scope();
        let loss = w.mul(&w).unwrap().exp().unwrap().sum_all().unwrap();
        loss.backward().unwrap();
    }
    // Only the leaf and its gradient remain.
    assert_eq!(ctx.stats().outstanding, 2);
    assert_eq!(fucina_autograd::live_nodes(), 0);
    drop(w);
}
