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
//!   backticks exists.

use std::collections::{BTreeMap, BTreeSet};
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

/// Source text with comments, string and char literals blanked (newlines
/// kept), so only code is scanned.
fn strip_code(src: &str) -> String {
    let c: Vec<char> = src.chars().collect();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    let ident = |ch: char| ch.is_alphanumeric() || ch == '_';
    while i < c.len() {
        let ch = c[i];
        let next = c.get(i + 1).copied();
        if ch == '/' && next == Some('/') {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if ch == '/' && next == Some('*') {
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && c.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if c[i] == '*' && c.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    if c[i] == '\n' {
                        out.push('\n');
                    }
                    i += 1;
                }
            }
        } else if ch == 'r'
            && (i == 0 || !ident(c[i - 1]))
            && matches!(next, Some('"') | Some('#'))
            && {
                let mut j = i + 1;
                while c.get(j) == Some(&'#') {
                    j += 1;
                }
                c.get(j) == Some(&'"')
            }
        {
            // Raw string r#"..."#.
            let mut j = i + 1;
            let mut hashes = 0;
            while c[j] == '#' {
                hashes += 1;
                j += 1;
            }
            j += 1;
            loop {
                if j >= c.len() {
                    break;
                }
                if c[j] == '"' && (0..hashes).all(|k| c.get(j + 1 + k) == Some(&'#')) {
                    j += 1 + hashes;
                    break;
                }
                if c[j] == '\n' {
                    out.push('\n');
                }
                j += 1;
            }
            out.push_str("\"\"");
            i = j;
        } else if ch == '"' {
            i += 1;
            while i < c.len() && c[i] != '"' {
                if c[i] == '\\' {
                    i += 1;
                } else if c[i] == '\n' {
                    out.push('\n');
                }
                i += 1;
            }
            i += 1;
            out.push_str("\"\"");
        } else if ch == '\'' {
            // A char literal ('x', '\n', '\u{..}') or a lifetime ('a).
            if next == Some('\\') {
                let mut j = i + 2;
                while j < c.len() && c[j] != '\'' {
                    j += 1;
                }
                i = j + 1;
                out.push_str("' '");
            } else if c.get(i + 2) == Some(&'\'') {
                i += 3;
                out.push_str("' '");
            } else {
                out.push(ch);
                i += 1;
            }
        } else {
            out.push(ch);
            i += 1;
        }
    }
    out
}

/// Tokens of stripped code: identifiers (with `$crate` as `crate`), `::`,
/// and single punctuation characters.
fn tokens(code: &str) -> Vec<String> {
    let c: Vec<char> = code.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < c.len() {
        let ch = c[i];
        if ch.is_alphanumeric() || ch == '_' {
            let start = i;
            while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                i += 1;
            }
            out.push(c[start..i].iter().collect());
        } else if ch == ':' && c.get(i + 1) == Some(&':') {
            out.push("::".to_string());
            i += 2;
        } else if ch == '$' {
            i += 1; // `$crate` is `crate`
        } else {
            if !ch.is_whitespace() {
                out.push(ch.to_string());
            }
            i += 1;
        }
    }
    out
}

fn is_ident(t: &str) -> bool {
    t.chars()
        .next()
        .is_some_and(|c| c.is_alphabetic() || c == '_')
}

/// Expands one use tree starting at `toks[*i]` into full paths (a trailing
/// `self` dropped, `*` kept as a segment, `as` renames as `(path, alias)`).
fn use_tree(toks: &[String], i: &mut usize, prefix: &[String], out: &mut Vec<UsePath>) {
    let mut path = prefix.to_vec();
    if toks.get(*i).map(String::as_str) == Some("::") {
        *i += 1; // a leading `::` (extern path)
    }
    loop {
        match toks.get(*i).map(String::as_str) {
            Some("{") => {
                *i += 1;
                while toks.get(*i).map(String::as_str) != Some("}") && *i < toks.len() {
                    use_tree(toks, i, &path, out);
                    if toks.get(*i).map(String::as_str) == Some(",") {
                        *i += 1;
                    }
                }
                *i += 1; // `}`
                return;
            }
            Some("*") => {
                *i += 1;
                let name = "*".to_string();
                path.push(name.clone());
                out.push((path, name));
                return;
            }
            Some(t) if is_ident(t) => {
                path.push(t.to_string());
                *i += 1;
                if toks.get(*i).map(String::as_str) == Some("::") {
                    *i += 1;
                    continue;
                }
                let mut alias = path.last().cloned().unwrap_or_default();
                if toks.get(*i).map(String::as_str) == Some("as") {
                    alias = toks.get(*i + 1).cloned().unwrap_or_default();
                    *i += 2;
                }
                if path.last().map(String::as_str) == Some("self") {
                    path.pop();
                    if alias == "self" {
                        alias = path.last().cloned().unwrap_or_default();
                    }
                }
                out.push((path, alias));
                return;
            }
            _ => return,
        }
    }
}

/// One path of a `use` tree and the name it binds.
type UsePath = (Vec<String>, String);

/// What a source file refers to: the paths of its `use` trees (with their
/// aliases) and the inline paths that start with `crate`, `super` or `self`.
fn references(src: &str) -> (Vec<UsePath>, Vec<Vec<String>>) {
    let toks = tokens(&strip_code(src));
    let mut uses = Vec::new();
    let mut inline = Vec::new();
    let mut i = 0;
    while i < toks.len() {
        if toks[i] == "use" && (i == 0 || toks[i - 1] != "::") {
            i += 1;
            use_tree(&toks, &mut i, &[], &mut uses);
            continue;
        }
        if matches!(toks[i].as_str(), "crate" | "super" | "self")
            && toks.get(i + 1).map(String::as_str) == Some("::")
            && (i == 0 || toks[i - 1] != "::")
        {
            let mut path = vec![toks[i].clone()];
            let mut j = i + 1;
            while toks.get(j).map(String::as_str) == Some("::")
                && toks.get(j + 1).is_some_and(|t| is_ident(t))
            {
                path.push(toks[j + 1].clone());
                j += 2;
            }
            inline.push(path);
            i = j;
            continue;
        }
        i += 1;
    }
    (uses, inline)
}

/// A crate's modules (`""` is the root; `a::b` a nested module) with their
/// source text.
type Sources = BTreeMap<String, String>;

/// The modules of the library crate at `dir` (`src/lib.rs` and the files
/// under `src/` by Rust's layout; `src/bin` is not part of it).
fn crate_sources(dir: &str) -> Option<Sources> {
    let src = root().join(dir).join("src");
    if !src.join("lib.rs").exists() {
        return None;
    }
    let mut out = Sources::new();
    let mut stack = vec![src.clone()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display())) {
            let p = e.expect("dir entry").path();
            if p.is_dir() {
                if p != src.join("bin") {
                    stack.push(p);
                }
                continue;
            }
            if p.extension().and_then(|x| x.to_str()) != Some("rs") {
                continue;
            }
            let rel = p.strip_prefix(&src).expect("under src");
            let mut segs: Vec<String> = rel
                .iter()
                .map(|s| s.to_string_lossy().trim_end_matches(".rs").to_string())
                .collect();
            if segs.last().is_some_and(|l| l == "mod" || l == "lib") {
                segs.pop();
            }
            let text = std::fs::read_to_string(&p).expect("read source");
            out.insert(segs.join("::"), text);
        }
    }
    Some(out)
}

fn join(segs: &[String]) -> String {
    segs.join("::")
}

fn split(module: &str) -> Vec<String> {
    if module.is_empty() {
        Vec::new()
    } else {
        module.split("::").map(str::to_string).collect()
    }
}

/// True when `a` is `b` or one of its ancestors (the root is everyone's).
fn is_ancestor(a: &str, b: &str) -> bool {
    a.is_empty() || a == b || b.starts_with(&format!("{a}::"))
}

/// The module graph of a crate: an edge `m → t` for every module `t` that
/// `m` names, except between a module and its own ancestors (a parent and
/// its children are one unit). Paths through the root's re-exports
/// (`crate::Tensor`, `crate::tensor` re-exported from `tape`) are followed
/// to the module that defines them.
fn module_graph(sources: &Sources) -> BTreeMap<String, BTreeSet<String>> {
    let is_mod = |segs: &[String]| sources.contains_key(&join(segs));
    // The root's aliases: `pub use a::b::Name` makes `crate::Name` mean `a::b::Name`.
    let mut aliases: BTreeMap<String, Vec<String>> = BTreeMap::new();
    if let Some(lib) = sources.get("") {
        for (path, alias) in references(lib).0 {
            let mut p = path.clone();
            if p.first().is_some_and(|s| s == "crate" || s == "self") {
                p.remove(0);
            }
            if p.first().is_some_and(|s| is_mod(std::slice::from_ref(s))) && alias != "*" {
                aliases.insert(alias, p);
            }
        }
    }
    // Resolves a path named in module `m` to the deepest crate module it names.
    let resolve = |m: &[String], path: &[String]| -> Option<String> {
        let (mut cur, rest): (Vec<String>, &[String]) = match path.first()?.as_str() {
            "crate" => (Vec::new(), &path[1..]),
            "self" => (m.to_vec(), &path[1..]),
            "super" => {
                let mut base = m.to_vec();
                let mut k = 0;
                while path.get(k).map(String::as_str) == Some("super") {
                    base.pop();
                    k += 1;
                }
                (base, &path[k..])
            }
            first => {
                let mut child = m.to_vec();
                child.push(first.to_string());
                if is_mod(&child) {
                    (m.to_vec(), path)
                } else if m.is_empty() && aliases.contains_key(first) {
                    (Vec::new(), path)
                } else {
                    return None; // an external crate or a local item
                }
            }
        };
        let mut rest: Vec<String> = rest.to_vec();
        let mut hops = 0;
        while let Some(seg) = rest.first().cloned() {
            let mut next = cur.clone();
            next.push(seg.clone());
            if is_mod(&next) {
                cur = next;
                rest.remove(0);
            } else if cur.is_empty() && hops < 8 {
                match aliases.get(&seg) {
                    Some(target) => {
                        hops += 1;
                        rest.splice(0..1, target.iter().cloned());
                    }
                    None => break,
                }
            } else {
                break;
            }
        }
        Some(join(&cur))
    };
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (module, text) in sources {
        let m = split(module);
        let (uses, inline) = references(text);
        let targets = graph.entry(module.clone()).or_default();
        for path in uses.into_iter().map(|(p, _)| p).chain(inline) {
            if let Some(t) = resolve(&m, &path) {
                if !is_ancestor(&t, module) && !is_ancestor(module, &t) {
                    targets.insert(t);
                }
            }
        }
    }
    graph
}

/// The strongly connected components with more than one module (Tarjan).
fn cycles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct State<'a> {
        graph: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        next: usize,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a str) {
        s.index.insert(v, s.next);
        s.low.insert(v, s.next);
        s.next += 1;
        s.stack.push(v);
        s.on_stack.insert(v);
        let graph = s.graph;
        for w in graph.get(v).into_iter().flatten() {
            let w = w.as_str();
            if !s.index.contains_key(w) {
                visit(s, w);
                let lw = s.low[w];
                let lv = s.low.get_mut(v).expect("visited");
                *lv = (*lv).min(lw);
            } else if s.on_stack.contains(w) {
                let iw = s.index[w];
                let lv = s.low.get_mut(v).expect("visited");
                *lv = (*lv).min(iw);
            }
        }
        if s.low[v] == s.index[v] {
            let mut comp = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                comp.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                s.out.push(comp);
            }
        }
    }
    let mut s = State {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        next: 0,
        out: Vec::new(),
    };
    for v in graph.keys() {
        if !s.index.contains_key(v.as_str()) {
            visit(&mut s, v);
        }
    }
    s.out
}

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
    let leaves = ["dtype", "error", "storage", "pool", "shape", "rng", "team"];
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
                if p.extension().and_then(|x| x.to_str()) != Some("rs")
                    || p.file_name().and_then(|x| x.to_str()) == Some("architecture.rs")
                {
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
