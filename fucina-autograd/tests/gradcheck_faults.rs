//! The fault suite: a custom op f(a, b) = a · sin(b) whose backward carries
//! one deliberate fault (a sign flip, +0.5 %, one wrong element, no gradient
//! at all, a detached path), checked by the full gradcheck and by fast mode
//! on a small and a 2,000-element input, over several seeds. Every fault
//! must fail both checks, naming input 1 (b, where the fault is), and the
//! fault-free op must pass both.

mod common;

use std::sync::Arc;

use common::{a_sin_b, Fault};
use fucina_autograd::gradcheck::unravel;
use fucina_autograd::testing::TestCtx;
use fucina_autograd::{
    custom_op, gradcheck, CustomOp, Error, GradcheckOpts, GradcheckReport, Result, Tensor,
};

const FAULTS: [Fault; 5] = [
    Fault::SignFlip,
    Fault::Scale,
    Fault::OneElement,
    Fault::Zero,
    Fault::Detach,
];

fn values(n: usize, seed: u64) -> Vec<f64> {
    let mut g = fucina_core::rng::SplitMix64::new(seed);
    g.vec_uniform(n, -1.5, 1.5)
}

/// Runs the check on an `a_sin_b` with `fault`, inputs of `shape`.
fn check(fault: Fault, shape: &[usize], opts: &GradcheckOpts) -> Result<GradcheckReport> {
    let ctx = TestCtx::with_threads(1).unwrap();
    let n: usize = shape.iter().product();
    let xs = vec![
        Tensor::variable(&ctx, &values(n, 1), shape)?,
        Tensor::variable(&ctx, &values(n, 2), shape)?,
    ];
    let op: Arc<dyn CustomOp> = a_sin_b(fault);
    let r = gradcheck(
        |x| {
            let y = custom_op(op.clone(), &[&x[0], &x[1]])?;
            if fault == Fault::Detach {
                // d/db [a sin(b) · b] = a cos(b) b + a sin(b); the detached
                // copy hides the second term.
                y.mul(&x[1].detach()?)?.tanh()
            } else {
                y.mul(&x[1])?.tanh()
            }
        },
        &xs,
        opts,
    );
    drop(xs);
    r
}

fn assert_caught(fault: Fault, shape: &[usize], opts: &GradcheckOpts) {
    let mode = if opts.fast_mode { "fast" } else { "full" };
    let err = match check(fault, shape, opts) {
        Ok(r) => panic!("{mode} check missed {fault:?} on {shape:?}: {r}"),
        Err(e) => e,
    };
    let Error::GradcheckFailed { input, failure, .. } = &err else {
        panic!("{mode} {fault:?}: expected GradcheckFailed, got {err:?}")
    };
    assert_eq!(*input, 1, "{mode} {fault:?} on {shape:?}: {err}");
    assert_eq!(failure.opts.fast_mode, opts.fast_mode);
    if opts.fast_mode {
        assert!(failure.projected.is_some(), "{err}");
    }
    if fault == Fault::OneElement {
        // Exactly the faulty element fails, named as a multi-index.
        let n: usize = shape.iter().product();
        assert_eq!(failure.failing, 1, "{mode}: {err}");
        assert_eq!(failure.worst().unwrap().index, unravel(n / 2, shape));
    } else if !opts.fast_mode {
        assert!(failure.failing > 0, "{err}");
    }
}

#[test]
fn the_fault_free_op_passes_both_checks() {
    for shape in [&[2, 3][..], &[40, 50]] {
        for seed in 0..4 {
            let opts = GradcheckOpts {
                seed,
                ..GradcheckOpts::f64()
            };
            let r = check(Fault::None, shape, &opts).unwrap();
            assert_eq!(r.checked, 2 * shape.iter().product::<usize>());
            let r = check(Fault::None, shape, &opts.fast()).unwrap();
            assert_eq!(r.checked, 2 * shape.iter().product::<usize>());
        }
    }
}

#[test]
fn the_full_check_catches_every_fault() {
    for shape in [&[2, 3][..], &[40, 50]] {
        for fault in FAULTS {
            assert_caught(fault, shape, &GradcheckOpts::f64());
        }
    }
}

#[test]
fn fast_mode_catches_every_fault() {
    for shape in [&[2, 3][..], &[40, 50]] {
        for fault in FAULTS {
            for seed in 0..4 {
                let opts = GradcheckOpts {
                    seed,
                    ..GradcheckOpts::f64()
                }
                .fast();
                assert_caught(fault, shape, &opts);
            }
        }
    }
}

/// Fast mode in f32 on 10⁴ elements: a unit direction moves each element by
/// ~1e-5, which f32 rounds; the analytical side follows the step as stored,
/// so a right gradient still passes the f32 profile, and a sign flip fails.
#[test]
fn fast_mode_in_f32_follows_the_rounded_step() {
    let ctx = TestCtx::with_threads(1).unwrap();
    let v: Vec<f32> = values(10_000, 3).into_iter().map(|x| x as f32).collect();
    let x = Tensor::variable(&ctx, &v, &[100, 100]).unwrap();
    let opts = GradcheckOpts::f32().fast();
    let r = gradcheck(|x| x[0].tanh()?.mul(&x[0]), std::slice::from_ref(&x), &opts).unwrap();
    assert_eq!(r.checked, 10_000);
    assert!(r.max_rel_err < 1e-2, "{r}");
    // 2·detach(y) − y has y's value and −y's gradient: a sign flip.
    let err = gradcheck(
        |x| {
            let y = x[0].tanh()?.mul(&x[0])?;
            y.detach()?.mul_scalar(2.0)?.sub(&y)
        },
        std::slice::from_ref(&x),
        &opts,
    );
    assert!(matches!(err, Err(Error::GradcheckFailed { .. })), "{err:?}");
    drop(x);
}
