//! Failed calls change nothing: `Optimizer::step` and `clip_grad_norm` run
//! under every memory limit between "nothing fits" and "everything fits"
//! (the pool's limit is the fault injected at each allocation they make);
//! each either succeeds with the unconstrained result or fails leaving
//! parameters, gradients, optimizer state and the step count bit for bit as
//! they were, so a retry gives the result of one call, not two. Every
//! context ends with nothing outstanding.

use fucina_autograd::testing::TestCtx;
use fucina_autograd::Tensor;
use fucina_core::ExecContext;
use fucina_optim::*;

mod common;

use common::tensor_bits;

/// Elements per parameter: 1000 f32 is one 4096-byte pool block.
const N: usize = 1000;

/// Two parameters with gradients (the second one distinct).
fn setup(ctx: &ExecContext) -> Vec<Tensor> {
    (0..2)
        .map(|k| {
            let v: Vec<f32> = (0..N).map(|i| 0.5 + (i + k) as f32 * 1e-3).collect();
            let g: Vec<f32> = (0..N).map(|i| 0.25 - (i * (k + 1)) as f32 * 1e-4).collect();
            let p = Tensor::variable(ctx, &v, &[N]).unwrap();
            p.set_grad(Some(ctx.from_slice(&g, &[N]).unwrap())).unwrap();
            p
        })
        .collect()
}

fn bits(ts: &[Tensor]) -> Vec<Vec<u32>> {
    ts.iter().map(tensor_bits).collect()
}

fn grad_bits(ts: &[Tensor]) -> Vec<Option<Vec<u32>>> {
    ts.iter()
        .map(|t| t.grad().as_ref().map(tensor_bits))
        .collect()
}

fn is_oom(e: &Error) -> bool {
    matches!(e, Error::Core(fucina_core::Error::OutOfMemory { .. }))
}

/// Everything an optimizer's state file holds.
fn state_of(opt: &dyn Optimizer) -> Vec<u8> {
    opt.state_bytes().unwrap()
}

/// Steps `make`'s optimizer twice (so the second step finds moments) under
/// every memory limit from the live bytes up in quarter blocks; `share`
/// holds a view of the second parameter's value (so its update must copy)
/// and a clone of its state (so its moments must be copied too).
fn step_under_every_limit<O: Optimizer>(make: impl Fn(Vec<Tensor>) -> O, share: bool) {
    // The result of two unconstrained steps.
    let want = {
        let ctx = TestCtx::with_threads(1).unwrap();
        let ps = setup(&ctx);
        let mut opt = make(ps.clone());
        opt.step().unwrap();
        opt.step().unwrap();
        (bits(&ps), state_of(&opt))
    };
    let mut failures = 0;
    for quarter in 0..40 {
        for first_fails in [true, false] {
            let ctx = TestCtx::with_threads(1).unwrap();
            let ps = setup(&ctx);
            let mut opt = make(ps.clone());
            if !first_fails {
                opt.step().unwrap();
            }
            let view = share.then(|| ps[1].value().unwrap());
            let (before, state_before) = (bits(&ps), state_of(&opt));
            let steps_before = opt.step_count();
            ctx.pool().trim();
            ctx.pool()
                .set_memory_limit(Some(ctx.stats().live_bytes + quarter * 1024));
            match opt.step() {
                Ok(()) => {}
                Err(e) => {
                    assert!(is_oom(&e), "{e}");
                    failures += 1;
                    ctx.pool().set_memory_limit(None);
                    assert_eq!(bits(&ps), before, "a failed step moved a parameter");
                    assert_eq!(
                        state_of(&opt),
                        state_before,
                        "a failed step changed the state"
                    );
                    assert_eq!(opt.step_count(), steps_before);
                    // The retry is one step, not two.
                    opt.step().unwrap();
                }
            }
            ctx.pool().set_memory_limit(None);
            if first_fails {
                opt.step().unwrap();
            }
            assert_eq!(bits(&ps), want.0, "limit +{quarter} KiB");
            assert_eq!(state_of(&opt), want.1, "limit +{quarter} KiB");
            drop((view, opt, ps));
        }
    }
    assert!(
        failures > 0,
        "no limit made the step fail: the test tests nothing"
    );
}

#[test]
fn adamw_step_is_all_or_nothing_under_every_memory_limit() {
    step_under_every_limit(
        |ps| AdamW::single(ps, AdamConfig::adamw(1e-2)).unwrap(),
        false,
    );
}

#[test]
fn adamw_step_with_shared_values_and_state_is_all_or_nothing() {
    step_under_every_limit(
        |ps| AdamW::single(ps, AdamConfig::adamw(1e-2)).unwrap(),
        true,
    );
}

#[test]
fn sgd_momentum_step_is_all_or_nothing_under_every_memory_limit() {
    step_under_every_limit(
        |ps| {
            Sgd::single(
                ps,
                SgdConfig {
                    momentum: 0.9,
                    ..SgdConfig::new(0.1)
                },
            )
            .unwrap()
        },
        true,
    );
}

#[test]
fn a_shared_moment_is_copied_before_any_parameter_moves() {
    // The second parameter's moments are shared with a snapshot of its
    // state, so its update must copy them: under a limit with no room for
    // the copy the step fails, and the first parameter has not moved.
    let ctx = TestCtx::with_threads(1).unwrap();
    let ps = setup(&ctx);
    let mut opt = AdamW::single(ps.clone(), AdamConfig::adamw(1e-2)).unwrap();
    opt.step().unwrap();
    let snapshot = opt.param_state(0, 1).unwrap().clone();
    let before = bits(&ps);
    ctx.pool().trim();
    ctx.pool()
        .set_memory_limit(Some(ctx.stats().live_bytes + 4096));
    let r = opt.step();
    ctx.pool().set_memory_limit(None);
    assert!(matches!(&r, Err(e) if is_oom(e)), "{r:?}");
    assert_eq!(bits(&ps), before);
    assert_eq!(opt.param_state(0, 0).unwrap().step, 1);
    drop((snapshot, opt, ps));
}

/// `clip_grad_norm` (or `clip_grad_value` with `by_value`) under every
/// memory limit, with a view held on every gradient so each must be copied.
fn clip_under_every_limit(by_value: bool) {
    let clip = |ps: &[Tensor]| -> Result<()> {
        if by_value {
            clip_grad_value(ps, 0.1)
        } else {
            clip_grad_norm(ps, 0.5).map(|_| ())
        }
    };
    let want = {
        let ctx = TestCtx::with_threads(1).unwrap();
        let ps = setup(&ctx);
        clip(&ps).unwrap();
        grad_bits(&ps)
    };
    let mut failures = 0;
    for quarter in 0..16 {
        let ctx = TestCtx::with_threads(1).unwrap();
        let ps = setup(&ctx);
        let views: Vec<_> = ps.iter().map(|p| p.grad_raw()).collect();
        let before = grad_bits(&ps);
        ctx.pool().trim();
        ctx.pool()
            .set_memory_limit(Some(ctx.stats().live_bytes + quarter * 1024));
        let r = clip(&ps);
        ctx.pool().set_memory_limit(None);
        match r {
            Ok(()) => assert_eq!(grad_bits(&ps), want, "limit +{quarter} KiB"),
            Err(e) => {
                assert!(is_oom(&e), "{e}");
                failures += 1;
                assert_eq!(grad_bits(&ps), before, "a failed clip changed a gradient");
                clip(&ps).unwrap();
                assert_eq!(grad_bits(&ps), want, "the retry differs");
            }
        }
        // The views still read the unclipped gradients.
        let v0 = views[0].as_ref().unwrap().to_vec::<f32>().unwrap();
        assert_eq!(
            v0.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
            before[0].clone().unwrap()
        );
        drop((views, ps));
    }
    assert!(
        failures > 0,
        "no limit made the clip fail: the test tests nothing"
    );
}

#[test]
fn clip_grad_norm_is_all_or_nothing_under_every_memory_limit() {
    clip_under_every_limit(false);
}

#[test]
fn clip_grad_value_is_all_or_nothing_under_every_memory_limit() {
    clip_under_every_limit(true);
}
