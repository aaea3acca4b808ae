//! Custom ops and gradcheck: a correct op passes, a wrong backward fails with
//! the input and element named.

mod common;

use common::{a_sin_b, fn_op, Fault};
use fucina_autograd::testing::TestCtx;
use fucina_autograd::{
    custom_op, gradcheck, Error, GradcheckOpts, GradcheckReport, Result, Tensor,
};
use fucina_core::ExecContext;

fn inputs(ctx: &ExecContext) -> Vec<Tensor> {
    vec![
        Tensor::variable(ctx, &[0.3f64, -1.2, 0.8, 2.0, -0.4, 1.1], &[2, 3]).unwrap(),
        Tensor::variable(ctx, &[0.7f64, 0.1, -0.9, 1.4, -2.2, 0.5], &[2, 3]).unwrap(),
    ]
}

/// The f64 gradcheck of `then(a_sin_b(x₀, x₁))` at `xs`, `fault` in its backward.
fn check_a_sin_b(
    xs: &[Tensor],
    fault: Fault,
    then: fn(Tensor) -> Result<Tensor>,
) -> Result<GradcheckReport> {
    let op = a_sin_b(fault);
    gradcheck(
        |x| then(custom_op(op.clone(), &[&x[0], &x[1]])?),
        xs,
        &GradcheckOpts::f64(),
    )
}

#[test]
fn a_correct_custom_op_passes_gradcheck() {
    let ctx = TestCtx::with_threads(1).unwrap();
    let xs = inputs(&ctx);
    let report = check_a_sin_b(&xs, Fault::None, |y| y.tanh()).unwrap();
    assert_eq!(report.checked, 12);
    assert!(report.max_abs_err < 1e-8, "{report:?}");
    // gradcheck leaves no gradient behind in training state.
    assert!(xs.iter().all(|x| x.grad().is_none()));
    drop(xs);
}

#[test]
fn a_wrong_custom_backward_fails_naming_input_and_index() {
    let ctx = TestCtx::with_threads(1).unwrap();
    let xs = inputs(&ctx);
    // The deliberate bug: sin instead of cos in b's gradient.
    let err = check_a_sin_b(&xs, Fault::SinForCos, Ok).unwrap_err();
    match &err {
        Error::GradcheckFailed {
            input,
            index,
            failure,
            ..
        } => {
            assert_eq!(*input, 1);
            let w = failure.worst().unwrap();
            // The legacy flat index is the worst element's, and the
            // multi-index names the same element of the [2, 3] input.
            assert_eq!(*index, w.flat);
            assert_eq!(w.index, vec![w.flat / 3, w.flat % 3]);
            assert_eq!(w.tol, 1e-5 + 1e-3 * w.numerical.abs());
            // Input 0's gradient is right: every listed element is input 1's.
            assert!(failure.mismatches.iter().all(|m| m.input == 1));
            assert!(failure.failing >= 1 && failure.failing <= 6);
            assert_eq!(failure.mismatches.len(), failure.failing);
            assert_eq!(failure.layout(), "contiguous");
        }
        other => panic!("expected GradcheckFailed, got {other:?}"),
    }
    let msg = err.to_string();
    assert!(
        msg.contains("input 1 of shape [2, 3]") && msg.contains("worst element ["),
        "{msg}"
    );
    assert!(msg.contains("atol 1e-5 + rtol 1e-3 * |numerical|"), "{msg}");
}

/// The report of a failure with many wrong elements: worst first, capped
/// with "and N more", the op and sample names attached, a transposed input's
/// layout described from its strides.
#[test]
fn a_failure_lists_the_worst_elements_up_to_the_cap() {
    let ctx = TestCtx::with_threads(1).unwrap();
    // x is a [3, 4] transposed view of a contiguous [4, 3] buffer.
    let base: Vec<f64> = (0..12).map(|i| 0.1 * i as f64 - 0.5).collect();
    let raw = ctx
        .from_slice(&base, &[4, 3])
        .unwrap()
        .transpose(0, 1)
        .unwrap();
    let x = Tensor::from_raw(&ctx, raw, true).unwrap();
    // d/dx (x·x) = 2x; detach hides one path and the backward gives x: every
    // element but x = 0 is wrong by |x|, the worst at the largest |x|.
    let opts = GradcheckOpts::f64().with_max_reported(3);
    let err = gradcheck(
        |x| x[0].detach()?.mul(&x[0]),
        std::slice::from_ref(&x),
        &opts,
    )
    .unwrap_err()
    .in_gradcheck_op("square_detached")
    .on_gradcheck_sample("transposed");
    let Error::GradcheckFailed { failure, .. } = &err else {
        panic!("{err:?}")
    };
    // base[11] = 0.6 is x[2, 3] (x = baseᵀ); base[5] = 0 is right.
    assert_eq!(failure.failing, 11);
    assert_eq!(failure.mismatches.len(), 3);
    assert_eq!(failure.worst().unwrap().index, vec![2, 3]);
    assert!(failure
        .mismatches
        .windows(2)
        .all(|p| p[0].abs_err >= p[1].abs_err));
    let msg = err.to_string();
    for want in [
        "for `square_detached`",
        "sample `transposed`",
        "strided [1, 3]",
        "worst element [2, 3]",
        "11 of 12 elements fail",
        "... and 8 more",
    ] {
        assert!(msg.contains(want), "missing {want:?} in:\n{msg}");
    }
    // The value is restored with its layout.
    assert_eq!(x.raw().unwrap().strides(), &[1, 3]);
    assert_eq!(x.to_vec_f64().unwrap()[11], base[11]);
}

/// A passing report names its worst element as a multi-index.
#[test]
fn a_passing_report_names_the_worst_element_as_a_multi_index() {
    let ctx = TestCtx::with_threads(1).unwrap();
    let x = Tensor::variable(&ctx, &[0.3f64, -1.2, 0.8, 2.0, -0.4, 1.1], &[2, 3]).unwrap();
    let r = gradcheck(
        |x| x[0].exp(),
        std::slice::from_ref(&x),
        &GradcheckOpts::f64(),
    )
    .unwrap();
    let w = r.worst_element.clone().unwrap();
    assert_eq!(w, vec![r.worst_index / 3, r.worst_index % 3]);
    let shown = format!("element [{}, {}]", w[0], w[1]);
    assert!(r.to_string().contains(&shown), "{r}");
    // Fast mode compares one projection per input: no element to name.
    let r = gradcheck(|x| x[0].exp(), &[x], &GradcheckOpts::f64().fast()).unwrap();
    assert_eq!(r.worst_element, None);
    assert!(r.to_string().contains("fast mode"), "{r}");
}

#[test]
fn a_custom_backward_with_a_wrong_shape_is_an_error() {
    let ctx = TestCtx::with_threads(1).unwrap();
    let x = Tensor::variable(&ctx, &[1.0f64, 2.0], &[2]).unwrap();
    let y = custom_op(
        fn_op(
            "bad_shape",
            |ctx, x| Ok(ctx.copy(x[0])?),
            |ctx, _x, _y, _gy, _needs| Ok(vec![Some(ctx.zeros(fucina_core::DType::F64, &[7])?)]),
        ),
        &[&x],
    )
    .unwrap();
    assert!(matches!(
        y.sum_all().unwrap().backward(),
        Err(Error::GradientShapeMismatch { .. })
    ));
}

#[test]
fn gradcheck_f32_profile_and_no_variable_inputs() {
    let ctx = TestCtx::with_threads(1).unwrap();
    let x = Tensor::variable(&ctx, &[0.3f32, -0.6, 0.9], &[3]).unwrap();
    let r = gradcheck(|x| x[0].tanh()?.mul(&x[0]), &[x], &GradcheckOpts::f32()).unwrap();
    assert_eq!(r.checked, 3);
    let c = Tensor::constant(&ctx, &[1.0f64], &[1]).unwrap();
    assert!(matches!(
        gradcheck(|x| x[0].exp(), &[c], &GradcheckOpts::f64()),
        Err(Error::NoVariableInputs)
    ));
}

#[test]
fn builtin_ops_pass_gradcheck_on_noncontiguous_and_broadcast_inputs() {
    let ctx = TestCtx::with_threads(1).unwrap();
    let a = Tensor::variable(&ctx, &[0.3f64, -1.2, 0.8, 2.0, -0.4, 1.1], &[2, 3]).unwrap();
    let b = Tensor::variable(&ctx, &[0.7f64, 0.1, -0.9], &[3]).unwrap();
    let w = Tensor::variable(&ctx, &[0.2f64, -0.3, 0.5, 0.9, -0.1, 0.4], &[2, 3]).unwrap();
    let f = |x: &[Tensor]| -> Result<Tensor> {
        // aᵀ is non-contiguous; b broadcasts; w enters a matmul with a transposed view.
        let h = x[0].transpose(0, 1)?.exp()?; // [3,2]
        let m = x[2].matmul(&h)?; // [2,2]
        let s = x[0].mul(&x[1])?.sum(&[1], true)?; // [2,1]
        m.add(&s)?
            .tanh()?
            .div(&x[0].narrow(1, 0, 2)?.square()?.add_scalar(1.0)?)
    };
    let r = gradcheck(f, &[a, b, w], &GradcheckOpts::f64()).unwrap();
    assert_eq!(r.checked, 15);
}
