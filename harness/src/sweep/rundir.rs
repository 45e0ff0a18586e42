//! Step 2 of a sweep: the run directory (`--out`): resumed when it holds the same
//! sweep, created (with host facts and a cold bandwidth probe) when empty.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::args::{as_usage, usage};

use super::host::Host;
use super::report::Meta;
use super::row::{self, Row};
use super::spec::{Shard, Spec};
use super::util::{utc_now_dirname, utc_now_rfc3339};

/// What identifies a sweep in its run directory.
pub struct Identity<'a> {
    /// The spec.
    pub spec: &'a Spec,
    /// The shard run by this invocation.
    pub shard: Option<Shard>,
    /// Model directory (canonical).
    pub model: &'a Path,
    /// Tensor bytes of the model.
    pub model_bytes: u64,
    /// Points in the whole spec.
    pub points_total: usize,
}

/// `out`, or a fresh `<reports>/<UTC time>` (with `-2`, `-3`, … on a clash).
pub fn choose_out(out: Option<&Path>, reports: &Path) -> PathBuf {
    match out {
        Some(o) => o.to_path_buf(),
        None => {
            let base = reports.join(utc_now_dirname());
            let mut o = base.clone();
            let mut n = 2;
            while o.exists() {
                o = PathBuf::from(format!("{}-{n}", base.display()));
                n += 1;
            }
            o
        }
    }
}

/// Opens `out` for the sweep `id`: its metadata and finished rows when it holds the
/// same sweep; fresh metadata (host facts, a cold bandwidth probe of `probe_bytes`
/// on the largest of `shard_files`) when it is empty or new.
///
/// Errors (usage): `out` holds a different sweep, or is not empty and holds none.
pub fn open(
    out: &Path,
    id: &Identity,
    shard_files: &[PathBuf],
    probe_bytes: u64,
) -> Result<(Meta, Vec<Row>)> {
    std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let model_str = id.model.display().to_string();
    let spec = id.spec;
    if out.join("sweep.json").exists() {
        let mut m = Meta::load(out).map_err(as_usage)?;
        if m.spec_sha256 != spec.hash() || m.shard != id.shard || m.model_dir != model_str {
            return Err(usage(format!(
                "{} holds a different sweep (spec, shard or model differ); choose another --out",
                out.display()
            )));
        }
        let rows = row::load(out)?;
        m.command = command;
        return Ok((m, rows));
    }
    if std::fs::read_dir(out)?.next().is_some() {
        return Err(usage(format!(
            "{} exists, is not empty and holds no sweep",
            out.display()
        )));
    }
    let mut host = Host::collect(id.model);
    if let Some(big) = shard_files
        .iter()
        .max_by_key(|p| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0))
    {
        host.probe_bandwidth(big, probe_bytes);
    }
    let meta = Meta {
        format: 1,
        spec_name: spec.name.clone(),
        spec_sha256: spec.hash(),
        model_dir: model_str,
        model_bytes: id.model_bytes,
        max_tokens: spec.max_tokens,
        created_utc: utc_now_rfc3339(),
        shard: id.shard,
        merged_from: vec![],
        points_total: id.points_total,
        runs_planned: 0,
        host,
        cgroup: String::new(),
        memdial_version: env!("CARGO_PKG_VERSION").to_string(),
        command,
        results_schema: None,
        model_content_hash: None,
        engines: vec![],
    };
    Ok((meta, vec![]))
}
