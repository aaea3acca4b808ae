//! Checks the architecture that `ARCHITECTURE.md` describes, so the document
//! cannot drift from the code:
//! - the crate layer table in ARCHITECTURE.md names every workspace member,
//!   and no crate depends (normal, dev or build) on a fucina crate of the
//!   same or a higher layer;
//! - every library crate's module graph (built from parsed `use` trees and
//!   inline `crate::`/`super::`/`self::` paths, root re-exports followed)
//!   has no cycle outside an explicit allow-list (`ALLOWED_CYCLES`: pool ↔
//!   storage, the tape's core types);
//! - inside fucina-core, the leaf modules never reach up to tensor, kernels
//!   or exec, tensor never reaches up to kernels or exec, and exec names no
//!   kernel (on the same graph, so `use crate::{tensor::RawTensor}` cannot
//!   escape);
//! - every test of fucina-core, fucina-autograd and fucina-optim builds its
//!   context through the leak-checking `TestCtx` fixture;
//! - every repository path ARCHITECTURE.md or CONTRIBUTING.md names in
//!   backticks exists;
//! - no `.rs` file in the workspace is over 800 lines.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

#[path = "architecture/modgraph.rs"]
mod modgraph;
use modgraph::*;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn read(rel: &str) -> String {
    let p = root().join(rel);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()))
}

/// Strips one pair of surrounding backticks, if any.
fn unquote(cell: &str) -> Option<&str> {
    cell.trim().strip_prefix('`')?.strip_suffix('`')
}

/// The layer table of ARCHITECTURE.md: rows `| <layer> | `crate` | `path/` | ... |`.
fn layer_table() -> Vec<(u32, String, String)> {
    let doc = read("ARCHITECTURE.md");
    let mut rows = Vec::new();
    for line in doc.lines() {
        let cells: Vec<&str> = line.split('|').collect();
        if cells.len() < 5 || !line.trim_start().starts_with('|') {
            continue;
        }
        let Ok(layer) = cells[1].trim().parse::<u32>() else {
            continue;
        };
        let (Some(name), Some(path)) = (unquote(cells[2]), unquote(cells[3])) else {
            panic!("layer row without `crate` and `path` cells: {line}");
        };
        rows.push((
            layer,
            name.to_string(),
            path.trim_end_matches('/').to_string(),
        ));
    }
    assert!(!rows.is_empty(), "no layer table found in ARCHITECTURE.md");
    rows
}

/// The `members = [...]` of the root Cargo.toml.
fn workspace_members() -> Vec<String> {
    let toml = read("Cargo.toml");
    let start = toml.find("\nmembers").expect("workspace members");
    let open = start + toml[start..].find('[').expect("members list");
    let close = open + toml[open..].find(']').expect("members list end");
    toml[open + 1..close]
        .split(',')
        .map(|m| m.trim().trim_matches('"').to_string())
        .filter(|m| !m.is_empty())
        .collect()
}

/// The package name and every dependency name (any kind) of a Cargo.toml.
fn manifest(text: &str) -> (String, Vec<String>) {
    let mut name = None;
    let mut deps = Vec::new();
    let mut section = String::new();
    for raw in text.lines() {
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.starts_with('[') {
            section = line.trim_matches(|c| c == '[' || c == ']').to_string();
            // `[dependencies.foo]` / `[dev-dependencies.foo]` tables.
            for kind in ["dependencies.", "dev-dependencies.", "build-dependencies."] {
                if let Some(i) = section.find(kind) {
                    deps.push(section[i + kind.len()..].to_string());
                }
            }
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        let key = key.trim();
        if section == "package" && key == "name" {
            name = Some(value.trim().trim_matches('"').to_string());
        }
        if section.ends_with("dependencies") {
            // `foo = ...`, `foo.workspace = true`, `foo = { package = "bar" }`.
            let dep = key.split('.').next().unwrap_or(key).trim_matches('"');
            deps.push(dep.to_string());
            if let Some(i) = value.find("package") {
                let renamed = value[i..].split('"').nth(1).unwrap_or("");
                deps.push(renamed.to_string());
            }
        }
    }
    (name.expect("[package] name"), deps)
}

#[test]
fn crates_depend_only_on_lower_layers() {
    let table = layer_table();
    let layer_of: BTreeMap<&str, u32> = table.iter().map(|(l, n, _)| (n.as_str(), *l)).collect();
    let members = workspace_members();
    let mut table_paths: Vec<&str> = table.iter().map(|(_, _, p)| p.as_str()).collect();
    table_paths.sort();
    let mut sorted_members: Vec<&str> = members.iter().map(|m| m.as_str()).collect();
    sorted_members.sort();
    assert_eq!(
        table_paths, sorted_members,
        "the layer table in ARCHITECTURE.md must list exactly the workspace members"
    );
    let mut violations = Vec::new();
    for (layer, name, path) in &table {
        let (pkg, deps) = manifest(&read(&format!("{path}/Cargo.toml")));
        assert_eq!(&pkg, name, "{path}/Cargo.toml names a different package");
        for dep in deps {
            if let Some(&dl) = layer_of.get(dep.as_str()) {
                if dl >= *layer && dep != *name {
                    violations.push(format!(
                        "{name} (layer {layer}) depends on {dep} (layer {dl})"
                    ));
                }
            }
        }
    }
    assert!(
        violations.is_empty(),
        "dependencies must point down the layer table:\n{}",
        violations.join("\n")
    );
}

#[test]
fn manifest_parser_sees_every_dependency_form() {
    // The checker is only as good as its parser: pin the forms it must see.
    let (name, deps) = manifest(
        r#"
[package]
name = "x"
[dependencies]
fucina-nn.workspace = true
other = { package = "fucina-optim", path = "../o" }
[dev-dependencies]
"fucina-autograd" = "1"
[target.'cfg(unix)'.dependencies]
fucina-core = { path = "../c" }
[build-dependencies.fucina-benches]
path = "../b"
"#,
    );
    assert_eq!(name, "x");
    for want in [
        "fucina-nn",
        "fucina-optim",
        "fucina-autograd",
        "fucina-core",
        "fucina-benches",
    ] {
        assert!(deps.iter().any(|d| d == want), "missed {want} in {deps:?}");
    }
}

// ------------------------------------------------------------ module graph

/// Module cycles that are allowed, per crate: a cycle is accepted only when
/// every module on it matches one group (an entry ending in `::` matches the
/// folder's modules). Everything else that forms a cycle fails the test.
const ALLOWED_CYCLES: &[(&str, &[&str])] = &[
    // A `Buffer` holds a weak pointer back to the pool it returns to.
    ("fucina-core", &["storage", "pool"]),
    // The tape's core types know each other: a tensor holds its node, a node
    // its inputs' tensors, the engine walks both, a scope adopts tensors.
    ("fucina-autograd", &["tape::"]),
];

/// True when every module of `cycle` matches one allowed group of `krate`.
fn allowed(krate: &str, cycle: &[String]) -> bool {
    let matches = |pat: &str, m: &str| match pat.strip_suffix("::") {
        Some(folder) => m.starts_with(&format!("{folder}::")),
        None => m == pat,
    };
    ALLOWED_CYCLES
        .iter()
        .filter(|(k, _)| *k == krate)
        .any(|(_, group)| cycle.iter().all(|m| group.iter().any(|p| matches(p, m))))
}

/// The cycles of a crate's graph that the allow-list does not cover.
fn forbidden_cycles(krate: &str, sources: &Sources) -> Vec<Vec<String>> {
    cycles(&module_graph(sources))
        .into_iter()
        .filter(|c| !allowed(krate, c))
        .collect()
}

/// A crate's cycles that the allow-list covers (to find stale entries).
fn allowed_cycles(krate: &str, sources: &Sources) -> Vec<Vec<String>> {
    cycles(&module_graph(sources))
        .into_iter()
        .filter(|c| allowed(krate, c))
        .collect()
}

#[test]
fn no_module_cycles_outside_the_allow_list() {
    let mut bad = Vec::new();
    let mut crates = 0;
    for (_, name, path) in layer_table() {
        let Some(sources) = crate_sources(&path) else {
            continue;
        };
        crates += 1;
        for c in forbidden_cycles(&name, &sources) {
            bad.push(format!("{name}: {}", c.join(" ↔ ")));
        }
        // Every allow-list entry must still excuse a real cycle: a stale one
        // (or a parser that stopped seeing edges) fails too.
        if ALLOWED_CYCLES.iter().any(|(k, _)| *k == name) {
            let seen = allowed_cycles(&name, &sources);
            if seen.is_empty() {
                bad.push(format!("{name}: ALLOWED_CYCLES names no cycle found"));
            }
        }
    }
    assert!(crates >= 6, "expected the library crates, found {crates}");
    assert!(
        bad.is_empty(),
        "module cycles (break them, or add a reasoned entry to ALLOWED_CYCLES):\n{}",
        bad.join("\n")
    );
}

fn synthetic(files: &[(&str, &str)]) -> Sources {
    files
        .iter()
        .map(|(m, t)| (m.to_string(), t.to_string()))
        .collect()
}

#[test]
fn use_trees_are_parsed_into_paths() {
    let (uses, inline) = references(
        "use crate::{a::B, c::{self, d::E as F}, *};\n\
         // use crate::commented::Out;\n\
         use super::super::g;\n\
         let s = \"crate::in_a_string\";\n\
         fn f() { crate::h::call(); $crate::i::j!(); }",
    );
    let paths: Vec<String> = uses.iter().map(|(p, _)| join(p)).collect();
    assert_eq!(
        paths,
        [
            "crate::a::B",
            "crate::c",
            "crate::c::d::E",
            "crate::*",
            "super::super::g"
        ]
    );
    assert_eq!(uses[2].1, "F");
    let inline: Vec<String> = inline.iter().map(|p| join(p)).collect();
    assert_eq!(inline, ["crate::h::call", "crate::i::j"]);
}

#[test]
fn a_deliberate_cycle_fails_and_an_allowed_one_passes() {
    // `use crate::{…}` is how the old substring check was escaped: a cycle
    // written that way must be found.
    let cyclic = synthetic(&[
        ("", "pub mod a; pub mod b; pub mod c; pub use a::Thing;"),
        ("a", "use crate::{b::{Other}};"),
        ("b", "pub struct Other; fn f() -> crate::Thing { todo!() }"),
        ("c", "use super::b;"),
    ]);
    assert_eq!(forbidden_cycles("x", &cyclic), vec![vec!["a", "b"]]);
    // The same cycle inside an allowed group passes.
    let tape = synthetic(&[
        ("", "pub mod tape; pub mod ops;"),
        ("tape", "pub mod graph; pub mod tensor;"),
        ("tape::graph", "use crate::tape::tensor::Tensor;"),
        ("tape::tensor", "use super::graph::Node;"),
        ("ops", "use crate::tape::{graph, tensor::Tensor};"),
    ]);
    assert!(forbidden_cycles("fucina-autograd", &tape).is_empty());
    // ... but not in another crate, nor once it leaves the folder.
    assert_eq!(forbidden_cycles("x", &tape).len(), 1);
    let mut escaped = tape.clone();
    escaped.insert("ops".into(), "use crate::tape::tensor::Tensor;".into());
    escaped.insert(
        "tape::graph".into(),
        "use crate::tape::tensor::Tensor; use crate::ops;".into(),
    );
    assert_eq!(
        forbidden_cycles("fucina-autograd", &escaped),
        vec![vec!["ops", "tape::graph", "tape::tensor"]]
    );
    // A parent and its children are one unit, not a cycle.
    let nested = synthetic(&[
        ("", "pub mod k;"),
        ("k", "mod m; use m::f;"),
        ("k::m", "use super::G;"),
    ]);
    assert!(forbidden_cycles("x", &nested).is_empty());
}

#[test]
fn core_modules_respect_their_layering() {
    let graph = module_graph(&crate_sources("fucina-core").expect("fucina-core/src/lib.rs"));
    let upper =
        |t: &str| t == "tensor" || t == "exec" || t == "kernels" || t.starts_with("kernels::");
    let leaves = [
        "dtype", "error", "storage", "pool", "shape", "rng", "team", "vmath",
    ];
    let mut violations = Vec::new();
    for leaf in leaves {
        let targets = graph
            .get(leaf)
            .unwrap_or_else(|| panic!("no module {leaf}"));
        for t in targets.iter().filter(|t| upper(t)) {
            violations.push(format!("{leaf} reaches up to {t}"));
        }
    }
    for t in &graph["tensor"] {
        if t != "tensor" && upper(t) {
            violations.push(format!("tensor reaches up to {t}"));
        }
    }
    // The copy entry points live with their kernels: exec names no kernel.
    for t in graph["exec"].iter().filter(|t| t.starts_with("kernels")) {
        violations.push(format!("exec reaches into {t}"));
    }
    assert!(
        violations.is_empty(),
        "layering violations:\n{}",
        violations.join("\n")
    );
}

/// Code lines of a source file (comments and doc comments dropped).
fn code_lines(rel: &str) -> Vec<String> {
    strip_code(&read(rel))
        .lines()
        .map(|l| l.trim().to_string())
        .collect()
}

#[test]
fn every_test_context_is_the_fixture() {
    // A test builds its context with `TestCtx` (fucina_core::testing or
    // fucina_autograd::testing), which fails the test if buffers are
    // outstanding or graph nodes alive when it drops. A context built by hand
    // needs `fixture-exempt: <why>` on its line or the line above.
    let ctors = [
        "ExecContext::new(",
        "ExecContext::with_threads(",
        "ExecContext::with_pool(",
    ];
    let mut files = 0;
    let mut bad = Vec::new();
    for dir in [
        "fucina-core/tests",
        "fucina-autograd/tests",
        "fucina-optim/tests",
    ] {
        let mut stack = vec![root().join(dir)];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).expect("tests dir") {
                let p = e.expect("entry").path();
                if p.is_dir() {
                    stack.push(p);
                    continue;
                }
                if p.extension().and_then(|x| x.to_str()) != Some("rs") {
                    continue;
                }
                files += 1;
                let rel = p
                    .strip_prefix(root())
                    .expect("in repo")
                    .to_string_lossy()
                    .to_string();
                let raw: Vec<String> = read(&rel).lines().map(str::to_string).collect();
                let code = code_lines(&rel);
                for (i, line) in code.iter().enumerate() {
                    if !ctors.iter().any(|c| line.contains(c)) {
                        continue;
                    }
                    let exempt = [i.saturating_sub(1), i]
                        .iter()
                        .any(|&k| raw.get(k).is_some_and(|l| l.contains("fixture-exempt:")));
                    if !exempt {
                        bad.push(format!("{rel}:{}: {line}", i + 1));
                    }
                }
            }
        }
    }
    assert!(files >= 30, "expected the test files, found {files}");
    assert!(
        bad.is_empty(),
        "contexts built without the TestCtx fixture:\n{}",
        bad.join("\n")
    );
}

/// Every file below `dir`, outside `target/` and hidden files and folders
/// (except the hidden ones named in `kept`).
fn files_below(dir: &Path, kept: &[&str], out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let path = e.path();
        let name = e.file_name().to_string_lossy().into_owned();
        if (name.starts_with('.') && !kept.contains(&name.as_str())) || name == "target" {
            continue;
        }
        if path.is_dir() {
            files_below(&path, kept, out);
        } else {
            out.push(path);
        }
    }
}

/// Every file of the repository, as a path relative to its root with `/`
/// separators (outside `target/` and hidden folders other than `.ci`).
fn repo_files(dir: &Path, out: &mut Vec<String>) {
    let mut files = Vec::new();
    files_below(dir, &[".ci"], &mut files);
    out.extend(
        files
            .iter()
            .filter_map(|p| p.strip_prefix(root()).ok())
            .map(|rel| rel.to_string_lossy().replace('\\', "/")),
    );
}

/// File names the docs mention that a run writes, not repository files.
const RUNTIME_FILES: [&str; 10] = [
    "trainer_state.json",
    "model.safetensors",
    "optimizer.safetensors",
    "config.json",
    "tokenizer.json",
    "adapter_config.json",
    "adapter_model.safetensors",
    "generation_config.json",
    "metrics.jsonl",
    "losses.tsv",
];

/// The repository paths a document names in backticks, and those missing.
///
/// Two kinds: a path from the repository root (`fucina-core/src/exec.rs`),
/// which must exist there; and a partial one (`kernels/copy.rs`,
/// `linear.rs`), a token ending in a file extension, which must be the tail
/// of some repository file. A path outside the repository says so by
/// starting with `../` (the shared reference beside it) and is not checked;
/// a name a run writes (`RUNTIME_FILES`, anything under `runs/`) is not a
/// repository path.
fn named_paths(doc_name: &str) -> (usize, Vec<String>) {
    let doc = read(doc_name);
    let roots = [
        "fucina-core/",
        "fucina-autograd/",
        "fucina-nn/",
        "fucina-nn-derive/",
        "fucina-optim/",
        "fucina-distributed/",
        "fucina-train/",
        "checks/",
        "src/",
        "tests/",
        "examples/",
        "benches/",
        "docs/",
        "tools/",
        "scripts/",
        "data/",
        ".ci/",
    ];
    let files = [
        "README.md",
        "ARCHITECTURE.md",
        "CONTRIBUTING.md",
        "Cargo.toml",
        "Cargo.lock",
    ];
    let extensions = [
        ".rs",
        ".py",
        ".sh",
        ".md",
        ".toml",
        ".json",
        ".jsonl",
        ".txt",
        ".safetensors",
    ];
    let mut all = Vec::new();
    repo_files(&root(), &mut all);
    let mut checked = 0;
    let mut missing = Vec::new();
    for (i, token) in doc.split('`').enumerate() {
        // Odd pieces are inside backticks.
        if i % 2 == 0 || token.contains(char::is_whitespace) {
            continue;
        }
        if token.contains(['<', '*', '{', '>', '(', ':', '$', '~'])
            || token.starts_with("../")
            || token.starts_with("runs/")
        {
            // A pattern, an expression, a path outside the repository or
            // one a run writes.
            continue;
        }
        if roots.iter().any(|r| token.starts_with(r)) || files.contains(&token) {
            checked += 1;
            if !root().join(token).exists() {
                missing.push(token.to_string());
            }
        } else if extensions.iter().any(|e| token.ends_with(e))
            && token
                .chars()
                .all(|c| c.is_alphanumeric() || "._-/".contains(c))
            && !RUNTIME_FILES.contains(&token)
        {
            checked += 1;
            let tail = format!("/{}", token.trim_start_matches('/'));
            if !all.iter().any(|f| f == token || f.ends_with(&tail)) {
                missing.push(token.to_string());
            }
        }
    }
    (checked, missing)
}

/// Asserts that `doc` names at least `min` paths and that all of them exist.
fn assert_paths_exist(doc: &str, min: usize) {
    let (checked, missing) = named_paths(doc);
    assert!(
        checked >= min,
        "expected {doc} to name paths, found {checked}"
    );
    assert!(missing.is_empty(), "{doc} names missing paths: {missing:?}");
}

#[test]
fn paths_named_in_architecture_md_exist() {
    assert_paths_exist("ARCHITECTURE.md", 10);
}

#[test]
fn paths_named_in_contributing_md_exist() {
    assert_paths_exist("CONTRIBUTING.md", 2);
}

#[test]
fn paths_named_in_readme_md_exist() {
    assert_paths_exist("README.md", 10);
}

#[test]
fn paths_named_in_the_docs_folder_exist() {
    assert_paths_exist("docs/BENCHMARKS.md", 5);
    assert_paths_exist("docs/DISTRIBUTED.md", 2);
    assert_paths_exist("docs/RELIABILITY.md", 5);
}

#[test]
fn the_path_check_sees_a_missing_file() {
    // The checker itself: a rooted and a partial path that do not exist fail.
    let doc = root().join("target/path-check-probe.md");
    std::fs::create_dir_all(root().join("target")).unwrap();
    std::fs::write(
        &doc,
        "`fucina-core/src/no_such.rs`, `elementwise/gelu_tanh.rs`, `kernels/copy.rs`, \
         `../shared/reference/torch_workloads.py`, `trainer_state.json`",
    )
    .unwrap();
    let (checked, missing) = named_paths("target/path-check-probe.md");
    std::fs::remove_file(&doc).unwrap();
    assert_eq!(checked, 3);
    assert_eq!(
        missing,
        ["fucina-core/src/no_such.rs", "elementwise/gelu_tanh.rs"]
    );
}

/// Every `.rs` file of the workspace (outside `target/` and hidden folders).
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut files = Vec::new();
    files_below(dir, &[], &mut files);
    out.extend(files.into_iter().filter(|p| {
        p.file_name()
            .is_some_and(|n| n.to_string_lossy().ends_with(".rs"))
    }));
}

#[test]
fn no_source_file_is_over_800_lines() {
    // Small files by domain: a file past 800 lines is split by role.
    let mut files = Vec::new();
    rust_files(&root(), &mut files);
    assert!(files.len() > 100, "found only {} .rs files", files.len());
    let long: Vec<String> = files
        .iter()
        .filter_map(|f| {
            let n = std::fs::read_to_string(f).ok()?.lines().count();
            (n > 800).then(|| format!("{} ({n} lines)", f.display()))
        })
        .collect();
    assert!(long.is_empty(), "files over 800 lines: {long:?}");
}

/// Folders that still hold a `mod.rs`: autograd's `ops/` and `tape/` (being
/// rewritten elsewhere; to move to `ops.rs`/`tape.rs` with them) and the
/// benches' `workloads/` (loaded through `#[path]` from `benches/lib.rs`).
/// `tests/common/mod.rs` is Cargo's convention for shared test helpers (a
/// `tests/common.rs` would be built as a test of its own), so tests are
/// outside the rule.
const MOD_RS_ALLOWED: [&str; 3] = [
    "fucina-autograd/src/ops/",
    "fucina-autograd/src/tape/",
    "benches/src/workloads/",
];

#[test]
fn one_module_convention_foo_rs_beside_foo() {
    // A module with children is `foo.rs` beside `foo/`, never `foo/mod.rs`.
    let mut files = Vec::new();
    rust_files(&root(), &mut files);
    let bad: Vec<String> = files
        .iter()
        .filter_map(|f| {
            let rel = f
                .strip_prefix(root())
                .ok()?
                .to_string_lossy()
                .replace('\\', "/");
            let in_tests = rel.split('/').any(|c| c == "tests");
            (rel.ends_with("/mod.rs")
                && !in_tests
                && !MOD_RS_ALLOWED.iter().any(|a| rel.starts_with(a)))
            .then_some(rel)
        })
        .collect();
    assert!(
        bad.is_empty(),
        "modules as `mod.rs` (make them `foo.rs` beside `foo/`): {bad:?}"
    );
}
