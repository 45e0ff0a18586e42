//! The run directory's metadata (`sweep.json`) and the human report (`report.md`,
//! `verdict.json`, charts), regenerated after every finished run so an
//! interrupted sweep always leaves a valid partial report.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Result;
use memdial::util::units::fmt_bytes;
use serde::Serialize;

use crate::sweep::analysis::anomaly::{anomalies, Anomaly};
use crate::sweep::analysis::layouts::{against_raw, against_safetensors, LayoutPair, LayoutRatio};
use crate::sweep::analysis::outcome::{Facts, Outcome};
use crate::sweep::analysis::recommend::{recommend_steady, Recommendation};
use crate::sweep::analysis::repeats::{self, PointRepeats};
use crate::sweep::analysis::stats::point_runs;
use crate::sweep::analysis::stats::{per_point, PointStats};
use crate::sweep::analysis::verdict::{short, verdict, Verdict};
use crate::sweep::engines::agreement::{cross, CrossEngine, Margins};
use crate::sweep::engines::ratio::{against_reference, EngineRatio};
use crate::sweep::record::baseline::{Baseline, Comparison};
use crate::sweep::record::row::Row;
use crate::sweep::record::rundir::Meta;
use crate::sweep::record::status::RunStatus;
use crate::sweep::util::utc_now_rfc3339;

mod concurrency;
mod noise;
mod predicted;
mod speculation;

fn opt<T>(v: Option<T>, f: impl Fn(T) -> String) -> String {
    v.map(f).unwrap_or_else(|| "–".into())
}

fn pct(v: Option<f64>) -> String {
    opt(v, |x| format!("{:.0}%", x * 100.0))
}

/// `5 %`, `2.5 %`: a fraction as a percentage without trailing zeros.
fn fmt_pct(f: f64) -> String {
    let t = format!("{:.2}", f * 100.0);
    let t = t.trim_end_matches('0').trim_end_matches('.');
    format!("{t} %")
}

fn bytes_f(v: Option<f64>) -> String {
    opt(v, |x| fmt_bytes(x.max(0.0).round() as u64))
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
    /// The lossless layout against safetensors at each point both ran (sweeps with
    /// both on the `layout` axis): s/token and bytes read per token, with intervals.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub layouts: Vec<LayoutRatio>,
    /// With the `raw` control on the `layout` axis: raw / safetensors (what the layout
    /// buys) and lossless / raw (what coding buys) at each point, with intervals.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub layout_pairs: Vec<LayoutPair>,
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

/// Digests of the results files.
#[derive(Debug, Clone, Default, Serialize, serde::Deserialize, PartialEq)]
pub struct ResultsDigests {
    /// SHA-256 of `results.json`.
    pub results_json: String,
    /// SHA-256 of `results.csv`.
    pub results_csv: String,
}

impl ResultsDigests {
    /// The digests of `dir`'s results files (empty strings for missing ones).
    pub fn of(dir: &Path) -> ResultsDigests {
        let h = |n: &str| {
            std::fs::read(dir.join(n))
                .map(|b| crate::sweep::util::sha256_hex(&b))
                .unwrap_or_default()
        };
        ResultsDigests {
            results_json: h("results.json"),
            results_csv: h("results.csv"),
        }
    }
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
            engine_ratios: (!meta.engines.is_empty()).then(|| engine_ratios(stats, &runs, meta)),
            layouts: against_safetensors(stats, &runs, rows),
            layout_pairs: against_raw(stats, &runs, rows),
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
        let facts = Facts {
            runs_compared: self.ids.runs_compared,
            checks_pass: self.ids.checks_pass() && engines_pass,
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

/// Writes results, `verdict.json`, `report.md` and the charts; returns the verdict
/// and the baseline comparison (when a baseline is given).
pub fn write_all(
    dir: &Path,
    meta: &Meta,
    rows: &[Row],
    baseline: Option<&Baseline>,
) -> Result<(SweepVerdict, Option<Comparison>)> {
    let stats = per_point(rows);
    // With a trace, the rows carry the predictions of their points.
    let filled;
    let rows = match &meta.predictions {
        Some(p) => {
            filled = p.fill(rows, &stats);
            &filled[..]
        }
        None => rows,
    };
    crate::sweep::record::row::save(dir, rows)?;
    let cmp = baseline.map(|b| {
        crate::sweep::record::baseline::compare(&b.path, &b.runs, &b.unreadable, rows, b.tolerance)
    });
    let v = SweepVerdict::new(dir, meta, rows, &stats)
        .settle(cmp.as_ref(), baseline.is_some_and(|b| b.undecided_passes));
    crate::export::write_json(&dir.join("verdict.json"), &v)?;
    let title = meta
        .spec_name
        .clone()
        .unwrap_or_else(|| "memdial sweep".into());
    let chart_err = crate::sweep::write::charts::write_charts(
        dir,
        &stats,
        Some(meta.model_bytes),
        &title,
        &v.anomalies,
        meta.opaque_model.is_some(),
    )
    .and_then(|_| match &meta.predictions {
        Some(p) => {
            crate::sweep::write::predicted_chart::write_predicted_chart(dir, &stats, p, &title)
        }
        None => Ok(()),
    })
    .and_then(|_| {
        crate::sweep::write::ttft_chart::write_ttft_chart(
            dir,
            &stats,
            rows,
            Some(meta.model_bytes),
            &title,
            meta.opaque_model.is_some(),
        )
    })
    .err();
    let md = markdown(meta, rows, &v, &stats, cmp.as_ref(), chart_err.as_ref());
    crate::export::write_text(&dir.join("report.md"), &md)?;
    Ok((v, cmp))
}

/// The reference engine's points (all points of a memdial-only sweep): what the
/// budget recommendation is about.
fn reference_stats(stats: &[PointStats], meta: &Meta) -> Vec<PointStats> {
    match meta.engines.iter().find(|e| e.reference) {
        None => stats.to_vec(),
        Some(r) => stats
            .iter()
            .filter(|p| crate::sweep::engines::def::engine_or_default(&p.engine) == r.name)
            .cloned()
            .collect(),
    }
}

/// Each engine's speed against the reference engine's (empty for one engine).
fn engine_ratios(
    stats: &[PointStats],
    runs: &crate::sweep::analysis::stats::PointRuns,
    meta: &Meta,
) -> Vec<EngineRatio> {
    match meta.engines.iter().find(|e| e.reference) {
        Some(r) if meta.engines.len() > 1 => against_reference(stats, runs, &r.name),
        _ => vec![],
    }
}

/// What every section of `report.md` renders from.
#[derive(Clone, Copy)]
struct Sections<'a> {
    meta: &'a Meta,
    rows: &'a [Row],
    v: &'a SweepVerdict,
    stats: &'a [PointStats],
    baseline: Option<&'a Comparison>,
    chart_err: Option<&'a anyhow::Error>,
}

/// The Markdown report: its sections in order, each written by its own function.
pub fn markdown(
    meta: &Meta,
    rows: &[Row],
    v: &SweepVerdict,
    stats: &[PointStats],
    baseline: Option<&Comparison>,
    chart_err: Option<&anyhow::Error>,
) -> String {
    let c = Sections {
        meta,
        rows,
        v,
        stats,
        baseline,
        chart_err,
    };
    let mut s = String::new();
    for section in [
        header_md,
        recommendation_md,
        verdict_md,
        engines_md,
        environment_md,
        noise_md,
        medians_md,
        baseline_md,
        same_budget_md,
        layouts_md,
        predicted_md,
        concurrency_md,
        speculation_md,
        charts_md,
    ] {
        section(&mut s, &c);
    }
    s
}

/// The parts of `report.md` a CI job summary shows: the recommendation, the verdict
/// and, with several engines, the agreement tables.
pub fn summary_markdown(
    meta: &Meta,
    rows: &[Row],
    v: &SweepVerdict,
    baseline: Option<&Comparison>,
) -> String {
    let stats = per_point(rows);
    let c = Sections {
        meta,
        rows,
        v,
        stats: &stats,
        baseline,
        chart_err: None,
    };
    let mut s = String::new();
    for section in [recommendation_md, verdict_md, engines_md, baseline_md] {
        section(&mut s, &c);
    }
    s
}

/// "Predicted vs measured" (a sweep given a trace).
fn predicted_md(s: &mut String, c: &Sections) {
    predicted::predicted_md(s, c.meta, c.rows, c.stats);
}

/// The title, the model and the time the report was updated; a partial report says how to complete it.
fn header_md(s: &mut String, c: &Sections) {
    let Sections { meta, rows, .. } = *c;
    // Every planned run leaves one row (below-floor points one `below_floor` row each).
    let done = rows.len();
    let planned_runs = meta.runs_planned;
    let _ = writeln!(
        s,
        "# memdial sweep: {}\n",
        crate::export::md_cell(meta.spec_name.as_deref().unwrap_or("unnamed"))
    );
    let _ = writeln!(
        s,
        "Model `{}` ({}), {} generated tokens per run. Started {}, updated {}{}.\n",
        meta.model_dir,
        fmt_bytes(meta.model_bytes),
        meta.max_tokens,
        meta.created_utc,
        utc_now_rfc3339(),
        match &meta.shard {
            Some(sh) => format!(", shard {sh}"),
            None if !meta.merged_from.is_empty() =>
                format!(", merged from {} directories", meta.merged_from.len()),
            None => String::new(),
        }
    );
    if let Some(o) = &meta.opaque_model {
        let _ = writeln!(s, "{}\n", o.markdown());
    }
    if !meta.missing_shards.is_empty() {
        let _ = writeln!(
            s,
            "> **Incomplete merge:** shard(s) {} of the split are missing; merge them in to complete it.\n",
            meta.missing_shards.join(", ")
        );
    }
    if done + c.v.ids.runs_not_needed < planned_runs {
        let _ = writeln!(
            s,
            "> **Partial report:** {done} of {planned_runs} runs finished. Re-run the same command with `--out` set to this directory to complete it.\n"
        );
    }
    if c.v.noisy_runs > 0 {
        let _ = writeln!(
            s,
            "> **Noisy machine:** {} of {} measured runs were marked noisy by the noise sentinel (other processes' CPU time, CPU steal or other reads on the model's disk over the thresholds; see Noise below). They are left out of the medians, intervals and the recommendation.\n",
            c.v.noisy_runs, c.v.measured_runs
        );
    }
}

/// The budget recommendation (computed once, in [`SweepVerdict`]).
fn recommendation_md(s: &mut String, c: &Sections) {
    let Sections { v, .. } = *c;
    *s += &v
        .recommendation
        .markdown(&|spec, bytes| crate::sweep::spec::budget_label(spec, bytes));
}

/// The verdict: its line, the differing points, each group and every run that failed or was skipped.
fn verdict_md(s: &mut String, c: &Sections) {
    let Sections { v, .. } = *c;
    let _ = writeln!(s, "## Verdict\n\n**{}**\n", v.line);
    let diff = v.ids.differing_points();
    if !diff.is_empty() {
        let _ = writeln!(
            s,
            "Differing points: {}\n",
            diff.iter()
                .map(|(i, k)| format!("p{i} `{k}`"))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    for g in &v.ids.groups {
        let _ = writeln!(
            s,
            "- {}prompt {} × {} tokens: {} runs, reference `{}` (run `{}`), {} differing",
            if g.engine.is_empty() {
                String::new()
            } else {
                format!("{}: ", g.engine)
            },
            g.prompt_index,
            g.max_tokens,
            g.runs,
            g.hash,
            g.reference_run,
            g.mismatches.len()
        );
        for m in &g.mismatches {
            let _ = writeln!(
                s,
                "  - `{}`: `{}`, first difference at token {}: expected {}, got {}",
                m.run_id,
                short(&m.hash),
                opt(m.first_diff_position, |p| p.to_string()),
                opt(m.expected_id, |p| p.to_string()),
                opt(m.got_id, |p| p.to_string())
            );
        }
    }
    for (id, st, e) in &v.ids.failed {
        let _ = writeln!(s, "- failed `{id}` ({st}): {e}");
    }
    for (id, why) in &v.ids.unproven {
        let _ = writeln!(s, "- failed `{id}` (ok, not compared): {why}");
    }
    for k in &v.ids.below_floor {
        let _ = writeln!(s, "- skipped (budget below the floor): `{k}`");
    }
    for (k, why) in &v.ids.not_applicable {
        let _ = writeln!(s, "- n/a (skipped): `{k}`: {why}");
    }
    s.push('\n');
}

/// The cross-engine verdict, the engines table and their speed against the reference.
fn engines_md(s: &mut String, c: &Sections) {
    let Sections { meta, rows, v, .. } = *c;
    if let Some(c) = &v.engines {
        *s += &c.markdown();
        let _ = writeln!(
            s,
            "| engine | adapter | version | budget held by | must match |\n|---|---|---|---|---|"
        );
        for e in &meta.engines {
            let _ = writeln!(
                s,
                "| {}{} | {} | {} | {} | {} |",
                crate::export::md_cell(&e.name),
                if e.reference { " (reference)" } else { "" },
                e.adapter,
                rows.iter()
                    .find(|r| r.engine == e.name && r.engine_version.is_some())
                    .and_then(|r| r.engine_version.clone())
                    .unwrap_or_else(|| e.version.clone()),
                e.budget,
                if e.must_match { "yes" } else { "no" }
            );
        }
        s.push('\n');
        if let Some(r) = meta.engines.iter().find(|e| e.reference) {
            *s += &crate::sweep::engines::ratio::markdown(
                v.engine_ratios.as_deref().unwrap_or_default(),
                &r.name,
            );
        }
    }
}

/// The machine, its storage and how the runs were held to their budgets.
fn environment_md(s: &mut String, c: &Sections) {
    let Sections { meta, rows, .. } = *c;
    let h = &meta.host;
    let _ = writeln!(s, "## Environment\n");
    let _ = writeln!(s, "| | |\n|---|---|");
    let _ = writeln!(
        s,
        "| CPU | {} ({} logical CPUs) |",
        h.cpu_model, h.cpu_cores
    );
    let _ = writeln!(s, "| RAM | {} |", fmt_bytes(h.ram_bytes));
    let _ = writeln!(s, "| Kernel | {} |", h.kernel);
    let _ = writeln!(s, "| Host | {} |", h.host_name);
    let _ = writeln!(
        s,
        "| Model storage | {} on {} (mounted at {}) |",
        h.model_fs, h.model_device, h.model_mount
    );
    let _ = writeln!(
        s,
        "| Cold read, O_DIRECT | {} |",
        opt(h.direct_cold_gbps, |g| format!(
            "{g:.2} GB/s (sequential, 4 MiB requests, QD 1, {})",
            fmt_bytes(h.bandwidth_probe_bytes)
        ))
    );
    let _ = writeln!(
        s,
        "| Cold read, buffered | {} |",
        opt(h.buffered_cold_gbps, |g| format!(
            "{g:.2} GB/s (sequential, 4 MiB reads, kernel read-ahead)"
        ))
    );
    if let Some(n) = &h.bandwidth_note {
        let _ = writeln!(s, "| Bandwidth note | {n} |");
    }
    let cold = rows
        .iter()
        .filter(|r| r.status == RunStatus::Ok && r.cold_verified)
        .count();
    let ok = rows.iter().filter(|r| r.status == RunStatus::Ok).count();
    let _ = writeln!(s, "| Cold cache | {cold} of {ok} finished runs started with 0 bytes of the model resident (mincore) |");
    let _ = writeln!(s, "| Memory cgroup | {} |", meta.cgroup);
    if h.free_page_reporting {
        let _ = writeln!(
            s,
            "| Free page reporting | on (virtio balloon): memory a run frees goes back to the host, and the next run's first use of it waits for the host; runs that fill many fresh buffers (direct IO at large budgets) can be bimodal (docs/io.md §2) |"
        );
    }
    let _ = writeln!(s, "| memdial | {} |", meta.memdial_version);
    let _ = writeln!(s, "| Command | `{}` |\n", meta.command);
}

/// The noise sentinel's thresholds and the noisy runs with their reasons (summarised
/// when there are many: [`noise`]).
fn noise_md(s: &mut String, c: &Sections) {
    let Sections { meta, rows, v, .. } = *c;
    let t = meta.noise.unwrap_or_default();
    let _ = writeln!(
        s,
        "## Noise\n\nAround every run the harness measured what the rest of the machine did (docs/steady-state.md): other processes' CPU time, CPU steal, \
         pressure stalls and reads on the model's disk not made by the run (columns `noise_*` of results.csv); memdial runs also measure how long their \
         compute threads waited for a CPU (`run_queue_wait_fraction`). A run is noisy above {} cores (and {} s) of other CPU use, a {:.0} % wait for a CPU, \
         {} cores of steal{} or {} of foreign reads (`[noise]` in the spec). {} of {} measured runs were noisy.\n",
        t.other_cpu_cores,
        t.other_cpu_min_s,
        t.run_queue_wait_fraction * 100.0,
        t.steal_cores,
        t.psi_cpu_some_fraction
            .map(|f| format!(", {:.0} % CPU pressure", f * 100.0))
            .unwrap_or_default(),
        fmt_bytes(t.foreign_read_bytes),
        v.noisy_runs,
        v.measured_runs
    );
    noise::noisy_runs_md(s, rows);
    if v.noisy_runs > 0 {
        s.push('\n');
    }
}

/// The medians per point with their intervals, and the footnotes their marks need.
fn medians_md(s: &mut String, c: &Sections) {
    let Sections { meta, stats, v, .. } = *c;
    let starts = stats.iter().any(|p| p.start == "warm");
    let layouts = stats.iter().any(|p| p.layout != stats[0].layout);
    let _ = writeln!(s, "## Medians per point\n");
    let _ = writeln!(
        s,
        "s/token is the median over repeats of each run's median decode time, with its 95 % interval in brackets \
         (two-level bootstrap over runs and the decode times within each run; see docs/statistics.md, \"Noise and signal\"). \
         tok/s is 1 / s/token (the same figure). Read/token is bytes read from the model files per decoded token; IO wait is the share of generation time (prefill + decode) the compute thread spent waiting for reads.\n"
    );
    floors_md(s, c.rows);
    let _ = writeln!(
        s,
        "| point | budget | io | prefetch | cache | threads | runs | s/token [95% CI] | tok/s | TTFT s | read/token | IO wait | trunk hit | expert hit | peak RSS | peak anon | accounted |"
    );
    let _ = writeln!(
        s,
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    );
    for p in stats {
        let budget = crate::sweep::spec::budget_label(&p.budget_spec, p.budget_bytes);
        // Several engines: the engine is named with the point.
        let budget = if meta.engines.is_empty() {
            budget
        } else {
            format!(
                "{budget} · {}",
                crate::export::md_cell(crate::sweep::engines::def::engine_or_default(&p.engine))
            )
        };
        // Warm and cold points: the start is named with the point.
        let budget = if starts {
            format!("{budget} · {}", p.start)
        } else {
            budget
        };
        // Both layouts: the layout is named with the point.
        let budget = if layouts {
            format!("{budget} · {}", p.layout)
        } else {
            budget
        };
        let anomaly = v
            .anomalies
            .iter()
            .find(|a| a.point_index == p.point_index)
            .map(|a| format!(" slower than p{}§", a.faster_point))
            .unwrap_or_default();
        let auto = auto_cell(v, p.point_index);
        if let Some(why) = &p.not_applicable {
            let _ = writeln!(
                s,
                "| p{} | {budget} | {} | {} | {} | {} | n/a: {} | | | | | | | | | | |",
                p.point_index,
                p.io,
                p.prefetch,
                p.cache,
                p.threads,
                crate::export::md_cell(why)
            );
            continue;
        }
        if p.below_floor {
            let _ = writeln!(
                s,
                "| p{} | {budget} | {} | {} | {} | {} | below floor ({}) | | | | | | | | | | |",
                p.point_index,
                p.io,
                p.prefetch,
                p.cache,
                p.threads,
                fmt_bytes(p.floor_bytes)
            );
            continue;
        }
        let _ = writeln!(
            s,
            "| p{} | {budget} | {} | {} | {} | {} | {}{auto}{}{}{}{} | {}{anomaly} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            p.point_index,
            p.io,
            p.prefetch,
            p.cache,
            p.threads,
            p.n,
            if p.failed > 0 { format!(" ({} failed)", p.failed) } else { String::new() },
            if p.noisy_only { " (all noisy: shown, used for no decision)".to_string() } else if p.noisy > 0 { format!(" (+{} noisy, left out)", p.noisy) } else { String::new() },
            if p.over_budget > 0 { format!(" ({} over budget†)", p.over_budget) } else if p.unenforced > 0 { "*".into() } else { String::new() },
            if p.cold_verified { "" } else { " (not cold)" },
            match (p.s_per_token, p.s_per_token_lo, p.s_per_token_hi) {
                (Some(m), Some(a), Some(b)) => format!(
                    "{m:.4} [{a:.4}–{b:.4}]{}",
                    if p.high_variance { " high variance‡" } else { "" }
                ),
                (Some(m), _, _) => format!("{m:.4} (insufficient repeats)"),
                _ => "–".into(),
            },
            opt(p.tokens_per_s, |x| format!("{x:.2}")),
            opt(p.ttft_s, |x| format!("{x:.3}")),
            bytes_f(p.bytes_read_per_token),
            pct(p.io_wait_fraction),
            pct(p.trunk_hit_rate),
            pct(p.expert_hit_rate),
            bytes_f(p.peak_rss_bytes),
            bytes_f(p.peak_rss_anon_bytes),
            bytes_f(p.peak_accounted_bytes),
        );
    }
    medians_footnotes(s, c);
}

/// ` of 10 (±3.1 %, precision reached)` / ` of 10 (±7.2 %, max_repeats reached)`
/// under `repeats = "auto"` (empty otherwise): how many runs the point could take,
/// its interval's half-width and why it stopped.
fn auto_cell(v: &SweepVerdict, point_index: usize) -> String {
    let (Some(a), Some(reps)) = (&v.auto, &v.repeats_auto) else {
        return String::new();
    };
    let Some(r) = reps.iter().find(|r| r.point_index == point_index) else {
        return String::new();
    };
    let hw = match r.half_width {
        Some(h) if r.quiet > 0 => format!("±{}", fmt_pct(h)),
        _ if r.quiet == 0 => "no quiet run".into(),
        _ => "no interval yet".into(),
    };
    let why = if r.reached {
        "precision reached"
    } else if r.runs as u32 >= a.max_repeats {
        "max_repeats reached"
    } else {
        "measuring"
    };
    format!(" of {} ({hw}, {why})", a.max_repeats)
}

/// The planned floors and the settings each is for (`memdial plan` prints the same
/// floor for the same settings), one per distinct pair, in point order.
fn floors_md(s: &mut String, rows: &[Row]) {
    let mut seen: Vec<(u64, &str)> = vec![];
    let mut by_point: Vec<&Row> = rows.iter().collect();
    by_point.sort_by_key(|r| r.point_index);
    for r in by_point {
        if let Some(f) = r.planned_floor_for.as_deref() {
            if !seen.contains(&(r.planned_floor_bytes, f)) {
                seen.push((r.planned_floor_bytes, f));
            }
        }
    }
    if seen.is_empty() {
        return;
    }
    let list: Vec<String> = seen
        .iter()
        .map(|(b, f)| format!("{} for {f}", fmt_bytes(*b)))
        .collect();
    let _ = writeln!(
        s,
        "Floors planned (the smallest budget a point's settings run in; `memdial plan --io … --prefetch … --threads … --max-context …` with the same settings prints the same floor): {}.\n",
        list.join("; ")
    );
}

/// The footnotes the marks of the medians table need.
fn medians_footnotes(s: &mut String, c: &Sections) {
    let Sections { stats, v, .. } = *c;
    if stats.iter().any(|p| p.high_variance) {
        let _ = writeln!(
            s,
            "\n‡ high variance: the 95 % interval is wider than ±10 % of the median. More repeats (`repeats` in the spec) or a quieter machine (no other load on the CPUs or the disk) narrow it."
        );
    }
    if !v.anomalies.is_empty() {
        let _ = writeln!(
            s,
            "\n§ slower than a smaller budget of the same IO mode, prefetch, cache, threads, prompt, start and layout, with the cause the point's own figures support:"
        );
        for a in &v.anomalies {
            let q = stats.iter().find(|q| q.point_index == a.faster_point);
            let label = q
                .map(|q| crate::sweep::spec::budget_label(&q.budget_spec, q.budget_bytes))
                .unwrap_or_else(|| a.faster_budget_spec.clone());
            let _ = writeln!(s, "- {}", a.describe(&label));
        }
    }
    if stats.iter().any(|p| p.unenforced > 0) {
        let _ = writeln!(
            s,
            "\n\\* not held to its budget by a memory cgroup (see `cgroup_reason` in results.csv); its memory was sampled (anon + model page cache) instead."
        );
    }
    if stats.iter().any(|p| p.over_budget > 0) {
        let _ = writeln!(
            s,
            "\n† over budget: the run's anonymous memory plus the model's page-cache residency (sampled every 100 ms) exceeded budget + `cgroup_slack`; it borrowed memory the budget does not count, so its speed is not comparable with runs held to their budget."
        );
    }
    s.push('\n');
}

/// The comparison with the baseline, when one was given.
fn baseline_md(s: &mut String, c: &Sections) {
    let Sections { baseline, .. } = *c;
    if let Some(b) = baseline {
        let _ = writeln!(
            s,
            "## Baseline\n\nAgainst `{}`, tolerance {:.0}%: {} points compared, {} regressed, {} without a baseline.\n",
            b.path.display(),
            b.tolerance * 100.0,
            b.compared.len(),
            b.regressions().len(),
            b.missing.len()
        );
        if let Some(why) = b.undecided_reason() {
            let _ = writeln!(s, "**The gate cannot decide:** {why}.\n");
            for (k, why) in &b.undecided {
                let _ = writeln!(s, "- undecided `{k}`: {why}");
            }
            if !b.undecided.is_empty() {
                s.push('\n');
            }
        }
        if !b.compared.is_empty() {
            let _ = writeln!(
                s,
                "| point | baseline s/token | now s/token | change | now / baseline [95% CI] | |\n|---|---|---|---|---|---|"
            );
            for c in &b.compared {
                let _ = writeln!(
                    s,
                    "| p{} `{}` | {:.4} | {:.4} | {:+.1}% | {} | {} |",
                    c.point_index,
                    c.point_key,
                    c.old_s_per_token,
                    c.new_s_per_token,
                    c.change * 100.0,
                    c.ratio.describe(),
                    if c.regressed {
                        "**regressed**"
                    } else if c.change > b.tolerance {
                        "slower, not significant"
                    } else {
                        "ok"
                    }
                );
            }
            s.push('\n');
        }
    }
}

/// IO modes and prefetch policies compared at the same budget.
fn same_budget_md(s: &mut String, c: &Sections) {
    let Sections { rows, stats, .. } = *c;
    let runs = crate::sweep::analysis::stats::point_runs(rows);
    let cmps = crate::sweep::analysis::compare::same_budget(stats, &runs);
    if !cmps.is_empty() {
        let _ = writeln!(
            s,
            "## Same-budget comparisons\n\nAt each budget, each IO mode against `direct` (same prefetch policy) and each prefetch policy against `none` (same IO mode): \
             the ratio of s/token with its 95 % interval; significant when the interval excludes 1 (same bootstrap as the intervals above). \
             Points with over-budget runs are left out.\n"
        );
        let _ = writeln!(
            s,
            "| budget | compared | s/token ratio [95% CI] | verdict |\n|---|---|---|---|"
        );
        for c in &cmps {
            let _ = writeln!(
                s,
                "| {} | p{} {} / p{} {} ({} {}) | {} | {} |",
                c.budget_spec,
                c.a_point,
                c.a,
                c.b_point,
                c.b,
                if c.axis == "io" { "prefetch" } else { "io" },
                c.fixed,
                c.ratio.describe(),
                c.verdict()
            );
        }
        s.push('\n');
    }
}

/// The lossless layout against safetensors (sweeps with both layouts).
fn layouts_md(s: &mut String, c: &Sections) {
    s.push_str(&crate::sweep::analysis::layouts::markdown(&c.v.layouts));
    s.push_str(&crate::sweep::analysis::layouts::raw_markdown(
        &c.v.layout_pairs,
    ));
    let lossless = c.stats.iter().any(|p| p.layout == "lossless" && p.n > 0);
    if c.v.layouts.is_empty() && lossless {
        s.push_str(
            "## Layouts: lossless against safetensors\n\nNo comparison yet: no `lossless` point has a \
             `safetensors` point at the same axes with quiet measured runs and no over-budget run \
             (noisy runs decide nothing: see Noise).\n\n",
        );
    }
}

/// Served runs against ordinary ones (sweeps with the `concurrency` axis).
fn concurrency_md(s: &mut String, c: &Sections) {
    s.push_str(&concurrency::markdown(c.rows));
}

fn speculation_md(s: &mut String, c: &Sections) {
    s.push_str(&speculation::markdown(c.rows));
}

/// The charts and how to read them, and the files of the directory.
fn charts_md(s: &mut String, c: &Sections) {
    let Sections {
        rows,
        stats,
        chart_err,
        ..
    } = *c;
    let _ = writeln!(s, "## Charts\n");
    if let Some(e) = chart_err {
        let _ = writeln!(s, "Charts could not be drawn: {e:#}\n");
    }
    let _ = writeln!(
        s,
        "![decode time vs budget](curve.svg)\n\n\
         How to read it: one panel per IO mode (same axes), one line per prefetch policy (colour and marker shape); a marker is the median s/token of a point, \
         the whisker its 95 % interval (min–max over repeats when there are too few for one); a hollow marker was not held to its budget by a memory cgroup. \
         Lines measured at the same budget are shifted right by up to 5 % so they do not hide each other (never past the model size). Both axes are logarithmic. The dashed vertical line in a line's colour is \
         its floor (the smallest budget that runs); the black line is the model size. Moving right trades memory for \
         speed; a flat stretch means extra memory buys nothing, a steep one means the budget is the bottleneck.\n"
    );
    let _ = writeln!(
        s,
        "![bytes read and IO wait vs budget](io.svg)\n\n\
         Top: bytes read from disk per decoded token (falls as more of the model stays resident). \
         Bottom: share of generation time (prefill + decode) spent waiting for IO (what prefetch tries to hide).\n"
    );
    if c.meta.predictions.is_some() {
        let _ = writeln!(
            s,
            "![predicted vs measured decode time](predicted.svg)\n\n\
             The spec's trace replayed at every point: one panel per start, one colour per IO mode and prefetch policy; \
             the dashed line is the predicted s/token, a marker the measured median with its 95 % interval (section \
             \"Predicted vs measured\").\n"
        );
    }
    let long = !super::ttft_chart::long_prompt_points(stats, rows).is_empty();
    if long {
        let _ = writeln!(
            s,
            "![time to first token vs budget](ttft.svg)\n\n\
             Time to first token (prefill of the prompt, then the first token chosen) of the points whose prompt has at least {} tokens, \
             against the budget: one line per IO mode and prefetch policy, the median of the repeats, same markers, floors and model-size line as the decode curve. \
             Within a prefill chunk each routed expert is read once, so below the model size this is dominated by the distinct experts each chunk needs.\n",
            super::ttft_chart::LONG_PROMPT_TOKENS
        );
    }
    let _ = writeln!(
        s,
        "Files: `results.csv` / `results.json` (one row per run, schema in docs/results.md), `verdict.json`, \
         `curve.svg`/`curve.png`, `io.svg`/`io.png`{}{}, `runs/<point>-<repeat>/` (metrics.json, stdout, stderr of each run).",
        if long { ", `ttft.svg`/`ttft.png`" } else { "" },
        if c.meta.predictions.is_some() { ", `predicted.svg`/`predicted.png`" } else { "" }
    );
}
