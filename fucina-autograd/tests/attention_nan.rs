//! NaN through autograd's attention: a NaN in a query row or a NaN scale gives NaN
//! gradients (they used to be 0), and anomaly mode names the attention op
//! (`scaled_dot_product_attention`) with nothing committed; f32 and f64, grouped k/v heads.

use fucina_autograd::testing::TestCtx;
use fucina_autograd::{detect_anomaly, Error, Tensor};
use fucina_core::kernels::fused::attention::AttentionOpts;
use fucina_core::rng::SplitMix64;
use fucina_core::{Element, ExecContext};

fn var<T: Element>(ctx: &ExecContext, seed: u64, shape: &[usize], nan_at: Option<usize>) -> Tensor {
    let n = shape.iter().product();
    let mut v: Vec<T> = SplitMix64::new(seed)
        .vec_uniform(n, -1.0, 1.0)
        .into_iter()
        .map(T::from_f64)
        .collect();
    if let Some(i) = nan_at {
        v[i] = T::from_f64(f64::NAN);
    }
    Tensor::variable(ctx, &v, shape).unwrap()
}

/// q `[1, 4, 6, 8]` (a NaN in row 2 of head 1 when `nan_q`), k, v `[1, 2, 7, 8]`.
fn case<T: Element>(nan_q: bool, scale: Option<f64>) {
    let ctx = TestCtx::with_threads(2).unwrap();
    let q = var::<T>(&ctx, 1, &[1, 4, 6, 8], nan_q.then_some((6 + 2) * 8 + 5));
    let k = var::<T>(&ctx, 2, &[1, 2, 7, 8], None);
    let v = var::<T>(&ctx, 3, &[1, 2, 7, 8], None);
    let opts = AttentionOpts {
        causal: true,
        scale,
    };
    let loss = || {
        Tensor::scaled_dot_product_attention(&q, &k, &v, None, opts)
            .unwrap()
            .sum_all()
            .unwrap()
    };
    // Plain backward: NaN gradients, not zeros.
    let l = loss();
    assert!(l.item().unwrap().is_nan());
    l.backward().unwrap();
    drop(l);
    let gq = q.grad().unwrap().to_vec_f64().unwrap();
    let row = if nan_q {
        &gq[(6 + 2) * 8..(6 + 3) * 8]
    } else {
        &gq[..]
    };
    assert!(row.iter().all(|x| x.is_nan()), "gq: {row:?}");
    let has_nan = |t: &Tensor| {
        t.grad()
            .unwrap()
            .to_vec_f64()
            .unwrap()
            .iter()
            .any(|x| x.is_nan())
    };
    assert!(has_nan(&k));
    assert!(has_nan(&v));
    for t in [&q, &k, &v] {
        t.zero_grad();
    }
    // Anomaly mode names the op, and commits nothing.
    let l = loss();
    let r = {
        let _anomaly = detect_anomaly();
        l.backward()
    };
    drop(l);
    match r {
        Err(Error::Anomaly { op, what, .. }) => {
            assert_eq!(op, "scaled_dot_product_attention");
            assert_eq!(what, "NaN");
        }
        other => panic!("expected an anomaly in attention, got {other:?}"),
    }
    assert!(q.grad().is_none() && k.grad().is_none() && v.grad().is_none());
}

#[test]
fn a_nan_query_row_gives_nan_gradients_and_an_anomaly_f32() {
    case::<f32>(true, None);
}

#[test]
fn a_nan_query_row_gives_nan_gradients_and_an_anomaly_f64() {
    case::<f64>(true, None);
}

#[test]
fn a_nan_scale_gives_nan_gradients_and_an_anomaly() {
    case::<f32>(false, Some(f64::NAN));
    case::<f64>(false, Some(f64::NAN));
}
