//! Streaming attention forward/backward vs the scalar reference (awkward sizes, masks,
//! causal, strided q/k/v, several key and query blocks), bitwise equality at 1 and 2
//! threads, fully masked rows, f64 finite differences, argument errors, and memory that
//! grows linearly in the sequence length; grouped-query attention (k/v heads shared by
//! groups of query heads, multi-query) the same ways (its edge cases: `attention_gqa.rs`).
//! The cases and their inputs are in `attention/cases.rs`, which the benchmark's
//! materialising kernel is checked on too (`benches/tests/materialising.rs`).

#[macro_use]
#[path = "common/errors.rs"]
mod errors;
#[macro_use]
#[path = "common/macros.rs"]
mod macros;
#[path = "attention/cases.rs"]
mod cases;

use cases::*;
use fucina_core::kernels::fused::attention::reference::{self, AttnDims};
use fucina_core::kernels::fused::attention::AttentionOpts;
use fucina_core::rng::SplitMix64;
use fucina_core::testing::TestCtx;
use fucina_core::{DType, Element, Error, ExecContext, Float, RawTensor};

fn assert_bits_eq<T: Element>(a: &RawTensor, b: &RawTensor, what: &str) {
    assert_eq!(
        bits(&a.to_vec::<T>().unwrap()),
        bits(&b.to_vec::<T>().unwrap()),
        "{what}: 1 vs 2 threads"
    );
}

fn fwd_bwd_case<T: Float>(tol: f64) {
    fwd_bwd_cases::<T>(&cases(), tol, 21);
}

fn fwd_bwd_cases<T: Float>(cases: &[Case], tol: f64, seed: u64) {
    each_problem::<T>(cases, seed, |c1, c2, n, case, p| {
        let AttnDims { b, h, t, dv, .. } = case.dims;
        let (q, k, v, g, opts) = (&p.q, &p.k, &p.v, &p.g, p.opts);
        let want_lse = reference::attention_lse(&p.qv, &p.kv, p.dims, p.rmask(), opts.causal, p.sc);
        let (o1, l1) = c1.attention(q, k, v, p.mask.as_ref(), opts).unwrap();
        let (o2, l2) = c2.attention(q, k, v, p.mask.as_ref(), opts).unwrap();
        let what = format!("case {n} {case:?}");
        assert_eq!(o1.shape(), &[b, h, t, dv]);
        assert_eq!(l1.shape(), &[b, h, t]);
        close(
            &o1.to_vec::<T>().unwrap(),
            &p.want_o,
            tol,
            &format!("out {what}"),
        );
        let lv = l1.to_vec::<T>().unwrap();
        for (i, (&g, &w)) in lv.iter().zip(&want_lse).enumerate() {
            if w.to_f64() == f64::NEG_INFINITY {
                assert_eq!(g.to_f64(), f64::NEG_INFINITY, "lse[{i}] {what}");
            } else {
                close(&[g], &[w], tol, &format!("lse[{i}] {what}"));
            }
        }
        assert_bits_eq::<T>(&o1, &o2, &format!("out {what}"));
        assert_bits_eq::<T>(&l1, &l2, &format!("lse {what}"));
        // Backward from a random upstream gradient given as a non-contiguous view.
        let m = p.mask.as_ref();
        let r1 = c1
            .attention_backward(q, k, v, m, &o1, &l1, g, opts, [true; 3])
            .unwrap();
        let r2 = c2
            .attention_backward(q, k, v, m, &o1, &l1, g, opts, [true; 3])
            .unwrap();
        for ((name, a, bb), want) in [
            ("gq", &r1.0, &r2.0),
            ("gk", &r1.1, &r2.1),
            ("gv", &r1.2, &r2.2),
        ]
        .into_iter()
        .zip(&p.want_g)
        {
            let (a, bb) = (a.as_ref().unwrap(), bb.as_ref().unwrap());
            close(
                &a.to_vec::<T>().unwrap(),
                want,
                tol,
                &format!("{name} {what}"),
            );
            assert_bits_eq::<T>(a, bb, &format!("{name} {what}"));
        }
        assert_eq!(r1.0.as_ref().unwrap().shape(), q.shape());
        assert_eq!(r1.1.as_ref().unwrap().shape(), k.shape());
        assert_eq!(r1.2.as_ref().unwrap().shape(), v.shape());
        // Partial needs give the same tensors for what is asked, None for the rest.
        for (which, needs) in [
            [false, true, false],
            [false, false, true],
            [true, false, false],
        ]
        .into_iter()
        .enumerate()
        {
            let part = c2
                .attention_backward(q, k, v, m, &o1, &l1, g, opts, needs)
                .unwrap();
            let got = [&part.0, &part.1, &part.2];
            let full = [&r1.0, &r1.1, &r1.2];
            for i in 0..3 {
                assert_eq!(got[i].is_some(), needs[i], "needs {which}");
                if let (Some(x), Some(y)) = (got[i], full[i]) {
                    assert_bits_eq::<T>(x, y, &format!("partial {which} {what}"));
                }
            }
        }
    });
}

f32_f64_tests!(fwd_bwd_case(2e-5; 1e-11) => attention_matches_reference_f32, attention_matches_reference_f64);

f32_f64_tests!(fwd_bwd_cases(&gqa_cases(), 2e-5, 23; &gqa_cases(), 1e-11, 24) => grouped_query_attention_matches_reference_f32, grouped_query_attention_matches_reference_f64);

#[test]
fn fully_masked_rows_give_zeros_not_nan() {
    let ctx = TestCtx::with_threads(2).unwrap();
    let mut rng = SplitMix64::new(22);
    let (b, h, t, s, d) = (1, 2, 4, 6, 8);
    let q = heads_view::<f32>(&ctx, &mut rng, [b, h, t, d]);
    let k = heads_view::<f32>(&ctx, &mut rng, [b, h, s, d]);
    let v = heads_view::<f32>(&ctx, &mut rng, [b, h, s, d]);
    // Row 1 of every head fully masked by -inf bias.
    let mut m = vec![0.0f32; t * s];
    for j in 0..s {
        m[s + j] = f32::NEG_INFINITY;
    }
    let mask = ctx.from_slice(&m, &[1, 1, t, s]).unwrap();
    let o = AttentionOpts::default();
    let (out, lse) = ctx.attention(&q, &k, &v, Some(&mask), o).unwrap();
    let (ov, lv) = (out.to_vec::<f32>().unwrap(), lse.to_vec::<f32>().unwrap());
    assert!(ov.iter().all(|x| x.is_finite()));
    for hh in 0..h {
        let row = hh * t + 1;
        assert!(ov[row * d..(row + 1) * d].iter().all(|&x| x == 0.0));
        assert_eq!(lv[row], f32::NEG_INFINITY);
        assert!(lv[hh * t].is_finite());
    }
    let g = ctx.ones(DType::F32, &[b, h, t, d]).unwrap();
    let (gq, gk, gv) = ctx
        .attention_backward(&q, &k, &v, Some(&mask), &out, &lse, &g, o, [true; 3])
        .unwrap();
    let gqv = gq.unwrap().to_vec::<f32>().unwrap();
    for x in [
        &gqv,
        &gk.unwrap().to_vec().unwrap(),
        &gv.unwrap().to_vec().unwrap(),
    ] {
        assert!(x.iter().all(|x: &f32| x.is_finite()));
    }
    for hh in 0..h {
        let row = hh * t + 1;
        assert!(gqv[row * d..(row + 1) * d].iter().all(|&x| x == 0.0));
    }
    // Causal with T > S: query i sees keys j <= i - (T - S); rows 0..T-S see none.
    let q2 = heads_view::<f32>(&ctx, &mut rng, [1, 1, 5, d]);
    let k2 = heads_view::<f32>(&ctx, &mut rng, [1, 1, 3, d]);
    let v2 = heads_view::<f32>(&ctx, &mut rng, [1, 1, 3, d]);
    let causal = AttentionOpts {
        causal: true,
        scale: None,
    };
    let (o2, l2) = ctx.attention(&q2, &k2, &v2, None, causal).unwrap();
    let (ov2, lv2) = (o2.to_vec::<f32>().unwrap(), l2.to_vec::<f32>().unwrap());
    assert!(ov2[..2 * d].iter().all(|&x| x == 0.0));
    assert_eq!(&lv2[..2], &[f32::NEG_INFINITY; 2]);
    // Row 2 sees key 0 only: its output is v[0] exactly (probability 1).
    assert_eq!(&ov2[2 * d..3 * d], &v2.to_vec::<f32>().unwrap()[..d]);
    let g2 = ctx.ones(DType::F32, &[1, 1, 5, d]).unwrap();
    let (gq2, _, _) = ctx
        .attention_backward(&q2, &k2, &v2, None, &o2, &l2, &g2, causal, [true; 3])
        .unwrap();
    let gq2 = gq2.unwrap().to_vec::<f32>().unwrap();
    assert!(gq2[..2 * d].iter().all(|&x| x == 0.0));
    drop((q, k, v, mask, out, lse, g, q2, k2, v2, o2, l2, g2));
}

/// Σ out ∘ w for the given inputs (the loss whose gradient the backward returns for g = w).
fn loss(
    ctx: &ExecContext,
    qkv: [&[f64]; 3],
    shapes: [[usize; 4]; 3],
    mask: Option<&RawTensor>,
    opts: AttentionOpts,
    w: &[f64],
) -> f64 {
    let q = ctx.from_slice(qkv[0], &shapes[0]).unwrap();
    let k = ctx.from_slice(qkv[1], &shapes[1]).unwrap();
    let v = ctx.from_slice(qkv[2], &shapes[2]).unwrap();
    let (o, _) = ctx.attention(&q, &k, &v, mask, opts).unwrap();
    o.to_vec::<f64>()
        .unwrap()
        .iter()
        .zip(w)
        .map(|(a, b)| a * b)
        .sum()
}

fn finite_difference_case(t: usize, s: usize, mask_kind: MaskKind, seed: u64) {
    finite_difference_heads(t, s, mask_kind, seed, (2, 2));
}

/// As [`finite_difference_case`] with `heads` = (H, Hkv) query and k/v heads.
fn finite_difference_heads(
    t: usize,
    s: usize,
    mask_kind: MaskKind,
    seed: u64,
    (h, hkv): (usize, usize),
) {
    let ctx = TestCtx::with_threads(2).unwrap();
    let mut rng = SplitMix64::new(seed);
    let (b, d, dv) = (2, 4, 3);
    let shapes = [[b, h, t, d], [b, hkv, s, d], [b, hkv, s, dv]];
    let dims = AttnDims {
        b,
        h,
        hkv,
        t,
        s,
        d,
        dv,
    };
    let mut vals: Vec<Vec<f64>> = shapes
        .iter()
        .map(|sh| rand_vec::<f64>(&mut rng, sh.iter().product()))
        .collect();
    let w = rand_vec::<f64>(&mut rng, b * h * t * dv);
    let (mask, _, _) = make_mask::<f64>(&ctx, &mut rng, mask_kind, dims);
    let opts = AttentionOpts {
        causal: matches!(mask_kind, MaskKind::Causal),
        scale: Some(0.7),
    };
    let q = ctx.from_slice(&vals[0], &shapes[0]).unwrap();
    let k = ctx.from_slice(&vals[1], &shapes[1]).unwrap();
    let v = ctx.from_slice(&vals[2], &shapes[2]).unwrap();
    let (o, lse) = ctx.attention(&q, &k, &v, mask.as_ref(), opts).unwrap();
    let g = ctx.from_slice(&w, &[b, h, t, dv]).unwrap();
    let (gq, gk, gv) = ctx
        .attention_backward(&q, &k, &v, mask.as_ref(), &o, &lse, &g, opts, [true; 3])
        .unwrap();
    let grads = [gq.unwrap(), gk.unwrap(), gv.unwrap()];
    drop((q, k, v, o, lse, g));
    let eps = 1e-6;
    let loss_at =
        |v: &[Vec<f64>]| loss(&ctx, [&v[0], &v[1], &v[2]], shapes, mask.as_ref(), opts, &w);
    for which in 0..3 {
        let analytic = grads[which].to_vec::<f64>().unwrap();
        for i in 0..vals[which].len() {
            let x0 = vals[which][i];
            vals[which][i] = x0 + eps;
            let lp = loss_at(&vals);
            vals[which][i] = x0 - eps;
            let lm = loss_at(&vals);
            vals[which][i] = x0;
            let fd = (lp - lm) / (2.0 * eps);
            assert!(
                (fd - analytic[i]).abs() <= 1e-7 * (1.0 + fd.abs()),
                "{mask_kind:?} input {which} element {i}: fd {fd} analytic {}",
                analytic[i]
            );
        }
    }
    drop((grads, mask));
}

#[test]
fn backward_matches_finite_differences_causal() {
    finite_difference_case(5, 5, MaskKind::Causal, 31);
    finite_difference_case(3, 6, MaskKind::Causal, 32);
}

#[test]
fn grouped_query_backward_matches_finite_differences() {
    finite_difference_heads(5, 5, MaskKind::Causal, 36, (4, 2));
    finite_difference_heads(4, 6, MaskKind::Keep, 37, (3, 1));
    finite_difference_heads(3, 5, MaskKind::HeadBias, 38, (4, 1));
}

#[test]
fn backward_matches_finite_differences_padding_mask() {
    finite_difference_case(4, 6, MaskKind::PadBias, 33);
    finite_difference_case(4, 5, MaskKind::Keep, 34);
    finite_difference_case(3, 4, MaskKind::None, 35);
}

#[test]
fn argument_errors() {
    let ctx = TestCtx::with_threads(1).unwrap();
    let q = ctx.zeros(DType::F32, &[1, 2, 3, 4]).unwrap();
    let k = ctx.zeros(DType::F32, &[1, 2, 5, 4]).unwrap();
    let v = ctx.zeros(DType::F32, &[1, 2, 5, 6]).unwrap();
    let o = AttentionOpts::default();
    let bad_k = ctx.zeros(DType::F32, &[1, 2, 5, 3]).unwrap();
    assert_err!(ctx.attention(&q, &bad_k, &v, None, o) => Error::ShapeMismatch { .. });
    let bad_v = ctx.zeros(DType::F32, &[1, 2, 4, 6]).unwrap();
    assert_err!(ctx.attention(&q, &k, &bad_v, None, o) => Error::ShapeMismatch { .. });
    let k64 = ctx.zeros(DType::F64, &[1, 2, 5, 4]).unwrap();
    assert_err!(ctx.attention(&q, &k64, &v, None, o) => Error::DTypeMismatch { .. });
    let r3 = ctx.zeros(DType::F32, &[2, 3, 4]).unwrap();
    assert_err!(ctx.attention(&r3, &k, &v, None, o) => Error::InvalidArgument { .. });
    let bad_mask = ctx.zeros(DType::F32, &[1, 1, 1, 4]).unwrap();
    assert_err!(ctx.attention(&q, &k, &v, Some(&bad_mask), o) => Error::Broadcast { .. });
    let int_mask = ctx.zeros(DType::I32, &[1, 1, 1, 5]).unwrap();
    assert_err!(ctx.attention(&q, &k, &v, Some(&int_mask), o) => Error::UnsupportedDType { .. });
    let qi = ctx.zeros(DType::I64, &[1, 2, 3, 4]).unwrap();
    let ki = ctx.zeros(DType::I64, &[1, 2, 5, 4]).unwrap();
    let vi = ctx.zeros(DType::I64, &[1, 2, 5, 6]).unwrap();
    assert_err!(ctx.attention(&qi, &ki, &vi, None, o) => Error::UnsupportedDType { .. });
    // An f64 bias on f32 inputs is converted.
    let m64 = ctx.zeros(DType::F64, &[1, 1, 1, 5]).unwrap();
    let (out, lse) = ctx.attention(&q, &k, &v, Some(&m64), o).unwrap();
    let g = ctx.zeros(DType::F32, &[1, 2, 3, 6]).unwrap();
    let bad = ctx.zeros(DType::F32, &[1, 2, 3, 4]).unwrap();
    let m = Some(&m64);
    assert_err!(ctx.attention_backward(&q, &k, &v, m, &bad, &lse, &g, o, [true; 3])
        => Error::ShapeMismatch { .. });
    assert_err!(ctx.attention_backward(&q, &k, &v, m, &out, &bad, &g, o, [true; 3])
        => Error::ShapeMismatch { .. });
    assert_err!(ctx.attention_backward(&q, &k, &v, m, &out, &lse, &bad, o, [true; 3])
        => Error::ShapeMismatch { .. });
    assert_err!(ctx.attention_backward(&q, &k, &v, Some(&bad_mask), &out, &lse, &g, o, [true; 3])
        => Error::Broadcast { .. });
    let lse64 = ctx.zeros(DType::F64, &[1, 2, 3]).unwrap();
    assert_err!(ctx.attention_backward(&q, &k, &v, m, &out, &lse64, &g, o, [true; 3])
        => Error::DTypeMismatch { .. });
    drop((
        q, k, v, bad_k, bad_v, k64, r3, bad_mask, int_mask, qi, ki, vi, m64, out, lse, g, bad,
        lse64,
    ));
}

/// Peak live pool bytes of one f32 forward + backward (B = 1, H = 2, D = 32) at length
/// `t`, above what was live before (the inputs).
fn peak_bytes(t: usize, causal: bool) -> usize {
    let ctx = TestCtx::with_threads(2).unwrap();
    let mut rng = SplitMix64::new(41);
    let shape = [1, 2, t, 32];
    let [q, k, v, g] = [0; 4].map(|_| layout_tensor::<f32>(&ctx, &mut rng, 2, shape));
    let opts = AttentionOpts {
        causal,
        scale: None,
    };
    let base = ctx.stats().live_bytes;
    let (outs, peak) = peak_above(&ctx, base, || {
        let (o, lse) = ctx.attention(&q, &k, &v, None, opts).unwrap();
        let grads = ctx
            .attention_backward(&q, &k, &v, None, &o, &lse, &g, opts, [true; 3])
            .unwrap();
        (o, lse, grads)
    });
    drop((q, k, v, g, outs));
    peak
}

#[test]
fn memory_grows_linearly_in_sequence_length() {
    for causal in [false, true] {
        let (small, large) = (peak_bytes(256, causal), peak_bytes(1024, causal));
        // Quadratic storage ([T, S] probabilities) would be 16x; the outputs alone are 4x.
        assert!(
            large <= 5 * small,
            "causal={causal}: peak {large} bytes at T=1024 vs {small} at T=256"
        );
        // And nothing close to one head's [T, S] block is ever live.
        assert!(large < 1024 * 1024 * 4, "peak {large} bytes at T=1024");
    }
}
