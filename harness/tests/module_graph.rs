//! The harness's module graph has no circles: every module depends only on modules
//! that do not depend back on it (stages: what runs → what it records → what it
//! writes). The graph is read from the sources under `harness/src` by
//! [`memdial_testkit::modgraph`] (use lines and inline paths, `super::` and `self::`).

use std::path::Path;

use memdial_testkit::modgraph::{expand_use, Graph, Module};
use memdial_testkit::source::strip;

fn build() -> Graph {
    memdial_testkit::modgraph::build(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"), false)
}

#[test]
fn no_circle_among_harness_modules() {
    let g = build();
    let msg = memdial_testkit::layers::component_circles(&g, &g.edges, |m: &Module| m.clone());
    assert!(msg.is_empty(), "{msg}");
}

/// The reader finds the edges it is meant to find (a known graph, written here).
#[test]
fn reader_sees_use_inline_and_super_paths() {
    let src = strip(
        "use crate::a::b::{c, d as e}; // use crate::zzz;\n\
         let s = \"crate::yyy\"; fn f() { crate::x::y(); super::w::v(); }",
    );
    assert!(!src.contains("zzz") && !src.contains("yyy"));
    let t = expand_use("crate::a::{b::{c, self}, d as e}");
    let paths: Vec<String> = t.iter().map(|(p, _)| p.join("::")).collect();
    assert_eq!(paths, ["crate::a::b::c", "crate::a::b", "crate::a::d"]);
    let g = build();
    // main.rs dispatches to every command: edges from the root exist.
    assert!(g.edges[&vec![]].contains(&vec!["cmd_run".to_string()]));
    assert!(g.mods.len() > 20);
}
