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

use std::collections::BTreeSet;
use std::path::Path;

use memdial_testkit::layers::{
    component_circles, entry_of, layers, path, table, ticked, upward_imports,
};
use memdial_testkit::modgraph::{build, name, Graph, Module};

const DOC: &str = include_str!("../docs/architecture.md");

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
    let layers = layers(DOC, "## Layers");
    let exceptions: Vec<(Module, Module)> = table(DOC, "### Known exceptions")
        .iter()
        .map(|r| (path(&ticked(&r[0])[0]), path(&ticked(&r[1])[0])))
        .collect();
    let g = graph();
    let (mut msg, used, kept) = upward_imports(&g, &layers, &exceptions);
    for (a, tos) in g.edges.iter().filter(|(a, _)| !a.is_empty()) {
        if tos.contains(&vec![]) {
            msg += &format!(
                "{} names an item of the crate root (an old path kept for one release; use the layer path)  at {}\n",
                name(a),
                g.seen_at[&(a.clone(), vec![])]
            );
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
    msg += &component_circles(&g, &kept, |m: &Module| {
        let k = if folders.contains(&m[..1]) { 2 } else { 1 };
        m[..k.min(m.len())].to_vec()
    });
    assert!(
        msg.is_empty(),
        "layering of src/ against docs/architecture.md:\n{msg}"
    );
}

/// Every module of `src/` is in the table, and every table entry names a module.
#[test]
fn the_layer_table_names_the_real_tree() {
    let layers = layers(DOC, "## Layers");
    let g = graph();
    for m in g.mods.iter().filter(|m| !m.is_empty()) {
        entry_of(&layers, m);
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
