//! Grouped-query attention at the edges: the argument errors (k/v heads that do not divide
//! the query heads, k and v disagreeing, a mask over the k/v heads), and keys and values
//! narrowed out of a `[B, Hkv, Smax, D]` KV cache read in place (same bits as contiguous
//! copies, no copy allocated, against the spec; causal decode steps with T < S). The
//! grouped forward and backward against the reference at awkward sizes are in
//! `attention.rs`, next to the per-head cases.

#[path = "attention/cases.rs"]
mod cases;
#[macro_use]
#[path = "common/errors.rs"]
mod errors;

use cases::{bits, close, heads_view, peak_above, rand_vec};
use fucina_core::kernels::fused::attention::reference::{self, AttnDims, RefMask};
use fucina_core::kernels::fused::attention::AttentionOpts;
use fucina_core::rng::SplitMix64;
use fucina_core::testing::TestCtx;
use fucina_core::{DType, Error, Float};

#[test]
fn grouped_query_argument_errors() {
    let ctx = TestCtx::with_threads(1).unwrap();
    let q = ctx.zeros(DType::F32, &[1, 4, 3, 8]).unwrap();
    let o = AttentionOpts::default();
    // 3 k/v heads cannot serve 4 query heads, nor can 0.
    for hkv in [3, 0, 8] {
        let k = ctx.zeros(DType::F32, &[1, hkv, 5, 8]).unwrap();
        let v = ctx.zeros(DType::F32, &[1, hkv, 5, 8]).unwrap();
        let err = ctx.attention(&q, &k, &v, None, o).unwrap_err();
        let msg = err.to_string();
        assert!(
            matches!(
                err,
                Error::InvalidArgument {
                    op: "attention",
                    ..
                }
            ),
            "{msg}"
        );
        assert!(msg.contains("[1, 4, 3, 8]") && msg.contains(&format!("[1, {hkv}, 5, 8]")));
        let g = ctx.zeros(DType::F32, &[1, 4, 3, 8]).unwrap();
        let lse = ctx.zeros(DType::F32, &[1, 4, 3]).unwrap();
        assert_err!(ctx.attention_backward(&q, &k, &v, None, &g, &lse, &g, o, [true; 3])
            => Error::InvalidArgument { op: "attention_backward", .. });
        drop((k, v, g, lse));
    }
    // k and v must agree on the k/v heads.
    let k = ctx.zeros(DType::F32, &[1, 2, 5, 8]).unwrap();
    let v = ctx.zeros(DType::F32, &[1, 4, 5, 8]).unwrap();
    assert_err!(ctx.attention(&q, &k, &v, None, o) => Error::ShapeMismatch { .. });
    // The mask broadcasts to the query heads [B, H, T, S], not to the k/v heads.
    let v2 = ctx.zeros(DType::F32, &[1, 2, 5, 8]).unwrap();
    let m_kv = ctx.zeros(DType::F32, &[1, 2, 3, 5]).unwrap();
    assert_err!(ctx.attention(&q, &k, &v2, Some(&m_kv), o) => Error::Broadcast { .. });
    let m_q = ctx.zeros(DType::F32, &[1, 4, 3, 5]).unwrap();
    let (out, lse) = ctx.attention(&q, &k, &v2, Some(&m_q), o).unwrap();
    assert_eq!(out.shape(), &[1, 4, 3, 8]);
    assert_eq!(lse.shape(), &[1, 4, 3]);
    drop((q, k, v, v2, m_kv, m_q, out, lse));
}

/// Keys and values narrowed out of a `[B, Hkv, Smax, D]` KV cache to the filled length `S`
/// (the cache's strides) are read in place: forward and backward give the same bits as
/// on contiguous copies, and the forward allocates nothing beyond its outputs.
fn narrowed_cache_case<T: Float>(h: usize, hkv: usize, t: usize, s: usize, causal: bool) {
    let ctx = TestCtx::with_threads(2).unwrap();
    let mut rng = SplitMix64::new(51 + (h * 131 + hkv * 17 + t * 7 + s) as u64);
    let (b, d, dv, smax) = (2, 16, 8, s + 37);
    let q = heads_view::<T>(&ctx, &mut rng, [b, h, t, d]);
    let kc = ctx
        .from_slice(
            &rand_vec::<T>(&mut rng, b * hkv * smax * d),
            &[b, hkv, smax, d],
        )
        .unwrap();
    let vc = ctx
        .from_slice(
            &rand_vec::<T>(&mut rng, b * hkv * smax * dv),
            &[b, hkv, smax, dv],
        )
        .unwrap();
    let (k, v) = (kc.narrow(2, 0, s).unwrap(), vc.narrow(2, 0, s).unwrap());
    assert_eq!(k.strides(), &[hkv * smax * d, smax * d, d, 1]);
    let (kk, vv) = (ctx.contiguous(&k).unwrap(), ctx.contiguous(&v).unwrap());
    assert_eq!(kk.strides(), &[hkv * s * d, s * d, d, 1]);
    let opts = AttentionOpts {
        causal,
        scale: None,
    };
    let base = ctx.stats().live_bytes;
    let (view_out, peak_view) = peak_above(&ctx, base, || {
        ctx.attention(&q, &k, &v, None, opts).unwrap()
    });
    drop(view_out);
    let ((o2, l2), peak_copy) = peak_above(&ctx, base, || {
        ctx.attention(&q, &kk, &vv, None, opts).unwrap()
    });
    assert_eq!(
        peak_view, peak_copy,
        "a copy of the narrowed k or v was made"
    );
    let (o1, l1) = ctx.attention(&q, &k, &v, None, opts).unwrap();
    let what = format!("h {h} hkv {hkv} t {t} s {s} causal {causal}");
    assert_eq!(
        bits(&o1.to_vec::<T>().unwrap()),
        bits(&o2.to_vec::<T>().unwrap()),
        "{what}"
    );
    assert_eq!(
        bits(&l1.to_vec::<T>().unwrap()),
        bits(&l2.to_vec::<T>().unwrap()),
        "{what}"
    );
    // Against the spec too (causal with T < S: bottom-right aligned, as a decode step).
    let dims = AttnDims {
        b,
        h,
        hkv,
        t,
        s,
        d,
        dv,
    };
    let (qv, kv, vvv) = (
        q.to_vec::<T>().unwrap(),
        kk.to_vec::<T>().unwrap(),
        vv.to_vec::<T>().unwrap(),
    );
    let sc = opts.scale_for(d);
    let (want_o, want_p) = reference::attention(&qv, &kv, &vvv, dims, RefMask::None, causal, sc);
    close(&o1.to_vec::<T>().unwrap(), &want_o, 1e-5, &what);
    let g = heads_view::<T>(&ctx, &mut rng, [b, h, t, dv]);
    let r1 = ctx
        .attention_backward(&q, &k, &v, None, &o1, &l1, &g, opts, [true; 3])
        .unwrap();
    let r2 = ctx
        .attention_backward(&q, &kk, &vv, None, &o2, &l2, &g, opts, [true; 3])
        .unwrap();
    let gvv = g.to_vec::<T>().unwrap();
    let want = reference::attention_backward(&qv, &kv, &vvv, &want_p, &gvv, dims, sc);
    for (name, a, bb, w) in [
        ("gq", r1.0, r2.0, want.0),
        ("gk", r1.1, r2.1, want.1),
        ("gv", r1.2, r2.2, want.2),
    ] {
        let (a, bb) = (a.unwrap(), bb.unwrap());
        assert_eq!(
            bits(&a.to_vec::<T>().unwrap()),
            bits(&bb.to_vec::<T>().unwrap())
        );
        close(
            &a.to_vec::<T>().unwrap(),
            &w,
            1e-5,
            &format!("{name} {what}"),
        );
    }
    drop((q, kc, vc, k, v, kk, vv, o1, l1, o2, l2, g));
}

#[test]
fn narrowed_kv_cache_is_read_in_place() {
    // A decode step (T = 1), a chunk of queries (T < S), and T = S, grouped and not.
    for (h, hkv, t, s) in [(8, 2, 1, 65), (4, 4, 1, 130), (6, 2, 7, 63), (8, 1, 65, 65)] {
        for causal in [true, false] {
            narrowed_cache_case::<f32>(h, hkv, t, s, causal);
            narrowed_cache_case::<f64>(h, hkv, t, s, causal);
        }
    }
}
