//! The harness keeps the layering `docs/architecture.md` states under "## Harness
//! layers": every `crate::`, `super::` and `self::` path in `harness/src/` (in `use`
//! lines and inline; code under `#[cfg(test)]` and test modules in their own files left
//! out) names a module of its own layer or of a lower rank, with no exceptions, and the
//! table's entries form no circle.

use std::path::Path;

use memdial_testkit::layers::{component_circles, entry_of, layers, upward_imports};
use memdial_testkit::modgraph::{build, name, Graph, Module};

const DOC: &str = include_str!("../../docs/architecture.md");
const HEADING: &str = "## Harness layers";

fn graph() -> Graph {
    build(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"), true)
}

#[test]
fn every_harness_import_stays_in_its_layer_or_below_and_no_entry_circles() {
    let layers = layers(DOC, HEADING);
    let g = graph();
    let (mut msg, _, kept) = upward_imports(&g, &layers, &[]);
    msg += &component_circles(&g, &kept, |m: &Module| entry_of(&layers, m).0.clone());
    assert!(
        msg.is_empty(),
        "layering of harness/src/ against docs/architecture.md:\n{msg}"
    );
}

/// Every module of `harness/src/` is in the table, every entry names a module, and no
/// `cmd_*` file is imported by another module but `main.rs`.
#[test]
fn the_harness_table_names_the_real_tree_and_commands_are_tops() {
    let layers = layers(DOC, HEADING);
    let g = graph();
    for m in g.mods.iter().filter(|m| !m.is_empty()) {
        entry_of(&layers, m);
    }
    for p in layers.keys() {
        assert!(
            g.mods.contains(p),
            "docs/architecture.md lists {} in a harness layer, but harness/src/ has no such module",
            name(p)
        );
    }
    let mut msg = String::new();
    for (a, tos) in g.edges.iter().filter(|(a, _)| !a.is_empty()) {
        for b in tos
            .iter()
            .filter(|b| b.first().is_some_and(|s| s.starts_with("cmd_")))
        {
            if b[0] != a[0] {
                msg += &format!(
                    "{} calls the command file {}  at {}\n",
                    name(a),
                    name(b),
                    g.seen_at[&(a.clone(), b.clone())]
                );
            }
        }
    }
    assert!(msg.is_empty(), "{msg}");
}
