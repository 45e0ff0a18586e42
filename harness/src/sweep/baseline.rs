//! `--baseline OLD/results.csv --max-regression 25%`: fail when a point's median
//! s/token is slower than the baseline's by more than the tolerance.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::Serialize;

use super::stats::PointStats;
use super::util::median;

/// Parses a tolerance: `25%` or `0.25` → 0.25.
pub fn parse_tolerance(s: &str) -> Result<f64> {
    let t = s.trim();
    let v = match t.strip_suffix('%') {
        Some(p) => p.trim().parse::<f64>().map(|x| x / 100.0),
        None => t.parse::<f64>(),
    }
    .with_context(|| format!("invalid tolerance {s:?} (e.g. 25%)"))?;
    if v.is_nan() || v < 0.0 || !v.is_finite() {
        bail!("tolerance {s:?} must be a non-negative number");
    }
    Ok(v)
}

/// Median s/token per point key of a `results.csv` (measured, finished runs only).
pub fn load(path: &Path) -> Result<BTreeMap<String, f64>> {
    let mut rd = csv::Reader::from_path(path)
        .with_context(|| format!("cannot read baseline {}", path.display()))?;
    let h = rd.headers()?.clone();
    let col = |name: &str| {
        h.iter()
            .position(|c| c == name)
            .with_context(|| format!("{} has no column {name}", path.display()))
    };
    let (ck, cs, cw, cm) = (
        col("point_key")?,
        col("status")?,
        col("warmup")?,
        col("decode_s_per_token_median")?,
    );
    let mut by: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for rec in rd.records() {
        let rec = rec.with_context(|| format!("malformed row in {}", path.display()))?;
        if rec.get(cs) != Some("ok") || rec.get(cw) == Some("true") {
            continue;
        }
        if let Some(v) = rec.get(cm).and_then(|v| v.parse::<f64>().ok()) {
            by.entry(rec.get(ck).unwrap_or("").to_string())
                .or_default()
                .push(v);
        }
    }
    Ok(by
        .into_iter()
        .filter_map(|(k, v)| median(&v).map(|m| (k, m)))
        .collect())
}

/// One compared point.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Compared {
    /// Point index in the new sweep.
    pub point_index: usize,
    /// Point key.
    pub point_key: String,
    /// Baseline median, seconds per token.
    pub old_s_per_token: f64,
    /// New median, seconds per token.
    pub new_s_per_token: f64,
    /// new / old − 1 (0.30 = 30 % slower).
    pub change: f64,
    /// `change > tolerance`.
    pub regressed: bool,
}

/// Result of a baseline comparison.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Comparison {
    /// The baseline file.
    pub path: PathBuf,
    /// Allowed slow-down (0.25 = 25 %).
    pub tolerance: f64,
    /// Points found in both.
    pub compared: Vec<Compared>,
    /// Points of the new sweep absent from the baseline.
    pub missing: Vec<String>,
}

impl Comparison {
    /// Points that regressed beyond the tolerance.
    pub fn regressions(&self) -> Vec<&Compared> {
        self.compared.iter().filter(|c| c.regressed).collect()
    }
}

/// Compares the new sweep's per-point medians with a baseline.
pub fn compare(
    path: &Path,
    base: &BTreeMap<String, f64>,
    stats: &[PointStats],
    tolerance: f64,
) -> Comparison {
    let mut compared = vec![];
    let mut missing = vec![];
    for s in stats {
        let Some(new) = s.s_per_token else { continue };
        match base.get(&s.point_key) {
            Some(&old) if old > 0.0 => {
                let change = new / old - 1.0;
                compared.push(Compared {
                    point_index: s.point_index,
                    point_key: s.point_key.clone(),
                    old_s_per_token: old,
                    new_s_per_token: new,
                    change,
                    regressed: change > tolerance,
                });
            }
            _ => missing.push(s.point_key.clone()),
        }
    }
    Comparison {
        path: path.to_path_buf(),
        tolerance,
        compared,
        missing,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tolerances() {
        assert_eq!(parse_tolerance("25%").unwrap(), 0.25);
        assert_eq!(parse_tolerance("0.1").unwrap(), 0.1);
        assert!(parse_tolerance("-5%").is_err());
        assert!(parse_tolerance("fast").is_err());
    }
}
