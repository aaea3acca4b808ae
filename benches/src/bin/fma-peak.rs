//! The machine's f32 FMA peak: 12 independent FMA chains per thread (enough
//! to cover the FMA latency on every x86 core we meet), best of many short
//! trials so a loaded machine's time slicing does not hide the peak. The
//! yardstick for the GEMM numbers in docs/BENCHMARKS.md ("how close to the
//! chip's limit") and the MFU `fucina-bench` prints (the kernels live in
//! `fucina_benches::mfu`).
//!
//! `cargo run --release -p fucina-benches --bin fma-peak [THREADS]` prints
//! GFLOP/s per thread for the widest path the CPU has (AVX-512 when
//! present, else AVX2 + FMA), and for the 256-bit path too on an AVX-512 CPU.

use fucina_benches::mfu::{fma_paths, per_thread_gflops, Chains};

/// Runs `f` on `threads` threads at once; prints each thread's GFLOP/s and the sum.
fn report(name: &str, f: Chains, lanes: usize, threads: usize) {
    let per = per_thread_gflops(f, lanes, threads);
    let txt: Vec<String> = per.iter().map(|g| format!("{g:.1}")).collect();
    println!(
        "{name}, {threads} thread(s): {} GFLOP/s (sum {:.1})",
        txt.join(" + "),
        per.iter().sum::<f64>()
    );
}

fn main() {
    let threads: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(2);
    let paths = fma_paths();
    if paths.is_empty() {
        println!("no AVX2 + FMA on this CPU: nothing to measure");
    }
    for (name, f, lanes) in paths {
        report(name, f, lanes, 1);
        report(name, f, lanes, threads);
    }
}
