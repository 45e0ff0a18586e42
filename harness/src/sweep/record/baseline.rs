//! Reading a baseline for `--baseline OLD/results.csv --max-regression 25%` (the
//! comparison is [`crate::sweep::analysis::baseline`]): the gate fails when a point is slower
//! than in the baseline by more than the tolerance **and** the slowdown is
//! significant under the method of [`memdial::util::stats::bootstrap`].
//!
//! The baseline's run directory must hold its `sweep.json` next to `results.csv`.
//! It is refused (usage error, exit 2) when its results schema, spec or model
//! content hash differ from this sweep's, naming what differs. Points are matched on
//! `point_key`, `budget_bytes`, `prompt_tokens` and `max_tokens` (the model is the
//! same by then).
//!
//! A gate that cannot decide says so: a point whose slow-down cannot be judged
//! (too few repeats on either side for the bootstrap, or baseline cells that are not
//! finite numbers) is **undecided**, and so is a comparison that compared no point.
//! The sweep's outcome then is "baseline undecided" (a failure unless
//! `--baseline-undecided pass`), never "0 slower".

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{bail, Context, Result};
use serde::Serialize;

use super::row::{Row, RESULTS_SCHEMA};
use super::rundir::Meta;
use super::status::RunStatus;
use memdial::util::stats::bootstrap::Run;

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
    /// [`memdial::format::checkpoint::model_content_hash`] of the model.
    pub model_content_hash: &'a str,
    /// The model's identity over its files.
    pub model_identity: &'a memdial::tools::identity::Identity,
    /// The prompt files' identities, by path as written in the spec.
    pub prompt_identities: &'a BTreeMap<String, memdial::tools::identity::Identity>,
}

/// Per-token decode times of the baseline's measured finished runs, by match key.
pub type Runs = BTreeMap<Key, Vec<Run>>;

/// Reads a baseline `results.csv` (or a run directory), checks its `sweep.json`
/// against `me`, and returns its runs by match key with its unreadable cells (see
/// [`read_csv`]). Every error is a reason to refuse the baseline (the caller maps
/// it to exit 2).
pub fn load(path: &Path, me: &Identity) -> Result<(Runs, Vec<Unreadable>)> {
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
/// ([`memdial::tools::identity`]) when the baseline recorded them: a baseline written with
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
                .content_changes_since(old)
                .into_iter()
                .map(|c| format!("model: {c}"))
                .collect();
            for (name, new) in me.prompt_identities {
                if let Some(old) = meta.prompt_identities.get(name) {
                    changes.extend(
                        new.content_changes_since(old)
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

/// A measured finished run of the baseline whose timing cells are not finite
/// numbers: its point cannot be judged.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Unreadable {
    /// The run's match key.
    #[serde(skip)]
    pub key: Key,
    /// The run id (or the row number when it has none).
    pub run: String,
    /// The column and the text that is not a finite number.
    pub why: String,
}

/// Runs of a `results.csv` by match key (measured, finished runs only), and the
/// runs whose timing cells (`decode_s_per_token`, `decode_s_per_token_median`) hold
/// text or a non-finite number. An unreadable run is left out of its point, and its
/// point is undecided.
pub fn read_csv(path: &Path) -> Result<(Runs, Vec<Unreadable>)> {
    read_csv_runs(path, false).map(|(runs, bad, _)| (runs, bad))
}

/// Noisy runs left out by [`read_csv_runs`], by match key.
pub type NoisyCounts = BTreeMap<Key, usize>;

/// [`read_csv`], leaving out the runs marked noisy (a non-empty `noisy` cell, where the
/// file has that column) when `skip_noisy`, and counting them per key.
pub fn read_csv_runs(
    path: &Path,
    skip_noisy: bool,
) -> Result<(Runs, Vec<Unreadable>, NoisyCounts)> {
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
    let run_id_col = h.iter().position(|c| c == "run_id");
    let noisy_col = h.iter().position(|c| c == "noisy");
    let mut noisy = NoisyCounts::new();
    let mut by: Runs = BTreeMap::new();
    let mut unreadable = vec![];
    for (n, rec) in rd.records().enumerate() {
        let rec = rec.with_context(|| format!("malformed row in {}", path.display()))?;
        let get = |i: usize| rec.get(c[i]).unwrap_or("");
        if RunStatus::parse(get(1)) != Some(RunStatus::Ok) || get(2) == "true" {
            continue;
        }
        let key = (
            get(0).to_string(),
            get(5).parse().unwrap_or(0),
            get(6).parse().ok(),
            get(7).parse().unwrap_or(0),
        );
        if skip_noisy && noisy_col.is_some_and(|i| !rec.get(i).unwrap_or("").is_empty()) {
            *noisy.entry(key).or_default() += 1;
            continue;
        }
        let finite = |t: &str| t.parse::<f64>().ok().filter(|x| x.is_finite() && *x >= 0.0);
        let bad = |col: &str, t: &str| Unreadable {
            key: key.clone(),
            run: run_id_col
                .and_then(|i| rec.get(i))
                .map(String::from)
                .unwrap_or_else(|| format!("row {}", n + 1)),
            why: format!("{col} holds {t:?}, not a finite number of seconds"),
        };
        let mut run: Run = vec![];
        let mut ok = true;
        for t in get(4).split_whitespace() {
            match finite(t) {
                Some(x) => run.push(x),
                None => {
                    unreadable.push(bad("decode_s_per_token", t));
                    ok = false;
                    break;
                }
            }
        }
        if ok && run.is_empty() {
            match get(3).trim() {
                "" => {}
                t => match finite(t) {
                    Some(x) => run.push(x),
                    None => {
                        unreadable.push(bad("decode_s_per_token_median", t));
                        ok = false;
                    }
                },
            }
        }
        if !ok || run.is_empty() {
            continue;
        }
        by.entry(key).or_default().push(run);
    }
    Ok((by, unreadable, noisy))
}

/// A loaded baseline: its path, runs by match key and the tolerance.
pub struct Baseline {
    /// The baseline `results.csv`.
    pub path: std::path::PathBuf,
    /// Median s/token per point key.
    pub runs: Runs,
    /// The baseline's runs whose timing cells could not be read.
    pub unreadable: Vec<Unreadable>,
    /// Allowed slow-down (0.25 = 25 %).
    pub tolerance: f64,
    /// `--baseline-undecided pass`: a gate that cannot decide does not fail the sweep.
    pub undecided_passes: bool,
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
