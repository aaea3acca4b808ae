//! gradgradcheck over every row of the op suite (f64): each op's second
//! derivatives against finite differences of its recorded first derivatives.
//! An op without second-order support must be listed in
//! `gradgradcheck::NO_SECOND_ORDER` with its reason, and must then refuse
//! `create_graph` with a clear error (never a silently first-order result).

use fucina_autograd::gradgradcheck::NO_SECOND_ORDER;
use fucina_autograd::suite::{cases, make_inputs};
use fucina_autograd::testing::TestCtx;
use fucina_autograd::{gradgradcheck, DType, Error, GradcheckOpts};

#[test]
fn every_op_passes_gradgradcheck_or_says_why_not() {
    let tc = TestCtx::new().unwrap();
    let ctx = tc.ctx();
    let mut failures = Vec::new();
    let mut passed = 0;
    for case in cases() {
        let xs = make_inputs(ctx, &case, DType::F64, 7).unwrap();
        let r = gradgradcheck(case.f, &xs, &GradcheckOpts::f64());
        let exempt = NO_SECOND_ORDER.iter().find(|(n, _)| *n == case.name);
        match (r, exempt) {
            (Ok(_), None) => passed += 1,
            (Ok(_), Some(_)) => failures.push(format!(
                "{}: listed in NO_SECOND_ORDER but passes",
                case.name
            )),
            (Err(Error::NoDoubleBackward { .. }), Some(_)) => {}
            (Err(e), _) => failures.push(format!("{}: {e}", case.name)),
        }
    }
    assert!(
        failures.is_empty(),
        "{} passed; failures:\n{}",
        passed,
        failures.join("\n")
    );
    assert!(passed >= 45, "only {passed} ops pass gradgradcheck");
    tc.check().unwrap();
}

/// The same check over every sample layout of every row (transposed,
/// narrowed, broadcast, zero-size, rank 0; f64).
#[test]
fn every_op_passes_gradgradcheck_over_its_samples() {
    use fucina_autograd::samples::samples;
    let tc = TestCtx::new().unwrap();
    let ctx = tc.ctx();
    let mut failures = Vec::new();
    let mut checked = 0;
    for case in cases() {
        if NO_SECOND_ORDER.iter().any(|(n, _)| *n == case.name) {
            continue;
        }
        for s in samples(ctx, &case, DType::F64).unwrap() {
            if !s.inputs.iter().any(|t| t.requires_grad()) {
                continue;
            }
            match gradgradcheck(case.f, &s.inputs, &GradcheckOpts::f64()) {
                Ok(_) => checked += 1,
                Err(e) => failures.push(format!("{} ({}): {e}", case.name, s.layout.name())),
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{checked} passed; failures:\n{}",
        failures.join("\n")
    );
    assert!(checked >= 300, "only {checked} samples checked");
    tc.check().unwrap();
}
