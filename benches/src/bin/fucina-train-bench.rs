//! Times the `tiny` and `mlp` train steps with the JSON keys of
//! `reference/torch_workloads.py`, for side-by-side runs until these
//! workloads are registered in `fucina-bench`.
//!
//! `fucina-train-bench [--workload tiny,mlp] [--steps N] [--warmup N] [--threads T]`
//! (like torch_workloads.py, `tiny` runs 20× the steps).

#[path = "../workloads/train_mlp.rs"]
mod train_mlp;

use std::time::Instant;

fn main() {
    let mut workloads = vec!["tiny".to_string(), "mlp".to_string()];
    let (mut steps, mut warmup, mut threads) = (20usize, 3usize, fucina_core::exec::default_num_threads());
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < args.len() {
        let v = args.get(i + 1).cloned().unwrap_or_default();
        let num = || {
            v.parse::<usize>().unwrap_or_else(|_| {
                eprintln!("{} expects a number, got {v:?}", args[i]);
                std::process::exit(2)
            })
        };
        match args[i].as_str() {
            "--workload" => workloads = v.split(',').map(str::to_string).collect(),
            "--steps" => steps = num(),
            "--warmup" => warmup = num(),
            "--threads" => threads = num().max(1),
            other => {
                eprintln!("unknown argument {other:?}");
                std::process::exit(2)
            }
        }
        i += 2;
    }
    let ctx = match fucina_core::ExecContext::with_threads(threads) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1)
        }
    };
    for name in workloads {
        let built = match name.as_str() {
            "tiny" => train_mlp::MlpTrain::tiny(&ctx),
            "mlp" => train_mlp::MlpTrain::mlp(&ctx),
            other => {
                eprintln!("unknown workload {other:?} (tiny, mlp)");
                std::process::exit(2)
            }
        };
        let mut w = built.unwrap_or_else(|e| {
            eprintln!("{name}: {e}");
            std::process::exit(1)
        });
        let n = steps * if name == "tiny" { 20 } else { 1 };
        let mut run = || -> fucina_optim::Result<Vec<f64>> {
            for _ in 0..warmup {
                w.step()?;
            }
            let mut times = Vec::with_capacity(n);
            for _ in 0..n {
                let t0 = Instant::now();
                w.step()?;
                times.push(t0.elapsed().as_secs_f64() * 1e3);
            }
            Ok(times)
        };
        let mut times = run().unwrap_or_else(|e| {
            eprintln!("{name}: {e}");
            std::process::exit(1)
        });
        times.sort_by(|a, b| a.total_cmp(b));
        let median = if times.len() % 2 == 1 {
            times[times.len() / 2]
        } else {
            0.5 * (times[times.len() / 2 - 1] + times[times.len() / 2])
        };
        println!(
            "{}",
            serde_json::json!({
                "workload": name, "framework": "fucina", "threads": threads,
                "median_ms": (median * 1e4).round() / 1e4, "min_ms": (times[0] * 1e4).round() / 1e4,
                "steps": n, "final_loss": w.last_loss,
            })
        );
    }
}
