//! The library keeps the layering `docs/architecture.md` states: every `crate::`,
//! `super::` and `self::` path in `src/` (in `use` lines and inline in code; test code
//! under `#[cfg(test)]` left out) names a module of its own layer or of a layer
//! ranked lower, the module graph has no circles, and the table's known exceptions
//! are exactly the imports that still break it.
//!
//! The table is the one under "## Layers" in `docs/architecture.md`:
//! `| rank | layer | modules |`, modules as `` `format` `` or `` `engine`, `model` ``.
//! A module belongs to the entry that is the longest prefix of its path. The
//! exceptions are the table under "### Known exceptions": `| from | to | why |`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use memdial_testkit::modgraph::{build, circles, name, Graph, Module};

const DOC: &str = include_str!("../docs/architecture.md");

struct Layer {
    rank: u32,
    name: String,
}

/// The backticked names in a table cell (`` `a`, `b::c` `` → `["a", "b::c"]`).
fn ticked(cell: &str) -> Vec<String> {
    cell.split('`')
        .skip(1)
        .step_by(2)
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

/// The rows of the first Markdown table after the heading line `heading`.
fn table(doc: &str, heading: &str) -> Vec<Vec<String>> {
    let at = doc
        .lines()
        .position(|l| l.trim() == heading)
        .unwrap_or_else(|| panic!("docs/architecture.md has no heading {heading:?}"));
    doc.lines()
        .skip(at + 1)
        .take_while(|l| !l.starts_with('#')) // the section's own table only
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2) // header and separator
        .map(|l| {
            l.trim()
                .trim_matches('|')
                .split('|')
                .map(|c| c.trim().to_string())
                .collect()
        })
        .collect()
}

fn path(s: &str) -> Module {
    if s == "crate" {
        vec![]
    } else {
        s.split("::").map(str::to_string).collect()
    }
}

/// Module prefix → its layer, from the doc.
fn layers(doc: &str) -> BTreeMap<Module, Layer> {
    let mut out = BTreeMap::new();
    for row in table(doc, "## Layers") {
        let rank: u32 = row[0]
            .parse()
            .unwrap_or_else(|_| panic!("rank {:?}", row[0]));
        for m in ticked(&row[2]) {
            let layer = Layer {
                rank,
                name: row[1].clone(),
            };
            assert!(out.insert(path(&m), layer).is_none(), "{m} listed twice");
        }
    }
    out
}

fn layer_of<'a>(layers: &'a BTreeMap<Module, Layer>, m: &Module) -> &'a Layer {
    layers
        .iter()
        .filter(|(p, _)| m.starts_with(p))
        .max_by_key(|(p, _)| p.len())
        .map(|(_, l)| l)
        .unwrap_or_else(|| panic!("module {} is in no layer of docs/architecture.md", name(m)))
}

/// Whether the exception `(from, to)` (module prefixes) covers the edge `a → b`.
fn covers(e: &(Module, Module), a: &Module, b: &Module) -> bool {
    a.starts_with(&e.0) && b.starts_with(&e.1)
}

/// The layer folders: top-level modules whose `mod.rs` only declares modules
/// (`util`, `format`, `engine`, `tools`).
fn layer_folders(g: &Graph) -> BTreeSet<Module> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    g.mods
        .iter()
        .filter(|m| m.len() == 1)
        .filter(|m| {
            let f = src.join(&m[0]).join("mod.rs");
            std::fs::read_to_string(&f).is_ok_and(|t| {
                memdial_testkit::source::strip(&t)
                    .lines()
                    .map(str::trim)
                    .all(|l| l.is_empty() || (l.starts_with("pub mod ") && l.ends_with(';')))
            })
        })
        .cloned()
        .collect()
}

fn graph() -> Graph {
    build(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"), true)
}

#[test]
fn every_import_stays_in_its_layer_or_below_and_no_module_circles() {
    let layers = layers(DOC);
    let exceptions: Vec<(Module, Module)> = table(DOC, "### Known exceptions")
        .iter()
        .map(|r| (path(&ticked(&r[0])[0]), path(&ticked(&r[1])[0])))
        .collect();
    let g = graph();
    let mut used = BTreeSet::new();
    let mut msg = String::new();
    let mut kept = g.edges.clone();
    for (a, tos) in &g.edges {
        if a.is_empty() {
            continue; // lib.rs: declarations and the old paths
        }
        for b in tos {
            if b.is_empty() {
                msg += &format!(
                    "{} names an item of the crate root (an old path kept for one release; use the layer path)  at {}\n",
                    name(a),
                    g.seen_at[&(a.clone(), b.clone())]
                );
                continue;
            }
            let (la, lb) = (layer_of(&layers, a), layer_of(&layers, b));
            let ok = la.name == lb.name || lb.rank < la.rank;
            if let Some(k) = exceptions.iter().position(|e| covers(e, a, b)) {
                used.insert(k);
                kept.get_mut(a).unwrap().remove(b);
                continue;
            }
            if !ok {
                msg += &format!(
                    "{} ({}, rank {}) imports {} ({}, rank {})  at {}\n",
                    name(a),
                    la.name,
                    la.rank,
                    name(b),
                    lb.name,
                    lb.rank,
                    g.seen_at[&(a.clone(), b.clone())]
                );
            }
        }
    }
    for (k, e) in exceptions.iter().enumerate() {
        if !used.contains(&k) {
            msg += &format!(
                "known exception {} -> {} no longer happens: remove it from the table\n",
                name(&e.0),
                name(&e.1)
            );
        }
    }
    // Circles among the components, the exceptions aside (an exception is an upward
    // import; the rest must form no loop within a layer either). A component is a
    // module of a layer folder (`format::manifest`, `engine::arena`) or a layer that
    // is one module (`store`, `model`); the crate root is left out (it only declares
    // modules and keeps the old paths).
    let folders = layer_folders(&g);
    let comp = |m: &Module| -> Module {
        let k = if folders.contains(&m[..1]) { 2 } else { 1 };
        m[..k.min(m.len())].to_vec()
    };
    let mut cg = Graph {
        mods: g.mods.iter().filter(|m| !m.is_empty()).map(comp).collect(),
        edges: BTreeMap::new(),
        seen_at: BTreeMap::new(),
    };
    for (a, tos) in kept.iter().filter(|(a, _)| !a.is_empty()) {
        for b in tos.iter().filter(|b| !b.is_empty()) {
            let (ca, cb) = (comp(a), comp(b));
            if ca != cb {
                cg.edges.entry(ca.clone()).or_default().insert(cb.clone());
                cg.seen_at
                    .entry((ca, cb))
                    .or_insert_with(|| g.seen_at[&(a.clone(), b.clone())].clone());
            }
        }
    }
    for c in circles(&cg) {
        msg += &format!(
            "circle: {}\n",
            c.iter().map(name).collect::<Vec<_>>().join(", ")
        );
        for a in &c {
            for b in cg.edges.get(a).into_iter().flatten() {
                if c.contains(b) {
                    msg += &format!(
                        "  {} -> {}  ({})\n",
                        name(a),
                        name(b),
                        cg.seen_at[&(a.clone(), b.clone())]
                    );
                }
            }
        }
    }
    assert!(
        msg.is_empty(),
        "layering of src/ against docs/architecture.md:\n{msg}"
    );
}

/// Every module of `src/` is in the table, and every table entry names a module.
#[test]
fn the_layer_table_names_the_real_tree() {
    let layers = layers(DOC);
    let g = graph();
    for m in g.mods.iter().filter(|m| !m.is_empty()) {
        layer_of(&layers, m);
    }
    for p in layers.keys() {
        assert!(
            p.is_empty() || g.mods.contains(p),
            "docs/architecture.md lists {} in a layer, but src/ has no such module",
            name(p)
        );
    }
}

/// The reader sees what it must: a known upward import in a test string is found,
/// test code is left out.
#[test]
fn reader_sees_inline_super_and_skips_test_code() {
    let t = memdial_testkit::modgraph::blank_cfg_test(
        "use crate::a;\n#[cfg(test)]\nmod tests {\n    use crate::b;\n}\nfn f() { crate::c::d(); }\n",
    );
    assert!(t.contains("crate::a") && t.contains("crate::c::d") && !t.contains("crate::b"));
    assert_eq!(t.lines().count(), 6);
    // A real inline path and a `super::` path of the tree are edges.
    let g = graph();
    let e = |a: &str, b: &str| g.edges.get(&path(a)).is_some_and(|s| s.contains(&path(b)));
    assert!(
        e("store::streaming::open", "store::streaming::io"),
        "super:: path"
    );
    assert!(e("engine::generate", "util::digest"), "inline crate:: path");
}
