//! The one way to add an axis ([`super::axes`]), shown with the first declared axis,
//! `start` ([`super::start::Start`]): its spec hash rule, point keys and results
//! column.

use std::path::Path;

use super::axes::Values;
use super::start::{Start, StartMode};
use crate::sweep::record::row::{columns, to_csv, Row, COLUMNS};
use crate::sweep::spec::Spec;

fn spec(extra: &str) -> Spec {
    Spec::parse(
        &format!("budgets = [\"floor\", \"2x floor\"]\n{extra}"),
        Path::new("."),
    )
    .unwrap()
}

#[test]
fn a_default_valued_axis_changes_no_hash_or_key_and_appends_its_column() {
    let s = spec("");
    // Left out of the hash form while it holds the default, spelled out or not: the
    // minimal spec's hash is the one pinned before the axis existed.
    assert_eq!(spec("start = [\"cold\"]").hash(), s.hash());
    assert_eq!(
        Spec::parse("budgets = [\"floor\"]\nstart = [\"cold\"]", Path::new("."))
            .unwrap()
            .hash(),
        "1a53ce6d5d10adcbc0c10dd70e59d1b7d3a3c2b08e8e66a4d294b5ca8fda9553"
    );
    // Left out of the point keys.
    let p = s.points();
    assert_eq!(
        p[0].key(),
        "budget=floor;io=direct;prefetch=none;cache=lru;threads=1;prompt=0"
    );
    assert_eq!(p[0].start, StartMode::Cold);
    // Its column follows every existing one.
    let row = Row {
        axes: p[0]
            .axes
            .iter()
            .map(|c| (c.name.clone(), c.value.clone().into()))
            .collect(),
        ..Default::default()
    };
    let cols = columns(std::slice::from_ref(&row));
    assert_eq!(&cols[..COLUMNS.len()], COLUMNS);
    assert_eq!(
        &cols[COLUMNS.len()..],
        ["start", "layout", "concurrency", "speculate", "depth"]
    );
    assert!(String::from_utf8(to_csv(&[row]).unwrap())
        .unwrap()
        .lines()
        .nth(1)
        .unwrap()
        .ends_with(",cold,safetensors,1,off,0"));
    // Rows of sweeps recorded before any later axis keep exactly the schema's columns.
    assert_eq!(columns(&[Row::default()]), COLUMNS);
}

#[test]
fn an_axis_with_values_joins_the_hash_and_the_keys() {
    let s = spec("");
    let with = spec("start = [\"cold\", \"warm\"]");
    assert_ne!(with.hash(), s.hash());
    let p = with.points();
    assert_eq!(p.len(), 2 * s.points().len());
    // Innermost: the two values of one budget are neighbours.
    assert_eq!(
        p[1].key(),
        "budget=floor;io=direct;prefetch=none;cache=lru;threads=1;prompt=0;start=warm"
    );
    assert_eq!(p[1].start, StartMode::Warm);
    assert_eq!(p[0].key(), format!("{};start=cold", s.points()[0].key()));
    assert_eq!(with.start.0, [StartMode::Cold, StartMode::Warm]);
    assert!(Values::<Start>::default().is_default());
    assert!(Spec::parse("budgets = [\"floor\"]\nstart = []", Path::new(".")).is_err());
    assert!(Spec::parse("budgets = [\"floor\"]\nstart = [\"hot\"]", Path::new(".")).is_err());
}

#[test]
fn the_steady_spec_runs_every_point_warm_then_cold() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("sweeps/steady.toml");
    let s = Spec::load(&path).unwrap();
    let p = s.points();
    // 4 budgets × 3 IO modes × 2 starts.
    assert_eq!(p.len(), 24);
    assert!(p[0].key().ends_with(";start=warm"), "{}", p[0].key());
    assert!(p[1].key().ends_with(";start=cold"), "{}", p[1].key());
}
