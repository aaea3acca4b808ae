//! Attention forward/backward vs the scalar reference (awkward sizes, masks, strided
//! q/k/v), thread-count determinism, fully masked rows, f64 finite differences.

use fucina_core::kernels::attention::reference::{self, AttnDims, RefMask};
use fucina_core::kernels::attention::AttentionOpts;
use fucina_core::rng::SplitMix64;
use fucina_core::{DType, Element, Error, ExecContext, Float, RawTensor};

const ALL_SIZES: [usize; 12] = [1, 3, 7, 15, 16, 17, 31, 33, 63, 65, 127, 257];

/// The awkward sizes; their first eight (up to 33) under `FUCINA_REDUCED_SIZES`
/// (the valgrind run, `tools/valgrind-kernels.sh`).
fn sizes() -> &'static [usize] {
    if std::env::var_os("FUCINA_REDUCED_SIZES").is_some() {
        &ALL_SIZES[..8]
    } else {
        &ALL_SIZES
    }
}

fn bits<T: Element>(v: &[T]) -> Vec<u64> {
    v.iter().map(|x| x.to_f64().to_bits()).collect()
}

fn rand_vec<T: Element>(rng: &mut SplitMix64, n: usize) -> Vec<T> {
    rng.vec_uniform(n, -1.5, 1.5)
        .into_iter()
        .map(T::from_f64)
        .collect()
}

/// A `[B, H, L, D]` view laid out as `[B, L, H, D]` in storage (the usual head split).
fn heads_view<T: Element>(ctx: &ExecContext, rng: &mut SplitMix64, s: [usize; 4]) -> RawTensor {
    let v = rand_vec::<T>(rng, s.iter().product());
    ctx.from_slice(&v, &[s[0], s[2], s[1], s[3]])
        .unwrap()
        .permute(&[0, 2, 1, 3])
        .unwrap()
}

/// A `[B, H, L, D]` view whose last axis is strided (stored as `[B, H, D, L]`).
fn last_strided<T: Element>(ctx: &ExecContext, rng: &mut SplitMix64, s: [usize; 4]) -> RawTensor {
    let v = rand_vec::<T>(rng, s.iter().product());
    ctx.from_slice(&v, &[s[0], s[1], s[3], s[2]])
        .unwrap()
        .transpose(2, 3)
        .unwrap()
}

fn close<T: Float>(got: &[T], want: &[T], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let (g, w) = (g.to_f64(), w.to_f64());
        assert!(
            (g - w).abs() <= tol * (1.0 + w.abs()),
            "{what}[{i}]: got {g}, want {w}"
        );
    }
}

#[derive(Clone, Copy, Debug)]
enum MaskKind {
    None,
    Causal,
    PadBias,
    Keep,
}

/// Builds the mask tensor for a case and its full `[B,H,T,S]` expansion.
fn make_mask<T: Element>(
    ctx: &ExecContext,
    rng: &mut SplitMix64,
    kind: MaskKind,
    d: AttnDims,
) -> (Option<RawTensor>, Vec<T>, Vec<u8>) {
    let full = [d.b, d.h, d.t, d.s];
    match kind {
        MaskKind::None | MaskKind::Causal => (None, vec![], vec![]),
        MaskKind::PadBias => {
            // [B,1,1,S]: -inf on padded keys (batch b pads its last b keys), -1e4 on one.
            let mut m = vec![T::from_f64(0.0); d.b * d.s];
            for b in 0..d.b {
                for j in d.s.saturating_sub(b)..d.s {
                    m[b * d.s + j] = T::from_f64(f64::NEG_INFINITY);
                }
                if d.s > 2 {
                    m[b * d.s + 1] = T::from_f64(-1e4);
                }
            }
            let t = ctx.from_slice(&m, &[d.b, 1, 1, d.s]).unwrap();
            let f = t.broadcast_to(&full).unwrap().to_vec::<T>().unwrap();
            (Some(t), f, vec![])
        }
        MaskKind::Keep => {
            // [B,1,T,S] keep-mask with random holes; row 0 of batch 0 fully masked.
            let mut m: Vec<u8> = (0..d.b * d.t * d.s)
                .map(|_| (rng.below(4) != 0) as u8)
                .collect();
            for j in 0..d.s {
                m[j] = 0;
            }
            let t = ctx.from_slice(&m, &[d.b, 1, d.t, d.s]).unwrap();
            let f = t.broadcast_to(&full).unwrap().to_vec::<u8>().unwrap();
            (Some(t), vec![], f)
        }
    }
}

fn fwd_bwd_case<T: Float>(tol: f64) {
    let c1 = ExecContext::with_threads(1).unwrap();
    let c2 = ExecContext::with_threads(2).unwrap();
    let mut rng = SplitMix64::new(21);
    let kinds = [
        MaskKind::None,
        MaskKind::Causal,
        MaskKind::PadBias,
        MaskKind::Keep,
    ];
    let sz = sizes();
    for (n, &t) in sz.iter().enumerate() {
        let s = sz[(n + 5) % sz.len()].min(65);
        let dd = sz[(n + 2) % sz.len()].min(65);
        let dv = sz[(n + 7) % sz.len()].min(33);
        let (b, h) = if t >= 127 { (1, 2) } else { (2, 3) };
        let dims = AttnDims {
            b,
            h,
            t,
            s,
            d: dd,
            dv,
        };
        let kind = kinds[n % kinds.len()];
        let q = heads_view::<T>(&c1, &mut rng, [b, h, t, dd]);
        let k = if n % 2 == 0 {
            heads_view::<T>(&c1, &mut rng, [b, h, s, dd])
        } else {
            last_strided::<T>(&c1, &mut rng, [b, h, s, dd])
        };
        let v = heads_view::<T>(&c1, &mut rng, [b, h, s, dv]);
        let (mask, fbias, fkeep) = make_mask::<T>(&c1, &mut rng, kind, dims);
        let opts = AttentionOpts {
            causal: matches!(kind, MaskKind::Causal),
            scale: if n % 3 == 0 { Some(0.3) } else { None },
        };
        let scale = opts.scale_for(dd);
        let (qv, kv, vv) = (
            q.to_vec::<T>().unwrap(),
            k.to_vec::<T>().unwrap(),
            v.to_vec::<T>().unwrap(),
        );
        let rmask = match kind {
            MaskKind::PadBias => RefMask::Bias(&fbias),
            MaskKind::Keep => RefMask::Keep(&fkeep),
            _ => RefMask::None,
        };
        let (want_o, want_p) = reference::attention(&qv, &kv, &vv, dims, rmask, opts.causal, scale);
        let (o1, p1) = c1.attention(&q, &k, &v, mask.as_ref(), opts).unwrap();
        let (o2, p2) = c2.attention(&q, &k, &v, mask.as_ref(), opts).unwrap();
        let ctx_case = format!("case {n} {kind:?} t={t} s={s} d={dd} dv={dv}");
        assert_eq!(o1.shape(), &[b, h, t, dv]);
        assert_eq!(p1.shape(), &[b, h, t, s]);
        close(
            &o1.to_vec::<T>().unwrap(),
            &want_o,
            tol,
            &format!("out {ctx_case}"),
        );
        close(
            &p1.to_vec::<T>().unwrap(),
            &want_p,
            tol,
            &format!("probs {ctx_case}"),
        );
        assert_eq!(
            bits(&o1.to_vec::<T>().unwrap()),
            bits(&o2.to_vec::<T>().unwrap())
        );
        assert_eq!(
            bits(&p1.to_vec::<T>().unwrap()),
            bits(&p2.to_vec::<T>().unwrap())
        );
        // Backward from a random upstream gradient given as a non-contiguous view.
        let g = heads_view::<T>(&c1, &mut rng, [b, h, t, dv]);
        let gvv = g.to_vec::<T>().unwrap();
        let pv = p1.to_vec::<T>().unwrap();
        let (wq, wk, wv) = reference::attention_backward(&qv, &kv, &vv, &pv, &gvv, dims, scale);
        let r1 = c1
            .attention_backward(&q, &k, &v, &p1, &g, opts, [true; 3])
            .unwrap();
        let r2 = c2
            .attention_backward(&q, &k, &v, &p1, &g, opts, [true; 3])
            .unwrap();
        for (name, a, bb, want) in [
            ("gq", &r1.0, &r2.0, &wq),
            ("gk", &r1.1, &r2.1, &wk),
            ("gv", &r1.2, &r2.2, &wv),
        ] {
            let (a, bb) = (a.as_ref().unwrap(), bb.as_ref().unwrap());
            let av = a.to_vec::<T>().unwrap();
            close(&av, want, tol, &format!("{name} {ctx_case}"));
            assert_eq!(
                bits(&av),
                bits(&bb.to_vec::<T>().unwrap()),
                "{name} threads"
            );
        }
        assert_eq!(r1.0.as_ref().unwrap().shape(), q.shape());
        assert_eq!(r1.1.as_ref().unwrap().shape(), k.shape());
        assert_eq!(r1.2.as_ref().unwrap().shape(), v.shape());
        // Partial needs give the same tensors for what is asked, None for the rest.
        let part = c2
            .attention_backward(&q, &k, &v, &p1, &g, opts, [false, true, false])
            .unwrap();
        assert!(part.0.is_none() && part.2.is_none());
        assert_eq!(
            bits(&part.1.unwrap().to_vec::<T>().unwrap()),
            bits(&r1.1.as_ref().unwrap().to_vec::<T>().unwrap())
        );
        let part = c2
            .attention_backward(&q, &k, &v, &p1, &g, opts, [false, false, true])
            .unwrap();
        assert_eq!(
            bits(&part.2.unwrap().to_vec::<T>().unwrap()),
            bits(&r1.2.as_ref().unwrap().to_vec::<T>().unwrap())
        );
    }
    assert_eq!(c1.stats().outstanding, 0);
    assert_eq!(c2.stats().outstanding, 0);
}

#[test]
fn attention_matches_reference_f32() {
    fwd_bwd_case::<f32>(2e-5);
}

#[test]
fn attention_matches_reference_f64() {
    fwd_bwd_case::<f64>(1e-12);
}

#[test]
fn fully_masked_rows_give_zeros_not_nan() {
    let ctx = ExecContext::with_threads(2).unwrap();
    let mut rng = SplitMix64::new(22);
    let (b, h, t, s, d) = (1, 2, 4, 6, 8);
    let q = heads_view::<f32>(&ctx, &mut rng, [b, h, t, d]);
    let k = heads_view::<f32>(&ctx, &mut rng, [b, h, s, d]);
    let v = heads_view::<f32>(&ctx, &mut rng, [b, h, s, d]);
    // Row 1 of every head fully masked by -inf bias; causal with T > S masks early rows.
    let mut m = vec![0.0f32; t * s];
    for j in 0..s {
        m[s + j] = f32::NEG_INFINITY;
    }
    let mask = ctx.from_slice(&m, &[1, 1, t, s]).unwrap();
    let (o, p) = ctx
        .attention(&q, &k, &v, Some(&mask), AttentionOpts::default())
        .unwrap();
    let (ov, pv) = (o.to_vec::<f32>().unwrap(), p.to_vec::<f32>().unwrap());
    assert!(ov.iter().chain(&pv).all(|x| x.is_finite()));
    for hh in 0..h {
        let row = hh * t + 1;
        assert!(pv[row * s..(row + 1) * s].iter().all(|&x| x == 0.0));
        assert!(ov[row * d..(row + 1) * d].iter().all(|&x| x == 0.0));
        let row0 = hh * t;
        let sum: f32 = pv[row0 * s..(row0 + 1) * s].iter().sum();
        assert!((sum - 1.0).abs() < 1e-5);
    }
    let g = ctx.ones(DType::F32, &[b, h, t, d]).unwrap();
    let (gq, gk, gv) = ctx
        .attention_backward(&q, &k, &v, &p, &g, AttentionOpts::default(), [true; 3])
        .unwrap();
    for x in [gq.unwrap(), gk.unwrap(), gv.unwrap()] {
        assert!(x.to_vec::<f32>().unwrap().iter().all(|x| x.is_finite()));
    }
    // Causal with T > S: query i sees keys j <= i - (T - S); rows 0..T-S are empty.
    let q2 = heads_view::<f32>(&ctx, &mut rng, [1, 1, 5, d]);
    let k2 = heads_view::<f32>(&ctx, &mut rng, [1, 1, 3, d]);
    let v2 = heads_view::<f32>(&ctx, &mut rng, [1, 1, 3, d]);
    let causal = AttentionOpts {
        causal: true,
        scale: None,
    };
    let (_, p2) = ctx.attention(&q2, &k2, &v2, None, causal).unwrap();
    let pv2 = p2.to_vec::<f32>().unwrap();
    assert_eq!(&pv2[..6], &[0.0; 6]);
    assert_eq!(pv2[6], 1.0);
    assert_eq!(&pv2[7..9], &[0.0; 2]);
    drop((q, k, v, mask, o, p, g, q2, k2, v2, p2));
    assert_eq!(ctx.stats().outstanding, 0);
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
    let ctx = ExecContext::with_threads(2).unwrap();
    let mut rng = SplitMix64::new(seed);
    let (b, h, d, dv) = (2, 2, 4, 3);
    let shapes = [[b, h, t, d], [b, h, s, d], [b, h, s, dv]];
    let dims = AttnDims { b, h, t, s, d, dv };
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
    let (_, p) = ctx.attention(&q, &k, &v, mask.as_ref(), opts).unwrap();
    let g = ctx.from_slice(&w, &[b, h, t, dv]).unwrap();
    let (gq, gk, gv) = ctx
        .attention_backward(&q, &k, &v, &p, &g, opts, [true; 3])
        .unwrap();
    let grads = [gq.unwrap(), gk.unwrap(), gv.unwrap()];
    drop((q, k, v, p, g));
    let eps = 1e-6;
    for which in 0..3 {
        let analytic = grads[which].to_vec::<f64>().unwrap();
        for i in 0..vals[which].len() {
            let x0 = vals[which][i];
            vals[which][i] = x0 + eps;
            let lp = loss(
                &ctx,
                [&vals[0], &vals[1], &vals[2]],
                shapes,
                mask.as_ref(),
                opts,
                &w,
            );
            vals[which][i] = x0 - eps;
            let lm = loss(
                &ctx,
                [&vals[0], &vals[1], &vals[2]],
                shapes,
                mask.as_ref(),
                opts,
                &w,
            );
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
    assert_eq!(ctx.stats().outstanding, 0);
}

#[test]
fn backward_matches_finite_differences_causal() {
    finite_difference_case(5, 5, MaskKind::Causal, 31);
    finite_difference_case(3, 6, MaskKind::Causal, 32);
}

#[test]
fn backward_matches_finite_differences_padding_mask() {
    finite_difference_case(4, 6, MaskKind::PadBias, 33);
    finite_difference_case(4, 5, MaskKind::Keep, 34);
    finite_difference_case(3, 4, MaskKind::None, 35);
}

#[test]
fn argument_errors() {
    let ctx = ExecContext::with_threads(1).unwrap();
    let q = ctx.zeros(DType::F32, &[1, 2, 3, 4]).unwrap();
    let k = ctx.zeros(DType::F32, &[1, 2, 5, 4]).unwrap();
    let v = ctx.zeros(DType::F32, &[1, 2, 5, 6]).unwrap();
    let o = AttentionOpts::default();
    let bad_k = ctx.zeros(DType::F32, &[1, 2, 5, 3]).unwrap();
    assert!(matches!(
        ctx.attention(&q, &bad_k, &v, None, o),
        Err(Error::ShapeMismatch { .. })
    ));
    let bad_v = ctx.zeros(DType::F32, &[1, 2, 4, 6]).unwrap();
    assert!(matches!(
        ctx.attention(&q, &k, &bad_v, None, o),
        Err(Error::ShapeMismatch { .. })
    ));
    let k64 = ctx.zeros(DType::F64, &[1, 2, 5, 4]).unwrap();
    assert!(matches!(
        ctx.attention(&q, &k64, &v, None, o),
        Err(Error::DTypeMismatch { .. })
    ));
    let r3 = ctx.zeros(DType::F32, &[2, 3, 4]).unwrap();
    assert!(matches!(
        ctx.attention(&r3, &k, &v, None, o),
        Err(Error::InvalidArgument { .. })
    ));
    let bad_mask = ctx.zeros(DType::F32, &[1, 1, 1, 4]).unwrap();
    assert!(matches!(
        ctx.attention(&q, &k, &v, Some(&bad_mask), o),
        Err(Error::Broadcast { .. })
    ));
    let int_mask = ctx.zeros(DType::I32, &[1, 1, 1, 5]).unwrap();
    assert!(matches!(
        ctx.attention(&q, &k, &v, Some(&int_mask), o),
        Err(Error::UnsupportedDType { .. })
    ));
    let qi = ctx.zeros(DType::I64, &[1, 2, 3, 4]).unwrap();
    let ki = ctx.zeros(DType::I64, &[1, 2, 5, 4]).unwrap();
    let vi = ctx.zeros(DType::I64, &[1, 2, 5, 6]).unwrap();
    assert!(matches!(
        ctx.attention(&qi, &ki, &vi, None, o),
        Err(Error::UnsupportedDType { .. })
    ));
    // An f64 bias on f32 inputs is converted.
    let m64 = ctx.zeros(DType::F64, &[1, 1, 1, 5]).unwrap();
    let (_, p) = ctx.attention(&q, &k, &v, Some(&m64), o).unwrap();
    let g = ctx.zeros(DType::F32, &[1, 2, 3, 6]).unwrap();
    let bad_p = ctx.zeros(DType::F32, &[1, 2, 3, 4]).unwrap();
    assert!(matches!(
        ctx.attention_backward(&q, &k, &v, &bad_p, &g, o, [true; 3]),
        Err(Error::ShapeMismatch { .. })
    ));
    assert!(matches!(
        ctx.attention_backward(&q, &k, &v, &p, &bad_p, o, [true; 3]),
        Err(Error::ShapeMismatch { .. })
    ));
    drop((
        q, k, v, bad_k, bad_v, k64, r3, bad_mask, int_mask, qi, ki, vi, m64, p, g, bad_p,
    ));
    assert_eq!(ctx.stats().outstanding, 0);
}
