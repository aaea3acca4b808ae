//! Where the real all-MiniLM-L6-v2 weights live (`scripts/fetch-minilm.sh`
//! puts them in `$FUCINA_CACHE/all-MiniLM-L6-v2`, default
//! `~/.cache/fucina/all-MiniLM-L6-v2`), and the skip rule: a test that needs
//! them prints one clear line and returns when they are absent, unless
//! `FUCINA_REQUIRE_MINILM=1` (set by `.ci/run`), where absence fails.

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
    if std::env::var("FUCINA_REQUIRE_MINILM").as_deref() == Ok("1") {
        panic!(
            "{test}: all-MiniLM-L6-v2 not found in {} and FUCINA_REQUIRE_MINILM=1: run scripts/fetch-minilm.sh",
            dir.display()
        );
    }
    eprintln!(
        "SKIPPED {test}: all-MiniLM-L6-v2 weights not found in {} (run scripts/fetch-minilm.sh)",
        dir.display()
    );
    None
}
