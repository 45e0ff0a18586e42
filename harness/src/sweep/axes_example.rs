//! The one way to add an axis ([`super::axes`]), shown with an example axis
//! declared only here: its spec hash rule, point keys and results column.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::axes::{Axis, Values};
use crate::sweep::record::row::{columns, to_csv, Row, COLUMNS};
use crate::sweep::spec::{spec_hash, Spec};

/// An example axis, declared only here: how a run starts.
struct Start;
impl Axis for Start {
    const NAME: &'static str = "start";
    type Value = String;
    fn default_value() -> String {
        "cold".into()
    }
}

/// A spec with the example axis, as `Spec` will hold a declared one.
#[derive(Serialize, Deserialize)]
struct WithStart {
    #[serde(flatten)]
    spec: Spec,
    #[serde(default, skip_serializing_if = "Values::is_default")]
    start: Values<Start>,
}

fn spec() -> Spec {
    Spec::parse("budgets = [\"floor\", \"2x floor\"]", Path::new(".")).unwrap()
}

#[test]
fn a_default_valued_axis_changes_no_hash_key_or_column() {
    let s = spec();
    let with = WithStart {
        spec: s.clone(),
        start: Values::default(),
    };
    // Left out of the hash form while it holds the default.
    assert_eq!(spec_hash(&with), s.hash());
    // Left out of the point keys; the points are the same.
    let p = s.points_with(&[with.start.coords()]);
    assert_eq!(
        p.iter().map(|p| p.key()).collect::<Vec<_>>(),
        s.points().iter().map(|p| p.key()).collect::<Vec<_>>()
    );
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
    assert_eq!(&cols[COLUMNS.len()..], ["start"]);
    assert!(String::from_utf8(to_csv(&[row]).unwrap())
        .unwrap()
        .lines()
        .nth(1)
        .unwrap()
        .ends_with(",cold"));
    // Rows of sweeps without later axes keep exactly the schema's columns.
    assert_eq!(columns(&[Row::default()]), COLUMNS);
}

#[test]
fn an_axis_with_values_joins_the_hash_and_the_keys() {
    let s = spec();
    let with = WithStart {
        spec: s.clone(),
        start: Values(vec!["cold".into(), "warm".into()]),
    };
    assert_ne!(spec_hash(&with), s.hash());
    let p = s.points_with(&[with.start.coords()]);
    assert_eq!(p.len(), 2 * s.points().len());
    // Innermost: the two values of one budget are neighbours.
    assert_eq!(
        p[1].key(),
        "budget=floor;io=direct;prefetch=none;cache=lru;threads=1;prompt=0;start=warm"
    );
    assert_eq!(p[0].key(), format!("{};start=cold", s.points()[0].key()));
    // The spec text round-trips through the declaration.
    let t: WithStart =
        toml::from_str("budgets = [\"floor\"]\nstart = [\"cold\", \"warm\"]").unwrap();
    assert_eq!(t.start.0, ["cold", "warm"]);
    assert!(toml::from_str::<WithStart>("budgets = [\"floor\"]\nstart = []").is_err());
}
