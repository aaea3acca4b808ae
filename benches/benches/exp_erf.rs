//! Criterion bench: the vector f32 exp (`kernels::simd::exp_f32_in_place`, bit for bit
//! glibc's `expf`) and f64 erf (`kernels::simd::erf_in_place`, bit for bit `libm::erf`)
//! slice loops over 4,096 elements, one thread, in each variant this CPU runs (AVX-512,
//! AVX2, the scalar call). GELU-tanh and SiLU run the exp, GELU-erf the erf. Numbers in
//! docs/BENCHMARKS.md.

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use fucina_core::kernels::simd::{erf_in_place_variants, exp_f32_in_place_variants};
use fucina_core::rng::SplitMix64;

fn bench(c: &mut Criterion) {
    let n = 4096;
    let mut g = SplitMix64::new(1);
    // GELU's arguments: about N(0, 2²); exp sees −|a| and −x²/2 of them.
    let xs: Vec<f64> = (0..n).map(|_| 2.0 * g.next_normal()).collect();
    let xe: Vec<f32> = xs.iter().map(|&v| -(v * v / 2.0) as f32).collect();

    let mut grp = c.benchmark_group("exp_f32_4096");
    grp.throughput(Throughput::Elements(n as u64));
    for (name, variant) in exp_f32_in_place_variants() {
        grp.bench_function(name, |b| {
            b.iter_batched_ref(|| xe.clone(), |x| variant(x), BatchSize::SmallInput)
        });
    }
    grp.finish();

    let mut grp = c.benchmark_group("erf_f64_4096");
    grp.throughput(Throughput::Elements(n as u64));
    for (name, variant) in erf_in_place_variants() {
        grp.bench_function(name, |b| {
            b.iter_batched_ref(|| xs.clone(), |x| variant(x), BatchSize::SmallInput)
        });
    }
    grp.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
