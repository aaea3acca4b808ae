//! Prefetch hides loading: items that take 2 ms each (a batch of 4: 8 ms
//! of loading) feeding a 10 ms step. Without prefetch an epoch of 8 steps
//! costs 8 × (8 + 10) ms; with one worker prefetching 2 batches it costs the
//! first batch's 8 ms plus 8 × 10 ms: no stall after the first batch.
//! Run: `cargo bench -p fucina-benches --bench loader`; numbers in
//! docs/BENCHMARKS.md.

use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use fucina_train::{DataLoader, Dataset, LoaderOptions};

/// Items that each take `ms` to load.
struct Slow {
    n: usize,
    ms: u64,
}

impl Dataset for Slow {
    type Item = usize;
    fn len(&self) -> usize {
        self.n
    }
    fn get(&self, index: usize) -> fucina_train::Result<usize> {
        std::thread::sleep(Duration::from_millis(self.ms));
        Ok(index)
    }
}

const STEP: Duration = Duration::from_millis(10);

fn epoch(prefetch: usize) -> Duration {
    let loader = DataLoader::new(
        Slow { n: 32, ms: 2 },
        LoaderOptions::new(4).seed(1).prefetch(prefetch),
        Ok,
    )
    .expect("loader");
    let t0 = Instant::now();
    for b in loader.epoch(0).expect("epoch") {
        std::hint::black_box(b.expect("batch"));
        std::thread::sleep(STEP); // the training step
    }
    t0.elapsed()
}

fn loader(c: &mut Criterion) {
    let mut g = c.benchmark_group("loader/epoch_8_steps_of_10ms_items_2ms");
    g.sample_size(10).measurement_time(Duration::from_secs(4));
    for prefetch in [0usize, 2] {
        g.bench_function(format!("prefetch_{prefetch}"), |b| {
            b.iter_custom(|iters| (0..iters).map(|_| epoch(prefetch)).sum())
        });
    }
    g.finish();
}

criterion_group!(benches, loader);
criterion_main!(benches);
