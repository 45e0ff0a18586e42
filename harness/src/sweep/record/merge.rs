//! `memdial report merge DIR…`: combine shard directories of one sweep into one
//! report with one verdict.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use anyhow::{bail, Result};
use memdial::util::error::UsageError;

use super::row::Row;
use super::rundir::Meta;

/// The model identity of a directory: its [`memdial::format::checkpoint::model_content_hash`]
/// (recorded in `sweep.json`), or for directories written before it was recorded,
/// the model's size.
fn model_id(m: &Meta) -> String {
    match &m.model_content_hash {
        Some(h) => format!("model content hash {}…", &h[..12.min(h.len())]),
        None => format!(
            "a model of {} bytes (no content hash recorded)",
            m.model_bytes
        ),
    }
}

/// Refuses inputs that are not sweep run directories (no `sweep.json`), naming the first.
pub fn check_inputs(dirs: &[PathBuf]) -> Result<()> {
    for d in dirs {
        if !d.join("sweep.json").exists() {
            bail!(
                "{} is not a sweep run directory (no sweep.json)",
                d.display()
            );
        }
    }
    Ok(())
}

/// Refuses an output directory that would overwrite an input shard or unrelated
/// files: only a new or empty directory, or an earlier merge (its `sweep.json` holds
/// `merged_from`), is written to.
///
/// Errors: a refused directory is a [`UsageError`] (exit 2); a directory that cannot
/// be listed is an ordinary error.
pub fn check_out(dirs: &[PathBuf], out: &Path) -> Result<()> {
    let canon = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    if dirs.iter().any(|d| canon(d) == canon(out)) {
        return Err(UsageError::Invalid(format!(
            "--out {} is one of the directories being merged",
            out.display()
        ))
        .into());
    }
    if out.is_dir() && std::fs::read_dir(out)?.next().is_some() {
        let earlier_merge = std::fs::read_to_string(out.join("sweep.json"))
            .ok()
            .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
            .and_then(|v| {
                v.get("merged_from")
                    .and_then(|m| m.as_array())
                    .map(|m| !m.is_empty())
            })
            .unwrap_or(false);
        if !earlier_merge {
            return Err(UsageError::Invalid(format!(
                "--out {} exists and is not an earlier merge: choose a new directory",
                out.display()
            ))
            .into());
        }
    }
    Ok(())
}

/// Loads and combines the run directories. They must come from the same spec
/// (same `spec_sha256`) and the same model (same model content hash; directories
/// that predate it are compared by model size). A run present in several
/// directories (a full sweep and one of its shards, or one shard given twice) is
/// counted once, and its copies must agree in status and output hash.
///
/// Returns the merged meta, the rows (ordered as a single sweep would run them),
/// and the shards of an `i/n` split that were not among the inputs (as `"i/n"`),
/// so a lost shard makes the merge incomplete. With an unsharded directory among
/// the inputs its plan is the plan of the merge.
///
/// Errors (the caller reports them as usage errors, exit 2), each naming both
/// directories: another spec; another model; two copies of a run that disagree; a
/// directory whose rows are duplicate, foreign or disagree with their runs'
/// `metrics.json` ([`super::proof`]).
///
/// The merged meta's `missing_shards` names the missing shards (the shard count
/// comes from the shards' own `sweep.json`).
pub fn merge(dirs: &[PathBuf]) -> Result<(Meta, Vec<Row>, Vec<String>)> {
    if dirs.is_empty() {
        bail!("nothing to merge: give one or more run directories");
    }
    let mut metas: Vec<Meta> = vec![];
    let mut rows: Vec<Row> = vec![];
    // run id → (index into rows, directory it came from)
    let mut seen: HashMap<String, (usize, usize)> = HashMap::new();
    // Runs that left a metrics.json but have no row (a sweep killed between the two,
    // or a row deleted), by directory and run: they count as planned.
    let mut unrecorded: BTreeSet<String> = BTreeSet::new();
    for (di, d) in dirs.iter().enumerate() {
        let m = Meta::load(d)?;
        if let Some(first) = metas.first() {
            same_sweep(d, &m, &dirs[0], first)?;
        }
        let own = super::row::load(d)?;
        let found = super::proof::check(d, &m.expect(), &own);
        if let Some(p) = found.problems().first() {
            bail!(
                "{}: {p}{}",
                d.display(),
                match found.problems().len() {
                    1 => String::new(),
                    n => format!(" (and {} more)", n - 1),
                }
            );
        }
        unrecorded.extend(super::proof::unrecorded_runs(d, &own));
        for r in own {
            match seen.get(&r.run_id) {
                None => {
                    seen.insert(r.run_id.clone(), (rows.len(), di));
                    rows.push(r);
                }
                Some(&(i, dj)) => {
                    let a = &rows[i];
                    if a.status != r.status || a.output_hash() != r.output_hash() {
                        let desc = |x: &Row| {
                            format!(
                                "{}, output sha256 {}",
                                x.status,
                                x.output_hash()
                                    .map(|h| format!("{}…", &h[..12.min(h.len())]))
                                    .unwrap_or_else(|| "none".into())
                            )
                        };
                        bail!(
                            "run {} differs between {} ({}) and {} ({}): the copies of one run must agree",
                            r.run_id,
                            dirs[dj].display(),
                            desc(a),
                            d.display(),
                            desc(&r)
                        );
                    }
                }
            }
        }
        metas.push(m);
    }
    rows.sort_by_key(|r| (!r.warmup, r.repeat, r.point_index));
    let mut shards_seen = BTreeSet::new();
    let mut planned = 0;
    for m in &metas {
        let key = m.shard.map(|s| (s.index, s.count));
        if shards_seen.insert(key) {
            planned += m.runs_planned;
        }
    }
    // Every shard records what the whole sweep plans: a missing shard's runs count.
    if let Some(total) = metas.iter().filter_map(|m| m.sweep_runs_planned).max() {
        planned = planned.max(total);
    }
    // An unsharded directory plans the whole sweep: its shards add nothing.
    if let Some(full) = metas.iter().find(|m| m.shard.is_none()) {
        planned = full.runs_planned;
    }
    // A run without its row is planned whatever sweep.json says, so it can never be
    // merged away.
    let rowless = unrecorded
        .iter()
        .filter(|run| !rows.iter().any(|r| super::proof::run_dir_name(r) == **run))
        .count();
    planned = planned.max(rows.len() + rowless);
    let missing = missing_shards(&metas, &shards_seen)?;
    let mut meta = metas[0].clone();
    meta.shard = None;
    meta.merged_from = dirs.iter().map(|d| d.display().to_string()).collect();
    meta.runs_planned = planned;
    meta.missing_shards = missing.clone();
    meta.sweep_runs_planned = None;
    meta.command = std::env::args().collect::<Vec<_>>().join(" ");
    Ok((meta, rows, missing))
}

/// Refuses directory `d` (its `m`) when it was not made by the same sweep as the first
/// directory `d0` (its `first`): another spec, or another model.
fn same_sweep(d: &Path, m: &Meta, d0: &Path, first: &Meta) -> Result<()> {
    if m.spec_sha256 != first.spec_sha256 {
        bail!(
            "{} was made from a different spec ({}…) than {} ({}…)",
            d.display(),
            &m.spec_sha256[..12.min(m.spec_sha256.len())],
            d0.display(),
            &first.spec_sha256[..12.min(first.spec_sha256.len())]
        );
    }
    let same_model = match (&m.model_content_hash, &first.model_content_hash) {
        (Some(a), Some(b)) => a == b,
        _ => m.model_bytes == first.model_bytes,
    };
    if let (Some(a), Some(b)) = (&m.model_identity, &first.model_identity) {
        let changes = a.content_changes_since(b);
        if !changes.is_empty() {
            bail!(
                "{} was made from another model than {}: {}",
                d.display(),
                d0.display(),
                changes.join("; ")
            );
        }
    }
    if !same_model {
        bail!(
            "{} was made from another model ({}) than {} ({})",
            d.display(),
            model_id(m),
            d0.display(),
            model_id(first)
        );
    }
    Ok(())
}

/// The shards of an `i/n` split not among `metas` (as `"i/n"`; none when an unsharded
/// directory is among them). Errors: splits into different shard counts.
fn missing_shards(
    metas: &[Meta],
    shards_seen: &BTreeSet<Option<(usize, usize)>>,
) -> Result<Vec<String>> {
    let mut missing = vec![];
    let counts: BTreeSet<usize> = metas
        .iter()
        .filter_map(|m| m.shard.map(|s| s.count))
        .collect();
    if counts.len() > 1 {
        bail!("the directories come from splits into different shard counts: {counts:?}");
    }
    if let Some(&n) = counts.iter().next() {
        let unsharded = metas.iter().any(|m| m.shard.is_none());
        if !unsharded {
            for i in 1..=n {
                if !shards_seen.contains(&Some((i, n))) {
                    missing.push(format!("{i}/{n}"));
                }
            }
        }
    }
    Ok(missing)
}

/// Copies every input directory's `runs/<run>/` into `out/runs/` (a run already there,
/// from an earlier input or merge, is kept), so the merged directory carries the
/// per-run files its rows are checked against (`memdial report verify`).
///
/// Errors: a run directory that cannot be listed or copied.
pub fn copy_runs(dirs: &[PathBuf], out: &Path) -> Result<()> {
    let to = out.join("runs");
    for d in dirs {
        let from = d.join("runs");
        let Ok(entries) = std::fs::read_dir(&from) else {
            continue;
        };
        for e in entries {
            let e = e?;
            let dst = to.join(e.file_name());
            if e.file_type()?.is_dir() && !dst.exists() {
                copy_tree(&e.path(), &dst)?;
            }
        }
    }
    Ok(())
}

/// Copies directory `src` to `dst` (files and subdirectories; `dst` must not exist):
/// written under a temporary name and renamed, so an interrupted merge leaves no
/// half-copied run.
fn copy_tree(src: &Path, dst: &Path) -> Result<()> {
    use anyhow::Context;
    let tmp = dst.with_extension("partial");
    let _ = std::fs::remove_dir_all(&tmp);
    fn walk(src: &Path, dst: &Path) -> std::io::Result<()> {
        std::fs::create_dir_all(dst)?;
        for e in std::fs::read_dir(src)? {
            let e = e?;
            let t = dst.join(e.file_name());
            if e.file_type()?.is_dir() {
                walk(&e.path(), &t)?;
            } else {
                std::fs::copy(e.path(), &t)?;
            }
        }
        Ok(())
    }
    walk(src, &tmp).with_context(|| format!("cannot copy {} into the merge", src.display()))?;
    std::fs::rename(&tmp, dst)
        .with_context(|| format!("cannot rename {} to {}", tmp.display(), dst.display()))
}

/// Copies `spec.toml` of the first directory into `out` (when present).
pub fn copy_spec(first: &Path, out: &Path) -> Result<()> {
    let src = first.join("spec.toml");
    if src.exists() {
        crate::export::write_atomic(&out.join("spec.toml"), &std::fs::read(&src)?)?;
    }
    Ok(())
}
