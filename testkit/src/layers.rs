//! A layer table in a Markdown doc, read and checked against a crate's module graph: the
//! shared core of `tests/layers.rs` (the library) and `harness/tests/layers.rs` (the
//! binary).
//!
//! A table is `| rank | layer | modules |`, modules as `` `format` `` or
//! `` `engine`, `model` ``. A module belongs to the entry that is the longest prefix of its
//! path; it may import its own layer or a lower rank (two layers of one rank are apart).

use std::collections::{BTreeMap, BTreeSet};

use crate::modgraph::{circles, name, Graph, Module};

/// One layer of a table.
pub struct Layer {
    /// Its rank: imports go to a lower rank or the same layer.
    pub rank: u32,
    /// Its name (the table's second column).
    pub name: String,
}

/// The backticked names in a table cell (`` `a`, `b::c` `` → `["a", "b::c"]`).
pub fn ticked(cell: &str) -> Vec<String> {
    cell.split('`')
        .skip(1)
        .step_by(2)
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

/// The rows (cells trimmed) of the first Markdown table after the heading line
/// `heading` and before the next heading. Panics when the doc has no such heading.
pub fn table(doc: &str, heading: &str) -> Vec<Vec<String>> {
    let at = doc
        .lines()
        .position(|l| l.trim() == heading)
        .unwrap_or_else(|| panic!("the doc has no heading {heading:?}"));
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

/// A module path as written (`a::b`; `crate` is the root).
pub fn path(s: &str) -> Module {
    if s == "crate" {
        vec![]
    } else {
        s.split("::").map(str::to_string).collect()
    }
}

/// Module prefix → its layer, from the table under `heading`. Panics on a bad rank or a
/// module listed twice.
pub fn layers(doc: &str, heading: &str) -> BTreeMap<Module, Layer> {
    let mut out = BTreeMap::new();
    for row in table(doc, heading) {
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

/// The entry (prefix and layer) `m` belongs to: the longest listed prefix of its path.
/// Panics when no entry covers it.
pub fn entry_of<'a>(layers: &'a BTreeMap<Module, Layer>, m: &Module) -> (&'a Module, &'a Layer) {
    layers
        .iter()
        .filter(|(p, _)| m.starts_with(p))
        .max_by_key(|(p, _)| p.len())
        .unwrap_or_else(|| panic!("module {} is in no layer of the table", name(m)))
}

/// Every edge of `g` from a non-root module that goes up (to a higher rank, or to another
/// layer of the same rank), one line each, except those an `exceptions` entry (a pair of
/// prefixes) covers. Returns the lines, the exceptions used (by index) and the graph's
/// edges with the excepted ones removed.
pub fn upward_imports(
    g: &Graph,
    layers: &BTreeMap<Module, Layer>,
    exceptions: &[(Module, Module)],
) -> (String, BTreeSet<usize>, BTreeMap<Module, BTreeSet<Module>>) {
    let mut used = BTreeSet::new();
    let mut msg = String::new();
    let mut kept = g.edges.clone();
    for (a, tos) in &g.edges {
        if a.is_empty() {
            continue; // the crate root only declares modules
        }
        for b in tos.iter().filter(|b| !b.is_empty()) {
            let (la, lb) = (entry_of(layers, a).1, entry_of(layers, b).1);
            let ok = la.name == lb.name || lb.rank < la.rank;
            let covered = |e: &(Module, Module)| a.starts_with(&e.0) && b.starts_with(&e.1);
            if let Some(k) = exceptions.iter().position(covered) {
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
    (msg, used, kept)
}

/// The circles among components: `edges` (non-root modules) mapped through `comp`, one
/// block per circle with the edges that close it.
pub fn component_circles(
    g: &Graph,
    edges: &BTreeMap<Module, BTreeSet<Module>>,
    comp: impl Fn(&Module) -> Module,
) -> String {
    let mut cg = Graph {
        mods: g.mods.iter().filter(|m| !m.is_empty()).map(&comp).collect(),
        edges: BTreeMap::new(),
        seen_at: BTreeMap::new(),
    };
    for (a, tos) in edges.iter().filter(|(a, _)| !a.is_empty()) {
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
    let mut msg = String::new();
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
    msg
}
