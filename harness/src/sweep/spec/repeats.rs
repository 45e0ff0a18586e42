//! `repeats`: a fixed count of measured runs per point, or `"auto"` (stop a point once
//! its interval is within `precision` of the median, after `MIN_AUTO_REPEATS` and at
//! most `max_repeats` runs).

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

/// `precision` of `repeats = "auto"` when the spec does not set it.
pub const DEFAULT_PRECISION: &str = "5%";
/// `max_repeats` of `repeats = "auto"` when the spec does not set it.
pub const DEFAULT_MAX_REPEATS: u32 = 10;
/// Fewest quiet measured runs before `repeats = "auto"` may stop a point: an
/// interval from fewer is hardly more than their min–max.
pub const MIN_AUTO_REPEATS: u32 = 3;

/// The spec's `repeats`: a fixed count per point, or `"auto"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Repeats {
    /// This many measured runs per point (serialised as the bare number, so the hash
    /// of every spec written before `"auto"` is unchanged).
    Count(u32),
    /// `"auto"`: measured until precise enough ([`AutoRepeats`]).
    Auto(AutoWord),
}

/// The word `"auto"` (any other string is refused).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AutoWord;

impl Serialize for AutoWord {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str("auto")
    }
}

impl<'de> Deserialize<'de> for AutoWord {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let w = String::deserialize(d)?;
        if w == "auto" {
            Ok(AutoWord)
        } else {
            Err(serde::de::Error::custom(format!(
                "repeats = {w:?}: expected a number of runs or \"auto\""
            )))
        }
    }
}

/// `repeats = "auto"` resolved: a point's measured runs go on, interleaved with the
/// other points', until its 95 % interval half-width is at most `precision` × its
/// median (after at least `min_repeats` quiet runs) or `max_repeats` runs were made.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct AutoRepeats {
    /// Largest interval half-width, as a fraction of the median (0.05 = ±5 %).
    pub precision: f64,
    /// Fewest quiet measured runs before a point may stop ([`MIN_AUTO_REPEATS`]).
    pub min_repeats: u32,
    /// Most measured runs of a point (what `runs_planned` counts).
    pub max_repeats: u32,
}

/// The spec's `precision`, as written: `"5%"` or `0.05`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Precision {
    /// `"5%"` (or `"0.05"`).
    Text(String),
    /// `0.05`.
    Fraction(f64),
}

/// Parses a precision: `"5%"` or a fraction (`0.05`), in (0, 1).
///
/// Errors: not a number, or outside (0 %, 100 %).
pub fn parse_precision(s: &str) -> Result<f64> {
    let t = s.trim();
    let v = match t.strip_suffix('%') {
        Some(p) => p.trim().parse::<f64>().map(|x| x / 100.0),
        None => t.parse::<f64>(),
    }
    .with_context(|| format!("invalid precision {s:?} (e.g. \"5%\")"))?;
    if !(v > 0.0 && v < 1.0) {
        bail!("precision {s:?} must be above 0 % and below 100 % of the median");
    }
    Ok(v)
}

/// How many runs each point gets: the spec's `repeats`, `precision`, `max_repeats`
/// and `warmup`, checked to go together.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Repetition {
    /// Discarded warm-up runs per point.
    pub warmup: u32,
    /// Most measured runs of a point: the fixed count, or `max_repeats` for `"auto"`.
    pub measured: u32,
    /// `repeats = "auto"` resolved; `None` for a fixed count.
    pub auto: Option<AutoRepeats>,
}
