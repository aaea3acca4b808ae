//! The end-to-end benchmark: same CLI and JSON keys as `reference/torch_workloads.py`.
//!
//! `fucina-bench --workload all|NAME[,NAME...] --steps N --warmup N --threads T` prints one JSON
//! line per workload (`all` = tiny, mlp, gpt, minilm, gemm, llama, llama-lora, llama-lora-bf16). Extra options: gemm's
//! `--shape MxKxN` and `--layout nn|tn|nt`; minilm's `--minilm-dir DIR` (the checkpoint;
//! default `$FUCINA_CACHE/all-MiniLM-L6-v2` when present, else random init). Unknown
//! workloads exit with status 2 before anything runs.

use fucina_benches::workloads::{self, gemm::Layout, Options};
use fucina_benches::{context, json_line_mfu, mfu, time_workload};

struct Args {
    workloads: Vec<String>,
    steps: usize,
    warmup: usize,
    threads: usize,
    opts: Options,
}

const USAGE: &str =
    "usage: fucina-bench [--workload all|tiny|mlp|gpt|minilm|gemm|llama|llama-lora|llama-lora-bf16|NAME,...] \
                     [--steps N] [--warmup N] [--threads T] [--shape MxKxN] [--layout nn|tn|nt] \
                     [--minilm-dir DIR]";

fn fail(msg: &str) -> ! {
    eprintln!("fucina-bench: {msg}\n{USAGE}");
    std::process::exit(2);
}

fn parse_usize(flag: &str, v: &str) -> usize {
    v.parse::<usize>()
        .unwrap_or_else(|_| fail(&format!("{flag} expects a non-negative integer, got {v:?}")))
}

fn parse_args() -> Args {
    let mut a = Args {
        workloads: vec!["all".into()],
        steps: 20,
        warmup: 3,
        threads: fucina_core::exec::default_num_threads(),
        opts: Options::default(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "-h" || flag == "--help" {
            println!("{USAGE}");
            std::process::exit(0);
        }
        // Accept both `--flag value` and `--flag=value`.
        let (flag, inline) = match flag.split_once('=') {
            Some((f, v)) => (f.to_string(), Some(v.to_string())),
            None => (flag, None),
        };
        let mut value = || {
            inline
                .clone()
                .or_else(|| it.next())
                .unwrap_or_else(|| fail(&format!("{flag} expects a value")))
        };
        match flag.as_str() {
            "--workload" => {
                a.workloads = value().split(',').map(|s| s.trim().to_string()).collect()
            }
            "--steps" => a.steps = parse_usize("--steps", &value()),
            "--warmup" => a.warmup = parse_usize("--warmup", &value()),
            "--threads" => a.threads = parse_usize("--threads", &value()).max(1),
            "--shape" => {
                let v = value();
                let d: Vec<usize> = v.split('x').map(|s| parse_usize("--shape", s)).collect();
                if d.len() != 3 {
                    fail(&format!("--shape expects MxKxN, got {v:?}"));
                }
                a.opts.gemm_shape = Some((d[0], d[1], d[2]));
            }
            "--layout" => {
                let v = value();
                a.opts.gemm_layout = Layout::parse(&v)
                    .unwrap_or_else(|| fail(&format!("--layout expects nn, tn or nt, got {v:?}")));
            }
            "--minilm-dir" => a.opts.minilm_dir = Some(value().into()),
            other => fail(&format!("unknown argument {other:?}")),
        }
    }
    if a.workloads.iter().any(|w| w == "all") {
        a.workloads = workloads::AVAILABLE.iter().map(|s| s.to_string()).collect();
    }
    if a.steps == 0 {
        fail("--steps must be at least 1");
    }
    for w in &a.workloads {
        if !workloads::AVAILABLE.contains(&w.as_str()) {
            fail(&format!(
                "unknown workload {w:?} (available: {:?})",
                workloads::AVAILABLE
            ));
        }
    }
    a
}

fn main() {
    let args = parse_args();
    let ctx = context(args.threads).unwrap_or_else(|e| fail(&format!("cannot build context: {e}")));
    // The FMA peak MFU divides by, measured once (FUCINA_FMA_PEAK_GFLOPS skips it).
    let mut peak: Option<Option<f64>> = None;
    for name in &args.workloads {
        let mut w = match workloads::build(name, &ctx, &args.opts) {
            Some(Ok(w)) => w,
            Some(Err(e)) => {
                eprintln!("fucina-bench: building {name}: {e}");
                std::process::exit(1);
            }
            None => fail(&format!("unknown workload {name:?}")),
        };
        // torch_workloads.py times 20x more steps of the overhead-bound `tiny` workload.
        let steps = args.steps * if name == "tiny" { 20 } else { 1 };
        match time_workload(w.as_mut(), steps, args.warmup) {
            Ok(t) => {
                let shape = w.shape();
                let p = match (&shape, peak) {
                    (Some(_), None) => *peak.insert(mfu::fma_peak_gflops(args.threads)),
                    (_, p) => p.flatten(),
                };
                println!(
                    "{}",
                    json_line_mfu(name, args.threads, &t, w.flops(), shape.as_ref(), p)
                )
            }
            Err(e) => {
                eprintln!("fucina-bench: {name}: {e}");
                std::process::exit(1);
            }
        }
    }
}
