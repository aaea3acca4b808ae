//! AdamW step over 10 M f32 parameters vs a parallel copy of the same size,
//! in one run, so the update's effective bandwidth can be compared with the
//! machine's copy bandwidth measured on the same context and threads.
//!
//! An AdamW step moves 28 bytes per parameter (reads p, g, m, v; writes p, m, v);
//! the copy moves 8 (reads src, writes dst). Criterion reports both as bytes/s.
//! Run: `cargo bench -p fucina-benches --bench adamw` (FUCINA_NUM_THREADS sets threads).

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use fucina_autograd::Tensor;
use fucina_core::ExecContext;
use fucina_optim::{AdamConfig, AdamW, Optimizer};

const N: usize = 10_000_000;
const CHUNK: usize = 1 << 16;

fn bench(c: &mut Criterion) {
    let ctx = ExecContext::new().expect("context");
    let mut g = c.benchmark_group(format!("adamw_vs_copy_{}threads", ctx.num_threads()));
    g.sample_size(20);

    // The copy: dst ← src in fixed 64K-element chunks over the context's threads.
    let src = vec![1.0f32; N];
    let mut dst = vec![0.0f32; N];
    g.throughput(Throughput::Bytes((N * 8) as u64));
    g.bench_function("copy_10M_f32", |b| {
        b.iter(|| {
            let s = &src;
            ctx.par_chunks_mut(&mut dst, CHUNK, true, |ch, out| {
                let lo = ch * CHUNK;
                out.copy_from_slice(&s[lo..lo + out.len()]);
            });
        })
    });

    // The AdamW step (fp32 moments, weight decay on).
    let p = Tensor::variable(&ctx, &vec![0.5f32; N], &[N]).expect("param");
    p.set_grad(Some(ctx.from_slice(&vec![0.01f32; N], &[N]).expect("grad")))
        .expect("grad");
    let mut opt = AdamW::single(vec![p.clone()], AdamConfig::adamw(1e-3)).expect("adamw");
    opt.step().expect("warm step"); // allocate the moments
    g.throughput(Throughput::Bytes((N * 28) as u64));
    g.bench_function("adamw_step_10M_f32", |b| {
        b.iter(|| opt.step().expect("step"))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
