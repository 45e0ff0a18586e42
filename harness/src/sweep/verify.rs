//! `memdial report verify DIR`: re-checks a finished run directory offline — every
//! row against its run's own `metrics.json` and its ids against its hash
//! ([`proof`]), no run without a row, `results.json` / `results.csv` against
//! the digests `verdict.json` recorded, the verdict recomputed from the rows
//! against the one recorded, and the model's (and prompt files') identity against
//! the one recorded in `sweep.json`.

use std::path::Path;

use anyhow::{Context, Result};

use crate::sweep::analysis::stats::per_point;
use crate::sweep::analysis::sweep_verdict::SweepVerdict;
use crate::sweep::record::digests::ResultsDigests;
use crate::sweep::record::proof;
use crate::sweep::record::row;
use crate::sweep::record::rundir::Meta;

/// What `verify` checked and what it found.
#[derive(Debug, Default)]
pub struct Report {
    /// Rows checked.
    pub rows: usize,
    /// One phrase per problem (empty: the directory verifies).
    pub problems: Vec<String>,
    /// The verdict line recomputed from the rows.
    pub line: String,
    /// The recomputed outcome is a pass and so is the recorded one (the baseline
    /// gate, not re-run offline, counts through the recorded verdict).
    pub pass: bool,
}

/// Verifies the run directory `dir`; the model is `model` (compared by content:
/// another copy has its own modification times), else the directory recorded in
/// `sweep.json` (compared by content and modification times).
///
/// Errors: `dir` holds no readable `sweep.json` or `results.json` (not a run
/// directory). A model that cannot be read is a problem, not an error.
pub fn verify(dir: &Path, model: Option<&Path>) -> Result<Report> {
    let meta = Meta::load(dir)?;
    let rows = row::load(dir)?;
    let mut out = Report {
        rows: rows.len(),
        ..Default::default()
    };
    let found = proof::check(dir, &meta.expect(), &rows);
    out.problems.extend(found.problems());
    for r in proof::unrecorded_runs(dir, &rows) {
        out.problems.push(format!(
            "runs/{r} holds a metrics.json but results.json has no row for it"
        ));
    }
    let text = std::fs::read_to_string(dir.join("verdict.json"))
        .with_context(|| format!("cannot read {}/verdict.json", dir.display()))?;
    let recorded: serde_json::Value = serde_json::from_str(&text)
        .with_context(|| format!("{}/verdict.json is not JSON", dir.display()))?;
    let digests: ResultsDigests = recorded
        .get("results_sha256")
        .and_then(|v| serde_json::from_value(v.clone()).ok())
        .unwrap_or_default();
    let now = ResultsDigests::of(dir);
    if digests.results_json.is_empty() {
        out.problems
            .push("verdict.json records no results digests (written by an older memdial)".into());
    } else {
        for (name, want, got) in [
            ("results.json", &digests.results_json, &now.results_json),
            ("results.csv", &digests.results_csv, &now.results_csv),
        ] {
            if want != got {
                out.problems.push(format!(
                    "{name} is not the file verdict.json was computed from (sha256 {got}, recorded {want})"
                ));
            }
        }
    }
    // The verdict again, from the rows (the baseline gate is not re-run offline).
    let again = SweepVerdict::new(dir, &meta, &rows, &per_point(&rows)).settle(None, false);
    let said = recorded.get("pass").and_then(|v| v.as_bool());
    out.line = again.line.clone();
    out.pass = again.pass && said == Some(true);
    let gated = recorded.get("baseline").is_some_and(|b| !b.is_null());
    if said == Some(true) && !again.pass {
        out.problems.push(format!(
            "verdict.json says pass, but the rows say: {}",
            again.line
        ));
    } else if !gated && said.is_some() && said != Some(again.pass) {
        out.problems.push(format!(
            "verdict.json says pass = {}, but the rows say: {}",
            said.unwrap_or(false),
            again.line
        ));
    }
    let model_dir = model
        .map(Path::to_path_buf)
        .unwrap_or_else(|| meta.model_dir.clone().into());
    match (
        &meta.model_identity,
        memdial::tools::identity::Identity::of_path(&model_dir),
    ) {
        (None, _) => out
            .problems
            .push("sweep.json records no model identity: the model cannot be checked".into()),
        (Some(_), Err(e)) => out.problems.push(format!(
            "the model cannot be checked: {e:#} (give it with --model)"
        )),
        // Another copy (--model) has its own mtimes: compared by content.
        (Some(old), Ok(new)) => out.problems.extend(
            if model.is_some() {
                new.content_changes_since(old)
            } else {
                new.changes_since(old)
            }
            .into_iter()
            .map(|c| format!("model {}: {c}", model_dir.display())),
        ),
    }
    for (name, old) in &meta.prompt_identities {
        match memdial::tools::identity::Identity::of_path(Path::new(name)) {
            Err(e) => out
                .problems
                .push(format!("prompt file {name} cannot be checked: {e:#}")),
            Ok(new) => out.problems.extend(
                new.changes_since(old)
                    .into_iter()
                    .map(|c| format!("prompt {name}: {c}")),
            ),
        }
    }
    Ok(out)
}
