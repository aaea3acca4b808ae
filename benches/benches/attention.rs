//! Criterion bench: f32 attention forward and backward at batch 1, 25 heads of 64,
//! T = S = 1024, bidirectional and causal: the streaming kernel (`ExecContext::attention`
//! then `attention_backward`) side by side with the materialising kernel it replaced
//! (`fucina_benches::materialising`, kept for this comparison only), and the forward
//! alone (inference). q, k, v are head views of `[B, T, H, D]` storage, as models make them.
//!
//! Run: `cargo bench -p fucina-benches --bench attention` (threads: `FUCINA_NUM_THREADS`,
//! default all cores). The targets: flash ≥ 2.4× (bidirectional) and ≥ 3.2×
//! (causal) faster than materialising, forward + backward.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use fucina_benches::materialising;
use fucina_core::kernels::fused::attention::AttentionOpts;
use fucina_core::rng::SplitMix64;
use fucina_core::{ExecContext, RawTensor};

const B: usize = 1;
const H: usize = 25;
const T: usize = 1024;
const D: usize = 64;

/// A `[B, H, T, D]` view of random `[B, T, H, D]` storage.
fn heads(ctx: &ExecContext, g: &mut SplitMix64) -> RawTensor {
    let v: Vec<f32> = (0..B * T * H * D).map(|_| g.next_normal() as f32).collect();
    let t = ctx.from_slice(&v, &[B, T, H, D]).expect("from_slice");
    t.permute(&[0, 2, 1, 3]).expect("permute")
}

fn bench(c: &mut Criterion) {
    let ctx = ExecContext::new().expect("context");
    let mut g = SplitMix64::new(3);
    let (q, k, v) = (
        heads(&ctx, &mut g),
        heads(&ctx, &mut g),
        heads(&ctx, &mut g),
    );
    let gy: Vec<f32> = (0..B * H * T * D).map(|_| g.next_normal() as f32).collect();
    let gy = ctx.from_slice(&gy, &[B, H, T, D]).expect("gy");
    let name = format!("attention_b{B}_h{H}_t{T}_d{D}_f32_{}t", ctx.num_threads());
    let mut grp = c.benchmark_group(name);
    grp.sample_size(10);
    for causal in [false, true] {
        let mode = if causal { "causal" } else { "bidirectional" };
        let opts = AttentionOpts {
            causal,
            scale: None,
        };
        // Both kernels compute the same thing (checked once, outside the timing).
        let (o, lse) = ctx.attention(&q, &k, &v, None, opts).expect("flash");
        let (mo, mp) = materialising::attention(&ctx, &q, &k, &v, None, opts).expect("mat");
        let (a, b) = (
            o.to_vec::<f32>().expect("o"),
            mo.to_vec::<f32>().expect("mo"),
        );
        let diff = a
            .iter()
            .zip(&b)
            .map(|(x, y)| (x - y).abs())
            .fold(0f32, f32::max);
        assert!(
            diff < 1e-4,
            "{mode}: flash and materialising differ by {diff}"
        );
        drop((o, lse, mo, mp));

        grp.bench_function(BenchmarkId::new("flash_fwd_bwd", mode), |bch| {
            bch.iter(|| {
                let (o, lse) = ctx.attention(&q, &k, &v, None, opts).expect("fwd");
                ctx.attention_backward(&q, &k, &v, None, &o, &lse, &gy, opts, [true; 3])
                    .expect("bwd")
            })
        });
        grp.bench_function(BenchmarkId::new("materialising_fwd_bwd", mode), |bch| {
            bch.iter(|| {
                let (_, p) = materialising::attention(&ctx, &q, &k, &v, None, opts).expect("fwd");
                materialising::attention_backward(&ctx, &q, &k, &v, &p, &gy, opts, [true; 3])
                    .expect("bwd")
            })
        });
        grp.bench_function(BenchmarkId::new("flash_fwd", mode), |bch| {
            bch.iter(|| ctx.attention(&q, &k, &v, None, opts).expect("fwd"))
        });
        grp.bench_function(BenchmarkId::new("materialising_fwd", mode), |bch| {
            bch.iter(|| materialising::attention(&ctx, &q, &k, &v, None, opts).expect("fwd"))
        });
    }
    grp.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
