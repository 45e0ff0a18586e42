//! The `speculate` axis ([`super::speculate`]): point keys, the spec hash, refusals.

use std::path::Path;

use crate::sweep::spec::Spec;

fn spec(extra: &str) -> anyhow::Result<Spec> {
    Spec::parse(
        &format!("budgets = [\"floor\"]\n{extra}"),
        Path::new("/sweeps"),
    )
}

#[test]
fn the_axis_keys_its_points_and_stays_out_of_the_hash_while_off() {
    let plain = spec("").unwrap();
    assert_eq!(spec("speculate = [\"off\"]").unwrap().hash(), plain.hash());
    // The hash pinned before any later axis existed (axes_example).
    assert_eq!(
        plain.hash(),
        "1a53ce6d5d10adcbc0c10dd70e59d1b7d3a3c2b08e8e66a4d294b5ca8fda9553"
    );
    let s = spec("speculate = [\"off\", \"ngram:4\", \"replay:ids/a.txt:4\"]").unwrap();
    assert_ne!(s.hash(), plain.hash());
    let keys: Vec<String> = s.points().iter().map(|p| p.key()).collect();
    let base = "budget=floor;io=direct;prefetch=none;cache=lru;threads=1;prompt=0";
    assert_eq!(
        keys,
        [
            format!("{base};speculate=off"),
            format!("{base};speculate=ngram:4"),
            format!("{base};speculate=replay:/sweeps/ids/a.txt:4"),
        ]
    );
    let p = s.points();
    assert_eq!(p[0].speculate.as_deref(), None);
    assert_eq!(p[1].speculate.as_deref(), Some("ngram:4"));
    assert!(super::speculate::not_applicable(false, p[1].speculate.as_deref()).is_some());
    assert!(super::speculate::not_applicable(true, p[1].speculate.as_deref()).is_none());
    assert!(super::speculate::not_applicable(false, p[0].speculate.as_deref()).is_none());
}

#[test]
fn bad_values_and_served_points_are_refused() {
    for (extra, want) in [
        ("speculate = [\"ngram:0\"]", "out of range"),
        ("speculate = [\"eagle:4\"]", "unknown draft source"),
        ("speculate = [\"off\", \"off\"]", "more than once"),
        (
            "speculate = [\"ngram:4\"]\nconcurrency = [1, 2]",
            "does not speculate",
        ),
    ] {
        let e = format!("{:#}", spec(extra).unwrap_err());
        assert!(e.contains(want), "{extra}: {e}");
    }
}
