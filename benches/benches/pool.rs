//! Buffer pool vs plain allocation: acquire + release against
//! `Vec::with_capacity` and `std::alloc` (64-byte aligned) at 4 KiB, 1 MiB and
//! 64 MiB, both bare and with the buffer written in full (first touch is
//! where a fresh allocation pays: page faults on memory the pool keeps warm).
//! Run: `cargo bench -p fucina-benches --bench pool`; numbers in docs/BENCHMARKS.md.

use std::alloc::{alloc, dealloc, Layout};
use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use fucina_core::pool::BufferPool;

const SIZES: [(usize, &str); 3] = [(4 << 10, "4KiB"), (1 << 20, "1MiB"), (64 << 20, "64MiB")];

fn acquire_release(c: &mut Criterion) {
    let mut g = c.benchmark_group("pool/acquire_release");
    for (bytes, label) in SIZES {
        let pool = BufferPool::new();
        // Warm the free list so the steady state (a hit) is measured.
        drop(pool.acquire_slab(bytes).expect("warm-up acquire"));
        g.bench_with_input(BenchmarkId::new("pool_slab", label), &bytes, |b, &n| {
            b.iter(|| black_box(pool.acquire_slab(black_box(n)).expect("acquire")))
        });
        drop(pool.acquire_f32(bytes / 4).expect("warm-up acquire"));
        g.bench_with_input(BenchmarkId::new("pool_f32", label), &bytes, |b, &n| {
            b.iter(|| black_box(pool.acquire_f32(black_box(n / 4)).expect("acquire")))
        });
        g.bench_with_input(
            BenchmarkId::new("vec_with_capacity", label),
            &bytes,
            |b, &n| b.iter(|| black_box(Vec::<u8>::with_capacity(black_box(n)))),
        );
        g.bench_with_input(
            BenchmarkId::new("std_alloc_align64", label),
            &bytes,
            |b, &n| {
                let layout = Layout::from_size_align(n, 64).expect("layout");
                b.iter(|| {
                    // SAFETY: non-zero size; freed with the same layout.
                    unsafe {
                        let p = alloc(black_box(layout));
                        assert!(!p.is_null());
                        dealloc(black_box(p), layout);
                    }
                })
            },
        );
        assert_eq!(pool.stats().outstanding, 0);
    }
    g.finish();
}

fn acquire_write_release(c: &mut Criterion) {
    let mut g = c.benchmark_group("pool/acquire_write_release");
    for (bytes, label) in SIZES {
        g.throughput(Throughput::Bytes(bytes as u64));
        let pool = BufferPool::new();
        drop(pool.acquire_slab(bytes).expect("warm-up acquire"));
        g.bench_with_input(BenchmarkId::new("pool_slab", label), &bytes, |b, &n| {
            b.iter(|| {
                let mut buf = pool.acquire_slab(black_box(n)).expect("acquire");
                if let Some(s) = buf.get_mut() {
                    s[..n].fill(1);
                }
                black_box(buf)
            })
        });
        g.bench_with_input(
            BenchmarkId::new("vec_with_capacity", label),
            &bytes,
            |b, &n| {
                b.iter(|| {
                    let mut v = Vec::<u8>::with_capacity(black_box(n));
                    v.resize(n, 1);
                    black_box(v)
                })
            },
        );
        assert_eq!(pool.stats().outstanding, 0);
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1))
        .sample_size(20);
    targets = acquire_release, acquire_write_release
}
criterion_main!(benches);
