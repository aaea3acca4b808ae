//! `finetune_llm` at a tiny size (the Llama fixture, a slice of *Henry V*):
//! a run stopped at step k and resumed gives the same losses, bit for bit,
//! as one that never stopped, for LoRA (with adapter dropout, so its
//! counters must come back) and for full fine-tuning, and on another thread
//! count; the JSONL prompt/completion format trains; the adapter it saves
//! loads back; bad input is a clear error.

use std::path::{Path, PathBuf};

use fucina_examples::llm_args::FinetuneArgs;
use fucina_examples::llm_finetune::{finetune_llm, FinetuneReport};

mod common;

fn tmp(name: &str) -> PathBuf {
    common::tmp("ft-llm", name)
}

fn fixture() -> PathBuf {
    common::fixture("llama")
}

/// The first 12k characters of Henry V.
fn small_text(dir: &Path) -> PathBuf {
    common::small_text(dir, "finetune/henry-v.txt", 12_000)
}

fn args(data: &Path, out: &Path, extra: &[&str]) -> FinetuneArgs {
    common::parse_cli(
        "finetune_llm --block-size 32 --batch-size 4 --steps 12 --warmup 2 --eval-every 4 \
         --ckpt-every 4 --sample-len 8 --threads 1 --no-progress",
        &[("--model", &fixture()), ("--data", data), ("--out", out)],
        extra,
    )
}

fn run(data: &Path, out: &Path, extra: &[&str]) -> FinetuneReport {
    finetune_llm(&args(data, out, extra), false).unwrap()
}

fn check_resume(kind: &str, extra: &[&str]) {
    let dir = tmp(kind);
    let data = small_text(&dir);
    let whole = run(&data, &dir.join("whole"), extra);
    assert_eq!(whole.run.losses.len(), 12);
    assert!(
        whole.val_after.unwrap() < whole.val_before,
        "{kind}: validation loss did not fall"
    );
    let cut = dir.join("cut");
    let first = run(&data, &cut, &[extra, &["--stop-after", "8"]].concat());
    assert_eq!(first.run.last_step, 8);
    assert!(first.val_after.is_none() && first.run.sample.is_empty());
    // The rest on two threads: the same bits.
    let rest = run(
        &data,
        &cut,
        &[extra, &["--resume", "--threads", "2"]].concat(),
    );
    assert_eq!(
        rest.run.losses, whole.run.losses,
        "{kind}: resumed losses differ"
    );
    assert_eq!(
        rest.run.val, whole.run.val,
        "{kind}: resumed validation differs"
    );
    assert_eq!(rest.run.sample, whole.run.sample);
    // KeepLast(2): only the newest two complete checkpoints stay.
    let kept: Vec<_> = std::fs::read_dir(cut.join("checkpoints"))
        .unwrap()
        .collect();
    assert_eq!(kept.len(), 2, "{kind}: {kept:?}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn lora_resume_is_bit_exact_with_dropout() {
    check_resume("lora", &["--lora-dropout", "0.1"]);
}

#[test]
fn full_resume_is_bit_exact() {
    check_resume("full", &["--full"]);
}

#[test]
fn jsonl_prompt_completion_trains_and_the_adapter_loads_back() {
    let dir = tmp("jsonl");
    let full = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../data/finetune/henry-v.jsonl"
    ))
    .unwrap();
    let data = dir.join("pc.jsonl");
    std::fs::write(&data, full.lines().take(80).collect::<Vec<_>>().join("\n")).unwrap();
    let out = dir.join("out");
    let r = run(
        &data,
        &out,
        &["--steps", "6", "--eval-every", "3", "--merge"],
    );
    assert!(r.val_after.unwrap() < r.val_before);
    let ctx = fucina_core::ExecContext::with_threads(1).unwrap();
    {
        let mut lm =
            fucina_nn::CausalLm::from_pretrained(&ctx, &fixture(), fucina_core::DType::F32)
                .unwrap();
        let mut init = fucina_nn::Init::new(&ctx, fucina_core::DType::F32, 0);
        let cfg = fucina_nn::load_adapter(&mut lm, &out.join("adapter"), &mut init).unwrap();
        assert_eq!(cfg.r, 8);
        // The merged model has the family's keys only and loads strictly.
        let merged = fucina_nn::CausalLm::from_pretrained(
            &ctx,
            &out.join("merged"),
            fucina_core::DType::F32,
        )
        .unwrap();
        let ids = fucina_autograd::Tensor::constant(&ctx, &[5i64, 6, 7, 8], &[1, 4]).unwrap();
        fucina_nn::Module::eval(&lm);
        let a = lm.forward(&ids, None).unwrap().to_vec::<f32>().unwrap();
        let b = merged.forward(&ids, None).unwrap().to_vec::<f32>().unwrap();
        let worst = common::max_abs_diff(&a, &b);
        assert!(worst < 1e-4, "merged vs adapter logits differ by {worst}");
    }
    assert_eq!(ctx.stats().outstanding, 0);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn bad_input_is_a_clear_error() {
    let dir = tmp("bad");
    let data = small_text(&dir);
    let out = dir.join("out");
    let err = |extra: &[&str]| {
        finetune_llm(&args(&data, &out, extra), false)
            .unwrap_err()
            .to_string()
    };
    let bad = dir.join("bad.jsonl");
    std::fs::write(
        &bad,
        "{\"prompt\": \"A:\\n\", \"completion\": \"b\"}\n{\"prompt\": \"C:\\n\"}\n",
    )
    .unwrap();
    let absent = dir.join("absent.txt");
    // Each run's extra flags and what its error must name.
    let cases: [(&[&str], &[&str]); 9] = [
        (
            &["--target-modules", "nope"],
            &["no linear layer matches", "q_proj"],
        ),
        (&["--lora-r", "0"], &["--lora-r", "positive"]),
        (
            &["--block-size", "65"],
            &["exceeds the model's context of 64"],
        ),
        (&["--model", dir.to_str().unwrap()], &["has no config.json"]),
        (&["--resume"], &["no complete checkpoint"]),
        (&["--full", "--export-twin", "x"], &["--export-twin"]),
        (
            &["--data", bad.to_str().unwrap()],
            &["bad.jsonl", "line 2: field `completion` is missing"],
        ),
        (&["--data", absent.to_str().unwrap()], &["absent.txt"]),
        (&["--batch-size", "1000"], &["make no batch of 1000"]),
    ];
    for (extra, names) in cases {
        let e = err(extra);
        assert!(names.iter().all(|n| e.contains(n)), "{e}");
    }
    std::fs::remove_dir_all(&dir).ok();
}
