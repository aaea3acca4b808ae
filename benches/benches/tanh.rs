//! Criterion bench: the f32 tanh slice loop (`kernels::simd::tanh_f32_slice`, bit for bit
//! glibc's `tanhf`) over 4,096 elements (the tiny workload's `[64, 64]` activation), one
//! thread, in each variant this CPU runs (AVX-512, AVX2, the baseline build) and against
//! `f32::tanh` (the libm call). Numbers in docs/BENCHMARKS.md.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use fucina_core::kernels::simd::tanh_f32_slice_variants;
use fucina_core::rng::SplitMix64;

fn bench(c: &mut Criterion) {
    let n = 4096;
    let mut g = SplitMix64::new(1);
    let x: Vec<f32> = (0..n).map(|_| 2.0 * g.next_normal() as f32).collect();
    let mut y = vec![0.0f32; n];
    let mut grp = c.benchmark_group("tanh_f32_4096");
    grp.throughput(Throughput::Elements(n as u64));
    for (name, variant) in tanh_f32_slice_variants() {
        grp.bench_function(name, |b| b.iter(|| variant(&x, &mut y)));
    }
    grp.bench_function("libm", |b| {
        b.iter(|| {
            for (o, &v) in y.iter_mut().zip(&x) {
                *o = v.tanh();
            }
        })
    });
    grp.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
