//! The baseline gate's comparison: the new sweep's runs against a baseline's
//! ([`crate::sweep::record::baseline`] reads it), point by point, with the
//! bootstrap of [`memdial::util::stats::bootstrap`]; a point that cannot be judged
//! is undecided, never "not slower".

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::sweep::record::baseline::{key_of, Key, Runs, Unreadable};
use crate::sweep::record::row::Row;
use memdial::util::stats::bootstrap::{ratio, Ratio, Run};

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
    /// Points whose slow-down cannot be judged: (point key, why).
    pub undecided: Vec<(String, String)>,
}

impl Comparison {
    /// Points that regressed beyond the tolerance, significantly.
    pub fn regressions(&self) -> Vec<&Compared> {
        self.compared.iter().filter(|c| c.regressed).collect()
    }

    /// Why the gate cannot decide (`None`: it decided): no point compared, or some
    /// points undecided (the first named).
    pub fn undecided_reason(&self) -> Option<String> {
        if let Some((k, why)) = self.undecided.first() {
            return Some(format!(
                "{} point(s) cannot be judged (first: {k}: {why})",
                self.undecided.len()
            ));
        }
        if self.compared.is_empty() {
            return Some(format!(
                "no point could be compared ({} without a baseline)",
                self.missing.len()
            ));
        }
        None
    }

    /// `baseline: 2 of 4 points slower by more than 25% (e.g. p3 +40%)`, or
    /// `baseline: undecided: …` when the gate cannot decide.
    pub fn line(&self) -> String {
        if let Some(why) = self.undecided_reason() {
            return format!("baseline: undecided: {why}");
        }
        let mut l = format!(
            "baseline: {} of {} points slower by more than {:.0}%",
            self.regressions().len(),
            self.compared.len(),
            self.tolerance * 100.0
        );
        if let Some(w) = self.regressions().first() {
            l += &format!(" (e.g. p{} {:+.0}%)", w.point_index, w.change * 100.0);
        }
        l
    }
}

/// Compares the new sweep's runs with the baseline's, point by point (`unreadable`:
/// the baseline's runs [`read_csv`] could not read; their points are undecided).
pub fn compare(
    path: &Path,
    base: &Runs,
    unreadable: &[Unreadable],
    rows: &[Row],
    tolerance: f64,
) -> Comparison {
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
    let mut undecided = vec![];
    for (idx, (key, runs)) in now {
        if let Some(u) = unreadable.iter().find(|u| u.key == key) {
            undecided.push((key.0.clone(), format!("baseline run {}: {}", u.run, u.why)));
            continue;
        }
        if let Some(bad) = runs
            .iter()
            .flatten()
            .find(|x| !(x.is_finite() && **x >= 0.0))
        {
            undecided.push((
                key.0.clone(),
                format!("this sweep's time {bad} is not finite"),
            ));
            continue;
        }
        let Some(old) = base.get(&key) else {
            missing.push(key.0.clone());
            continue;
        };
        let Some(r) = ratio(&runs, old, idx as u64) else {
            missing.push(key.0.clone());
            continue;
        };
        if r.significant.is_none() {
            undecided.push((
                key.0.clone(),
                format!(
                    "insufficient repeats ({} run(s) here, {} in the baseline; the bootstrap needs {} runs of {} decode times on each side)",
                    runs.len(),
                    old.len(),
                    memdial::util::stats::bootstrap::MIN_RUNS,
                    memdial::util::stats::bootstrap::MIN_TOKENS
                ),
            ));
            continue;
        }
        let change = r.ratio - 1.0;
        let meds = |rs: &[Run]| {
            let m: Vec<f64> = rs
                .iter()
                .filter_map(|x| memdial::util::stats::median(x))
                .collect();
            memdial::util::stats::median(&m).unwrap_or(f64::NAN)
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
        undecided,
    }
}
