//! Streaming attention forward/backward vs the scalar reference (awkward sizes, masks,
//! causal, strided q/k/v, several key and query blocks), bitwise equality at 1 and 2
//! threads, fully masked rows, f64 finite differences, argument errors, and memory that
//! grows linearly in the sequence length; grouped-query attention (k/v heads shared by
//! groups of query heads, multi-query) the same ways (its edge cases: `attention_gqa.rs`).

use fucina_core::kernels::fused::attention::reference::{self, AttnDims, RefMask};
use fucina_core::kernels::fused::attention::{materialising, AttentionOpts};
use fucina_core::rng::SplitMix64;
use fucina_core::testing::TestCtx;
use fucina_core::{DType, Element, Error, ExecContext, Float, RawTensor};

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
    /// A `[1, H, T, S]` bias that differs per query head (and row).
    HeadBias,
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
        MaskKind::HeadBias => {
            let m = rand_vec::<T>(rng, d.h * d.t * d.s);
            let t = ctx.from_slice(&m, &[1, d.h, d.t, d.s]).unwrap();
            let f = t.broadcast_to(&full).unwrap().to_vec::<T>().unwrap();
            (Some(t), f, vec![])
        }
    }
}

/// One problem: shapes, mask, layouts; checked against the reference at 1 and 2 threads.
#[derive(Clone, Copy, Debug)]
struct Case {
    b: usize,
    h: usize,
    /// K/V heads (dividing `h`).
    hkv: usize,
    t: usize,
    s: usize,
    d: usize,
    dv: usize,
    kind: MaskKind,
    causal: bool,
    /// 0: [B,L,H,D] head views; 1: k with a strided last axis; 2: contiguous.
    layout: usize,
    scale: Option<f64>,
}

/// The sizes the brief asks for: T, S in {1, 3, 17, 33, 65, 127} (every pair), head dims
/// cycling through {1, 7, 16, 64}, every mask kind with and without causal, three layouts;
/// plus a few multi-block shapes (T < S and T > S).
fn cases() -> Vec<Case> {
    const LENS: [usize; 6] = [1, 3, 17, 33, 65, 127];
    const DIMS: [usize; 4] = [1, 7, 16, 64];
    let kinds = [MaskKind::None, MaskKind::PadBias, MaskKind::Keep];
    let mut out = Vec::new();
    let mut n = 0;
    for &t in &LENS {
        for &s in &LENS {
            let (b, h) = if t * s >= 64 * 64 { (1, 2) } else { (2, 3) };
            out.push(Case {
                b,
                h,
                hkv: h,
                t,
                s,
                d: DIMS[n % 4],
                dv: DIMS[(n / 4 + n) % 4],
                kind: kinds[n % 3],
                causal: (n / 3) % 2 == 1,
                layout: n % 3,
                scale: if n % 5 == 0 { Some(0.3) } else { None },
            });
            n += 1;
        }
    }
    for (t, s, d, kind, causal) in [
        (130, 257, 16, MaskKind::PadBias, true),
        (257, 130, 33, MaskKind::Keep, true),
        (200, 200, 64, MaskKind::None, true),
        (129, 190, 40, MaskKind::PadBias, false),
    ] {
        out.push(Case {
            b: 1,
            h: 2,
            hkv: 2,
            t,
            s,
            d,
            dv: d,
            kind,
            causal,
            layout: n % 3,
            scale: None,
        });
        n += 1;
    }
    out
}

fn layout_tensor<T: Element>(
    ctx: &ExecContext,
    rng: &mut SplitMix64,
    layout: usize,
    s: [usize; 4],
) -> RawTensor {
    match layout {
        0 => heads_view::<T>(ctx, rng, s),
        1 => last_strided::<T>(ctx, rng, s),
        _ => ctx
            .from_slice(&rand_vec::<T>(rng, s.iter().product()), &s)
            .unwrap(),
    }
}

fn assert_bits_eq<T: Element>(a: &RawTensor, b: &RawTensor, what: &str) {
    assert_eq!(
        bits(&a.to_vec::<T>().unwrap()),
        bits(&b.to_vec::<T>().unwrap()),
        "{what}: 1 vs 2 threads"
    );
}

/// Grouped-query cases: (H, Hkv) in (4, 2), (6, 2), (8, 2), (8, 1) and (3, 1) (groups of 2,
/// 3, 4, 8 and 3 query heads; the last two multi-query), T, S in {1, 7, 63, 65, 130} (every
/// pair, twice), every mask kind (a per-query-head bias included) with and without causal,
/// three layouts.
fn gqa_cases() -> Vec<Case> {
    const LENS: [usize; 5] = [1, 7, 63, 65, 130];
    const DIMS: [usize; 4] = [1, 7, 16, 33];
    const HEADS: [(usize, usize); 5] = [(4, 2), (6, 2), (8, 2), (8, 1), (3, 1)];
    let kinds = [
        MaskKind::None,
        MaskKind::PadBias,
        MaskKind::Keep,
        MaskKind::HeadBias,
    ];
    let mut out = Vec::new();
    let mut n = 0;
    for pass in 0..2 {
        for &t in &LENS {
            for &s in &LENS {
                let (h, hkv) = HEADS[(n + pass) % 5];
                out.push(Case {
                    b: if t * s >= 64 * 64 { 1 } else { 2 },
                    h,
                    hkv,
                    t,
                    s,
                    d: DIMS[n % 4],
                    dv: DIMS[(n / 4 + n + 1) % 4],
                    kind: kinds[n % 4],
                    causal: (n / 2) % 2 == 1,
                    layout: n % 3,
                    scale: if n % 5 == 0 { Some(0.3) } else { None },
                });
                n += 1;
            }
        }
    }
    out
}

fn fwd_bwd_case<T: Float>(tol: f64) {
    fwd_bwd_cases::<T>(&cases(), tol, 21);
}

fn fwd_bwd_cases<T: Float>(cases: &[Case], tol: f64, seed: u64) {
    let c1 = TestCtx::with_threads(1).unwrap();
    let c2 = TestCtx::with_threads(2).unwrap();
    let mut rng = SplitMix64::new(seed);
    for (n, &case) in cases.iter().enumerate() {
        let Case {
            b,
            h,
            hkv,
            t,
            s,
            d: dd,
            dv,
            kind,
            causal,
            layout,
            scale,
        } = case;
        let dims = AttnDims {
            b,
            h,
            hkv,
            t,
            s,
            d: dd,
            dv,
        };
        let q = heads_view::<T>(&c1, &mut rng, [b, h, t, dd]);
        let k = layout_tensor::<T>(&c1, &mut rng, layout, [b, hkv, s, dd]);
        let v = layout_tensor::<T>(&c1, &mut rng, (layout + 2) % 3, [b, hkv, s, dv]);
        let (mask, fbias, fkeep) = make_mask::<T>(&c1, &mut rng, kind, dims);
        let opts = AttentionOpts { causal, scale };
        let sc = opts.scale_for(dd);
        let (qv, kv, vv) = (
            q.to_vec::<T>().unwrap(),
            k.to_vec::<T>().unwrap(),
            v.to_vec::<T>().unwrap(),
        );
        let rmask = match kind {
            MaskKind::PadBias | MaskKind::HeadBias => RefMask::Bias(&fbias),
            MaskKind::Keep => RefMask::Keep(&fkeep),
            _ => RefMask::None,
        };
        let (want_o, want_p) = reference::attention(&qv, &kv, &vv, dims, rmask, causal, sc);
        let want_lse = reference::attention_lse(&qv, &kv, dims, rmask, causal, sc);
        let (o1, l1) = c1.attention(&q, &k, &v, mask.as_ref(), opts).unwrap();
        let (o2, l2) = c2.attention(&q, &k, &v, mask.as_ref(), opts).unwrap();
        let what = format!("case {n} {case:?}");
        assert_eq!(o1.shape(), &[b, h, t, dv]);
        assert_eq!(l1.shape(), &[b, h, t]);
        close(
            &o1.to_vec::<T>().unwrap(),
            &want_o,
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
        let g = heads_view::<T>(&c1, &mut rng, [b, h, t, dv]);
        let gvv = g.to_vec::<T>().unwrap();
        let (wq, wk, wv) = reference::attention_backward(&qv, &kv, &vv, &want_p, &gvv, dims, sc);
        let m = mask.as_ref();
        let r1 = c1
            .attention_backward(&q, &k, &v, m, &o1, &l1, &g, opts, [true; 3])
            .unwrap();
        let r2 = c2
            .attention_backward(&q, &k, &v, m, &o1, &l1, &g, opts, [true; 3])
            .unwrap();
        for (name, a, bb, want) in [
            ("gq", &r1.0, &r2.0, &wq),
            ("gk", &r1.1, &r2.1, &wk),
            ("gv", &r1.2, &r2.2, &wv),
        ] {
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
                .attention_backward(&q, &k, &v, m, &o1, &l1, &g, opts, needs)
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
        // The materialising kernel (the benchmark's comparison) still matches the spec; it
        // has no grouped-query path and says so.
        if hkv != h {
            let err = materialising::attention(&c2, &q, &k, &v, mask.as_ref(), opts);
            assert!(matches!(err, Err(Error::InvalidArgument { .. })), "{what}");
        } else if n % 4 == 0 {
            let (mo, mp) = materialising::attention(&c2, &q, &k, &v, mask.as_ref(), opts).unwrap();
            close(
                &mo.to_vec::<T>().unwrap(),
                &want_o,
                tol,
                &format!("mat out {what}"),
            );
            close(
                &mp.to_vec::<T>().unwrap(),
                &want_p,
                tol,
                &format!("mat probs {what}"),
            );
            let mg = materialising::attention_backward(&c2, &q, &k, &v, &mp, &g, opts, [true; 3])
                .unwrap();
            close(&mg.0.unwrap().to_vec::<T>().unwrap(), &wq, tol, "mat gq");
            close(&mg.1.unwrap().to_vec::<T>().unwrap(), &wk, tol, "mat gk");
            close(&mg.2.unwrap().to_vec::<T>().unwrap(), &wv, tol, "mat gv");
        }
    }
}

#[test]
fn attention_matches_reference_f32() {
    fwd_bwd_case::<f32>(2e-5);
}

#[test]
fn attention_matches_reference_f64() {
    fwd_bwd_case::<f64>(1e-11);
}

#[test]
fn grouped_query_attention_matches_reference_f32() {
    fwd_bwd_cases::<f32>(&gqa_cases(), 2e-5, 23);
}

#[test]
fn grouped_query_attention_matches_reference_f64() {
    fwd_bwd_cases::<f64>(&gqa_cases(), 1e-11, 24);
}

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
    let (out, lse) = ctx.attention(&q, &k, &v, Some(&m64), o).unwrap();
    let g = ctx.zeros(DType::F32, &[1, 2, 3, 6]).unwrap();
    let bad = ctx.zeros(DType::F32, &[1, 2, 3, 4]).unwrap();
    let m = Some(&m64);
    assert!(matches!(
        ctx.attention_backward(&q, &k, &v, m, &bad, &lse, &g, o, [true; 3]),
        Err(Error::ShapeMismatch { .. })
    ));
    assert!(matches!(
        ctx.attention_backward(&q, &k, &v, m, &out, &bad, &g, o, [true; 3]),
        Err(Error::ShapeMismatch { .. })
    ));
    assert!(matches!(
        ctx.attention_backward(&q, &k, &v, m, &out, &lse, &bad, o, [true; 3]),
        Err(Error::ShapeMismatch { .. })
    ));
    assert!(matches!(
        ctx.attention_backward(&q, &k, &v, Some(&bad_mask), &out, &lse, &g, o, [true; 3]),
        Err(Error::Broadcast { .. })
    ));
    let lse64 = ctx.zeros(DType::F64, &[1, 2, 3]).unwrap();
    assert!(matches!(
        ctx.attention_backward(&q, &k, &v, m, &out, &lse64, &g, o, [true; 3]),
        Err(Error::DTypeMismatch { .. })
    ));
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
    ctx.pool().reset_peak();
    let (o, lse) = ctx.attention(&q, &k, &v, None, opts).unwrap();
    let grads = ctx
        .attention_backward(&q, &k, &v, None, &o, &lse, &g, opts, [true; 3])
        .unwrap();
    let peak = ctx.stats().peak_live_bytes - base;
    drop((q, k, v, g, o, lse, grads));
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
