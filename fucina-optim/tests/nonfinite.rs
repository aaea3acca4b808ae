//! Skipping a step whose gradients are not finite: `grads_are_finite` and
//! `Optimizer::step_if_finite` leave parameters, moments and the step count
//! untouched on NaN or infinity, and step normally otherwise.

use fucina_autograd::testing::TestCtx;
use fucina_autograd::{ScopeExt, Tensor};
use fucina_optim::{grads_are_finite, AdamConfig, AdamW, Optimizer};

#[test]
fn a_step_with_non_finite_gradients_is_skipped_and_changes_nothing() {
    let ctx = TestCtx::with_threads(1).unwrap();
    let w = Tensor::variable(&ctx, &[0.5f32, -0.5], &[2]).unwrap();
    let b = Tensor::variable(&ctx, &[0.1f32], &[1]).unwrap();
    let mut opt = AdamW::single(vec![w.clone(), b.clone()], AdamConfig::adamw(0.1)).unwrap();
    assert!(grads_are_finite(&opt.params()).unwrap()); // no gradients yet

    // A finite step first, so there are moments to protect.
    {
        let _scope = ctx.scope();
        let loss = w
            .square()
            .unwrap()
            .sum_all()
            .unwrap()
            .add(&b.sum_all().unwrap())
            .unwrap();
        loss.backward().unwrap();
    }
    assert!(grads_are_finite(&opt.params()).unwrap());
    assert!(opt.step_if_finite().unwrap());
    opt.zero_grad();
    let w_before = w.to_vec::<f32>().unwrap();
    let b_before = b.to_vec::<f32>().unwrap();
    let state_before = opt.state_bytes().unwrap();
    assert_eq!(opt.step_count(), 1);

    // log(0) = -inf in the forward pass: w's gradient is infinite.
    {
        let _scope = ctx.scope();
        let z = Tensor::constant(&ctx, &[0.0f32, 1.0], &[2]).unwrap();
        let loss = w.mul(&z.log().unwrap()).unwrap().sum_all().unwrap();
        let loss = loss.add(&b.sum_all().unwrap()).unwrap();
        loss.backward().unwrap(); // anomaly mode is off: it succeeds
    }
    assert!(!grads_are_finite(&opt.params()).unwrap());
    assert!(!grads_are_finite(std::slice::from_ref(&w)).unwrap());
    assert!(grads_are_finite(std::slice::from_ref(&b)).unwrap());
    assert!(!opt.step_if_finite().unwrap());
    assert_eq!(w.to_vec::<f32>().unwrap(), w_before);
    assert_eq!(b.to_vec::<f32>().unwrap(), b_before); // all or nothing across params
    assert_eq!(opt.state_bytes().unwrap(), state_before);
    assert_eq!(opt.step_count(), 1);
    opt.zero_grad();

    // NaN is caught the same way.
    w.set_grad(Some(ctx.from_slice(&[f32::NAN, 0.0], &[2]).unwrap()))
        .unwrap();
    assert!(!opt.step_if_finite().unwrap());
    assert_eq!(opt.step_count(), 1);
    opt.zero_grad();
    drop((opt, w, b));
}
