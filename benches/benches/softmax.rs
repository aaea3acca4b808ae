//! Criterion bench: softmax forward and backward over the last axis of 512×1024
//! (f32), on the default thread count. Compare with `torch.softmax(x, -1)`.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use fucina_core::rng::SplitMix64;
use fucina_core::ExecContext;

fn bench(c: &mut Criterion) {
    let ctx = ExecContext::new().expect("context");
    let (rows, cols) = (512, 1024);
    let mut g = SplitMix64::new(1);
    let xv: Vec<f32> = (0..rows * cols)
        .map(|_| 3.0 * g.next_normal() as f32)
        .collect();
    let gyv: Vec<f32> = (0..rows * cols).map(|_| g.next_normal() as f32).collect();
    let x = ctx.from_slice(&xv, &[rows, cols]).expect("x");
    let gy = ctx.from_slice(&gyv, &[rows, cols]).expect("gy");
    let y = ctx.softmax(&x, 1).expect("softmax");

    let mut grp = c.benchmark_group("softmax_512x1024_f32");
    grp.throughput(Throughput::Elements((rows * cols) as u64));
    grp.bench_function("forward", |b| {
        b.iter(|| ctx.softmax(&x, 1).expect("softmax"))
    });
    grp.bench_function("log_softmax", |b| {
        b.iter(|| ctx.log_softmax(&x, 1).expect("log_softmax"))
    });
    grp.bench_function("backward", |b| {
        b.iter(|| ctx.softmax_backward(&y, &gy, 1).expect("softmax_backward"))
    });
    grp.bench_function("causal", |b| {
        b.iter(|| ctx.softmax_causal(&x).expect("softmax_causal"))
    });
    grp.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
