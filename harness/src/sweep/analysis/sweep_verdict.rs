//! The sweep's verdict, composed once from the rows ([`SweepVerdict`]): the verdict
//! over the output ids, the cross-engine verdict, the baseline gate, the budget
//! recommendation, the engines' and layouts' ratios, noise and completeness.
//! `verdict.json` serialises it, `report.md` renders from it, and the stdout line
//! and exit code are its `line` and `outcome`.

use std::path::Path;

use serde::Serialize;

use crate::sweep::analysis::agreement::{cross, CrossEngine, Margins};
use crate::sweep::analysis::anomaly::{anomalies, Anomaly};
use crate::sweep::analysis::baseline::Comparison;
use crate::sweep::analysis::engine_ratio::{against_reference, EngineRatio};
use crate::sweep::analysis::layouts::{against_raw, against_safetensors, LayoutPair, LayoutRatio};
use crate::sweep::analysis::outcome::{Facts, Outcome};
use crate::sweep::analysis::recommend::{recommend_steady, Recommendation};
use crate::sweep::analysis::repeats::{self, PointRepeats};
use crate::sweep::analysis::stats::{point_runs, PointStats};
use crate::sweep::analysis::verdict::{verdict, Verdict};
use crate::sweep::record::digests::ResultsDigests;
use crate::sweep::record::row::Row;
use crate::sweep::record::rundir::Meta;

/// `5 %`, `2.5 %`: a fraction as a percentage without trailing zeros.
pub fn fmt_pct(f: f64) -> String {
    let t = format!("{:.2}", f * 100.0);
    let t = t.trim_end_matches('0').trim_end_matches('.');
    format!("{t} %")
}

/// `verdict.json`: the sweep's [`Outcome`] and its line, the verdict over the output
/// ids, the cross-engine verdict layered over it (sweeps with several engines), the
/// baseline gate, the budget recommendation and each engine's speed against the
/// reference. Computed once; `verdict.json` serialises this value, `report.md`
/// renders from it, and the stdout line and exit code are its `line` and
/// `outcome`.
#[derive(Debug, Clone, Serialize)]
pub struct SweepVerdict {
    /// The outcome: `pass`, `fail`, `incomplete`, `nothing_compared`,
    /// `baseline_undecided`.
    pub outcome: Outcome,
    /// `outcome == pass`.
    pub pass: bool,
    /// The one-line verdict (printed on stdout, heading the report's verdict).
    pub line: String,
    /// The verdict over the output ids (one engine at a time).
    #[serde(flatten)]
    pub ids: Verdict,
    /// The cross-engine verdict (sweeps with several engines).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub engines: Option<CrossEngine>,
    /// The budget recommendation (the reference engine's points).
    pub recommendation: Recommendation,
    /// Each engine's speed against the reference's (sweeps with an engines axis).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub engine_ratios: Option<Vec<EngineRatio>>,
    /// Adapters run with several settings: per point, the fastest engine (the speed
    /// figure) and the one named after the adapter (the agreement figure),
    /// [`crate::sweep::analysis::engine_ratio::at_best`].
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub engines_at_best: Vec<crate::sweep::analysis::engine_ratio::AtBest>,
    /// The lossless layout against safetensors at each point both ran (sweeps with
    /// both on the `layout` axis): s/token and bytes read per token, with intervals.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub layouts: Vec<LayoutRatio>,
    /// With the `raw` control on the `layout` axis: raw / safetensors (what the layout
    /// buys) and lossless / raw (what coding buys) at each point, with intervals.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub layout_pairs: Vec<LayoutPair>,
    /// Each lossy layout's agreement with the exact one, per (prompt, max_tokens)
    /// ([`crate::sweep::analysis::lossy`]); its limits are the only way it fails.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub lossy: Vec<crate::sweep::analysis::lossy::LossyAgreement>,
    /// Each lossy layout's points against safetensors at the same axes: s/token and
    /// bytes read per token.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub lossy_pairs: Vec<LayoutPair>,
    /// Measured finished runs the noise sentinel marked `noisy` (left out of the
    /// statistics), of `measured_runs`.
    pub noisy_runs: usize,
    /// Measured finished runs.
    pub measured_runs: usize,
    /// The runs by kind (measured, quiet, noisy, failed, not run) under `all` and per
    /// start (`cold`, `warm`), warm-ups left out.
    pub runs_by_start:
        std::collections::BTreeMap<String, crate::sweep::analysis::counts::RunCounts>,
    /// Points slower than a smaller budget of their mode, with the causes their
    /// figures support ([`crate::sweep::analysis::anomaly`]).
    pub anomalies: Vec<Anomaly>,
    /// `repeats = "auto"`: the measured runs each point took and whether it reached
    /// the precision (absent for a fixed count).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repeats_auto: Option<Vec<PointRepeats>>,
    /// The spec's `repeats = "auto"` settings (from `sweep.json`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auto: Option<crate::sweep::spec::AutoRepeats>,
    /// Shards missing from a merge (`"2/3"`): the directory is incomplete.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub missing_shards: Vec<String>,
    /// Points of the directory (of its shard) without a single row: however many
    /// runs `sweep.json` plans, the directory is incomplete.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub points_without_rows: Vec<usize>,
    /// The baseline gate (when a baseline was given).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub baseline: Option<BaselineGate>,
    /// Lower-case hex SHA-256 of `results.json` and `results.csv` as written with
    /// this verdict (what `memdial report verify` re-checks).
    pub results_sha256: ResultsDigests,
}

/// The baseline gate's part of `verdict.json`.
#[derive(Debug, Clone, Serialize)]
pub struct BaselineGate {
    /// Points compared.
    pub compared: usize,
    /// Points that regressed significantly beyond the tolerance.
    pub regressed: usize,
    /// Why the gate cannot decide (`None`: it decided).
    pub undecided: Option<String>,
    /// `--baseline-undecided pass`.
    pub undecided_passes: bool,
}

impl SweepVerdict {
    /// The verdict of `rows` for the run directory described by `meta` (`dir` holds
    /// the engines' `margins.json`, when one was written).
    pub fn new(dir: &Path, meta: &Meta, rows: &[Row], stats: &[PointStats]) -> SweepVerdict {
        let reps = meta.repeats_auto.map(|a| repeats::per_point(rows, &a));
        let not_needed = meta
            .repeats_auto
            .zip(reps.as_ref())
            .map(|(a, p)| repeats::not_needed(p, &a))
            .unwrap_or(0);
        let mut ids = verdict(rows).with_planned(meta.runs_planned, not_needed);
        let have: std::collections::BTreeSet<usize> = rows.iter().map(|r| r.point_index).collect();
        let points_without_rows: Vec<usize> = (0..meta.points_total)
            .filter(|i| meta.shard.is_none_or(|s| s.contains(*i)) && !have.contains(i))
            .collect();
        if !meta.missing_shards.is_empty() || !points_without_rows.is_empty() {
            ids.complete = false;
            ids.pass = false;
        }
        let engines = (!meta.engines.is_empty()).then(|| {
            let margins: Margins =
                std::fs::read_to_string(dir.join("engines").join("margins.json"))
                    .ok()
                    .and_then(|t| serde_json::from_str(&t).ok())
                    .unwrap_or_default();
            cross(&ids, rows, &meta.engines, &margins)
        });
        let runs = point_runs(rows);
        let mut recommendation = recommend_steady(&reference_stats(stats, meta), &runs);
        let reference = |st: &[PointStats]| reference_stats(st, meta);
        let t = meta.noise.unwrap_or_default();
        match crate::sweep::analysis::uncontended::decide(&recommendation, rows, &t, &reference) {
            Ok(Some(u)) => recommendation = u,
            Ok(None) => {}
            Err(why) => recommendation.uncontended_undecided = Some(why),
        }
        if let Some(bl) = recommendation.bottom_line.as_mut() {
            bl.auto = meta.repeats_auto;
        }
        SweepVerdict {
            outcome: Outcome::Incomplete,
            pass: false,
            line: String::new(),
            baseline: None,
            results_sha256: ResultsDigests::of(dir),
            noisy_runs: rows.iter().filter(|r| r.is_measured_noisy()).count(),
            measured_runs: rows.iter().filter(|r| r.is_measured_ok()).count(),
            runs_by_start: crate::sweep::analysis::counts::by_start(rows),
            anomalies: anomalies(stats, &runs),
            recommendation,
            engines_at_best: crate::sweep::analysis::engine_ratio::at_best(
                &engine_ratios(stats, &runs, meta),
                &meta
                    .engines
                    .iter()
                    .map(|e| (e.name.clone(), e.adapter.clone()))
                    .collect::<Vec<_>>(),
            ),
            engine_ratios: (!meta.engines.is_empty()).then(|| engine_ratios(stats, &runs, meta)),
            layouts: against_safetensors(stats, &runs, rows),
            layout_pairs: against_raw(stats, &runs, rows),
            lossy: crate::sweep::analysis::lossy::complete(
                crate::sweep::analysis::lossy::load(dir).unwrap_or_default(),
                &ids.groups,
                &meta.lossy_limits,
            ),
            lossy_pairs: crate::sweep::analysis::layouts::lossy_against_safetensors(
                stats, &runs, rows,
            ),
            ids,
            engines,
            repeats_auto: reps,
            auto: meta.repeats_auto,
            missing_shards: meta.missing_shards.clone(),
            points_without_rows,
        }
    }

    /// `; 8 of 12 points reached ±5 % before 10 runs (12 planned runs not needed)`
    /// under `repeats = "auto"` (empty otherwise).
    fn auto_line(&self, meta_auto: Option<&crate::sweep::spec::AutoRepeats>) -> String {
        let (Some(a), Some(p)) = (meta_auto, &self.repeats_auto) else {
            return String::new();
        };
        let reached = p.iter().filter(|x| x.reached).count();
        format!(
            "; repeats auto: {reached} of {} point(s) reached ±{} before {} runs ({} planned run(s) not needed)",
            p.len(),
            fmt_pct(a.precision),
            a.max_repeats,
            self.ids.runs_not_needed
        )
    }

    /// Whether the directory holds every planned run (of every shard).
    pub fn complete(&self) -> bool {
        self.ids.complete && self.missing_shards.is_empty() && self.points_without_rows.is_empty()
    }

    /// Decides the outcome from the checks, completeness and the baseline
    /// comparison `cmp` (`undecided_passes`: `--baseline-undecided pass`), and
    /// writes the line.
    pub fn settle(mut self, cmp: Option<&Comparison>, undecided_passes: bool) -> SweepVerdict {
        let engines_pass = self.engines.as_ref().is_none_or(|c| c.pass);
        let lossy_pass = self.lossy.iter().all(|a| !a.fails());
        let facts = Facts {
            runs_compared: self.ids.runs_compared,
            checks_pass: self.ids.checks_pass() && engines_pass && lossy_pass,
            complete: self.complete(),
            regressions: cmp.map(|c| c.regressions().len()).unwrap_or(0),
            baseline_undecided: cmp.is_some_and(|c| c.undecided_reason().is_some()),
            undecided_passes,
        };
        self.outcome = Outcome::decide(&facts);
        self.pass = self.outcome.is_pass();
        self.baseline = cmp.map(|c| BaselineGate {
            compared: c.compared.len(),
            regressed: c.regressions().len(),
            undecided: c.undecided_reason(),
            undecided_passes,
        });
        self.line = self.compose_line(cmp, engines_pass);
        self
    }

    /// The one line of [`SweepVerdict::line`]: the outcome's word, then what it
    /// rests on.
    fn compose_line(&self, cmp: Option<&Comparison>, engines_pass: bool) -> String {
        let ids = &self.ids;
        let engines = self.engines.as_ref().map(|c| c.one_line());
        let mut missing = if self.missing_shards.is_empty() {
            String::new()
        } else {
            format!("; shard(s) {} missing", self.missing_shards.join(", "))
        };
        // Named only when the planned count says complete (else runs are just not done).
        if !self.points_without_rows.is_empty() && ids.runs_done >= ids.runs_planned {
            missing += &format!(
                "; {} point(s) without a row (first: p{})",
                self.points_without_rows.len(),
                self.points_without_rows[0]
            );
        }
        let spared = if ids.runs_not_needed > 0 {
            format!(" ({} not needed: precision reached)", ids.runs_not_needed)
        } else {
            String::new()
        };
        let incomplete = format!(
            "{} of {} runs{spared}{missing}",
            ids.runs_done, ids.runs_planned
        );
        let mut l = match self.outcome {
            Outcome::Incomplete => format!("INCOMPLETE ({incomplete}); {}", ids.so_far()),
            Outcome::NothingCompared => format!(
                "NOTHING COMPARED: no run finished to compare ({} point(s) below the floor, {} n/a for their engine, {} row(s) in all)",
                ids.below_floor.len(),
                ids.not_applicable.len(),
                ids.runs_done
            ),
            Outcome::Fail if ids.checks_pass() && !engines_pass => format!(
                "FAIL: {}; within each engine, {}",
                engines.clone().unwrap_or_default(),
                ids.summary()
            ),
            o => format!("{}: {}", o.word(), ids.summary()),
        };
        if let (Some(e), true) = (&engines, engines_pass || !ids.checks_pass()) {
            l += &format!("; {e}");
        }
        l += &crate::sweep::analysis::lossy::line_part(&self.lossy);
        if self.outcome == Outcome::Fail && !self.complete() {
            l += &format!("; incomplete ({incomplete})");
        }
        if let Some(c) = cmp {
            l += &format!("; {}", c.line());
            if self.outcome == Outcome::Pass && c.undecided_reason().is_some() {
                l += " (accepted: --baseline-undecided pass)";
            }
        }
        if !ids.not_applicable.is_empty() && self.outcome != Outcome::NothingCompared {
            l += &format!(
                "; {} point(s) n/a for their engine (skipped)",
                ids.not_applicable.len()
            );
        }
        if !ids.over_budget.is_empty() {
            l += &format!(
                "; {} run(s) exceeded their budget through the page cache; their speed is not comparable",
                ids.over_budget.len()
            );
        }
        if self.outcome != Outcome::Incomplete {
            l += &self.auto_line(self.auto.as_ref());
        }
        if self.noisy_runs > 0 {
            l += &format!(
                "; NOISY: {} of {} measured runs marked noisy (left out of the statistics)",
                self.noisy_runs, self.measured_runs
            );
        }
        l
    }
}

/// The reference engine's points (all points of a memdial-only sweep): what the
/// budget recommendation is about.
/// A lossy layout's points are left out: the answer is for the exact output.
pub fn reference_stats(stats: &[PointStats], meta: &Meta) -> Vec<PointStats> {
    let exact = |p: &&PointStats| {
        crate::sweep::layout::LayoutKind::parse(&p.layout).is_none_or(|l| !l.is_lossy())
    };
    match meta.engines.iter().find(|e| e.reference) {
        None => stats.iter().filter(exact).cloned().collect(),
        Some(r) => stats
            .iter()
            .filter(exact)
            .filter(|p| crate::sweep::spec::engines::def::engine_or_default(&p.engine) == r.name)
            .cloned()
            .collect(),
    }
}

/// Each engine's speed against the reference engine's (empty for one engine).
pub fn engine_ratios(
    stats: &[PointStats],
    runs: &crate::sweep::analysis::stats::PointRuns,
    meta: &Meta,
) -> Vec<EngineRatio> {
    match meta.engines.iter().find(|e| e.reference) {
        Some(r) if meta.engines.len() > 1 => against_reference(stats, runs, &r.name),
        _ => vec![],
    }
}
