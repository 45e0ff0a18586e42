//! The module graph of a crate read from its sources, for tests that keep it free of
//! circles (and, with a layer table, of upward imports).
//!
//! One node per module (a file, its inline modules folded in), one edge per path that
//! names another module of the crate — `use crate::…`, `use super::…`, `use self::…`,
//! a `use` of a child module by its bare name, and the same paths written inline in
//! code (`crate::export::write_json(…)`), `super::` resolved against the module (or
//! inline module) it appears in. A path points at the deepest module it names:
//! `crate::sweep::row::Row` is an edge to `sweep::row`, a re-export through `sweep`
//! would be an edge to `sweep` itself. Comments and string literals are skipped; `mod`
//! declarations are not edges.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::source::strip;

/// A module path below the crate root (`[]` is `main.rs` / `lib.rs`).
pub type Module = Vec<String>;

/// Every `.rs` file under `dir` with its module path.
pub fn modules(dir: &Path, prefix: &Module, out: &mut BTreeMap<Module, PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for p in entries {
        let name = p.file_stem().unwrap().to_string_lossy().into_owned();
        if p.is_dir() {
            let mut m = prefix.clone();
            m.push(name);
            modules(&p, &m, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            let m = if (prefix.is_empty() && (name == "main" || name == "lib")) || name == "mod" {
                prefix.clone()
            } else {
                let mut m = prefix.clone();
                m.push(name);
                m
            };
            out.insert(m, p);
        }
    }
}

/// The `use` trees of a `use` item body (`a::{b, c::d as e}` → `a::b`, `a::c::d`),
/// each with the name it binds.
pub fn expand_use(tree: &str) -> Vec<(Vec<String>, Option<String>)> {
    fn go(prefix: &[String], t: &str, out: &mut Vec<(Vec<String>, Option<String>)>) {
        let t = t.trim();
        if t.is_empty() {
            return;
        }
        if let Some(open) = t.find('{') {
            let head: Vec<String> = t[..open]
                .split("::")
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .collect();
            let inner = &t[open + 1..t.rfind('}').unwrap()];
            let mut p = prefix.to_vec();
            p.extend(head);
            let mut depth = 0;
            let mut start = 0;
            for (k, ch) in inner.char_indices() {
                match ch {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        go(&p, &inner[start..k], out);
                        start = k + 1;
                    }
                    _ => {}
                }
            }
            go(&p, &inner[start..], out);
            return;
        }
        let (path, alias) = match t.split_once(" as ") {
            Some((p, a)) => (p, Some(a.trim().to_string())),
            None => (t, None),
        };
        let mut p = prefix.to_vec();
        p.extend(path.split("::").map(|s| s.trim().to_string()));
        if p.last().is_some_and(|s| s == "self") {
            p.pop();
        }
        let bound = alias.or_else(|| p.last().cloned());
        out.push((p, bound));
    }
    let mut out = vec![];
    go(&[], tree, &mut out);
    out
}

pub struct Graph {
    /// Every file module.
    pub mods: BTreeSet<Module>,
    /// Module → the modules it names.
    pub edges: BTreeMap<Module, BTreeSet<Module>>,
    /// Where each edge was first seen, `FILE:LINE` (for failure messages).
    pub seen_at: BTreeMap<(Module, Module), String>,
}

impl Graph {
    /// Whether `m` is a module of the crate.
    pub fn is_mod(&self, m: &Module) -> bool {
        self.mods.contains(m)
    }

    /// The deepest module a path names, from the module `at` (the inline module the
    /// path is written in), or `None` when it is not a harness path.
    fn resolve(
        &self,
        at: &Module,
        path: &[String],
        aliases: &BTreeMap<String, Module>,
    ) -> Option<Module> {
        let mut cur: Module;
        let mut rest = path;
        match path.first()?.as_str() {
            "crate" => {
                cur = vec![];
                rest = &path[1..];
            }
            "self" => {
                cur = at.clone();
                rest = &path[1..];
            }
            "super" => {
                cur = at.clone();
                while rest.first().is_some_and(|s| s == "super") {
                    cur.pop()?;
                    rest = &rest[1..];
                }
            }
            first => {
                let mut child = at.clone();
                child.push(first.to_string());
                if self.is_mod(&child) {
                    cur = child;
                    rest = &path[1..];
                } else if let Some(m) = aliases.get(first) {
                    cur = m.clone();
                    rest = &path[1..];
                } else {
                    return None;
                }
            }
        }
        for seg in rest {
            let mut next = cur.clone();
            next.push(seg.clone());
            if self.is_mod(&next) {
                cur = next;
            } else {
                break;
            }
        }
        Some(cur)
    }
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The file module plus the inline module the text at byte `pos` sits in.
fn inline_module(file_mod: &Module, stack: &[(String, usize)]) -> Module {
    let mut m = file_mod.clone();
    m.extend(stack.iter().map(|(n, _)| n.clone()));
    m
}

/// The module graph of the crate whose sources are under `src_dir` (its root file
/// `main.rs` or `lib.rs`). With `skip_test_code`, items under `#[cfg(test)]` (test
/// modules, test-only imports) are left out: tests may use any layer.
pub fn build(src_dir: &Path, skip_test_code: bool) -> Graph {
    let mut files = BTreeMap::new();
    modules(src_dir, &vec![], &mut files);
    let mut g = Graph {
        mods: files.keys().cloned().collect(),
        edges: BTreeMap::new(),
        seen_at: BTreeMap::new(),
    };
    let test_only: BTreeSet<Module> = if skip_test_code {
        files
            .iter()
            .flat_map(|(m, path)| {
                let text = strip(&std::fs::read_to_string(path).unwrap());
                cfg_test_file_mods(&text)
                    .into_iter()
                    .map(|n| {
                        let mut c = m.clone();
                        c.push(n);
                        c
                    })
                    .collect::<Vec<_>>()
            })
            .collect()
    } else {
        BTreeSet::new()
    };
    for (m, path) in &files {
        if test_only.iter().any(|t| m.starts_with(t)) {
            continue; // a test module in its own file: tests may use any layer
        }
        let mut text = strip(&std::fs::read_to_string(path).unwrap());
        if skip_test_code {
            text = blank_cfg_test(&text);
        }
        // Inline modules: their names join the module set, so `super::` inside them
        // resolves to the file's module.
        let chars: Vec<char> = text.chars().collect();
        let mut found: Vec<(Module, Module)> = vec![];
        let mut aliases: BTreeMap<String, Module> = BTreeMap::new();
        let mut stack: Vec<(String, usize)> = vec![];
        let mut depth = 0usize;
        let mut i = 0;
        let mut line = 1;
        while i < chars.len() {
            let c = chars[i];
            if c == '\n' {
                line += 1;
            }
            if c == '{' {
                depth += 1;
                i += 1;
                continue;
            }
            if c == '}' {
                depth -= 1;
                if stack.last().is_some_and(|(_, d)| *d == depth) {
                    stack.pop();
                }
                i += 1;
                continue;
            }
            let boundary = i == 0 || !is_ident(chars[i - 1]);
            if !boundary || !is_ident(c) {
                i += 1;
                continue;
            }
            let mut j = i;
            while j < chars.len() && is_ident(chars[j]) {
                j += 1;
            }
            let word: String = chars[i..j].iter().collect();
            let here = inline_module(m, &stack);
            if word == "mod" {
                // `mod name {` opens an inline module; `mod name;` declares a file.
                let rest: String = chars[j..].iter().take(200).collect();
                let rest = rest.trim_start();
                let name: String = rest.chars().take_while(|c| is_ident(*c)).collect();
                let after = rest[name.len()..].trim_start();
                if after.starts_with('{') {
                    let mut im = here.clone();
                    im.push(name.clone());
                    g.mods.insert(im);
                    stack.push((name, depth));
                }
                i = j;
                continue;
            }
            if word == "use" {
                let end = (j..chars.len()).find(|&k| chars[k] == ';').unwrap();
                let body: String = chars[j..end].iter().collect();
                let body: String = body.split_whitespace().collect::<Vec<_>>().join(" ");
                let body = body.replace(" ::", "::").replace(":: ", "::");
                for (p, bound) in expand_use(&body) {
                    if let Some(to) = g.resolve(&here, &p, &aliases) {
                        let full = p.len();
                        // A `use` that binds a module makes its name an alias.
                        if let Some(b) = bound {
                            let exact = {
                                let r = g.resolve(&here, &p, &BTreeMap::new());
                                r.as_ref().is_some_and(|r| {
                                    r.last() == p.last() && full > 0 && g.is_mod(r)
                                })
                            };
                            if exact {
                                aliases.insert(b, to.clone());
                            }
                        }
                        found.push((to, vec![format!("{}:{line}", path.display())]));
                    }
                }
                line += chars[j..end].iter().filter(|&&c| c == '\n').count();
                i = end + 1;
                continue;
            }
            // An inline path: word::ident::ident…
            let mut segs = vec![word];
            let mut k = j;
            while k + 1 < chars.len() && chars[k] == ':' && chars[k + 1] == ':' {
                let s = k + 2;
                let mut e = s;
                while e < chars.len() && is_ident(chars[e]) {
                    e += 1;
                }
                if e == s {
                    break;
                }
                segs.push(chars[s..e].iter().collect());
                k = e;
            }
            if segs.len() > 1 {
                if let Some(to) = g.resolve(&here, &segs, &aliases) {
                    found.push((to, vec![format!("{}:{line}", path.display())]));
                }
            }
            i = k.max(j);
        }
        for (to, at) in found {
            // Inline modules fold into their file's module.
            let to = files
                .keys()
                .filter(|f| to.starts_with(f))
                .max_by_key(|f| f.len())
                .cloned()
                .unwrap_or_default();
            if &to != m {
                g.edges.entry(m.clone()).or_default().insert(to.clone());
                g.seen_at.entry((m.clone(), to)).or_insert(at[0].clone());
            }
        }
    }
    g.mods = files.keys().cloned().collect();
    g
}

/// Strongly connected components with more than one module (Tarjan).
pub fn circles(g: &Graph) -> Vec<Vec<Module>> {
    struct T<'a> {
        g: &'a Graph,
        index: BTreeMap<Module, usize>,
        low: BTreeMap<Module, usize>,
        stack: Vec<Module>,
        on: BTreeSet<Module>,
        next: usize,
        out: Vec<Vec<Module>>,
    }
    fn visit(t: &mut T, v: &Module) {
        t.index.insert(v.clone(), t.next);
        t.low.insert(v.clone(), t.next);
        t.next += 1;
        t.stack.push(v.clone());
        t.on.insert(v.clone());
        let succ: Vec<Module> =
            t.g.edges
                .get(v)
                .map(|s| s.iter().cloned().collect())
                .unwrap_or_default();
        for w in succ {
            if !t.index.contains_key(&w) {
                visit(t, &w);
                let lw = t.low[&w];
                let lv = t.low.get_mut(v).unwrap();
                *lv = (*lv).min(lw);
            } else if t.on.contains(&w) {
                let iw = t.index[&w];
                let lv = t.low.get_mut(v).unwrap();
                *lv = (*lv).min(iw);
            }
        }
        if t.low[v] == t.index[v] {
            let mut comp = vec![];
            loop {
                let w = t.stack.pop().unwrap();
                t.on.remove(&w);
                let done = &w == v;
                comp.push(w);
                if done {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                t.out.push(comp);
            }
        }
    }
    let mut t = T {
        g,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: vec![],
        on: BTreeSet::new(),
        next: 0,
        out: vec![],
    };
    for m in &g.mods {
        if !t.index.contains_key(m) {
            visit(&mut t, m);
        }
    }
    t.out
}

/// `a::b`, or `crate` for the root.
pub fn name(m: &Module) -> String {
    if m.is_empty() {
        "crate".into()
    } else {
        m.join("::")
    }
}

/// The names of the file modules `text` (already [`strip`]ped) declares under
/// `#[cfg(test)]` (`#[cfg(test)] mod tests;` → `["tests"]`).
pub fn cfg_test_file_mods(text: &str) -> Vec<String> {
    let mut out = vec![];
    for (at, _) in text.match_indices("#[cfg(test)]") {
        let mut rest = text[at + "#[cfg(test)]".len()..].trim_start();
        while rest.starts_with("#[") {
            let Some(end) = rest.find(']') else { break };
            rest = rest[end + 1..].trim_start();
        }
        for vis in ["pub(crate) ", "pub(super) ", "pub "] {
            rest = rest.strip_prefix(vis).unwrap_or(rest).trim_start();
        }
        let Some(r) = rest.strip_prefix("mod ") else {
            continue;
        };
        let name: String = r
            .trim_start()
            .chars()
            .take_while(|c| is_ident(*c))
            .collect();
        if r.trim_start()[name.len()..].trim_start().starts_with(';') {
            out.push(name);
        }
    }
    out
}

/// `text` (already [`strip`]ped) with every item under `#[cfg(test)]` blanked: the
/// attribute, any attributes after it, and the item up to its `;` or its balanced
/// `{…}` (newlines kept, so line numbers stay right).
pub fn blank_cfg_test(text: &str) -> String {
    let mut b: Vec<char> = text.chars().collect();
    let pat: Vec<char> = "#[cfg(test)]".chars().collect();
    let mut i = 0;
    while i + pat.len() <= b.len() {
        if b[i..i + pat.len()] != pat[..] {
            i += 1;
            continue;
        }
        let start = i;
        let mut j = i + pat.len();
        let mut depth = 0i32;
        while j < b.len() {
            match b[j] {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        j += 1;
                        break;
                    }
                }
                ';' if depth == 0 => {
                    j += 1;
                    break;
                }
                _ => {}
            }
            j += 1;
        }
        let end = j.min(b.len());
        for c in &mut b[start..end] {
            if *c != '\n' {
                *c = ' ';
            }
        }
        i = j;
    }
    b.into_iter().collect()
}
