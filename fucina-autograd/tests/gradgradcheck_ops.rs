//! gradgradcheck over every row of the op suite (f64): each op's second
//! derivatives against finite differences of its recorded first derivatives.
//! An op without second-order support must be listed in
//! `gradgradcheck::NO_SECOND_ORDER` with its reason, and must then refuse
//! `create_graph` with a clear error (never a silently first-order result).

use fucina_autograd::gradgradcheck::NO_SECOND_ORDER;
use fucina_autograd::suite::{cases, make_inputs, OpCase};
use fucina_autograd::testing::TestCtx;
use fucina_autograd::{gradgradcheck, DType, Error, ExecContext, GradcheckOpts};

/// Runs `check` on every row of the suite in one test context: it pushes a
/// line per failure and returns how many checks passed. Then asserts that
/// none failed, that at least `min` passed (`what` names them) and that the
/// context is clean.
fn sweep(
    what: &str,
    min: usize,
    mut check: impl FnMut(&ExecContext, &OpCase, &mut Vec<String>) -> usize,
) {
    let tc = TestCtx::new().unwrap();
    let mut failures = Vec::new();
    let mut passed = 0;
    for case in cases() {
        passed += check(tc.ctx(), &case, &mut failures);
    }
    assert!(
        failures.is_empty(),
        "{passed} passed; failures:\n{}",
        failures.join("\n")
    );
    assert!(passed >= min, "only {passed} {what}");
    tc.check().unwrap();
}

#[test]
fn every_op_passes_gradgradcheck_or_says_why_not() {
    sweep("ops pass gradgradcheck", 45, |ctx, case, failures| {
        let xs = make_inputs(ctx, case, DType::F64, 7).unwrap();
        let r = gradgradcheck(case.f, &xs, &GradcheckOpts::f64());
        let exempt = NO_SECOND_ORDER.iter().find(|(n, _)| *n == case.name);
        match (r, exempt) {
            (Ok(_), None) => return 1,
            (Ok(_), Some(_)) => failures.push(format!(
                "{}: listed in NO_SECOND_ORDER but passes",
                case.name
            )),
            (Err(Error::NoDoubleBackward { .. }), Some(_)) => {}
            (Err(e), _) => failures.push(format!("{}: {e}", case.name)),
        }
        0
    });
}

/// The same check over every sample layout of every row (transposed,
/// narrowed, broadcast, zero-size, rank 0; f64).
#[test]
fn every_op_passes_gradgradcheck_over_its_samples() {
    use fucina_autograd::samples::samples;
    sweep("samples checked", 300, |ctx, case, failures| {
        if NO_SECOND_ORDER.iter().any(|(n, _)| *n == case.name) {
            return 0;
        }
        let mut checked = 0;
        for s in samples(ctx, case, DType::F64).unwrap() {
            if !s.inputs.iter().any(|t| t.requires_grad()) {
                continue;
            }
            match gradgradcheck(case.f, &s.inputs, &GradcheckOpts::f64()) {
                Ok(_) => checked += 1,
                Err(e) => failures.push(format!("{} ({}): {e}", case.name, s.layout.name())),
            }
        }
        checked
    });
}
