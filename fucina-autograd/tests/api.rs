//! The user-facing API of the autograd `Tensor`: operators, PyTorch-style
//! printing (pinned to `goldens/display.txt`, written by
//! `tools/gen_display_goldens.py` from PyTorch's own repr), shape arguments,
//! creation, ndarray interop, and the errors that replace silent mistakes
//! (each asserting its message says what to do).

mod common;

use common::ctx;
use fucina_autograd::testing::TestCtx;
use fucina_autograd::{
    gradcheck, ndarray, CrossEntropyOpts, DType, Error, GradcheckOpts, Reduction, Tensor,
};
use fucina_core::ExecContext;

fn f32s(ctx: &ExecContext, data: &[f32], shape: &[usize]) -> Tensor {
    Tensor::constant(ctx, data, shape).unwrap()
}

// ---------------------------------------------------------------- operators

#[test]
fn operators_match_the_named_methods_and_record_backward() {
    let ctx = ctx();
    {
        let a = Tensor::variable(&ctx, &[1.0f64, 2.0, 3.0], &[3]).unwrap();
        let b = Tensor::variable(&ctx, &[4.0f64, 5.0, 6.0], &[3]).unwrap();
        let y = (&a * &b).unwrap();
        assert_eq!(y.to_vec::<f64>().unwrap(), vec![4.0, 10.0, 18.0]);
        assert_eq!(y.grad_fn_name(), Some("mul"));
        // A Result on the left lets a chain end with one `?`.
        let z = ((&a * &b + &a).unwrap() - &b).unwrap();
        assert_eq!(z.to_vec::<f64>().unwrap(), vec![1.0, 7.0, 15.0]);
        let r = (&a + &a * &b).unwrap(); // a Result on the right
        assert_eq!(r.to_vec::<f64>().unwrap(), vec![5.0, 12.0, 21.0]);
        let r2 = (a.clone() - (&b / &a)).unwrap();
        assert_eq!(r2.to_vec::<f64>().unwrap(), vec![-3.0, -0.5, 1.0]);
        let q = (&b / &a).unwrap();
        assert_eq!(q.to_vec::<f64>().unwrap(), vec![4.0, 2.5, 2.0]);
        let n = (-&a).unwrap();
        assert_eq!(n.to_vec::<f64>().unwrap(), vec![-1.0, -2.0, -3.0]);
        // By value.
        let s = (a.clone() + b.clone()).unwrap();
        assert_eq!(s.to_vec::<f64>().unwrap(), vec![5.0, 7.0, 9.0]);
        let s2 = (a.clone() - &b).unwrap();
        assert_eq!(s2.to_vec::<f64>().unwrap(), vec![-3.0, -3.0, -3.0]);
        // d/da Σ (a·b + a − b) = b + 1, d/db = a − 1.
        z.sum_all().unwrap().backward().unwrap();
        assert_eq!(
            a.grad().unwrap().to_vec::<f64>().unwrap(),
            vec![5.0, 6.0, 7.0]
        );
        assert_eq!(
            b.grad().unwrap().to_vec::<f64>().unwrap(),
            vec![0.0, 1.0, 2.0]
        );
    }
}

#[test]
fn scalar_operators_on_both_sides() {
    let ctx = ctx();
    {
        let a = f32s(&ctx, &[1.0, 2.0, 4.0], &[3]);
        let v = |r: fucina_autograd::Result<Tensor>| r.unwrap().to_vec::<f32>().unwrap();
        assert_eq!(v(&a + 1.0), vec![2.0, 3.0, 5.0]);
        assert_eq!(v(1.0 + &a), vec![2.0, 3.0, 5.0]);
        assert_eq!(v(&a - 1.0), vec![0.0, 1.0, 3.0]);
        assert_eq!(v(1.0 - &a), vec![0.0, -1.0, -3.0]);
        assert_eq!(v(&a * 2.0), vec![2.0, 4.0, 8.0]);
        assert_eq!(v(2.0 * &a), vec![2.0, 4.0, 8.0]);
        assert_eq!(v(&a / 2.0), vec![0.5, 1.0, 2.0]);
        assert_eq!(v(4.0 / &a), vec![4.0, 2.0, 1.0]);
        assert_eq!(v(a.clone() * 3.0), vec![3.0, 6.0, 12.0]);
        assert_eq!(v(3.0 * a.clone()), vec![3.0, 6.0, 12.0]);
    }
}

#[test]
fn operator_errors_are_results_not_panics() {
    let ctx = ctx();
    {
        let a = f32s(&ctx, &[1.0, 2.0, 3.0], &[3]);
        let b = f32s(&ctx, &[1.0, 2.0], &[2]);
        assert!(matches!(&a + &b, Err(Error::Core(_))));
        let d = Tensor::constant(&ctx, &[1.0f64, 2.0, 3.0], &[3]).unwrap();
        assert!(matches!(&a * &d, Err(Error::Core(_))));
    }
}

// ---------------------------------------------------------------- display

/// The golden file's blocks, by name.
fn display_goldens() -> Vec<(String, String)> {
    let text = include_str!("goldens/display.txt");
    let mut out: Vec<(String, String)> = Vec::new();
    for line in text.lines() {
        if let Some(name) = line.strip_prefix("=== ") {
            out.push((name.to_string(), String::new()));
        } else if let Some((_, body)) = out.last_mut() {
            if !body.is_empty() {
                body.push('\n');
            }
            body.push_str(line);
        }
    }
    out
}

fn arange(ctx: &ExecContext, dtype: DType, n: usize) -> Tensor {
    Tensor::arange(ctx, dtype, 0.0, n as f64, 1.0).unwrap()
}

#[test]
fn display_matches_pytorch() {
    let ctx = ctx();
    {
        let a = Tensor::variable(&ctx, &[1.0f32, 2.0, 3.0], &[3]).unwrap();
        let f = |d: &[f32], s: &[usize]| f32s(&ctx, d, s);
        let cases: Vec<(&str, Tensor)> = vec![
            (
                "leaf_2x2",
                Tensor::variable(&ctx, &[0.1f32, -1.2, 2.0, 3.0], &[2, 2]).unwrap(),
            ),
            ("mul_result", (&a * &a).unwrap()),
            ("scalar", f(&[3.5], &[])),
            ("int_mode", f(&[1.0, 2.0, 3.0], &[3])),
            ("sci_small", f(&[1e-5, 1.0], &[2])),
            ("sci_large", f(&[1.0, 2e9], &[2])),
            ("non_finite", f(&[f32::NAN, f32::INFINITY, -1.5], &[3])),
            (
                "i64",
                Tensor::constant(&ctx, &[1i64, 2, 300], &[3]).unwrap(),
            ),
            ("i32", Tensor::constant(&ctx, &[1i32, 2, 3], &[3]).unwrap()),
            ("f64", Tensor::constant(&ctx, &[0.5f64, 1.5], &[2]).unwrap()),
            (
                "empty_0x3",
                Tensor::zeros(&ctx, DType::F32, &[0, 3]).unwrap(),
            ),
            ("empty_0", Tensor::zeros(&ctx, DType::F32, &[0]).unwrap()),
            (
                "rank3_int",
                arange(&ctx, DType::F32, 24).reshape([2, 3, 4]).unwrap(),
            ),
            ("wrap_30", (arange(&ctx, DType::F32, 30) / 8.0).unwrap()),
            ("summarized_2000", arange(&ctx, DType::F32, 2000)),
            (
                "summarized_30x40",
                (arange(&ctx, DType::F32, 1200).reshape([30, 40]).unwrap() / 8.0).unwrap(),
            ),
            (
                "summarized_10x20x20_f64",
                (arange(&ctx, DType::F64, 4000)
                    .reshape([10, 20, 20])
                    .unwrap()
                    / 4.0)
                    .unwrap(),
            ),
        ];
        let goldens = display_goldens();
        assert_eq!(goldens.len(), cases.len(), "cases and goldens out of step");
        for ((name, t), (gname, want)) in cases.iter().zip(&goldens) {
            assert_eq!(name, gname, "cases and goldens out of step");
            assert_eq!(&t.to_string(), want, "case {name}");
        }
    }
}

#[test]
fn debug_shows_shape_dtype_grad_state_and_values() {
    let ctx = ctx();
    {
        let a = Tensor::variable(&ctx, &[1.0f32, -2.0], &[2]).unwrap();
        assert_eq!(
            format!("{a:?}"),
            "Tensor { shape: [2], dtype: F32, requires_grad: true, values: [ 1., -2.] }"
        );
        let y = a.tanh().unwrap();
        let dbg = format!("{y:?}");
        assert!(dbg.contains("grad_fn: <TanhBackward>"), "{dbg}");
        assert!(dbg.contains("values: [ 0.7616, -0.9640]"), "{dbg}");
    }
}

#[test]
fn display_of_a_released_tensor_says_so() {
    let ctx = ctx();
    let a = Tensor::variable(&ctx, &[1.0f32, 2.0], &[2]).unwrap();
    let y = common::released(&ctx, || &a * 2.0);
    // The scope released value and node; shape and flags remain.
    assert_eq!(
        y.to_string(),
        "tensor(<released>, size=(2,), requires_grad=true)"
    );
    assert!(format!("{y:?}").contains("values: <released>"));
    drop((a, y));
}

// ---------------------------------------------------------------- shapes

#[test]
fn reshape_takes_any_integer_shape_with_one_inferred_axis() {
    let ctx = ctx();
    {
        let x = arange(&ctx, DType::F32, 24);
        let batch: usize = 2;
        let n: i64 = 3;
        assert_eq!(x.reshape([-1, 4]).unwrap().shape(), &[6, 4]);
        assert_eq!(x.reshape((batch, -1)).unwrap().shape(), &[2, 12]);
        assert_eq!(x.reshape((batch, n, -1)).unwrap().shape(), &[2, 3, 4]);
        assert_eq!(x.reshape([batch, 12]).unwrap().shape(), &[2, 12]);
        assert_eq!(x.reshape(vec![4usize, 6]).unwrap().shape(), &[4, 6]);
        let s: Vec<isize> = vec![-1, 2];
        assert_eq!(x.reshape(&s).unwrap().shape(), &[12, 2]);
        assert_eq!(x.reshape(&s[..]).unwrap().shape(), &[12, 2]);
        let arr: &[i64; 2] = &[-1, 12];
        assert_eq!(x.reshape(arr).unwrap().shape(), &[2, 12]);
        assert_eq!(x.view(x.shape()).unwrap().shape(), &[24]);
        let one = f32s(&ctx, &[5.0], &[1]);
        assert_eq!(one.reshape(()).unwrap().shape(), &[] as &[usize]);

        let two = x.reshape([-1, -1]).unwrap_err().to_string();
        assert!(two.contains("only one dimension can be -1"), "{two}");
        let neg = x.reshape([-2, 12]).unwrap_err().to_string();
        assert!(neg.contains("sizes are >= 0, or -1"), "{neg}");
        assert!(x.reshape([5, -1]).is_err());
        assert!(x.reshape([5usize, 5]).is_err());
    }
}

// ---------------------------------------------------------------- creation

#[test]
fn random_constructors_are_seeded_and_thread_count_independent() {
    let c1 = TestCtx::with_threads(1).unwrap();
    let c3 = TestCtx::with_threads(3).unwrap();
    {
        let a = Tensor::randn(&c1, DType::F32, &[64, 65], 7).unwrap();
        let b = Tensor::randn(&c3, DType::F32, &[64, 65], 7).unwrap();
        let c = Tensor::randn(&c1, DType::F32, &[64, 65], 8).unwrap();
        let (va, vb, vc) = (
            a.to_vec::<f32>().unwrap(),
            b.to_vec::<f32>().unwrap(),
            c.to_vec::<f32>().unwrap(),
        );
        assert_eq!(
            va.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
            vb.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
        );
        assert_ne!(va, vc);
        let mean = va.iter().map(|&x| x as f64).sum::<f64>() / va.len() as f64;
        assert!(mean.abs() < 0.1, "mean {mean}");
        assert!(!a.requires_grad() && a.is_leaf());

        let u = Tensor::uniform(&c1, DType::F64, &[1000], -2.0, 3.0, 1).unwrap();
        assert!(u
            .to_vec::<f64>()
            .unwrap()
            .iter()
            .all(|&x| (-2.0..3.0).contains(&x)));
        let r = Tensor::rand(&c1, DType::F64, &[1000], 1).unwrap();
        assert!(r
            .to_vec::<f64>()
            .unwrap()
            .iter()
            .all(|&x| (0.0..1.0).contains(&x)));
        let nrm = Tensor::normal(&c1, DType::F64, &[4], 10.0, 0.0, 1).unwrap();
        assert_eq!(nrm.to_vec::<f64>().unwrap(), vec![10.0; 4]);
        assert!(Tensor::randn(&c1, DType::I64, &[4], 1).is_err());
        let like = a.randn_like(7).unwrap();
        assert_eq!(like.to_vec::<f32>().unwrap(), va);
        assert_eq!(a.rand_like(3).unwrap().shape(), &[64, 65]);
    }
}

#[test]
fn deterministic_constructors() {
    let ctx = ctx();
    {
        let r = Tensor::arange(&ctx, DType::I64, 2.0, 11.0, 3.0).unwrap();
        assert_eq!(r.to_vec::<i64>().unwrap(), vec![2, 5, 8]);
        let l = Tensor::linspace(&ctx, DType::F64, -1.0, 1.0, 5).unwrap();
        assert_eq!(l.to_vec::<f64>().unwrap(), vec![-1.0, -0.5, 0.0, 0.5, 1.0]);
        let l1 = Tensor::linspace(&ctx, DType::F32, 3.0, 9.0, 1).unwrap();
        assert_eq!(l1.to_vec::<f32>().unwrap(), vec![3.0]);
        assert_eq!(
            Tensor::linspace(&ctx, DType::F32, 0.0, 1.0, 0)
                .unwrap()
                .shape(),
            &[0]
        );
        assert!(Tensor::linspace(&ctx, DType::F32, 0.0, f64::NAN, 3).is_err());
        let v = Tensor::from_vec(&ctx, vec![1.0f32, 2.0, 3.0, 4.0], &[2, 2]).unwrap();
        assert_eq!(
            v.zeros_like().unwrap().to_vec::<f32>().unwrap(),
            vec![0.0; 4]
        );
        assert_eq!(
            v.ones_like().unwrap().to_vec::<f32>().unwrap(),
            vec![1.0; 4]
        );
        assert_eq!(
            v.full_like(2.5).unwrap().to_vec::<f32>().unwrap(),
            vec![2.5; 4]
        );
        let full = Tensor::full(&ctx, DType::F64, &[2], -1.0).unwrap();
        assert_eq!(full.to_vec::<f64>().unwrap(), vec![-1.0, -1.0]);
        assert!(Tensor::from_vec(&ctx, vec![1.0f32; 3], &[2, 2]).is_err());
    }
}

#[test]
fn requires_grad_builder_makes_a_trainable_leaf() {
    let ctx = ctx();
    {
        let w = Tensor::randn(&ctx, DType::F64, &[3], 0)
            .unwrap()
            .requires_grad_(true)
            .unwrap();
        assert!(w.requires_grad());
        (&w * &w).unwrap().sum_all().unwrap().backward().unwrap();
        let want: Vec<f64> = w.to_vec::<f64>().unwrap().iter().map(|x| 2.0 * x).collect();
        assert_eq!(w.grad().unwrap().to_vec::<f64>().unwrap(), want);
        let y = (&w * 2.0).unwrap();
        assert!(y.requires_grad_(true).is_err(), "a non-leaf cannot change");
        let idx = Tensor::arange(&ctx, DType::I64, 0.0, 3.0, 1.0).unwrap();
        let e = idx.requires_grad_(true).unwrap_err();
        assert!(matches!(e, Error::NonFloatVariable { .. }), "{e}");
    }
}

// ---------------------------------------------------------------- ndarray

#[test]
fn ndarray_round_trip_in_any_layout() {
    let ctx = ctx();
    {
        let a = ndarray::array![[1.0f64, 2.0, 3.0], [4.0, 5.0, 6.0]];
        let t = Tensor::from_ndarray(&ctx, &a).unwrap();
        assert_eq!(t.shape(), &[2, 3]);
        assert!(!t.requires_grad());
        assert_eq!(t.to_ndarray::<f64>().unwrap(), a.clone().into_dyn());
        // A transposed (Fortran-order) view is read in logical order.
        let tt = Tensor::from_ndarray(&ctx, &a.t()).unwrap();
        assert_eq!(
            tt.to_vec::<f64>().unwrap(),
            vec![1.0, 4.0, 2.0, 5.0, 3.0, 6.0]
        );
        let back = t.t().unwrap().to_ndarray::<f64>().unwrap();
        assert_eq!(back, a.t().to_owned().into_dyn());
        // Wrong element type: an error, not a reinterpretation.
        assert!(t.to_ndarray::<f32>().is_err());
        let v = Tensor::from_ndarray(&ctx, &a)
            .unwrap()
            .requires_grad_(true)
            .unwrap();
        v.sum_all().unwrap().backward().unwrap();
        assert_eq!(
            v.grad().unwrap().to_ndarray::<f64>().unwrap(),
            ndarray::ArrayD::<f64>::ones(vec![2, 3])
        );
    }
}

// ---------------------------------------------------------------- silent mistakes

#[test]
fn variable_with_an_integer_dtype_fails_at_creation() {
    let ctx = ctx();
    let e = Tensor::variable(&ctx, &[1i64, 2, 3], &[3]).unwrap_err();
    assert!(
        matches!(
            e,
            Error::NonFloatVariable {
                op: "Tensor::variable",
                dtype: DType::I64
            }
        ),
        "{e:?}"
    );
    let msg = e.to_string();
    assert!(
        msg.contains("needs a float dtype (f32 or f64), got i64"),
        "{msg}"
    );
    assert!(
        msg.contains("use Tensor::constant for integer data"),
        "{msg}"
    );
    let c = Tensor::constant(&ctx, &[1i64, 2, 3], &[3]).unwrap();
    assert!(c.set_requires_grad(true).is_err());
    drop(c);
}

/// Asserts that `e`'s message contains every one of `parts`.
fn assert_message(e: &Error, parts: &[&str]) {
    let msg = e.to_string();
    for p in parts {
        assert!(msg.contains(p), "missing {p:?} in: {msg}");
    }
}

#[test]
fn mse_loss_with_different_shapes_is_an_error_not_a_broadcast() {
    let ctx = ctx();
    {
        let y = Tensor::variable(&ctx, &[1.0f32, 2.0, 3.0, 4.0], &[4, 1]).unwrap();
        let t = f32s(&ctx, &[1.0, 2.0, 3.0, 4.0], &[4]);
        let e = y.mse_loss(&t, Reduction::Mean).unwrap_err();
        assert!(
            matches!(e, Error::ArgumentShapeMismatch { op: "mse_loss", .. }),
            "{e:?}"
        );
        assert_message(
            &e,
            &[
                "`input` has shape [4, 1] but `target` has shape [4]",
                "no broadcasting",
                "reshape",
            ],
        );
        // The fix the message names gives the right loss (0 here).
        let ok = y
            .reshape(t.shape())
            .unwrap()
            .mse_loss(&t, Reduction::Mean)
            .unwrap();
        assert_eq!(ok.item().unwrap(), 0.0);
        for r in [
            y.bce_with_logits(&t, Reduction::Mean),
            y.huber_loss(&t, 1.0, Reduction::Mean),
        ] {
            assert!(matches!(r, Err(Error::ArgumentShapeMismatch { .. })));
        }
    }
}

#[test]
fn cross_entropy_with_one_hot_float_targets_names_the_argument() {
    let ctx = ctx();
    {
        let logits = Tensor::variable(&ctx, &[0.1f32, 0.2, 0.3, 0.4, 0.5, 0.6], &[2, 3]).unwrap();
        let one_hot = f32s(&ctx, &[0.0, 1.0, 0.0, 0.0, 0.0, 1.0], &[2, 3]);
        let e = logits
            .cross_entropy(&one_hot, CrossEntropyOpts::default())
            .unwrap_err();
        assert!(
            matches!(
                e,
                Error::WrongArgumentDType {
                    op: "cross_entropy",
                    arg: "targets",
                    ..
                }
            ),
            "{e:?}"
        );
        assert_message(
            &e,
            &[
                "targets must be integer class indices",
                "got dtype f32 with shape [2, 3]",
                "argmax",
            ],
        );
        let nll = logits
            .nll_loss(&one_hot, None, Reduction::Mean)
            .unwrap_err();
        assert!(nll
            .to_string()
            .contains("nll_loss: targets must be integer class indices"));
        // The fix the message names works.
        let idx = one_hot.argmax(-1, false).unwrap();
        assert!(logits
            .cross_entropy(&idx, CrossEntropyOpts::default())
            .is_ok());
    }
}

#[test]
fn gradcheck_on_f32_with_the_f64_profile_says_which_profile_to_use() {
    let ctx = ctx();
    {
        let x = Tensor::variable(&ctx, &[0.3f32, -0.7, 1.1], &[3]).unwrap();
        let f = |xs: &[Tensor]| xs[0].tanh();
        let e = gradcheck(f, std::slice::from_ref(&x), &GradcheckOpts::f64()).unwrap_err();
        assert!(
            matches!(e, Error::GradcheckProfile { input: 0, .. }),
            "{e:?}"
        );
        assert_message(&e, &["input 0 is f32", "pass GradcheckOpts::f32()"]);
        let report = gradcheck(f, std::slice::from_ref(&x), &GradcheckOpts::f32()).unwrap();
        assert_eq!(report.checked, 3);
        assert_eq!(report.opts, GradcheckOpts::f32());
        let text = report.to_string();
        for part in [
            "3 input elements",
            "central difference n = (f(x+eps) - f(x-eps)) / 2eps, eps = 1e-3",
            "Worst absolute error |a - n|",
            "worst relative error |a - n| / max(|a|, |n|)",
            "passes when |a - n| <= atol + rtol*|n| (atol 1e-3, rtol 1e-2)",
        ] {
            assert!(text.contains(part), "missing {part:?} in {text}");
        }
    }
}

#[test]
fn huber_loss_refuses_a_non_positive_or_nan_delta() {
    let ctx = ctx();
    {
        let y = Tensor::variable(&ctx, &[0.0f64, 3.0], &[2]).unwrap();
        let t = Tensor::constant(&ctx, &[1.0f64, 0.0], &[2]).unwrap();
        for delta in [-1.0, 0.0, f64::NAN, -0.0] {
            let r = y.huber_loss(&t, delta, Reduction::Sum);
            let msg = r.as_ref().map(|_| ()).unwrap_err().to_string();
            assert!(
                matches!(
                    r,
                    Err(Error::Core(fucina_core::Error::InvalidArgument {
                        op: "huber_loss",
                        ..
                    }))
                ),
                "delta {delta}: {msg}"
            );
            assert!(msg.contains("delta"), "{msg}");
        }
        // A positive delta is unchanged: ½·1² + 1·(3 − ½).
        let l = y.huber_loss(&t, 1.0, Reduction::Sum).unwrap();
        assert_eq!(l.item().unwrap(), 3.0);
    }
}

#[test]
fn select_out_of_range_names_select_and_the_index() {
    let ctx = ctx();
    {
        let x = Tensor::variable(&ctx, &[0.0f32; 6], &[2, 3]).unwrap();
        let e = x.select(1, usize::MAX).unwrap_err().to_string();
        assert!(e.starts_with("select: index 18446744073709551615"), "{e}");
        let e = x.select(-1, 3).unwrap_err().to_string();
        assert!(e.starts_with("select: index 3"), "{e}");
    }
}

#[test]
fn from_raw_refuses_an_integer_tensor_that_requires_a_gradient() {
    let ctx = ctx();
    {
        let ids = ctx.from_slice(&[1i64, 2, 3], &[3]).unwrap();
        let r = Tensor::from_raw(&ctx, ids.clone(), true);
        assert!(
            matches!(
                r,
                Err(Error::NonFloatVariable {
                    op: "Tensor::from_raw",
                    dtype: fucina_core::DType::I64
                })
            ),
            "{r:?}"
        );
        // As a constant it is fine, and floats may require a gradient.
        assert!(!Tensor::from_raw(&ctx, ids, false).unwrap().requires_grad());
        let x = ctx.from_slice(&[1.0f32], &[1]).unwrap();
        assert!(Tensor::from_raw(&ctx, x, true).unwrap().requires_grad());
    }
}
