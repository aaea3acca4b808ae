//! Streaming attention's memory through autograd: the peak live pool bytes of one
//! forward + backward grow linearly in the sequence length (no `[T, S]` block is saved),
//! and grouped-query attention never holds k or v repeated to the query heads.

mod common;

use common::uniform_var;
use fucina_autograd::testing::TestCtx;
use fucina_autograd::Tensor;
use fucina_core::kernels::fused::attention::AttentionOpts;
use fucina_core::rng::SplitMix64;

/// Peak live pool bytes of `sdpa(q, k, v, key_padding).sum().backward()` (f32, B = 1,
/// H = 2, D = 32, T = S = `t`) above what was live before (the inputs and the mask).
fn peak_fwd_bwd(t: usize, causal: bool) -> usize {
    let ctx = TestCtx::with_threads(2).unwrap();
    let mut rng = SplitMix64::new(7);
    let shape = [1, 2, t, 32];
    let [q, k, v] = [0; 3].map(|_| uniform_var(&ctx, &mut rng, &shape));
    // A [B, 1, 1, S] key-padding keep-mask: the last eighth of the keys are padding.
    let keep: Vec<u8> = (0..t).map(|j| (j < t - t / 8) as u8).collect();
    let mask =
        Tensor::from_raw(&ctx, ctx.from_slice(&keep, &[1, 1, 1, t]).unwrap(), false).unwrap();
    let opts = AttentionOpts {
        causal,
        scale: None,
    };
    let base = ctx.stats().live_bytes;
    ctx.pool().reset_peak();
    let out = Tensor::scaled_dot_product_attention(&q, &k, &v, Some(&mask), opts).unwrap();
    out.sum_all().unwrap().backward().unwrap();
    drop(out);
    let peak = ctx.stats().peak_live_bytes - base;
    for x in [&q, &k, &v] {
        let g = x.grad().unwrap().to_vec::<f32>().unwrap();
        assert!(g.iter().all(|v| v.is_finite()));
        assert!(g.iter().any(|&v| v != 0.0));
    }
    drop((q, k, v, mask));
    peak
}

#[test]
fn attention_forward_backward_memory_is_linear_in_t() {
    for causal in [false, true] {
        let (small, large) = (peak_fwd_bwd(256, causal), peak_fwd_bwd(1024, causal));
        // Materialised [B, H, T, S] probabilities alone would make this 16x.
        assert!(
            large <= 5 * small,
            "causal={causal}: peak {large} B at T=1024 vs {small} B at T=256 (> 5x)"
        );
    }
}

/// Grouped-query attention (f32, B = 1, H = 8 query heads sharing Hkv = 2 k/v heads, so
/// G = 4; T = 32 queries over S = 1024 keys, D = 64): one forward + backward through autograd
/// keeps its peak live pool bytes, above the inputs, below the bytes of ONE k repeated to
/// `[B, H, S, D]`. A `repeat_kv` implementation holds two such copies (k and v) through the
/// forward, and their gradients in the backward, so it fails this.
#[test]
fn grouped_query_attention_never_repeats_kv() {
    let (b, h, hkv, t, s, d) = (1, 8, 2, 32, 1024, 64);
    let repeated_k_bytes = b * h * s * d * std::mem::size_of::<f32>();
    for causal in [false, true] {
        let ctx = TestCtx::with_threads(2).unwrap();
        let mut rng = SplitMix64::new(9);
        let mut var = |shape: [usize; 4]| uniform_var(&ctx, &mut rng, &shape);
        let (q, k, v) = (var([b, h, t, d]), var([b, hkv, s, d]), var([b, hkv, s, d]));
        let opts = AttentionOpts {
            causal,
            scale: None,
        };
        let base = ctx.stats().live_bytes;
        ctx.pool().reset_peak();
        let out = Tensor::scaled_dot_product_attention(&q, &k, &v, None, opts).unwrap();
        assert_eq!(out.shape(), &[b, h, t, d]);
        out.sum_all().unwrap().backward().unwrap();
        drop(out);
        let peak = ctx.stats().peak_live_bytes - base;
        for (x, shape) in [
            (&q, [b, h, t, d]),
            (&k, [b, hkv, s, d]),
            (&v, [b, hkv, s, d]),
        ] {
            let g = x.grad().unwrap();
            assert_eq!(g.shape(), &shape);
            let g = g.to_vec::<f32>().unwrap();
            assert!(g.iter().all(|v| v.is_finite()));
            assert!(g.iter().any(|&v| v != 0.0));
        }
        assert!(
            peak < repeated_k_bytes,
            "causal={causal}: peak {peak} B >= one repeated k ({repeated_k_bytes} B)"
        );
        eprintln!("causal={causal}: peak {peak} B, one repeated k {repeated_k_bytes} B");
        drop((q, k, v));
    }
}
