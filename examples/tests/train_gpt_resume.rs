//! `train_gpt` at a tiny size: a run stopped at step k and resumed with
//! `--resume` gives the same loss, bit for bit, at every later step as a
//! run that never stopped (also when the resume starts from an earlier
//! checkpoint, as after a crash), with dropout on so its counters must be
//! restored too; the thread count does not change a bit; pool memory is
//! flat over the run; bad arguments and unreadable data are clear errors.
//! The batches come from fucina-train's prefetching `DataLoader`, which the
//! resumed run restarts at the checkpoint's batch; the same holds for
//! `--arch llama`; `--keep-last` prunes old checkpoints but keeps the best
//! validation loss's; the metrics reach `metrics.jsonl`.

use std::path::{Path, PathBuf};

use fucina_examples::gpt_train::{train_gpt, TrainGptArgs, TrainReport};
use fucina_examples::Error;

mod common;

/// A scratch directory `name` holding the first 30k characters of the
/// shipped corpus: `(directory, text file)`.
fn scratch(name: &str) -> (PathBuf, PathBuf) {
    common::scratch_with_text("train-gpt", name, "shakespeare.txt", 30_000)
}

/// A tiny GPT (2 layers, 2 heads, 16 wide) for 12 steps, with dropout and
/// a checkpoint every 4.
const TINY: &str = "train_gpt --n-layer 2 --n-head 2 --n-embd 16 --block-size 16 \
                    --batch-size 4 --steps 12 --warmup 2 --eval-every 4 --eval-batches 2 \
                    --ckpt-every 4 --dropout 0.1 --sample-len 24 --threads 2";

fn args(data: &Path, out: &Path, extra: &[&str]) -> TrainGptArgs {
    common::train_gpt_args(TINY, data, out, extra)
}

fn bits(r: &TrainReport) -> (Vec<u32>, Vec<(u64, u64)>) {
    (
        r.run.losses.iter().map(|l| l.to_bits()).collect(),
        r.run.val.iter().map(|&(s, v)| (s, v.to_bits())).collect(),
    )
}

#[test]
fn resume_is_bit_exact() {
    let (root, data) = scratch("resume");

    let full = train_gpt(&args(&data, &root.join("a"), &[]), false).unwrap();
    assert_eq!(full.run.losses.len(), 12);
    assert!(full.run.losses.iter().all(|l| l.is_finite()));
    assert!(full.final_val.is_some_and(f64::is_finite));
    assert_eq!(full.run.sample.chars().count(), 24 + 1); // the prompt "\n" + 24
                                                         // memory is flat: the same buffers are outstanding at every evaluation
    assert!(full.mem.len() >= 3);
    assert!(full
        .mem
        .iter()
        .all(|m| m.outstanding == full.mem[0].outstanding));

    // stopped after step 6 (a checkpoint there), then resumed
    let b = root.join("b");
    let stopped = train_gpt(&args(&data, &b, &["--stop-after", "6"]), false).unwrap();
    assert_eq!(stopped.run.last_step, 6);
    assert_eq!(stopped.final_val, None);
    let resumed = train_gpt(&args(&data, &b, &["--resume"]), false).unwrap();
    assert_eq!(bits(&resumed), bits(&full));
    assert_eq!(
        resumed.final_val.map(f64::to_bits),
        full.final_val.map(f64::to_bits)
    );
    assert_eq!(resumed.run.sample, full.run.sample);

    // "killed" after step 7: the newest checkpoint is step 4's; resume from there
    let c = root.join("c");
    train_gpt(&args(&data, &c, &["--stop-after", "7"]), false).unwrap();
    std::fs::remove_dir_all(c.join("checkpoints/step-000007")).unwrap();
    let resumed = train_gpt(&args(&data, &c, &["--resume"]), false).unwrap();
    assert_eq!(bits(&resumed), bits(&full));

    // one thread: the same bits
    let one = train_gpt(&args(&data, &root.join("d"), &["--threads", "1"]), false).unwrap();
    assert_eq!(bits(&one), bits(&full));

    // a resume whose knobs differ is refused, naming the checkpoint
    let e = train_gpt(&args(&data, &b, &["--resume", "--lr", "1e-2"]), false).unwrap_err();
    assert!(matches!(e, Error::Resume { .. }), "{e}");
    // ... and naming the one field that differs, not two whole identities
    let msg = e.to_string();
    assert!(msg.contains("`lr`: checkpoint"), "{msg}");
    assert_eq!(msg.matches("checkpoint ").count(), 1, "{msg}");
    std::fs::remove_dir_all(&root).unwrap();
}

fn step_dirs(root: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(root.join("checkpoints"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("step-"))
        .collect();
    v.sort();
    v
}

#[test]
fn llama_resume_is_bit_exact_and_old_checkpoints_are_pruned() {
    let (root, data) = scratch("llama");
    let llama = ["--arch", "llama", "--n-kv-head", "1"];
    let full = train_gpt(&args(&data, &root.join("a"), &llama), false).unwrap();
    assert!(full.run.losses.iter().all(|l| l.is_finite()));
    let b = root.join("b");
    let mut stop = llama.to_vec();
    stop.extend(["--stop-after", "5"]);
    train_gpt(&args(&data, &b, &stop), false).unwrap();
    let mut resume = llama.to_vec();
    resume.push("--resume");
    let resumed = train_gpt(&args(&data, &b, &resume), false).unwrap();
    assert_eq!(bits(&resumed), bits(&full));
    assert_eq!(resumed.run.sample, full.run.sample);
    // A Llama checkpoint does not resume as a GPT.
    let e = train_gpt(&args(&data, &b, &["--resume"]), false).unwrap_err();
    assert!(matches!(e, Error::Resume { .. }), "{e}");

    // --keep-last 1: the newest checkpoint and the best validation loss's.
    let c = root.join("c");
    let mut keep = llama.to_vec();
    keep.extend(["--keep-last", "1"]);
    let r = train_gpt(&args(&data, &c, &keep), false).unwrap();
    let (best_step, _) = r
        .run
        .val
        .iter()
        .copied()
        .min_by(|x, y| x.1.total_cmp(&y.1))
        .unwrap();
    let mut want = vec![format!("step-{best_step:06}"), "step-000012".to_string()];
    want.dedup();
    want.sort();
    assert_eq!(step_dirs(&c), want);
    // Every step's loss and every evaluation in metrics.jsonl.
    let text = std::fs::read_to_string(c.join("metrics.jsonl")).unwrap();
    let rows: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let tagged = |t: &str| rows.iter().filter(|r| r["tag"] == t).count();
    assert_eq!(tagged("train/loss"), 12);
    assert_eq!(tagged("val/loss"), r.run.val.len());
    let logged: Vec<f32> = rows
        .iter()
        .filter(|r| r["tag"] == "train/loss")
        .map(|r| r["value"].as_f64().unwrap() as f32)
        .collect();
    assert_eq!(logged, r.run.losses);
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn bad_arguments_and_data_are_clear_errors() {
    let (root, data) = scratch("errors");
    let out = root.join("out");
    let e = train_gpt(&args(&data, &out, &["--n-embd", "15"]), false).unwrap_err();
    assert!(e.to_string().contains("--n-embd"), "{e}");
    let e = train_gpt(&args(&data, &out, &["--steps", "0"]), false).unwrap_err();
    assert!(e.to_string().contains("--steps"), "{e}");
    let e = train_gpt(
        &args(&data, &out, &["--arch", "llama", "--n-kv-head", "3"]),
        false,
    )
    .unwrap_err();
    assert!(e.to_string().contains("--n-kv-head"), "{e}");
    let e = train_gpt(&args(&data, &out, &["--keep-last", "0"]), false).unwrap_err();
    assert!(e.to_string().contains("--keep-last"), "{e}");
    let missing = root.join("nope.txt");
    let e = train_gpt(&args(&missing, &out, &[]), false).unwrap_err();
    assert!(
        matches!(e, Error::Data { .. }) && e.to_string().contains("nope.txt"),
        "{e}"
    );
    let latin1 = root.join("latin1.txt");
    std::fs::write(&latin1, b"caf\xe9 ".repeat(100)).unwrap();
    let e = train_gpt(&args(&latin1, &out, &[]), false).unwrap_err();
    assert!(e.to_string().contains("not UTF-8"), "{e}");
    let short = root.join("short.txt");
    std::fs::write(&short, "to be or not").unwrap();
    let e = train_gpt(&args(&short, &out, &[]), false).unwrap_err();
    assert!(e.to_string().contains("too short"), "{e}");
    let e = train_gpt(&args(&data, &root.join("empty"), &["--resume"]), false).unwrap_err();
    assert!(matches!(e, Error::Resume { .. }), "{e}");
    std::fs::remove_dir_all(&root).unwrap();
}
