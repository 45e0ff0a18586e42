//! Rows checked against what each run left: `results.json` is a summary, each run's
//! own `runs/<dir>/metrics.json` is the record. Resume, `report merge` and `report
//! verify` believe a row only when it agrees with its run.
//!
//! A row is
//! - **duplicate** when another row has its run id;
//! - **foreign** when it cannot belong to this directory: its run id is not made of
//!   its own point key and repeat (`KEY#r0`, `KEY#w0`, `KEY#skip` for a point below
//!   the floor, `KEY#na` for one its engine cannot run), its point key is not made of
//!   its axes, its point is outside the spec or the directory's shard, or its
//!   `max_tokens` is not the sweep's;
//! - **disagreeing** when it is `ok` but its run left no `metrics.json`, or the
//!   metrics read from that file differ from the row's, or the row does not prove its
//!   output ([`Row::prove`]), or (a served run of the `concurrency` axis) its requests'
//!   ids differ from its `requests.json`.

use std::collections::BTreeSet;
use std::path::Path;

use super::row::Row;
use super::status::RunStatus;
use crate::sweep::spec::Shard;

/// What a run directory's rows must fit (from its `sweep.json`).
#[derive(Debug, Clone, Copy)]
pub struct Expect {
    /// Points in the whole spec (0: unknown).
    pub points_total: usize,
    /// The directory's shard (`None`: the whole sweep).
    pub shard: Option<Shard>,
    /// Generated tokens per run.
    pub max_tokens: usize,
}

/// Directory of a run under `runs/`: `p003-r1` (`p003-w0` for a warm-up).
pub fn run_dir_name(r: &Row) -> String {
    format!(
        "p{:03}-{}{}",
        r.point_index,
        if r.warmup { "w" } else { "r" },
        r.repeat
    )
}

/// What [`check`] found, each entry `(run id, why)`.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct RowCheck {
    /// Rows whose run id occurs more than once.
    pub duplicate: Vec<String>,
    /// Rows that cannot belong to this directory.
    pub foreign: Vec<(String, String)>,
    /// `ok` rows that disagree with their run's `metrics.json`.
    pub disagreeing: Vec<(String, String)>,
}

impl RowCheck {
    /// One phrase per problem: `duplicate row KEY#r0`, `foreign row …: why`,
    /// `row … disagrees with runs/p000-r0/metrics.json: why`.
    pub fn problems(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .duplicate
            .iter()
            .map(|id| format!("duplicate row {id}"))
            .collect();
        v.extend(
            self.foreign
                .iter()
                .map(|(id, why)| format!("foreign row {id}: {why}")),
        );
        v.extend(
            self.disagreeing
                .iter()
                .map(|(id, why)| format!("row {id} disagrees with its run: {why}")),
        );
        v
    }
}

/// Why `r` cannot belong to the directory described by `meta` (`None`: it can).
fn foreign(r: &Row, meta: &Expect) -> Option<String> {
    let axes = format!(
        "budget={};io={};prefetch={};cache={};threads={};prompt={}",
        r.budget_spec,
        r.io.as_str(),
        r.prefetch.as_str(),
        r.cache.as_str(),
        r.threads,
        r.prompt_index
    );
    // Then `;engine=…` and the spec's own axes, when they are in the key.
    let rest = r.point_key.strip_prefix(&axes);
    if !rest.is_some_and(|t| t.is_empty() || t.starts_with(';')) {
        return Some(format!("its point key is not made of its axes ({axes})"));
    }
    let suffix = match r.status {
        RunStatus::BelowFloor => "skip".to_string(),
        RunStatus::NotApplicable => "na".to_string(),
        _ => format!("{}{}", if r.warmup { "w" } else { "r" }, r.repeat),
    };
    if r.run_id != format!("{}#{suffix}", r.point_key) {
        return Some(format!(
            "a {} row's run id must be {}#{suffix}",
            r.status, r.point_key
        ));
    }
    if meta.points_total > 0 && r.point_index >= meta.points_total {
        return Some(format!(
            "point {} is outside the spec's {} points",
            r.point_index, meta.points_total
        ));
    }
    if let Some(s) = meta.shard.filter(|s| !s.contains(r.point_index)) {
        return Some(format!("point {} is not in shard {s}", r.point_index));
    }
    if r.max_tokens != meta.max_tokens {
        return Some(format!(
            "max_tokens {} is not the sweep's {}",
            r.max_tokens, meta.max_tokens
        ));
    }
    None
}

/// Why the `ok` row `r` disagrees with `dir/runs/<run>/metrics.json` (`None`: it
/// agrees).
fn disagrees(dir: &Path, r: &Row) -> Option<String> {
    let rel = format!("runs/{}/metrics.json", run_dir_name(r));
    let text = match std::fs::read_to_string(dir.join(&rel)) {
        Ok(t) => t,
        Err(e) => return Some(format!("{rel}: {e}")),
    };
    let v: serde_json::Value = match serde_json::from_str(&text) {
        Ok(v) => v,
        Err(e) => return Some(format!("{rel} does not parse: {e}")),
    };
    let mut run = Row {
        max_tokens: r.max_tokens,
        ..Default::default()
    };
    if let Err(e) = run.fill_metrics(&v) {
        return Some(format!("{rel}: {e:#}"));
    }
    let (a, b) = (
        serde_json::to_value(&r.metrics).unwrap_or_default(),
        serde_json::to_value(&run.metrics).unwrap_or_default(),
    );
    if a != b {
        let field = a
            .as_object()
            .zip(b.as_object())
            .and_then(|(a, b)| a.keys().find(|k| a.get(*k) != b.get(*k)).cloned())
            .unwrap_or_else(|| "metrics".into());
        return Some(format!("{field} differs from {rel}"));
    }
    if !r.requests_output_ids.is_empty() {
        let rel = format!("runs/{}/requests.json", run_dir_name(r));
        let ids: Option<Vec<Vec<u32>>> = std::fs::read_to_string(dir.join(&rel))
            .ok()
            .and_then(|t| serde_json::from_str::<Vec<serde_json::Value>>(&t).ok())
            .map(|v| {
                v.iter()
                    .map(|q| serde_json::from_value(q["ids"].clone()).unwrap_or_default())
                    .collect()
            });
        if ids.as_ref() != Some(&r.requests_output_ids) {
            return Some(format!("requests_output_ids differs from {rel}"));
        }
    }
    r.prove().err()
}

/// Checks `rows` of the run directory `dir` (described by `meta`) against its runs.
pub fn check(dir: &Path, meta: &Expect, rows: &[Row]) -> RowCheck {
    let mut out = RowCheck::default();
    let mut seen = BTreeSet::new();
    for r in rows {
        if !seen.insert(r.run_id.as_str()) {
            out.duplicate.push(r.run_id.clone());
            continue;
        }
        if let Some(why) = foreign(r, meta) {
            out.foreign.push((r.run_id.clone(), why));
            continue;
        }
        if r.status == RunStatus::Ok {
            if let Some(why) = disagrees(dir, r) {
                out.disagreeing.push((r.run_id.clone(), why));
            }
        }
    }
    out.duplicate.sort();
    out.duplicate.dedup();
    out
}

/// Run directories under `dir/runs/` holding a `metrics.json` that no row names
/// (a row deleted from `results.json`), sorted.
pub fn unrecorded_runs(dir: &Path, rows: &[Row]) -> Vec<String> {
    let named: BTreeSet<String> = rows.iter().map(run_dir_name).collect();
    let mut v: Vec<String> = std::fs::read_dir(dir.join("runs"))
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.path().join("metrics.json").is_file())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !named.contains(n))
        .collect();
    v.sort();
    v
}
