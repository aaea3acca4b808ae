//! Cross-entropy: fast kernels vs the scalar reference at awkward sizes, every
//! reduction, ignore_index, label smoothing, i32/i64 targets and strided inputs;
//! backward vs central differences; all-ignored batches; thread-count
//! determinism; validation.

#[macro_use]
mod common;

use common::{
    assert_close_tol, assert_fd, assert_thread_invariant, fd_of, randn, tensor, tensor_bits, vals,
    SIZES,
};
use fucina_core::kernels::fused::loss::{reference as r, CrossEntropyOpts, Reduction};
use fucina_core::rng::SplitMix64;
use fucina_core::testing::TestCtx;
use fucina_core::{Element, Error, ExecContext, Float, RawTensor};

const REDUCTIONS: [Reduction; 3] = [Reduction::Mean, Reduction::Sum, Reduction::None];

/// Targets in `0..c`, with every `ignore_every`-th set to `ignore` (when given).
fn targets(seed: u64, n: usize, c: usize, ignore: Option<(i64, usize)>) -> Vec<i64> {
    let mut g = SplitMix64::new(seed);
    (0..n)
        .map(|i| match ignore {
            Some((ig, every)) if i % every == 1 => ig,
            _ => g.below(c as u64) as i64,
        })
        .collect()
}

fn target_tensor(ctx: &ExecContext, t: &[i64], i32s: bool) -> RawTensor {
    if i32s {
        let v: Vec<i32> = t.iter().map(|&x| x as i32).collect();
        ctx.from_slice(&v, &[t.len()]).unwrap()
    } else {
        ctx.from_slice(t, &[t.len()]).unwrap()
    }
}

/// The upstream gradient of a loss with `reduction`: `gyv` as an `[n]` tensor for
/// [`Reduction::None`], else the scalar `gyv[0]`.
fn upstream<T: Element>(ctx: &ExecContext, reduction: Reduction, gyv: &[T]) -> RawTensor {
    match reduction {
        Reduction::None => ctx.from_slice(gyv, &[gyv.len()]).unwrap(),
        _ => ctx.scalar(gyv[0]).unwrap(),
    }
}

/// Cross-entropy options ignoring target -100, with `label_smoothing` and `reduction`.
fn ignoring(label_smoothing: f64, reduction: Reduction) -> CrossEntropyOpts {
    CrossEntropyOpts {
        ignore_index: Some(-100),
        label_smoothing,
        reduction,
    }
}

fn assert_close<T: Float>(got: &[T], want: &[T], what: &str) {
    assert_close_tol(got, want, [(2e-5, 2e-6), (1e-12, 1e-13)], what);
}

fn option_sets() -> Vec<(Option<(i64, usize)>, CrossEntropyOpts)> {
    let mut v = Vec::new();
    for reduction in REDUCTIONS {
        let base = CrossEntropyOpts {
            reduction,
            ..CrossEntropyOpts::default()
        };
        v.push((None, base));
        v.push((
            Some((-100, 3)),
            CrossEntropyOpts {
                ignore_index: Some(-100),
                ..base
            },
        ));
        v.push((
            Some((0, 4)),
            CrossEntropyOpts {
                ignore_index: Some(0),
                label_smoothing: 0.1,
                ..base
            },
        ));
        v.push((
            None,
            CrossEntropyOpts {
                label_smoothing: 0.25,
                ..base
            },
        ));
    }
    v
}

/// Checks forward (loss, saved stats) and backward on the logits view `x`.
fn check<T: Float>(ctx: &ExecContext, x: &RawTensor, seed: u64, what: &str) {
    let (n, c) = (x.shape()[0], x.shape()[1]);
    let xv = vals::<T>(x);
    for (k, (ign, opts)) in option_sets().into_iter().enumerate() {
        let tv = targets(seed + k as u64, n, c, ign);
        let t = target_tensor(ctx, &tv, k % 2 == 1);
        let (loss, saved) = ctx.cross_entropy(x, &t, opts).unwrap();
        let want = r::cross_entropy(&xv, c, &tv, opts);
        let tag = format!("{what} opts {opts:?}");
        match opts.reduction {
            Reduction::None => assert_eq!(loss.shape(), &[n]),
            _ => assert_eq!(loss.shape(), &[] as &[usize]),
        }
        assert_close(&vals::<T>(&loss), &want, &format!("loss {tag}"));
        let count = tv.iter().filter(|&&v| Some(v) != opts.ignore_index).count();
        assert_eq!(saved.count, count);
        // Saved statistics: row max and Σ exp(x − max).
        let (sm, ss) = (vals::<T>(&saved.row_max), vals::<T>(&saved.row_sumexp));
        for i in 0..n {
            let row = &xv[i * c..(i + 1) * c];
            let m = row.iter().fold(T::NEG_INFINITY, |a, &b| a.max(b));
            assert_eq!(sm[i], m);
            let s: T = row.iter().map(|&v| (v - m).exp()).sum();
            assert_close(&[ss[i]], &[s], "row_sumexp");
        }
        let gyv: Vec<T> = match opts.reduction {
            Reduction::None => randn(seed + 99, n, 1.0),
            _ => vec![1.7],
        }
        .into_iter()
        .map(T::from_f64)
        .collect();
        let gy = upstream(ctx, opts.reduction, &gyv);
        let g = ctx
            .cross_entropy_backward(x, &t, &saved, &gy, opts)
            .unwrap();
        assert_eq!(g.shape(), &[n, c]);
        let gr = r::cross_entropy_backward(&xv, c, &tv, &gyv, opts);
        assert_close(&vals::<T>(&g), &gr, &format!("grad {tag}"));
    }
}

fn sizes_and_views<T: Float>() {
    let ctx = TestCtx::with_threads(2).unwrap();
    for (k, &c) in SIZES.iter().enumerate() {
        for n in [1, 3, 17] {
            let x = tensor::<T>(&ctx, &randn(k as u64 * 13 + n as u64, n * c, 3.0), &[n, c]);
            check::<T>(&ctx, &x, k as u64, &format!("[{n}, {c}]"));
        }
        // Transposed and narrowed logits.
        let base = tensor::<T>(&ctx, &randn(300 + k as u64, c * 5, 3.0), &[c, 5]);
        check::<T>(
            &ctx,
            &base.transpose(0, 1).unwrap(),
            7,
            &format!("transposed C {c}"),
        );
        let wide = tensor::<T>(&ctx, &randn(400 + k as u64, 4 * (c + 2), 3.0), &[4, c + 2]);
        check::<T>(
            &ctx,
            &wide.narrow(1, 2, c).unwrap(),
            8,
            &format!("narrowed C {c}"),
        );
    }
    for (k, &n) in SIZES.iter().enumerate() {
        let x = tensor::<T>(&ctx, &randn(500 + k as u64, n * 33, 3.0), &[n, 33]);
        check::<T>(&ctx, &x, k as u64, &format!("[{n}, 33]"));
    }
}

f32_f64_tests!(sizes_and_views => matches_reference_f32, matches_reference_f64);

#[test]
fn strided_targets_and_large_logits() {
    let ctx = TestCtx::with_threads(1).unwrap();
    let (n, c) = (5, 4);
    // Targets read from a stride-2 view.
    let tbase = ctx
        .from_slice(&[1i64, 9, 3, 9, 0, 9, 2, 9, 3, 9], &[n, 2])
        .unwrap();
    let t = tbase.select(1, 0).unwrap();
    assert_eq!(t.strides(), &[2]);
    let xv: Vec<f64> = randn(1, n * c, 1.0).iter().map(|v| v + 1e4).collect();
    let x = ctx.from_slice(&xv, &[n, c]).unwrap();
    let opts = CrossEntropyOpts::default();
    let (loss, _) = ctx.cross_entropy(&x, &t, opts).unwrap();
    let want = r::cross_entropy(&xv, c, &[1, 3, 0, 2, 3], opts);
    let l = loss.item::<f64>().unwrap();
    assert!(
        l.is_finite() && (l - want[0]).abs() < 1e-10,
        "{l} vs {want:?}"
    );
    drop((tbase, t, x, loss));
}

/// Central differences of L = Σ gy · loss(x) against the analytic gradient.
#[test]
fn backward_matches_finite_differences() {
    let ctx = TestCtx::with_threads(1).unwrap();
    let (n, c) = (5, 4);
    let xv = randn(21, n * c, 2.0);
    let x = ctx.from_slice(&xv, &[n, c]).unwrap();
    for (k, (ign, opts)) in option_sets().into_iter().enumerate() {
        let tv = targets(30 + k as u64, n, c, ign);
        let t = target_tensor(&ctx, &tv, false);
        let gyv = match opts.reduction {
            Reduction::None => randn(40, n, 1.0),
            _ => vec![0.7],
        };
        let gy = upstream(&ctx, opts.reduction, &gyv);
        let (_, saved) = ctx.cross_entropy(&x, &t, opts).unwrap();
        let g = ctx
            .cross_entropy_backward(&x, &t, &saved, &gy, opts)
            .unwrap()
            .to_vec::<f64>()
            .unwrap();
        let loss = |v: &[f64]| -> f64 {
            r::cross_entropy(v, c, &tv, opts)
                .iter()
                .zip(&gyv)
                .map(|(a, b)| a * b)
                .sum()
        };
        assert_fd(&g, &fd_of(&xv, loss), 1e-7, &format!("{opts:?}"));
    }
    drop(x);
}

#[test]
fn all_ignored_gives_zero_loss_and_zero_grad() {
    let ctx = TestCtx::with_threads(1).unwrap();
    let x = ctx.from_slice(&randn(3, 12, 1.0), &[3, 4]).unwrap();
    let t = ctx.from_slice(&[-100i64; 3], &[3]).unwrap();
    for reduction in REDUCTIONS {
        let opts = ignoring(0.2, reduction);
        let (loss, saved) = ctx.cross_entropy(&x, &t, opts).unwrap();
        assert_eq!(saved.count, 0);
        assert!(
            loss.to_vec::<f64>().unwrap().iter().all(|&v| v == 0.0),
            "{reduction:?}"
        );
        let gy = upstream(&ctx, reduction, &[1.0f64; 3]);
        let g = ctx
            .cross_entropy_backward(&x, &t, &saved, &gy, opts)
            .unwrap();
        assert!(g.to_vec::<f64>().unwrap().iter().all(|&v| v == 0.0));
    }
    drop((x, t));
}

fn deterministic<T: Float>() {
    let (n, c) = (2048, 65);
    let xv = randn(8, n * c, 4.0);
    let tv = targets(9, n, c, Some((-100, 7)));
    assert_thread_invariant(|ctx| {
        let x = tensor::<T>(ctx, &xv, &[n, c]);
        let t = ctx.from_slice(&tv, &[n]).unwrap();
        let mut res = Vec::new();
        for reduction in REDUCTIONS {
            let opts = ignoring(0.05, reduction);
            let (loss, saved) = ctx.cross_entropy(&x, &t, opts).unwrap();
            let gy = match reduction {
                Reduction::None => tensor::<T>(ctx, &randn(10, n, 1.0), &[n]),
                _ => ctx.scalar(T::ONE).unwrap(),
            };
            let g = ctx
                .cross_entropy_backward(&x, &t, &saved, &gy, opts)
                .unwrap();
            res.push(tensor_bits::<T>(&loss));
            res.push(tensor_bits::<T>(&saved.row_max));
            res.push(tensor_bits::<T>(&saved.row_sumexp));
            res.push(tensor_bits::<T>(&g));
        }
        res
    });
}

f32_f64_tests!(deterministic => bitwise_identical_across_thread_counts);

#[test]
fn rejects_bad_inputs() {
    let ctx = TestCtx::with_threads(1).unwrap();
    let x = ctx.from_slice(&[0.5f32; 6], &[2, 3]).unwrap();
    let opts = CrossEntropyOpts::default();
    let bad = ctx.from_slice(&[0i64, 3], &[2]).unwrap();
    assert!(matches!(
        ctx.cross_entropy(&x, &bad, opts),
        Err(Error::OutOfRange {
            what: "target",
            index: 3,
            bound: 3,
            ..
        })
    ));
    let neg = ctx.from_slice(&[-1i32, 0], &[2]).unwrap();
    assert!(matches!(
        ctx.cross_entropy(&x, &neg, opts),
        Err(Error::OutOfRange { index: -1, .. })
    ));
    // -100 is only ignored when asked.
    let ig = ctx.from_slice(&[-100i64, 0], &[2]).unwrap();
    assert!(matches!(
        ctx.cross_entropy(&x, &ig, opts),
        Err(Error::OutOfRange { .. })
    ));
    let ign = CrossEntropyOpts {
        ignore_index: Some(-100),
        ..opts
    };
    assert!(ctx.cross_entropy(&x, &ig, ign).is_ok());
    let tf = ctx.from_slice(&[0.0f32, 1.0], &[2]).unwrap();
    assert!(matches!(
        ctx.cross_entropy(&x, &tf, opts),
        Err(Error::UnsupportedDType { .. })
    ));
    let t3 = ctx.from_slice(&[0i64, 1, 2], &[3]).unwrap();
    assert!(matches!(
        ctx.cross_entropy(&x, &t3, opts),
        Err(Error::ShapeMismatch { .. })
    ));
    let x3 = ctx.from_slice(&[0.5f32; 6], &[1, 2, 3]).unwrap();
    assert!(matches!(
        ctx.cross_entropy(&x3, &t3, opts),
        Err(Error::InvalidArgument { .. })
    ));
    let smooth = CrossEntropyOpts {
        label_smoothing: 1.5,
        ..opts
    };
    let good = ctx.from_slice(&[0i64, 2], &[2]).unwrap();
    assert!(matches!(
        ctx.cross_entropy(&x, &good, smooth),
        Err(Error::InvalidArgument { .. })
    ));
    let (_, saved) = ctx.cross_entropy(&x, &good, opts).unwrap();
    let gy_bad = ctx.from_slice(&[1.0f32, 1.0], &[2]).unwrap();
    assert!(matches!(
        ctx.cross_entropy_backward(&x, &good, &saved, &gy_bad, opts),
        Err(Error::ShapeMismatch { .. })
    ));
    let gy64 = ctx.scalar(1.0f64).unwrap();
    assert!(matches!(
        ctx.cross_entropy_backward(&x, &good, &saved, &gy64, opts),
        Err(Error::DTypeMismatch { .. })
    ));
    drop((x, bad, neg, ig, tf, t3, x3, good, saved, gy_bad, gy64));
}
