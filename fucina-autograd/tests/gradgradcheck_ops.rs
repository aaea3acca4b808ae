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
