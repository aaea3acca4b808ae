//! Criterion bench of the scatter-add family: embedding backward (the hot adjoint of an
//! embedding lookup) at GPT-char (vocab 65) and BERT (vocab 30522) sizes, 2048 ids, plus the
//! forward lookup for comparison. Run: `cargo bench -p fucina-benches --bench scatter_add`.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use fucina_core::rng::SplitMix64;
use fucina_core::ExecContext;

fn bench(c: &mut Criterion) {
    let ctx = ExecContext::new().expect("exec context");
    let mut rng = SplitMix64::new(7);
    let n_ids = 2048usize;
    let mut group = c.benchmark_group("embedding_backward");
    for (vocab, d) in [(65usize, 256usize), (65, 384), (30522, 256), (30522, 384)] {
        let ids: Vec<i64> = (0..n_ids).map(|_| rng.below(vocab as u64) as i64).collect();
        let ids = ctx.from_slice(&ids, &[8, n_ids / 8]).expect("ids");
        let g: Vec<f32> = rng
            .vec_uniform(n_ids * d, -1.0, 1.0)
            .into_iter()
            .map(|x| x as f32)
            .collect();
        let g = ctx.from_slice(&g, &[8, n_ids / 8, d]).expect("grad");
        let w = ctx
            .zeros(fucina_core::DType::F32, &[vocab, d])
            .expect("weight");
        // Bytes moved: read the gradient, write the whole table.
        group.throughput(Throughput::Bytes(((n_ids + vocab) * d * 4) as u64));
        let id = format!("v{vocab}_d{d}");
        group.bench_function(BenchmarkId::new("backward", &id), |b| {
            b.iter(|| {
                ctx.embedding_backward(vocab, &ids, &g)
                    .expect("embedding_backward")
            })
        });
        group.bench_function(BenchmarkId::new("forward", &id), |b| {
            b.iter(|| ctx.embedding(&w, &ids).expect("embedding"))
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
