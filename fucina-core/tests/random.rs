//! Dropout and random fills vs their reference: the counter-based mask on
//! logical indices (any strides), backward regenerating the same mask,
//! argument errors, distribution sanity and thread-count determinism.

#[macro_use]
mod common;
use common::{bits, one_and_two_threads, tensor_bits, SIZES};
use fucina_core::kernels::random::reference as r;
use fucina_core::rng::SplitMix64;
use fucina_core::testing::TestCtx;
use fucina_core::{DType, Error, ExecContext, Float};

fn dropout_vs_reference<T: Float>() {
    let ctx = TestCtx::with_threads(2).unwrap();
    for &n in &SIZES {
        let d: Vec<T> = SplitMix64::new(n as u64)
            .vec_uniform(3 * n, 0.5, 2.0)
            .iter()
            .map(|&v| T::from_f64(v))
            .collect();
        let base = ctx.from_slice(&d, &[n, 3]).unwrap();
        // A transposed view: the mask must follow the LOGICAL row-major index.
        for x in [
            base.clone_view(),
            base.transpose(0, 1).unwrap(),
            base.narrow(1, 1, 2).unwrap(),
        ] {
            for p in [0.1, 0.5, 0.9] {
                let y = ctx.dropout(&x, p, 1234).unwrap();
                assert_eq!(y.shape(), x.shape());
                let want = bits(&r::dropout::<T>(&x, p, 1234).unwrap());
                assert_eq!(
                    tensor_bits::<T>(&y),
                    want,
                    "n {n} p {p} shape {:?}",
                    x.shape()
                );
                // The backward regenerates exactly the same mask and scale.
                let gx = ctx.dropout_backward(&x, p, 1234).unwrap();
                assert_eq!(tensor_bits::<T>(&gx), want);
            }
        }
    }
    // Large (parallel chunks).
    let xs: Vec<T> = (0..100_000)
        .map(|i| T::from_f64(1.0 + i as f64 * 1e-5))
        .collect();
    let x = ctx.from_slice(&xs, &[100_000]).unwrap();
    let y = ctx.dropout(&x, 0.3, 99).unwrap();
    let want = bits(&r::dropout::<T>(&x, 0.3, 99).unwrap());
    assert_eq!(tensor_bits::<T>(&y), want);
    drop((x, y));
}

f32_f64_tests!(dropout_vs_reference => dropout_matches_reference_f32, dropout_matches_reference_f64);

#[test]
fn dropout_keep_rate_scale_and_mask_rule() {
    let ctx = TestCtx::with_threads(2).unwrap();
    {
        let n = 200_000;
        let x = ctx.ones(DType::F64, &[n]).unwrap();
        for p in [0.1, 0.5, 0.8] {
            let y = ctx.dropout(&x, p, 7).unwrap().to_vec::<f64>().unwrap();
            let kept = y.iter().filter(|&&v| v != 0.0).count();
            let rate = kept as f64 / n as f64;
            assert!((rate - (1.0 - p)).abs() < 0.01, "p {p}: keep rate {rate}");
            assert!(y.iter().all(|&v| v == 0.0 || v == 1.0 / (1.0 - p)));
            // The documented rule, spelled out.
            let thr = ((1.0 - p) * (1u64 << 53) as f64).ceil() as u64;
            for (i, &v) in y.iter().enumerate().take(1000) {
                let keep = (fucina_core::rng::at(7, i as u64) >> 11) < thr;
                assert_eq!(v != 0.0, keep);
            }
        }
        // Different seeds give different masks.
        let a = ctx.dropout(&x, 0.5, 1).unwrap().to_vec::<f64>().unwrap();
        let b = ctx.dropout(&x, 0.5, 2).unwrap().to_vec::<f64>().unwrap();
        assert_ne!(a, b);
    }
}

#[test]
fn dropout_p_zero_and_errors() {
    let ctx = TestCtx::with_threads(1).unwrap();
    {
        let x = ctx.ones(DType::F32, &[4]).unwrap();
        let y = ctx.dropout(&x, 0.0, 3).unwrap();
        assert!(y.buffer().same_as(x.buffer()), "p == 0 is a clone_view");
        let g = ctx.dropout_backward(&x, 0.0, 3).unwrap();
        assert!(g.buffer().same_as(x.buffer()));
        for p in [1.0, -0.1, 1.5, f64::NAN] {
            assert!(
                matches!(ctx.dropout(&x, p, 3), Err(Error::InvalidArgument { .. })),
                "p {p}"
            );
            assert!(matches!(
                ctx.dropout_backward(&x, p, 3),
                Err(Error::InvalidArgument { .. })
            ));
        }
        let h = ctx.zeros(DType::F16, &[4]).unwrap();
        assert!(matches!(
            ctx.dropout(&h, 0.5, 3),
            Err(Error::UnsupportedDType { .. })
        ));
        assert!(matches!(
            ctx.rand_uniform(DType::BF16, &[2], 0.0, 1.0, 0),
            Err(Error::UnsupportedDType { .. })
        ));
        assert!(matches!(
            ctx.randn(DType::I32, &[2], 0.0, 1.0, 0),
            Err(Error::UnsupportedDType { .. })
        ));
        assert!(matches!(
            ctx.rand_uniform(DType::F32, &[2], 1.0, 0.0, 0),
            Err(Error::InvalidArgument { .. })
        ));
        assert!(matches!(
            ctx.randn(DType::F32, &[2], 0.0, -1.0, 0),
            Err(Error::InvalidArgument { .. })
        ));
        assert!(matches!(
            ctx.randn(DType::F32, &[2], f64::NAN, 1.0, 0),
            Err(Error::InvalidArgument { .. })
        ));
    }
}

fn fills_vs_reference<T: Float>() {
    let ctx = TestCtx::with_threads(2).unwrap();
    for &n in SIZES.iter().chain(&[70_000]) {
        let u = ctx.rand_uniform(T::DTYPE, &[n], -2.0, 3.0, 11).unwrap();
        assert_eq!(u.shape(), &[n]);
        let want = bits(&r::rand_uniform::<T>(n, -2.0, 3.0, 11));
        assert_eq!(tensor_bits::<T>(&u), want);
        let g = ctx.randn(T::DTYPE, &[n, 1], 1.0, 0.5, 12).unwrap();
        assert_eq!(g.shape(), &[n, 1]);
        let want = bits(&r::randn::<T>(n, 1.0, 0.5, 12));
        assert_eq!(tensor_bits::<T>(&g), want);
    }
}

f32_f64_tests!(fills_vs_reference => fills_match_reference_f32, fills_match_reference_f64);

#[test]
fn fill_distributions() {
    let ctx = TestCtx::with_threads(2).unwrap();
    {
        let n = 200_000;
        let u = ctx
            .rand_uniform(DType::F64, &[n], -1.0, 3.0, 5)
            .unwrap()
            .to_vec::<f64>()
            .unwrap();
        assert!(u.iter().all(|&v| (-1.0..3.0).contains(&v)));
        let mean = u.iter().sum::<f64>() / n as f64;
        assert!((mean - 1.0).abs() < 0.02, "uniform mean {mean}");
        let g = ctx
            .randn(DType::F64, &[n], 2.0, 3.0, 6)
            .unwrap()
            .to_vec::<f64>()
            .unwrap();
        let mean = g.iter().sum::<f64>() / n as f64;
        let var = g.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n as f64;
        assert!((mean - 2.0).abs() < 0.03, "normal mean {mean}");
        assert!((var.sqrt() - 3.0).abs() < 0.03, "normal std {}", var.sqrt());
    }
}

#[test]
fn thread_count_determinism() {
    let (c1, c2) = one_and_two_threads();
    let run = |ctx: &ExecContext| -> Vec<Vec<u64>> {
        let x = ctx
            .rand_uniform(DType::F32, &[300, 400], 0.0, 1.0, 1)
            .unwrap();
        let xt = x.transpose(0, 1).unwrap();
        vec![
            tensor_bits::<f32>(&x),
            tensor_bits::<f32>(&ctx.randn(DType::F32, &[300, 400], 0.0, 1.0, 2).unwrap()),
            tensor_bits::<f32>(&ctx.dropout(&xt, 0.25, 3).unwrap()),
            tensor_bits::<f32>(&ctx.dropout_backward(&x, 0.25, 3).unwrap()),
        ]
    };
    assert_eq!(run(&c1), run(&c2));
}
