//! `memdial report merge DIR…`: combine shard directories of one sweep into one
//! report with one verdict.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use anyhow::{bail, Result};

use super::report::Meta;
use super::row::Row;

/// Loads and combines the run directories. They must come from the same spec
/// (same `spec_sha256`) and model size. Rows are de-duplicated by run id (the
/// first directory wins) and ordered as a single sweep would run them.
///
/// Returns the merged meta, the rows, and the shards of an `i/n` split that were
/// not among the inputs (as `"i/n"`), so a lost shard makes the merge incomplete.
pub fn merge(dirs: &[PathBuf]) -> Result<(Meta, Vec<Row>, Vec<String>)> {
    if dirs.is_empty() {
        bail!("nothing to merge: give one or more run directories");
    }
    let mut metas = vec![];
    let mut rows: Vec<Row> = vec![];
    let mut seen = BTreeSet::new();
    for d in dirs {
        let m = Meta::load(d)?;
        if let Some(first) = metas.first() {
            let first: &Meta = first;
            if m.spec_sha256 != first.spec_sha256 {
                bail!(
                    "{} was made from a different spec ({}…) than {} ({}…)",
                    d.display(),
                    &m.spec_sha256[..12.min(m.spec_sha256.len())],
                    dirs[0].display(),
                    &first.spec_sha256[..12.min(first.spec_sha256.len())]
                );
            }
            if m.model_bytes != first.model_bytes {
                bail!(
                    "{} used a model of {} bytes, {} one of {} bytes",
                    d.display(),
                    m.model_bytes,
                    dirs[0].display(),
                    first.model_bytes
                );
            }
        }
        for r in super::row::load(d)? {
            if seen.insert(r.run_id.clone()) {
                rows.push(r);
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
    let mut meta = metas[0].clone();
    meta.shard = None;
    meta.merged_from = dirs.iter().map(|d| d.display().to_string()).collect();
    meta.runs_planned = planned;
    meta.command = std::env::args().collect::<Vec<_>>().join(" ");
    Ok((meta, rows, missing))
}

/// Copies `spec.toml` of the first directory into `out` (when present).
pub fn copy_spec(first: &Path, out: &Path) -> Result<()> {
    let src = first.join("spec.toml");
    if src.exists() {
        super::util::write_atomic(&out.join("spec.toml"), &std::fs::read(&src)?)?;
    }
    Ok(())
}
