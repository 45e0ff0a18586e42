//! `--baseline OLD/results.csv --max-regression 25%`: fail when a point is slower
//! than in the baseline by more than the tolerance **and** the slowdown is
//! significant under the method of [`crate::sweep::analysis::bootstrap`].
//!
//! The baseline's run directory must hold its `sweep.json` next to `results.csv`.
//! It is refused (usage error, exit 2) when its results schema, spec or model
//! content hash differ from this sweep's, naming what differs. Points are matched on
//! `point_key`, `budget_bytes`, `prompt_tokens` and `max_tokens` (the model is the
//! same by then).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::Serialize;

use super::row::{Row, RESULTS_SCHEMA};
use super::rundir::Meta;
use super::status::RunStatus;
use crate::sweep::analysis::bootstrap::{ratio, Ratio, Run};

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

/// What a point is matched on: `point_key`, `budget_bytes`, `prompt_tokens`
/// (`None` when the run did not report it), `max_tokens`.
pub type Key = (String, u64, Option<u64>, usize);

/// The match key of a row.
pub fn key_of(r: &Row) -> Key {
    (
        r.point_key.clone(),
        r.budget_bytes,
        r.metrics.prompt_tokens,
        r.max_tokens,
    )
}

/// What this sweep is, for checking a baseline against it.
#[derive(Debug, Clone)]
pub struct Identity<'a> {
    /// Spec name.
    pub spec_name: Option<&'a str>,
    /// SHA-256 of the canonical spec.
    pub spec_sha256: &'a str,
    /// [`memdial::checkpoint::model_content_hash`] of the model.
    pub model_content_hash: &'a str,
    /// The model's identity over its files.
    pub model_identity: &'a memdial::identity::Identity,
    /// The prompt files' identities, by path as written in the spec.
    pub prompt_identities: &'a BTreeMap<String, memdial::identity::Identity>,
}

/// Per-token decode times of the baseline's measured finished runs, by match key.
pub type Runs = BTreeMap<Key, Vec<Run>>;

/// Reads a baseline `results.csv` (or a run directory), checks its `sweep.json`
/// against `me`, and returns its runs by match key. Every error is a reason to
/// refuse the baseline (the caller maps it to exit 2).
pub fn load(path: &Path, me: &Identity) -> Result<Runs> {
    let csv_path = if path.is_dir() {
        path.join("results.csv")
    } else {
        path.to_path_buf()
    };
    let dir = csv_path.parent().unwrap_or(Path::new("."));
    if !dir.join("sweep.json").exists() {
        bail!(
            "baseline {}: no sweep.json next to it; pass the results.csv of a run directory written by `memdial sweep`",
            csv_path.display()
        );
    }
    let meta = Meta::load(dir)?;
    check(&meta, me).with_context(|| format!("baseline {} refused", csv_path.display()))?;
    read_csv(&csv_path)
}

/// Refuses a baseline whose results schema, spec or model differ from `me`.
///
/// The model and prompt files are compared by their identities
/// ([`memdial::identity`]) when the baseline recorded them: a baseline written with
/// another model or prompt file content is refused, naming what changed. A baseline
/// written before identities were recorded is accepted on its model content hash,
/// with a note on stderr that its model files could not be compared.
pub fn check(meta: &Meta, me: &Identity) -> Result<()> {
    match meta.results_schema {
        None => bail!(
            "it was written before results schema {RESULTS_SCHEMA} (its sweep.json has no results_schema): re-run the baseline sweep with this memdial"
        ),
        Some(v) if v != RESULTS_SCHEMA => {
            bail!("results schema differs: baseline {v}, this sweep {RESULTS_SCHEMA}")
        }
        _ => {}
    }
    if meta.spec_sha256 != me.spec_sha256 {
        bail!(
            "spec differs: baseline spec {:?} (sha256 {}) vs this sweep's {:?} (sha256 {})",
            meta.spec_name.as_deref().unwrap_or("unnamed"),
            short(&meta.spec_sha256),
            me.spec_name.unwrap_or("unnamed"),
            short(me.spec_sha256)
        );
    }
    match &meta.model_identity {
        Some(old) => {
            let mut changes: Vec<String> = me
                .model_identity
                .changes_since(old)
                .into_iter()
                .map(|c| format!("model: {c}"))
                .collect();
            for (name, new) in me.prompt_identities {
                if let Some(old) = meta.prompt_identities.get(name) {
                    changes.extend(
                        new.changes_since(old)
                            .into_iter()
                            .map(|c| format!("prompt {name}: {c}")),
                    );
                }
            }
            if !changes.is_empty() {
                bail!(
                    "it was written with other inputs: {}",
                    changes.join("; ")
                );
            }
        }
        None => eprintln!(
            "note: the baseline predates model identities: its model is checked by content hash only"
        ),
    }
    match &meta.model_content_hash {
        Some(h) if h == me.model_content_hash => Ok(()),
        Some(h) => bail!(
            "model differs: baseline model {} (content hash {}) vs this sweep's (content hash {})",
            meta.model_dir,
            short(h),
            short(me.model_content_hash)
        ),
        None => bail!("its sweep.json has no model_content_hash"),
    }
}

fn short(h: &str) -> &str {
    &h[..h.len().min(12)]
}

/// Runs of a `results.csv` by match key (measured, finished runs only).
pub fn read_csv(path: &Path) -> Result<Runs> {
    let mut rd = csv::Reader::from_path(path)
        .with_context(|| format!("cannot read baseline {}", path.display()))?;
    let h = rd.headers()?.clone();
    let col = |name: &str| {
        h.iter()
            .position(|c| c == name)
            .with_context(|| format!("{} has no column {name}", path.display()))
    };
    let c = [
        col("point_key")?,
        col("status")?,
        col("warmup")?,
        col("decode_s_per_token_median")?,
        col("decode_s_per_token")?,
        col("budget_bytes")?,
        col("prompt_tokens")?,
        col("max_tokens")?,
    ];
    let mut by: Runs = BTreeMap::new();
    for rec in rd.records() {
        let rec = rec.with_context(|| format!("malformed row in {}", path.display()))?;
        let get = |i: usize| rec.get(c[i]).unwrap_or("");
        if RunStatus::parse(get(1)) != Some(RunStatus::Ok) || get(2) == "true" {
            continue;
        }
        let mut run: Run = get(4)
            .split_whitespace()
            .filter_map(|x| x.parse::<f64>().ok())
            .collect();
        if run.is_empty() {
            run.extend(get(3).parse::<f64>().ok());
        }
        if run.is_empty() {
            continue;
        }
        let key = (
            get(0).to_string(),
            get(5).parse().unwrap_or(0),
            get(6).parse().ok(),
            get(7).parse().unwrap_or(0),
        );
        by.entry(key).or_default().push(run);
    }
    Ok(by)
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
    /// new / old with its 95 % interval and significance.
    pub ratio: Ratio,
    /// `change > tolerance` and the slowdown is significant.
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
    /// Points that regressed beyond the tolerance, significantly.
    pub fn regressions(&self) -> Vec<&Compared> {
        self.compared.iter().filter(|c| c.regressed).collect()
    }
}

/// Compares the new sweep's runs with the baseline's, point by point.
pub fn compare(path: &Path, base: &Runs, rows: &[Row], tolerance: f64) -> Comparison {
    let mut now: BTreeMap<usize, (Key, Vec<Run>)> = BTreeMap::new();
    for r in rows.iter().filter(|r| r.is_measured_ok()) {
        let run: Run = if r.metrics.decode_s_per_token.is_empty() {
            r.metrics.decode_s_per_token_median.into_iter().collect()
        } else {
            r.metrics.decode_s_per_token.clone()
        };
        now.entry(r.point_index)
            .or_insert_with(|| (key_of(r), vec![]))
            .1
            .push(run);
    }
    let mut compared = vec![];
    let mut missing = vec![];
    for (idx, (key, runs)) in now {
        let Some(old) = base.get(&key) else {
            missing.push(key.0.clone());
            continue;
        };
        let Some(r) = ratio(&runs, old, idx as u64) else {
            missing.push(key.0.clone());
            continue;
        };
        let change = r.ratio - 1.0;
        let meds = |rs: &[Run]| {
            let m: Vec<f64> = rs.iter().filter_map(|x| crate::stats::median(x)).collect();
            crate::stats::median(&m).unwrap_or(f64::NAN)
        };
        compared.push(Compared {
            point_index: idx,
            point_key: key.0.clone(),
            old_s_per_token: meds(old),
            new_s_per_token: meds(&runs),
            change,
            regressed: change > tolerance && r.significant == Some(true) && r.ratio > 1.0,
            ratio: r,
        });
    }
    Comparison {
        path: path.to_path_buf(),
        tolerance,
        compared,
        missing,
    }
}

/// A loaded baseline: its path, runs by match key and the tolerance.
pub struct Baseline {
    /// The baseline `results.csv`.
    pub path: std::path::PathBuf,
    /// Median s/token per point key.
    pub runs: Runs,
    /// Allowed slow-down (0.25 = 25 %).
    pub tolerance: f64,
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
