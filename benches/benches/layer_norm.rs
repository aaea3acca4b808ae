//! Criterion bench: layer norm (with weight and bias) forward and backward on
//! 2048×256 f32, and RMS norm forward, on the default thread count.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use fucina_core::rng::SplitMix64;
use fucina_core::ExecContext;

fn bench(c: &mut Criterion) {
    let ctx = ExecContext::new().expect("context");
    let (rows, d) = (2048, 256);
    let mut g = SplitMix64::new(2);
    let mut randn = |n: usize| -> Vec<f32> { (0..n).map(|_| g.next_normal() as f32).collect() };
    let x = ctx.from_slice(&randn(rows * d), &[rows, d]).expect("x");
    let gy = ctx.from_slice(&randn(rows * d), &[rows, d]).expect("gy");
    let w = ctx.from_slice(&randn(d), &[d]).expect("w");
    let b = ctx.from_slice(&randn(d), &[d]).expect("b");
    let (_, mean, rstd) = ctx.layer_norm(&x, Some(&w), Some(&b), 1e-5).expect("ln");

    let mut grp = c.benchmark_group("layer_norm_2048x256_f32");
    grp.throughput(Throughput::Elements((rows * d) as u64));
    grp.bench_function("forward", |bn| {
        bn.iter(|| ctx.layer_norm(&x, Some(&w), Some(&b), 1e-5).expect("ln"))
    });
    grp.bench_function("backward", |bn| {
        bn.iter(|| {
            ctx.layer_norm_backward(&x, Some(&w), &mean, &rstd, &gy, true, true, true)
                .expect("ln bwd")
        })
    });
    grp.bench_function("rms_forward", |bn| {
        bn.iter(|| ctx.rms_norm(&x, Some(&w), 1e-5).expect("rms"))
    });
    grp.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
