//! What a CI system reads from a finished sweep or merge: a JUnit report
//! (`--junit FILE`) and, when `GITHUB_ACTIONS=true`, the job summary and annotations.
//!
//! JUnit: one `<testsuite>` named after the spec; one `<testcase>` per point and
//! engine (class name `SPEC.ENGINE`, case name `pN POINT_KEY`), plus one case
//! `verdict` that fails whenever the sweep's own verdict line is not a pass (an
//! incomplete sweep, a missing shard, nothing compared, a failed cross-engine
//! check), so a report that lists only passing points can never read as a pass.
//! A point's case fails on an output mismatch (message: the first differing position
//! and both ids), a failed run (its status and error), a finished run whose metrics
//! do not prove its output or a significant regression
//! against the baseline; a point every run of which is `n/a` or below the floor is
//! skipped with the reason; `time` is the sum of its runs' wall times.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Result;

use super::gha::{self, Level};
use super::junit::{self, Case, Outcome, Suite};
use super::report::SweepVerdict;
use crate::sweep::record::baseline::Comparison;
use crate::sweep::record::row::Row;
use crate::sweep::record::rundir::Meta;
use crate::sweep::record::status::RunStatus;
use crate::sweep::spec::engines::def::engine_or_default;

/// A finished sweep or merge as the CI outputs see it.
pub struct Finished<'a> {
    pub meta: &'a Meta,
    pub rows: &'a [Row],
    pub v: &'a SweepVerdict,
    pub baseline: Option<&'a Comparison>,
    /// The line printed on stdout (the verdict with the baseline and shard notes).
    pub line: &'a str,
    /// The exit code is 0.
    pub pass: bool,
}

/// Refuses, before any run, a `--junit` path that cannot be written: a directory, or
/// a file in a directory that does not exist (a usage error, exit 2).
pub fn check_junit_path(p: Option<&Path>) -> Result<()> {
    match p {
        Some(p) => crate::export::check_output_path("--junit", p),
        None => Ok(()),
    }
}

/// The CI outputs of a finished sweep or merge: the JUnit report when `junit` is
/// given, and the GitHub Actions summary and annotations when running there.
///
/// Errors: either cannot be written (naming the file).
pub fn outputs(junit: Option<&Path>, f: &Finished) -> Result<()> {
    if let Some(p) = junit {
        write_junit(p, f)?;
    }
    github(
        f,
        &super::report::summary_markdown(f.meta, f.rows, f.v, f.baseline),
    )
}

/// Writes the JUnit report of `f` to `path` (atomically).
///
/// Errors: `path` cannot be written (naming it).
pub fn write_junit(path: &Path, f: &Finished) -> Result<()> {
    crate::export::write_text(path, &junit::render(&[suite(f)]))
}

/// The JUnit suite of `f` (see the module docs).
pub fn suite(f: &Finished) -> Suite {
    let spec = f
        .meta
        .spec_name
        .clone()
        .unwrap_or_else(|| "memdial sweep".into());
    let mut points: BTreeMap<(usize, String), Vec<&Row>> = BTreeMap::new();
    for r in f.rows.iter().filter(|r| !r.warmup) {
        points
            .entry((r.point_index, engine_or_default(&r.engine).to_string()))
            .or_default()
            .push(r);
    }
    let mut cases = vec![Case {
        classname: spec.clone(),
        name: "verdict".into(),
        time_s: 0.0,
        outcome: if f.pass {
            Outcome::Passed
        } else {
            Outcome::Failed {
                kind: "verdict".into(),
                message: f.line.to_string(),
                detail: f.line.to_string(),
            }
        },
    }];
    for ((index, engine), rows) in points {
        cases.push(Case {
            classname: format!("{spec}.{engine}"),
            name: format!("p{index} {}", rows[0].point_key),
            time_s: rows.iter().filter_map(|r| r.wall_s).sum(),
            outcome: point_outcome(f, index, &engine, &rows),
        });
    }
    Suite {
        name: spec,
        timestamp: f.meta.created_utc.clone(),
        hostname: f.rows.first().map(|r| r.host_name.clone()),
        properties: vec![
            ("spec_sha256".into(), f.meta.spec_sha256.clone()),
            ("model".into(), f.meta.model_dir.clone()),
            ("verdict".into(), f.line.to_string()),
        ],
        cases,
    }
}

/// The outcome of one point of one engine.
fn point_outcome(f: &Finished, index: usize, engine: &str, rows: &[&Row]) -> Outcome {
    if let Some(r) = rows.iter().find(|r| {
        matches!(
            r.status,
            RunStatus::Failed | RunStatus::Refused | RunStatus::Timeout
        )
    }) {
        return Outcome::Failed {
            kind: r.status.as_str().into(),
            message: format!("run {} {}", r.run_id, r.status.as_str()),
            detail: r.error.clone().unwrap_or_default(),
        };
    }
    if let Some((id, why)) =
        f.v.ids
            .unproven
            .iter()
            .find(|(id, _)| rows.iter().any(|r| r.run_id == *id))
    {
        return Outcome::Failed {
            kind: "unproven".into(),
            message: format!("run {id} does not prove its output"),
            detail: why.clone(),
        };
    }
    let mismatch =
        f.v.ids
            .groups
            .iter()
            .filter(|g| engine_or_default(&g.engine) == engine)
            .flat_map(|g| &g.mismatches)
            .find(|m| m.point_index == index);
    if let Some(m) = mismatch {
        let at = match m.first_diff_position {
            Some(p) => format!(
                "at token {p} (expected {}, got {})",
                opt(m.expected_id),
                opt(m.got_id)
            ),
            None => "in its hash only (the ids agree)".into(),
        };
        return Outcome::Failed {
            kind: "mismatch".into(),
            message: format!("output ids differ from the reference {at}"),
            detail: format!("run {} hash {}", m.run_id, m.hash),
        };
    }
    if let Some(c) = f
        .baseline
        .and_then(|b| b.regressions().into_iter().find(|c| c.point_index == index))
    {
        return Outcome::Failed {
            kind: "regression".into(),
            message: format!(
                "{:+.0} % s/token against the baseline ({:.4} → {:.4})",
                c.change * 100.0,
                c.old_s_per_token,
                c.new_s_per_token
            ),
            detail: String::new(),
        };
    }
    if rows.iter().all(|r| !matches!(r.status, RunStatus::Ok)) {
        let reason = rows
            .iter()
            .map(|r| match r.status {
                RunStatus::BelowFloor => "below the floor".to_string(),
                RunStatus::NotApplicable => {
                    format!("n/a: {}", r.error.clone().unwrap_or_default())
                }
                s => s.as_str().to_string(),
            })
            .next()
            .unwrap_or_default();
        return Outcome::Skipped { reason };
    }
    Outcome::Passed
}

fn opt(v: Option<u32>) -> String {
    v.map_or("nothing".into(), |x| x.to_string())
}

/// Under GitHub Actions: appends the verdict, the recommendation and the agreement
/// tables to the job summary and prints (on stderr, so `--check` keeps its one stdout
/// line; the runner reads workflow commands from both streams) one error annotation
/// per failed case and a warning when runs went over budget unenforced. Does nothing
/// elsewhere.
///
/// Errors: the summary file cannot be written.
pub fn github(f: &Finished, summary_md: &str) -> Result<()> {
    if !gha::enabled() {
        return Ok(());
    }
    let title = f.meta.spec_name.as_deref().unwrap_or("memdial sweep");
    let md = format!(
        "## memdial sweep `{}`\n\n**{}**\n\n{summary_md}",
        title.replace('`', "'"),
        f.line
    );
    gha::append_summary(&md)?;
    for c in suite(f).cases {
        if let Outcome::Failed { kind, message, .. } = &c.outcome {
            let what = match kind.as_str() {
                "mismatch" => "Output mismatch",
                "regression" => "Regression",
                "verdict" => "Sweep verdict",
                _ => "Failed run",
            };
            eprintln!(
                "{}",
                gha::annotation(Level::Error, &format!("{what}: {}", c.name), message)
            );
        }
    }
    if !f.v.ids.over_budget.is_empty() {
        eprintln!(
            "{}",
            gha::annotation(
                Level::Warning,
                "Over budget",
                &format!(
                    "{} run(s) exceeded their budget through the page cache (unenforced): their speed is not comparable",
                    f.v.ids.over_budget.len()
                )
            )
        );
    }
    Ok(())
}
