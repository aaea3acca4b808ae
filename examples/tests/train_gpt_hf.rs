//! `train_gpt --arch llama --save-hf DIR` at a tiny size: the directory
//! loads with `CausalLm::from_pretrained` to logits bit-identical to the
//! trained model's, its char tokenizer round-trips (encode gives the ids the
//! model trained on, decode gives the text back), and the `generate`
//! example runs on it. `--arch gpt --save-hf` writes GPT-2's layout, whose
//! logits match the trained GPT's to f32 rounding.

use std::path::{Path, PathBuf};

use fucina_autograd::{no_grad, Tensor};
use fucina_core::DType;
use fucina_examples::char_lm::CharLm;
use fucina_examples::chardata::CharData;
use fucina_examples::gpt_train::{train_gpt_model, TrainGptArgs};
use fucina_nn::hf::Tokenizer;
use fucina_nn::{CausalLm, GenerateOptions, Module};

mod common;

/// A scratch directory `name` holding the first 30k characters of the
/// shipped corpus: `(directory, text file)`.
fn scratch(name: &str) -> (PathBuf, PathBuf) {
    common::scratch_with_text("train-hf", name, "shakespeare.txt", 30_000)
}

/// A tiny GPT (2 layers, 4 heads, 32 wide) for 12 steps.
const TINY: &str = "train_gpt --n-layer 2 --n-head 4 --n-embd 32 --block-size 16 \
                    --batch-size 4 --steps 12 --warmup 2 --eval-every 6 --eval-batches 2 \
                    --sample-len 8 --threads 2";

fn args(data: &Path, out: &Path, extra: &[&str]) -> TrainGptArgs {
    common::train_gpt_args(TINY, data, out, extra)
}

/// Logits of the first 2 × 16 validation characters, `(trained, loaded)`.
fn logits_pair(model: &CharLm, loaded: &CausalLm, data: &CharData) -> (Vec<f32>, Vec<f32>) {
    let m = model.module();
    m.eval_mode();
    let _ng = no_grad();
    let ids: Vec<i64> = data.val[..32].iter().map(|&v| v as i64).collect();
    let x = Tensor::constant(loaded.ctx(), &ids, &[2, 16]).unwrap();
    let a = model.logits(&x).unwrap().to_vec::<f32>().unwrap();
    let b = loaded.forward(&x, None).unwrap().to_vec::<f32>().unwrap();
    (a, b)
}

/// A scratch run `name` of [`TINY`] with `extra` that saves its model to
/// `root/hf` (`--save-hf`): `(root, text file, hf directory, arguments)`.
fn save_hf_run(name: &str, extra: &[&str]) -> (PathBuf, PathBuf, PathBuf, TrainGptArgs) {
    let (root, text_path) = scratch(name);
    let hf = root.join("hf");
    let mut flags = vec!["--save-hf", hf.to_str().unwrap()];
    flags.extend_from_slice(extra);
    let a = args(&text_path, &root.join("run"), &flags);
    (root, text_path, hf, a)
}

#[test]
fn llama_save_hf_loads_to_the_same_logits_and_round_trips_the_text() {
    let (root, text_path, hf, a) = save_hf_run("llama", &["--arch", "llama", "--n-kv-head", "2"]);
    let (report, model) = train_gpt_model(&a, false).unwrap();
    assert!(report.final_val.is_some_and(f64::is_finite));
    let CharLm::Llama(lm) = &model else {
        panic!("--arch llama built {:?}", model.arch())
    };
    assert_eq!((lm.config.num_heads, lm.config.num_kv_heads), (4, 2));
    assert!(!lm.config.tie_word_embeddings && lm.lm_head.is_some());

    // The weights: from_pretrained gives the trained model's logits, bit for bit.
    let data = CharData::load(&text_path, a.val_frac, a.block_size).unwrap();
    let loaded = CausalLm::from_pretrained(lm.ctx(), &hf, DType::F32).unwrap();
    assert_eq!(loaded.config, lm.config);
    let (trained, reread) = logits_pair(&model, &loaded, &data);
    assert_eq!(trained.len(), 2 * 16 * data.vocab_size());
    assert!(
        trained
            .iter()
            .zip(&reread)
            .all(|(x, y)| x.to_bits() == y.to_bits()),
        "the reloaded model's logits differ"
    );
    let config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(hf.join("config.json")).unwrap()).unwrap();
    assert_eq!(config["model_type"], "llama");
    assert_eq!(config["num_key_value_heads"], 2);
    assert!(hf.join("generation_config.json").is_file());
    let tcfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(hf.join("tokenizer_config.json")).unwrap())
            .unwrap();
    assert_eq!(tcfg["tokenizer_class"], "PreTrainedTokenizerFast");

    // The tokenizer: the training ids, and the text back.
    let tok = Tokenizer::from_file(&hf.join("tokenizer.json")).unwrap();
    assert_eq!(tok.vocab_size(), data.vocab_size());
    let text: String = std::fs::read_to_string(&text_path)
        .unwrap()
        .chars()
        .take(2000)
        .collect();
    let ids = tok.encode(&text, true).unwrap();
    assert_eq!(ids, data.encode(&text));
    assert_eq!(tok.decode(&ids, true).unwrap(), text);
    let val_text = data.decode(&data.val);
    assert_eq!(tok.encode(&val_text, true).unwrap(), data.val);
    // A character outside the vocabulary is skipped, as CharData::encode does.
    assert_eq!(tok.encode("A\u{1F600}B", true).unwrap(), data.encode("AB"));

    // The generate example runs on the directory, greedy ids as CausalLm::generate's.
    let stdout = common::run_generate(
        "generate",
        &[
            "--model",
            hf.to_str().unwrap(),
            "--prompt",
            "ROMEO:",
            "--max-new-tokens",
            "6",
            "--greedy",
            "--threads",
            "1",
        ],
    );
    let line = common::json_line(&stdout);
    let prompt: Vec<i64> = data.encode("ROMEO:").iter().map(|&i| i as i64).collect();
    assert_eq!(line["prompt_ids"], serde_json::json!(prompt));
    let opts = GenerateOptions::greedy(6);
    let want = loaded
        .generate(std::slice::from_ref(&prompt), &opts)
        .unwrap();
    assert_eq!(line["generated_ids"], serde_json::json!(want.tokens[0]));
    assert!(stdout.starts_with("ROMEO:"), "{stdout}");
    drop((loaded, model));
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn gpt_save_hf_writes_gpt2_with_the_same_logits() {
    let (root, text_path, hf, a) = save_hf_run("gpt", &[]);
    let (_, model) = train_gpt_model(&a, false).unwrap();
    let CharLm::Gpt(g) = &model else {
        panic!("the default arch is the GPT")
    };
    let data = CharData::load(&text_path, a.val_frac, a.block_size).unwrap();
    let loaded = CausalLm::from_pretrained(g.wte.weight.ctx(), &hf, DType::F32).unwrap();
    assert_eq!(loaded.config.model_type.as_str(), "gpt2");
    assert_eq!(loaded.num_parameters(), g.num_parameters());
    let (trained, reread) = logits_pair(&model, &loaded, &data);
    let worst = common::max_abs_diff(&trained, &reread);
    assert!(worst < 1e-4, "GPT-2 logits differ by {worst}");
    let tok = Tokenizer::from_file(&hf.join("tokenizer.json")).unwrap();
    assert_eq!(tok.encode("To be", true).unwrap(), data.encode("To be"));
    drop((loaded, model));
    std::fs::remove_dir_all(&root).unwrap();
}
