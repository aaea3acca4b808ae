//! Source audit of the workspace's `unsafe` (issue 14): the kernels write their outputs only
//! through the context's disjoint `&mut` primitives (no `from_raw_parts_mut`, no `SendPtr` in
//! `fucina-core/src/kernels`), and every `unsafe` block, fn and impl in any crate's `src/`
//! carries a `SAFETY:` comment (or, for an `unsafe fn`, a `# Safety` doc section) just above
//! it — on the line itself, in the comment/attribute lines directly above, or above the
//! statement it continues.
//!
//! CPU feature detection lives in one module: `is_x86_feature_detected!` appears in code
//! only in `fucina-core/src/kernels/simd.rs`.
//!
//! The checks are plain text scans, so each is also run on a small sample with a planted
//! violation to show it fails.

use std::fs;
use std::path::{Path, PathBuf};

/// The workspace root (this crate, `checks/`, sits one level below it).
fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("checks/ has a parent directory")
        .to_path_buf()
}

/// Every `.rs` file under `dir`, recursively, sorted.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// The `src/` directories of the umbrella crate and of every member crate.
fn src_dirs() -> Vec<PathBuf> {
    let root = workspace();
    let mut dirs = vec![root.join("src")];
    if let Ok(entries) = fs::read_dir(&root) {
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() && p.join("Cargo.toml").is_file() && p.join("src").is_dir() {
                dirs.push(p.join("src"));
            }
        }
    }
    dirs.sort();
    dirs
}

/// The code part of a line (before a `//` comment).
fn code(line: &str) -> &str {
    match line.find("//") {
        Some(i) => &line[..i],
        None => line,
    }
}

/// True when `word` occurs in `s` as a whole identifier.
fn has_word(s: &str, word: &str) -> bool {
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    s.match_indices(word).any(|(i, _)| {
        let before = s[..i].chars().next_back();
        let after = s[i + word.len()..].chars().next();
        !before.is_some_and(ident) && !after.is_some_and(ident)
    })
}

/// True when line `i` uses `unsafe` as a block, fn or impl (not an `unsafe fn(..)` type).
fn is_unsafe_site(line: &str) -> bool {
    let c = code(line);
    if !has_word(c, "unsafe") {
        return false;
    }
    // A function-pointer type (`unsafe fn(*mut T)`) declares nothing.
    let only_types = c
        .match_indices("unsafe")
        .all(|(i, _)| c[i + "unsafe".len()..].trim_start().starts_with("fn("));
    !only_types
}

/// True when a `SAFETY:` (or `# Safety`) comment sits on line `i` or just above it.
fn has_safety_comment(lines: &[&str], i: usize, depth: usize) -> bool {
    let marks = |l: &str| l.contains("SAFETY:") || l.contains("# Safety");
    if lines[i].contains("SAFETY:") {
        return true;
    }
    let mut j = i;
    let mut block = false;
    while j > 0 {
        let t = lines[j - 1].trim_start();
        if t.starts_with("//") || t.starts_with("#[") || t.starts_with("#![") {
            if marks(t) {
                return true;
            }
            block = true;
            j -= 1;
        } else {
            break;
        }
    }
    // No comment directly above: the line may continue a statement whose start has one.
    if !block && j > 0 && depth < 4 {
        let prev = code(lines[j - 1]).trim_end();
        if !prev.is_empty() && !prev.ends_with(';') && !prev.ends_with('{') && !prev.ends_with('}')
        {
            return has_safety_comment(lines, j - 1, depth + 1);
        }
    }
    false
}

/// `(line number, line)` of every `unsafe` site in `text` without a SAFETY comment.
fn unjustified(text: &str) -> Vec<(usize, String)> {
    let lines: Vec<&str> = text.lines().collect();
    (0..lines.len())
        .filter(|&i| is_unsafe_site(lines[i]) && !has_safety_comment(&lines, i, 0))
        .map(|i| (i + 1, lines[i].trim().to_string()))
        .collect()
}

/// Lines of `text` that write through raw shared pointers the kernels no longer use.
fn raw_writes(text: &str) -> Vec<(usize, String)> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| l.contains("from_raw_parts_mut") || l.contains("SendPtr"))
        .map(|(i, l)| (i + 1, l.trim().to_string()))
        .collect()
}

#[test]
fn kernels_write_outputs_without_raw_pointers() {
    let dir = workspace().join("fucina-core/src/kernels");
    let files = rust_files(&dir);
    assert!(
        files.len() > 10,
        "expected the kernel sources under {dir:?}"
    );
    let mut bad = Vec::new();
    for f in files {
        let text = fs::read_to_string(&f).expect("readable source");
        for (n, l) in raw_writes(&text) {
            bad.push(format!("{}:{n}: {l}", f.display()));
        }
    }
    assert!(
        bad.is_empty(),
        "kernels must write through ExecContext's disjoint &mut primitives \
         (par_chunks_mut and friends), not raw pointers:\n{}",
        bad.join("\n")
    );
}

#[test]
fn every_unsafe_in_the_workspace_has_a_safety_comment() {
    let mut bad = Vec::new();
    let mut sites = 0usize;
    for dir in src_dirs() {
        for f in rust_files(&dir) {
            let text = fs::read_to_string(&f).expect("readable source");
            sites += text.lines().filter(|l| is_unsafe_site(l)).count();
            for (n, l) in unjustified(&text) {
                bad.push(format!("{}:{n}: {l}", f.display()));
            }
        }
    }
    assert!(
        sites > 0,
        "the scan found no unsafe at all: is it reading the sources?"
    );
    assert!(
        bad.is_empty(),
        "unsafe without a `// SAFETY:` comment (or `# Safety` doc) just above:\n{}",
        bad.join("\n")
    );
}

/// Code lines of `text` that probe CPU features.
fn feature_probes(text: &str) -> usize {
    text.lines()
        .filter(|l| code(l).contains("is_x86_feature_detected!"))
        .count()
}

#[test]
fn cpu_features_are_detected_in_one_module() {
    let home = workspace().join("fucina-core/src/kernels/simd.rs");
    let mut probing = Vec::new();
    for dir in src_dirs() {
        for f in rust_files(&dir) {
            let text = fs::read_to_string(&f).expect("readable source");
            if feature_probes(&text) > 0 {
                probing.push(f);
            }
        }
    }
    assert_eq!(
        probing,
        vec![home],
        "is_x86_feature_detected! belongs in kernels/simd.rs only (others call its helpers)"
    );
}

#[test]
fn the_scans_catch_planted_violations() {
    // A block with its comment, a continued statement, a documented fn, a fn-pointer type.
    let good = "\
// SAFETY: in bounds.
let x = unsafe { *p };
let y =
    // SAFETY: as above.
    unsafe { *p };
let z = v
    .map(|p| unsafe { *p }); // SAFETY: each chunk owns its row.
/// # Safety
/// The caller keeps p valid.
#[inline]
unsafe fn f(p: *const u8) -> u8 { 0 }
fn g(k: Option<unsafe fn(*mut u8)>) {}
";
    assert_eq!(unjustified(good), vec![]);
    let bad = "\
let a = 1;
let x = unsafe { *p };
// A comment that justifies nothing.
unsafe impl Send for P {}
";
    let found: Vec<usize> = unjustified(bad).into_iter().map(|(n, _)| n).collect();
    assert_eq!(found, vec![2, 4]);
    let raw = "let d = unsafe { std::slice::from_raw_parts_mut(p, n) };\nlet q = SendPtr(p);\n";
    assert_eq!(raw_writes(raw).len(), 2);
    let probes = "// is_x86_feature_detected!(\"avx2\") in a comment\nlet a = std::is_x86_feature_detected!(\"avx2\");\n";
    assert_eq!(feature_probes(probes), 1);
}
