//! OpInfo-style samples over the whole suite table: every row is
//! gradchecked (f64, PyTorch's tolerances) on each of its layouts, the
//! forward of every non-contiguous sample equals its contiguous copy's
//! bitwise (f32 and f64), and a layout a row does not get must be listed in
//! `SAMPLE_EXEMPTIONS` with its reason (a listed one that is made after all
//! fails too, so the list cannot go stale).

use std::collections::BTreeSet;

use fucina_autograd::samples::{
    check_samples, samples, samples_and_skips, Layout, SAMPLE_EXEMPTIONS,
};
use fucina_autograd::suite::cases;
use fucina_autograd::testing::TestCtx;
use fucina_autograd::GradcheckOpts;
use fucina_core::DType;

#[test]
fn every_op_passes_gradcheck_and_the_forward_reference_on_its_samples() {
    let ctx = TestCtx::with_threads(1).unwrap();
    let mut failures = Vec::new();
    let (mut gradchecked, mut forwards) = (0, 0);
    for case in cases() {
        match check_samples(&ctx, &case, &GradcheckOpts::f64()) {
            Ok(r) => {
                gradchecked += r.gradchecked;
                forwards += r.forwards_matched;
            }
            Err(e) => failures.push(format!("{}: {e}", case.name)),
        }
        assert_eq!(ctx.stats().outstanding, 0, "{} leaked buffers", case.name);
    }
    assert!(
        failures.is_empty(),
        "{} sample failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
    eprintln!(
        "{} rows: {gradchecked} f64 samples gradchecked, {forwards} non-contiguous forwards matched",
        cases().len()
    );
    assert!(gradchecked > 4 * cases().len(), "{gradchecked}");
}

#[test]
fn every_op_has_every_layout_or_a_written_reason() {
    let ctx = TestCtx::with_threads(1).unwrap();
    let exempt: BTreeSet<(&str, Layout)> =
        SAMPLE_EXEMPTIONS.iter().map(|(c, l, _)| (*c, *l)).collect();
    assert!(SAMPLE_EXEMPTIONS.iter().all(|(_, _, why)| why.len() > 10));
    let mut missing = Vec::new();
    let mut stale = Vec::new();
    for case in cases() {
        for dtype in [DType::F32, DType::F64] {
            let (made, skipped) = samples_and_skips(&ctx, &case, dtype).unwrap();
            for s in &skipped {
                if !exempt.contains(&(case.name, s.layout)) {
                    missing.push(format!(
                        "(\"{}\", Layout::{:?}, \"{}\"),",
                        case.name, s.layout, s.reason
                    ));
                }
            }
            for s in &made {
                if exempt.contains(&(case.name, s.layout)) {
                    stale.push(format!("{} {} ({dtype})", case.name, s.layout));
                }
            }
        }
    }
    missing.dedup();
    assert!(
        missing.is_empty(),
        "{} layouts without a written reason:\n{}",
        missing.len(),
        missing.join("\n")
    );
    assert!(stale.is_empty(), "exempted but made: {stale:?}");
}

/// The layouts are what they say: a transposed sample is strided, a narrowed
/// one has an offset, a broadcast one has a stride-0 axis, a zero-size one
/// has an empty input, a rank-0 one a scalar, and the values are the
/// contiguous copy's.
#[test]
fn samples_have_the_layout_they_are_labelled_with() {
    let ctx = TestCtx::with_threads(1).unwrap();
    let case = cases().into_iter().find(|c| c.name == "mul").unwrap();
    let all = samples(&ctx, &case, DType::F64).unwrap();
    let layouts: Vec<Layout> = all.iter().map(|s| s.layout).collect();
    assert_eq!(layouts, Layout::ALL);
    for s in &all {
        let raws: Vec<_> = s.inputs.iter().map(|t| t.raw().unwrap()).collect();
        let ok = match s.layout {
            Layout::Contiguous => raws.iter().all(|r| r.is_contiguous() && r.offset() == 0),
            Layout::Transposed => raws.iter().any(|r| !r.is_contiguous()),
            Layout::Narrowed => raws.iter().all(|r| r.offset() > 0),
            Layout::Broadcast => raws.iter().any(|r| r.strides().contains(&0)),
            Layout::ZeroSize => raws.iter().any(|r| r.numel() == 0),
            Layout::Rank0 => raws.iter().any(|r| r.rank() == 0),
        };
        assert!(ok, "{}: {raws:?}", s.layout);
        assert!(s.inputs.iter().all(|t| t.requires_grad()));
        let r = s.reference().unwrap();
        for (a, b) in s.inputs.iter().zip(&r) {
            assert!(b.raw().unwrap().is_contiguous());
            let (va, vb) = (a.to_vec_f64().unwrap(), b.to_vec_f64().unwrap());
            assert_eq!(va, vb, "{}", s.layout);
        }
    }
}

/// An op whose forward depends on the layout fails the forward reference,
/// naming the sample.
#[test]
fn a_layout_dependent_forward_fails_the_reference() {
    use fucina_autograd::suite::{InputSpec, OpCase};
    let ctx = TestCtx::with_threads(1).unwrap();
    let case = OpCase::new("layout_dependent", vec![InputSpec::float(&[3, 4])], |x| {
        let y = x[0].exp()?;
        if x[0].raw()?.is_contiguous() {
            Ok(y)
        } else {
            y.mul_scalar(1.0 + 1e-6)
        }
    });
    let err = check_samples(&ctx, &case, &GradcheckOpts::f64()).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("`layout_dependent` on the transposed f32 sample: output element [0, 0]"),
        "{msg}"
    );
}

/// An op whose gradient is wrong only on non-contiguous inputs passes the
/// contiguous gradcheck and fails on the transposed sample, the error naming
/// the op, the sample and the input's strides.
#[test]
fn a_gradient_wrong_only_off_contiguous_fails_on_its_sample() {
    use fucina_autograd::suite::{InputSpec, OpCase};
    use fucina_autograd::Error;
    let ctx = TestCtx::with_threads(1).unwrap();
    let case = OpCase::new(
        "noncontig_sign_flip",
        vec![InputSpec::float(&[3, 4])],
        |x| {
            let y = x[0].exp()?;
            if x[0].raw()?.is_contiguous() {
                Ok(y)
            } else {
                // y's value, −y's gradient.
                y.detach()?.mul_scalar(2.0)?.sub(&y)
            }
        },
    );
    let all = samples(&ctx, &case, DType::F64).unwrap();
    fucina_autograd::gradcheck(case.f, &all[0].inputs, &GradcheckOpts::f64()).unwrap();
    let err = check_samples(&ctx, &case, &GradcheckOpts::f64()).unwrap_err();
    let Error::GradcheckFailed { failure, .. } = &err else {
        panic!("{err:?}")
    };
    assert_eq!(failure.sample.as_deref(), Some("transposed"));
    assert_eq!(failure.op.as_deref(), Some("noncontig_sign_flip"));
    let msg = err.to_string();
    assert!(
        msg.contains("strided [1, 3]") && msg.contains("12 of 12 elements fail"),
        "{msg}"
    );
}
