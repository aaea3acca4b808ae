//! Criterion microbench of f32 GEMM (`ExecContext::matmul`) at a few square sizes, the MLP
//! layer shape 128×784×512, a skinny 64×4096×4096 and transposed operands, on 1 and 2 threads.
//!
//! Run: `cargo bench -p fucina-benches --bench gemm`. For side-by-side numbers against
//! PyTorch use the `fucina-bench` binary (see docs/BENCHMARKS.md).

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use fucina_benches::workloads::gemm::{Gemm, Layout};
use fucina_benches::Workload;
use fucina_core::ExecContext;

fn bench_gemm(c: &mut Criterion) {
    let mut group = c.benchmark_group("gemm_f32");
    group.sample_size(10);
    let cases: &[(&str, (usize, usize, usize), Layout)] = &[
        ("128", (128, 128, 128), Layout::NN),
        ("256", (256, 256, 256), Layout::NN),
        ("512", (512, 512, 512), Layout::NN),
        ("1024", (1024, 1024, 1024), Layout::NN),
        ("mlp_128x784x512", (128, 784, 512), Layout::NN),
        ("skinny_64x4096x4096", (64, 4096, 4096), Layout::NN),
        ("tn_512", (512, 512, 512), Layout::TN),
        ("nt_512", (512, 512, 512), Layout::NT),
    ];
    for threads in [1usize, 2] {
        let ctx = match ExecContext::with_threads(threads) {
            Ok(c) => c,
            Err(e) => panic!("cannot build a context: {e}"),
        };
        for (name, shape, layout) in cases {
            let mut w = match Gemm::new(&ctx, Some(*shape), *layout) {
                Ok(w) => w,
                Err(e) => panic!("cannot build {name}: {e}"),
            };
            let flops = w.flops().unwrap_or(0.0) as u64;
            group.throughput(Throughput::Elements(flops));
            group.bench_function(BenchmarkId::new(*name, format!("{threads}t")), |b| {
                b.iter(|| w.step().map_err(|e| e.to_string()))
            });
        }
    }
    group.finish();
}

criterion_group!(benches, bench_gemm);
criterion_main!(benches);
