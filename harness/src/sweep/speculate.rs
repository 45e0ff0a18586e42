//! The `speculate` axis: `memdial run --speculate` per point (docs/speculation.md).
//!
//! - `off` (the default, and every sweep before the axis): plain decoding;
//! - `ngram:K`: prompt lookup; `replay:FILE:K`: the ids of an earlier run, FILE
//!   relative to the spec file (made absolute when the spec is read).
//!
//! Speculation cannot change the ids, so its points are compared with the `off`
//! points of their prompt like any other setting: the verdict groups runs by
//! (prompt, max_tokens, engine), whatever their `speculate` value. Only memdial
//! speculates: other engines' points of another value are `n/a`, and served points
//! (`concurrency` above 1) are refused with it (speculation inside `serve` is not
//! built).

use std::path::Path;

use anyhow::{bail, Result};
use memdial::engine::speculate::Speculate as Value;

use super::axes::{Axis, Coord};

/// The `speculate` axis (spec key `speculate = ["off", "ngram:4", "replay:ids.txt:4"]`).
pub struct Speculate;

impl Speculate {
    /// [`Axis::NAME`] as a plain constant (the `results.csv` column).
    pub const NAME_STR: &'static str = "speculate";
}

impl Axis for Speculate {
    const NAME: &'static str = Speculate::NAME_STR;
    type Value = String;
    fn default_value() -> String {
        "off".into()
    }
}

/// Errors: a value `memdial run --speculate` refuses (the parser's message, naming it).
pub fn check(values: &[String]) -> Result<()> {
    for v in values {
        Value::parse(v)?;
    }
    Ok(())
}

/// `values` with each relative `replay:` file made relative to `base` (the spec's
/// directory). Values that do not parse are kept for [`check`] to refuse.
pub fn resolve(values: &mut [String], base: &Path) {
    for v in values.iter_mut() {
        if let Ok(Value::Replay { path, k }) = Value::parse(v) {
            if path.is_relative() {
                *v = Value::Replay {
                    path: base.join(path),
                    k,
                }
                .as_string();
            }
        }
    }
}

/// The point's `--speculate` value when it is not `off` (its `speculate` coordinate).
pub fn of(axes: &[Coord]) -> Option<&str> {
    axes.iter()
        .find(|c| c.name == Speculate::NAME && c.value != "off")
        .map(|c| c.value.as_str())
}

/// Why engine `memdial == false` cannot run the point: it speculates.
pub fn not_applicable(memdial: bool, axes: &[Coord]) -> Option<String> {
    let v = of(axes)?;
    (!memdial).then(|| format!("speculate = {v:?}: only memdial speculates"))
}

/// Errors: a spec serving concurrent clients (`concurrency` above 1) that speculates.
pub fn check_with_concurrency(values: &[String], concurrency: &[u32]) -> Result<()> {
    if values.iter().any(|v| v != "off") && concurrency.iter().any(|&c| c > 1) {
        bail!(
            "speculate with concurrency above 1: `memdial serve` does not speculate; \
             sweep the two axes in separate specs"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
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
        assert_eq!(super::of(&p[0].axes), None);
        assert_eq!(super::of(&p[1].axes), Some("ngram:4"));
        assert!(super::not_applicable(false, &p[1].axes).is_some());
        assert!(super::not_applicable(true, &p[1].axes).is_none());
        assert!(super::not_applicable(false, &p[0].axes).is_none());
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
}
