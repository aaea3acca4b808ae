//! Checks the architecture that `ARCHITECTURE.md` describes, so the document
//! cannot drift from the code:
//! - the crate layer table in ARCHITECTURE.md names every workspace member,
//!   and no crate depends (normal, dev or build) on a fucina crate of the
//!   same or a higher layer;
//! - inside fucina-core, the leaf modules never reach up to tensor, kernels
//!   or exec, and tensor never reaches up to kernels or exec;
//! - every repository path ARCHITECTURE.md or CONTRIBUTING.md names in
//!   backticks exists.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

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

/// Code lines of a source file (comments and doc comments dropped).
fn code_lines(rel: &str) -> Vec<String> {
    read(rel)
        .lines()
        .map(|l| l.trim())
        .filter(|l| !l.starts_with("//"))
        .map(|l| l.to_string())
        .collect()
}

#[test]
fn core_modules_respect_their_layering() {
    let src = "fucina-core/src";
    let upper = [
        "crate::tensor",
        "crate::kernels",
        "crate::exec",
        "crate::RawTensor",
        "crate::ExecContext",
    ];
    let leaves = [
        "dtype.rs",
        "error.rs",
        "storage.rs",
        "pool.rs",
        "shape.rs",
        "rng.rs",
        "team.rs",
    ];
    let mut violations = Vec::new();
    for leaf in leaves {
        for line in code_lines(&format!("{src}/{leaf}")) {
            for u in upper {
                if line.contains(u) {
                    violations.push(format!("{leaf}: `{line}` reaches up to {u}"));
                }
            }
        }
    }
    for line in code_lines(&format!("{src}/tensor.rs")) {
        for u in ["crate::kernels", "crate::exec", "crate::ExecContext"] {
            if line.contains(u) {
                violations.push(format!("tensor.rs: `{line}` reaches up to {u}"));
            }
        }
    }
    assert!(
        violations.is_empty(),
        "layering violations:\n{}",
        violations.join("\n")
    );
}

/// The repository paths a document names in backticks, and those missing.
fn named_paths(doc_name: &str) -> (usize, Vec<String>) {
    let doc = read(doc_name);
    let roots = [
        "fucina-core/",
        "fucina-autograd/",
        "fucina-nn/",
        "fucina-optim/",
        "fucina-distributed/",
        "src/",
        "examples/",
        "benches/",
        "docs/",
        "tools/",
        ".ci/",
    ];
    let files = [
        "README.md",
        "ARCHITECTURE.md",
        "CONTRIBUTING.md",
        "Cargo.toml",
    ];
    let mut checked = 0;
    let mut missing = Vec::new();
    for (i, token) in doc.split('`').enumerate() {
        // Odd pieces are inside backticks.
        if i % 2 == 0 || token.contains(char::is_whitespace) {
            continue;
        }
        if token.contains(['<', '*', '{', '>']) {
            continue; // a pattern, not a path
        }
        let is_path = roots.iter().any(|r| token.starts_with(r)) || files.contains(&token);
        if !is_path {
            continue;
        }
        checked += 1;
        if !root().join(token).exists() {
            missing.push(token.to_string());
        }
    }
    (checked, missing)
}

#[test]
fn paths_named_in_architecture_md_exist() {
    let (checked, missing) = named_paths("ARCHITECTURE.md");
    assert!(
        checked >= 10,
        "expected ARCHITECTURE.md to name paths, found {checked}"
    );
    assert!(
        missing.is_empty(),
        "ARCHITECTURE.md names missing paths: {missing:?}"
    );
}

#[test]
fn paths_named_in_contributing_md_exist() {
    let (checked, missing) = named_paths("CONTRIBUTING.md");
    assert!(
        checked >= 2,
        "expected CONTRIBUTING.md to name paths, found {checked}"
    );
    assert!(
        missing.is_empty(),
        "CONTRIBUTING.md names missing paths: {missing:?}"
    );
}
