//! What the example tests share: a fresh scratch directory, a short slice
//! of a shipped corpus, a decoder fixture, a CLI parsed from fixed and extra
//! arguments, a run of the built `generate` example, and the largest
//! difference between two sets of logits.
#![allow(dead_code)] // each test binary uses its own part

#[path = "../../../tests/common/diff.rs"]
mod diff;
#[allow(unused_imports)] // each test binary uses its own part
pub use diff::max_abs_diff;

use std::path::{Path, PathBuf};
use std::process::Command;

use clap::Parser;
use fucina_examples::gpt_train::TrainGptArgs;

/// An empty directory `fucina-<tag>-<pid>-<name>` under the temp dir.
pub fn tmp(tag: &str, name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("fucina-{tag}-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// `dir/small.txt`: the first `chars` characters of `data/<corpus>`.
pub fn small_text(dir: &Path, corpus: &str, chars: usize) -> PathBuf {
    let full = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../data")
        .join(corpus);
    let full = std::fs::read_to_string(full).unwrap();
    let p = dir.join("small.txt");
    std::fs::write(&p, full.chars().take(chars).collect::<String>()).unwrap();
    p
}

/// [`tmp`] with [`small_text`] in it: `(directory, text file)`.
pub fn scratch_with_text(tag: &str, name: &str, corpus: &str, chars: usize) -> (PathBuf, PathBuf) {
    let dir = tmp(tag, name);
    let text = small_text(&dir, corpus, chars);
    (dir, text)
}

/// The decoder fixture `fucina-nn/tests/fixtures/hf/<family>`.
pub fn fixture(family: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fucina-nn/tests/fixtures/hf")
        .join(family)
}

/// `A` parsed from `flags` (space-separated, the program name first), then
/// each `(flag, path)`, then `extra`.
pub fn parse_cli<A: Parser>(flags: &str, paths: &[(&str, &Path)], extra: &[&str]) -> A {
    let mut v: Vec<String> = flags.split_whitespace().map(String::from).collect();
    for (flag, path) in paths {
        v.extend([flag.to_string(), path.display().to_string()]);
    }
    v.extend(extra.iter().map(|s| s.to_string()));
    A::try_parse_from(v).unwrap()
}

/// `train_gpt`'s arguments: `flags`, then the corpus `data` and the run
/// directory `out`, then `extra`.
pub fn train_gpt_args(flags: &str, data: &Path, out: &Path, extra: &[&str]) -> TrainGptArgs {
    parse_cli(flags, &[("--data", data), ("--out", out)], extra)
}

/// The `generate` example, which `cargo test` builds next to the test binaries.
pub fn generate_binary() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().and_then(Path::parent).unwrap();
    let bin = dir.join("examples").join("generate");
    assert!(
        bin.is_file(),
        "{} not built (cargo test builds the examples)",
        bin.display()
    );
    bin
}

/// The stdout of `generate` run with `args`, which must succeed (`what`
/// names the run in the failure).
pub fn run_generate(what: &str, args: &[&str]) -> String {
    let out = Command::new(generate_binary()).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The last line of `generate`'s stdout: its JSON report.
pub fn json_line(stdout: &str) -> serde_json::Value {
    let line = stdout.lines().last().expect("no output");
    serde_json::from_str(line).unwrap_or_else(|e| panic!("last line is not JSON ({e}): {line}"))
}
