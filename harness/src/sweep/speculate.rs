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

use super::axes::Axis;

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

/// Why engine `memdial == false` cannot run the point: it speculates (`v`, the
/// point's `--speculate` value; `None` for `off`).
pub fn not_applicable(memdial: bool, v: Option<&str>) -> Option<String> {
    let v = v?;
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
