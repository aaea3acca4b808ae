//! Criterion bench: gradcheck's full mode (two forwards per input element)
//! against fast mode (one backward and two forwards per input) on one
//! 10⁴-element f64 input, f(x) = tanh(x) · x over [100, 100], one thread.
//! Issue 27 asks fast mode to be at least 10× faster here; the measured
//! ratio is recorded in docs/BENCHMARKS.md.
//!
//! Run: `cargo bench -p fucina-benches --bench gradcheck`

use criterion::{criterion_group, criterion_main, Criterion};
use fucina_autograd::{gradcheck, GradcheckOpts, Tensor};
use fucina_core::rng::SplitMix64;
use fucina_core::ExecContext;

fn bench(c: &mut Criterion) {
    let ctx = ExecContext::with_threads(1).expect("context");
    let mut g = SplitMix64::new(1);
    let v = g.vec_uniform(10_000, -1.5, 1.5);
    let x = Tensor::variable(&ctx, &v, &[100, 100]).expect("x");
    let inputs = [x];
    let f = |xs: &[Tensor]| xs[0].tanh()?.mul(&xs[0]);

    let mut grp = c.benchmark_group("gradcheck_10k_f64");
    grp.sample_size(10);
    grp.bench_function("full", |b| {
        b.iter(|| gradcheck(f, &inputs, &GradcheckOpts::f64()).expect("full"))
    });
    grp.bench_function("fast", |b| {
        b.iter(|| gradcheck(f, &inputs, &GradcheckOpts::f64().fast()).expect("fast"))
    });
    grp.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
