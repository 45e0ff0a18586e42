//! The `depth` axis ([`super::depth`]): point keys, the spec hash, refusals.

use std::path::Path;

use crate::sweep::spec::Spec;

fn spec(extra: &str) -> anyhow::Result<Spec> {
    Spec::parse(
        &format!("budgets = [\"floor\"]\n{extra}"),
        Path::new("/sweeps"),
    )
}

#[test]
fn the_axis_keys_its_points_and_stays_out_of_the_hash_at_zero() {
    let plain = spec("").unwrap();
    assert_eq!(spec("depth = [0]").unwrap().hash(), plain.hash());
    // The hash pinned before any later axis existed (axes_example).
    assert_eq!(
        plain.hash(),
        "1a53ce6d5d10adcbc0c10dd70e59d1b7d3a3c2b08e8e66a4d294b5ca8fda9553"
    );
    let s = spec("depth = [0, 512]").unwrap();
    assert_ne!(s.hash(), plain.hash());
    let keys: Vec<String> = s.points().iter().map(|p| p.key()).collect();
    let base = "budget=floor;io=direct;prefetch=none;cache=lru;threads=1;prompt=0";
    assert_eq!(
        keys,
        [format!("{base};depth=0"), format!("{base};depth=512")]
    );
    let p = s.points();
    assert_eq!(p[0].depth, 0);
    assert_eq!(p[1].depth, 512);
    assert!(super::depth::not_applicable(false, p[1].depth).is_some());
    assert!(super::depth::not_applicable(true, p[1].depth).is_none());
    assert!(super::depth::not_applicable(false, p[0].depth).is_none());
    // A sweep without the axis: no `;depth=` in its keys, depth 0.
    assert!(!plain.points()[0].key().contains("depth"));
    assert_eq!(plain.points()[0].depth, 0);
}

#[test]
fn bad_values_and_served_points_are_refused() {
    for (extra, want) in [
        ("depth = [0, 0]", "more than once"),
        ("depth = [-1]", "invalid sweep spec"),
        ("depth = [16777216]", "at most 16777215 positions"),
        ("depth = []", "is empty"),
        ("depth = [16]\nconcurrency = [1, 2]", "takes no depth"),
        (
            "depth = [0, 512]\nmax_context = 520\nmax_tokens = 16",
            "depth = 512 with max_tokens = 16 needs more than max_context = 520",
        ),
    ] {
        let e = format!("{:#}", spec(extra).unwrap_err());
        assert!(e.contains(want), "{extra}: {e}");
    }
    // Concurrency above 1 at depth 0 alone is the ordinary served sweep.
    assert!(spec("depth = [0]\nconcurrency = [1, 2]").is_ok());
    // 512 + 16 = 528 positions fit (the prompt's are checked by the run).
    assert!(spec("depth = [512]\nmax_context = 528\nmax_tokens = 16").is_ok());
}
