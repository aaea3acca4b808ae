//! The machine's f32 FMA peak: 12 independent FMA chains per thread (enough
//! to cover the FMA latency on every x86 core we meet), best of many short
//! trials so a loaded machine's time slicing does not hide the peak. The
//! yardstick for the GEMM numbers in docs/BENCHMARKS.md ("how close to the
//! chip's limit").
//!
//! `cargo run --release -p fucina-benches --bin fma-peak [THREADS]` prints
//! GFLOP/s per thread for the widest path the CPU has (AVX-512 when
//! present, else AVX2 + FMA), and for the 256-bit path too on an AVX-512 CPU.

use std::time::Instant;

/// FMA steps per trial (each step: 12 chains × lanes × 2 FLOPs).
const STEPS: usize = 20_000;
/// Trials per thread; the fastest counts.
const TRIALS: usize = 300;

#[cfg(target_arch = "x86_64")]
mod chains {
    use std::arch::x86_64::*;

    /// 12 independent 8-lane FMA chains for `steps` steps.
    ///
    /// # Safety
    /// AVX2 and FMA are available.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn avx2(steps: usize) -> f32 {
        let mut acc = [_mm256_set1_ps(0.0); 12];
        let a = _mm256_set1_ps(1.000_001);
        let b = _mm256_set1_ps(0.999_999);
        for _ in 0..steps {
            for r in acc.iter_mut() {
                *r = _mm256_fmadd_ps(*r, a, b);
            }
        }
        let mut s = _mm256_setzero_ps();
        for r in acc {
            s = _mm256_add_ps(s, r);
        }
        let mut out = [0f32; 8];
        // SAFETY: `out` holds 8 floats.
        unsafe { _mm256_storeu_ps(out.as_mut_ptr(), s) };
        out.iter().sum()
    }

    /// 12 independent 16-lane FMA chains for `steps` steps.
    ///
    /// # Safety
    /// AVX-512F is available.
    #[target_feature(enable = "avx512f")]
    pub unsafe fn avx512(steps: usize) -> f32 {
        let mut acc = [_mm512_set1_ps(0.0); 12];
        let a = _mm512_set1_ps(1.000_001);
        let b = _mm512_set1_ps(0.999_999);
        for _ in 0..steps {
            for r in acc.iter_mut() {
                *r = _mm512_fmadd_ps(*r, a, b);
            }
        }
        let mut s = _mm512_setzero_ps();
        for r in acc {
            s = _mm512_add_ps(s, r);
        }
        _mm512_reduce_add_ps(s)
    }
}

/// GFLOP/s of the fastest of [`TRIALS`] runs of `f` (`lanes` per chain).
fn best(f: fn(usize) -> f32, lanes: usize) -> f64 {
    let mut best = f64::MAX;
    for _ in 0..TRIALS {
        let t = Instant::now();
        std::hint::black_box(f(STEPS));
        best = best.min(t.elapsed().as_secs_f64());
    }
    (STEPS * 12 * lanes * 2) as f64 / best / 1e9
}

/// Runs `f` on `threads` threads at once; prints each thread's GFLOP/s and the sum.
fn report(name: &str, f: fn(usize) -> f32, lanes: usize, threads: usize) {
    let per: Vec<f64> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads).map(|_| s.spawn(|| best(f, lanes))).collect();
        hs.into_iter().map(|h| h.join().unwrap_or(0.0)).collect()
    });
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
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: AVX-512F was detected just above.
            let f: fn(usize) -> f32 = |n| unsafe { chains::avx512(n) };
            report("f32 FMA, 512-bit", f, 16, 1);
            report("f32 FMA, 512-bit", f, 16, threads);
        }
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            // SAFETY: AVX2 and FMA were detected just above.
            let f: fn(usize) -> f32 = |n| unsafe { chains::avx2(n) };
            report("f32 FMA, 256-bit", f, 8, 1);
            report("f32 FMA, 256-bit", f, 8, threads);
            return;
        }
    }
    println!("no AVX2 + FMA on this CPU: nothing to measure");
}
