//! Criterion bench: the vector f32 exp (`kernels::simd::exp_f32_in_place`, bit for bit
//! glibc's `expf`) and f64 erf (`kernels::simd::erf_in_place`, bit for bit `libm::erf`)
//! slice loops over 4,096 elements, one thread, in each variant this CPU runs (AVX-512,
//! AVX2, the scalar call). GELU-tanh and SiLU run the exp, GELU-erf the erf. Numbers in
//! docs/BENCHMARKS.md.

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use fucina_core::kernels::simd::{erf_in_place_variants, exp_f32_in_place_variants};
use fucina_core::rng::SplitMix64;

/// Named in-place slice loops over `T`.
type Variants<T> = Vec<(&'static str, fn(&mut [T]))>;

/// One group: every `variants` loop over a fresh copy of `x` per iteration.
fn group<T: Clone>(c: &mut Criterion, name: &str, x: &[T], variants: Variants<T>) {
    let mut grp = c.benchmark_group(name);
    grp.throughput(Throughput::Elements(x.len() as u64));
    for (name, variant) in variants {
        grp.bench_function(name, |b| {
            b.iter_batched_ref(|| x.to_vec(), |x| variant(x), BatchSize::SmallInput)
        });
    }
    grp.finish();
}

fn bench(c: &mut Criterion) {
    let n = 4096;
    let mut g = SplitMix64::new(1);
    // GELU's arguments: about N(0, 2²); exp sees −|a| and −x²/2 of them.
    let xs: Vec<f64> = (0..n).map(|_| 2.0 * g.next_normal()).collect();
    let xe: Vec<f32> = xs.iter().map(|&v| -(v * v / 2.0) as f32).collect();
    group(c, "exp_f32_4096", &xe, exp_f32_in_place_variants());
    group(c, "erf_f64_4096", &xs, erf_in_place_variants());
}

criterion_group!(benches, bench);
criterion_main!(benches);
