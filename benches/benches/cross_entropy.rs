//! Criterion bench: cross-entropy forward and backward (mean reduction, f32) on
//! 2048×65 (char-level vocab) and 512×8192 logits, on the default thread count.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use fucina_core::kernels::fused::loss::CrossEntropyOpts;
use fucina_core::rng::SplitMix64;
use fucina_core::ExecContext;

fn bench(c: &mut Criterion) {
    let ctx = ExecContext::new().expect("context");
    for (n, classes) in [(2048usize, 65usize), (512, 8192)] {
        let mut g = SplitMix64::new(3);
        let xv: Vec<f32> = (0..n * classes)
            .map(|_| 2.0 * g.next_normal() as f32)
            .collect();
        let tv: Vec<i64> = (0..n).map(|_| g.below(classes as u64) as i64).collect();
        let x = ctx.from_slice(&xv, &[n, classes]).expect("x");
        let t = ctx.from_slice(&tv, &[n]).expect("t");
        let opts = CrossEntropyOpts::default();
        let gy = ctx.scalar(1.0f32).expect("gy");
        let (_, saved) = ctx.cross_entropy(&x, &t, opts).expect("ce");

        let mut grp = c.benchmark_group(format!("cross_entropy_{n}x{classes}_f32"));
        grp.throughput(Throughput::Elements((n * classes) as u64));
        grp.bench_function("forward", |b| {
            b.iter(|| ctx.cross_entropy(&x, &t, opts).expect("ce"))
        });
        grp.bench_function("backward", |b| {
            b.iter(|| {
                ctx.cross_entropy_backward(&x, &t, &saved, &gy, opts)
                    .expect("ce bwd")
            })
        });
        grp.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
