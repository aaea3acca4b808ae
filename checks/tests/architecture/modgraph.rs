//! The module-graph half of `checks/tests/architecture.rs`: source text stripped to
//! code, `use` trees and inline `crate::`/`super::`/`self::` paths parsed into
//! module references, each library crate's module graph (root re-exports
//! followed), and its cycles. The policy (which cycles are allowed, what the
//! layering is) stays in `architecture.rs`.

use super::root;
use std::collections::{BTreeMap, BTreeSet};

/// Source text with comments, string and char literals blanked (newlines
/// kept), so only code is scanned.
pub(super) fn strip_code(src: &str) -> String {
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
pub(super) fn tokens(code: &str) -> Vec<String> {
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

pub(super) fn is_ident(t: &str) -> bool {
    t.chars()
        .next()
        .is_some_and(|c| c.is_alphabetic() || c == '_')
}

/// Expands one use tree starting at `toks[*i]` into full paths (a trailing
/// `self` dropped, `*` kept as a segment, `as` renames as `(path, alias)`).
pub(super) fn use_tree(toks: &[String], i: &mut usize, prefix: &[String], out: &mut Vec<UsePath>) {
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
pub(super) type UsePath = (Vec<String>, String);

/// What a source file refers to: the paths of its `use` trees (with their
/// aliases) and the inline paths that start with `crate`, `super` or `self`.
pub(super) fn references(src: &str) -> (Vec<UsePath>, Vec<Vec<String>>) {
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
pub(super) type Sources = BTreeMap<String, String>;

/// The modules of the library crate at `dir` (`src/lib.rs` and the files
/// under `src/` by Rust's layout; `src/bin` is not part of it).
pub(super) fn crate_sources(dir: &str) -> Option<Sources> {
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

pub(super) fn join(segs: &[String]) -> String {
    segs.join("::")
}

pub(super) fn split(module: &str) -> Vec<String> {
    if module.is_empty() {
        Vec::new()
    } else {
        module.split("::").map(str::to_string).collect()
    }
}

/// True when `a` is `b` or one of its ancestors (the root is everyone's).
pub(super) fn is_ancestor(a: &str, b: &str) -> bool {
    a.is_empty() || a == b || b.starts_with(&format!("{a}::"))
}

/// The module graph of a crate: an edge `m → t` for every module `t` that
/// `m` names, except between a module and its own ancestors (a parent and
/// its children are one unit). Paths through the root's re-exports
/// (`crate::Tensor`, `crate::tensor` re-exported from `tape`) are followed
/// to the module that defines them.
pub(super) fn module_graph(sources: &Sources) -> BTreeMap<String, BTreeSet<String>> {
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
pub(super) fn cycles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
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
