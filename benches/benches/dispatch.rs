//! Criterion bench of one parallel dispatch: `ExecContext::for_chunks` with two trivial chunks
//! on a 2-thread context (the fixed cost every parallel kernel pays), next to the same fork-join
//! through a rayon pool's `install` (what the context used before its own team).
//! Run: `cargo bench -p fucina-benches --bench dispatch`.

use std::hint::black_box;
use std::sync::atomic::{AtomicUsize, Ordering};

use criterion::{criterion_group, criterion_main, Criterion};
use fucina_core::ExecContext;

fn bench(c: &mut Criterion) {
    let ctx = ExecContext::with_threads(2).expect("exec context");
    let rayon_pool = rayon::ThreadPoolBuilder::new()
        .num_threads(2)
        .build()
        .expect("rayon pool");
    let hits = AtomicUsize::new(0);
    let mut group = c.benchmark_group("dispatch_2_chunks");
    group.bench_function("fucina_team", |b| {
        b.iter(|| {
            ctx.for_chunks(2, true, |i| {
                hits.fetch_add(black_box(i), Ordering::Relaxed);
            })
        })
    });
    group.bench_function("rayon_install", |b| {
        b.iter(|| {
            rayon_pool.install(|| {
                rayon::join(
                    || hits.fetch_add(black_box(0), Ordering::Relaxed),
                    || hits.fetch_add(black_box(1), Ordering::Relaxed),
                )
            })
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
