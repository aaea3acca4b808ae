//! Where the real all-MiniLM-L6-v2 weights live (`scripts/fetch-minilm.sh`
//! puts them in `$FUCINA_CACHE/all-MiniLM-L6-v2`, default
//! `~/.cache/fucina/all-MiniLM-L6-v2`), and the rule when they are absent:
//! the test **fails**, saying how to fetch them, unless
//! `FUCINA_ALLOW_NO_MINILM=1` says skipping is meant, in which case it prints
//! one `SKIPPED` line and returns. A test that did not run is never a silent
//! `ok` (README, "Tests"; `.ci/run` fetches the weights first).

#![allow(dead_code)]

use std::path::PathBuf;

/// The model directory, or `None` (after printing why) when absent.
pub fn minilm_dir(test: &str) -> Option<PathBuf> {
    let cache = match std::env::var_os("FUCINA_CACHE") {
        Some(c) => PathBuf::from(c),
        None => PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/fucina"),
    };
    let dir = cache.join("all-MiniLM-L6-v2");
    let ok = ["model.safetensors", "config.json"]
        .iter()
        .all(|f| dir.join(f).is_file());
    if ok {
        return Some(dir);
    }
    if std::env::var("FUCINA_ALLOW_NO_MINILM").as_deref() != Ok("1") {
        panic!(
            "{test}: all-MiniLM-L6-v2 not found in {}: run scripts/fetch-minilm.sh, or set \
             FUCINA_ALLOW_NO_MINILM=1 to skip the tests that need it",
            dir.display()
        );
    }
    eprintln!(
        "SKIPPED {test}: all-MiniLM-L6-v2 weights not found in {} (FUCINA_ALLOW_NO_MINILM=1)",
        dir.display()
    );
    None
}
