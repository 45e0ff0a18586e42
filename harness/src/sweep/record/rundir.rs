//! Step 2 of a sweep: the run directory (`--out`): locked for this sweep, cleaned
//! of what an interrupted sweep left, resumed when it holds the same sweep, created
//! (with host facts and a cold bandwidth probe) when empty.
//!
//! Crash safety: every file is written atomically (temporary + rename, see
//! [`crate::export::write_atomic`]), `sweep.json` before `spec.toml`, so a sweep
//! killed at any moment leaves a directory that is either resumable or holds only
//! this module's own files (lock, stale temporaries, the same `spec.toml`), which
//! count as empty.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};

/// Default parent of run directories (`reports/`).
pub const DEFAULT_REPORTS: &str = "reports";

use std::collections::BTreeMap;

use anyhow::{Context, Result};
use memdial::tools::identity::Identity as InputIdentity;
use serde::{Deserialize, Serialize};

use crate::args::{as_usage, usage};

use super::host::Host;
use super::row::{self, Row};
use crate::sweep::spec::{Shard, Spec};
use crate::sweep::util::{utc_now_dirname, utc_now_rfc3339};

/// The lock file in a run directory (holds the pid of the sweep that holds the lock).
pub const LOCK_FILE: &str = ".lock";

/// An exclusive `flock(2)` on `--out/.lock`, held while the sweep runs (released
/// when dropped or when the process ends, however it ends).
#[derive(Debug)]
pub struct DirLock {
    _file: File,
}

/// Locks `out` (created when missing) for this sweep and writes our pid into the
/// lock file.
///
/// Errors (usage): another process holds the lock — the message names its pid.
pub fn lock(out: &Path) -> Result<DirLock> {
    if out.exists() && !out.is_dir() {
        return Err(usage(format!(
            "--out {} is not a directory: give a run directory (new, or one to resume)",
            out.display()
        )));
    }
    std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
    let p = out.join(LOCK_FILE);
    let mut f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&p)
        .with_context(|| format!("cannot open {}", p.display()))?;
    match rustix::fs::flock(&f, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => {
            f.set_len(0)?;
            f.rewind()?;
            writeln!(f, "{}", std::process::id())?;
            Ok(DirLock { _file: f })
        }
        Err(rustix::io::Errno::WOULDBLOCK) => {
            let mut t = String::new();
            let _ = f.read_to_string(&mut t);
            let holder = match t.trim() {
                "" => "pid unknown".to_string(),
                pid => format!("pid {pid}"),
            };
            Err(usage(format!(
                "{} is in use by another sweep ({holder}); wait for it to finish or choose another --out",
                out.display()
            )))
        }
        Err(e) => Err(anyhow::anyhow!("cannot lock {}: {e}", p.display())),
    }
}

/// Whether `name` is a temporary file of an interrupted atomic write
/// (`.NAME.tmpPID`) or an unfinished run's metrics attempt (`metrics.PID.NONCE.json`).
fn is_stale_temp(name: &str) -> bool {
    (name.starts_with('.') && name.contains(".tmp"))
        || (name.starts_with("metrics.") && name.ends_with(".json") && name != "metrics.json")
}

/// Removes the temporaries an interrupted sweep left in `out` and its run
/// directories (only call while holding [`lock`]: then none is in use). Returns
/// how many were removed.
pub fn clean_stale(out: &Path) -> usize {
    let mut n = 0;
    let mut dirs = vec![out.to_path_buf()];
    if let Ok(rd) = std::fs::read_dir(out.join("runs")) {
        dirs.extend(rd.flatten().map(|e| e.path()).filter(|p| p.is_dir()));
    }
    for d in dirs {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if is_stale_temp(&name) && e.path().is_file() && std::fs::remove_file(e.path()).is_ok()
            {
                n += 1;
            }
        }
    }
    n
}

/// What identifies a sweep in its run directory.
pub struct Identity<'a> {
    /// The spec.
    pub spec: &'a Spec,
    /// The spec's text (written to `spec.toml`).
    pub spec_text: &'a str,
    /// The shard run by this invocation.
    pub shard: Option<Shard>,
    /// Model directory (canonical).
    pub model: &'a Path,
    /// Tensor bytes of the model.
    pub model_bytes: u64,
    /// Points in the whole spec.
    pub points_total: usize,
    /// The model's identity (over its files' contents, see [`memdial::tools::identity`]).
    pub model_identity: &'a InputIdentity,
    /// The identities of the spec's prompt files, by path as written in the spec.
    pub prompt_identities: &'a BTreeMap<String, InputIdentity>,
}

/// Why the recorded identities of a run directory are not those of this sweep's
/// inputs: one phrase per change (`model: config.json: content changed`, `prompt
/// p.txt: size 10 → 12 bytes`); empty when they are the same. A directory that
/// recorded no model identity (written before identities were) counts as changed:
/// its model cannot be checked.
pub fn identity_changes(m: &Meta, id: &Identity) -> Vec<String> {
    let mut out = vec![];
    match &m.model_identity {
        None => out.push(
            "model: no identity recorded (the directory predates model identities), so the model cannot be checked"
                .to_string(),
        ),
        Some(old) => out.extend(
            id.model_identity
                .changes_since(old)
                .into_iter()
                .map(|c| format!("model: {c}")),
        ),
    }
    for (name, new) in id.prompt_identities {
        match m.prompt_identities.get(name) {
            None => out.push(format!("prompt {name}: no identity recorded")),
            Some(old) => out.extend(
                new.changes_since(old)
                    .into_iter()
                    .map(|c| format!("prompt {name}: {c}")),
            ),
        }
    }
    out
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

/// Refuses, without writing anything, an `--out` this sweep cannot use: a file; a
/// directory holding another sweep (spec, shard or model differ); a non-empty
/// directory holding no sweep (a sweep killed before its first `sweep.json` leaves
/// only the lock and at most the same `spec.toml`: those are accepted). A missing
/// directory passes. Checked before anything slow (packing a layout) or written.
///
/// Errors: usage errors naming the directory; an unreadable `sweep.json`.
pub fn refuse_other_out(
    out: &Path,
    spec: &Spec,
    spec_text: &str,
    shard: Option<Shard>,
    model: &Path,
) -> Result<()> {
    if out.exists() && !out.is_dir() {
        return Err(usage(format!(
            "--out {} is not a directory: give a run directory (new, or one to resume)",
            out.display()
        )));
    }
    if !out.is_dir() {
        return Ok(());
    }
    if out.join("sweep.json").exists() {
        let m = Meta::load(out).map_err(as_usage)?;
        if m.spec_sha256 != spec.hash()
            || m.shard != shard
            || m.model_dir != model.display().to_string()
        {
            return Err(usage(format!(
                "{} holds a different sweep (spec, shard or model differ); choose another --out",
                out.display()
            )));
        }
        return Ok(());
    }
    for e in std::fs::read_dir(out)? {
        let e = e?;
        let name = e.file_name().to_string_lossy().into_owned();
        let ours = name == LOCK_FILE
            || is_stale_temp(&name)
            || (name == "spec.toml"
                && std::fs::read_to_string(e.path()).ok().as_deref() == Some(spec_text));
        if !ours {
            return Err(usage(format!(
                "{} exists, is not empty and holds no sweep ({name})",
                out.display()
            )));
        }
    }
    Ok(())
}

/// Opens `out` for the sweep `id`: its metadata and finished rows when it holds the
/// same sweep; fresh metadata (host facts, a cold bandwidth probe of `probe_bytes`
/// on the largest of `shard_files`) when it is empty or new.
///
/// On resume the rows are checked against each run's own `metrics.json`
/// ([`super::proof`]): a row that disagrees is dropped, so its run is run again (a
/// note on stderr names it).
///
/// Errors (usage): `out` holds a different sweep; its model or a prompt file changed
/// since it was written (naming what changed); it holds duplicate or foreign rows;
/// it is not empty and holds no sweep.
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
    refuse_other_out(out, spec, id.spec_text, id.shard, id.model)?;
    if out.join("sweep.json").exists() {
        let mut m = Meta::load(out).map_err(as_usage)?;
        let changes = identity_changes(&m, id);
        if !changes.is_empty() {
            return Err(usage(format!(
                "{} was written for other inputs: {}; choose another --out",
                out.display(),
                changes.join("; ")
            )));
        }
        let mut rows = row::load(out)?;
        let found = super::proof::check(out, &m.expect(), &rows);
        if !found.duplicate.is_empty() || !found.foreign.is_empty() {
            return Err(usage(format!(
                "{}/results.json cannot be resumed: {}",
                out.display(),
                found.problems().join("; ")
            )));
        }
        for (id, why) in &found.disagreeing {
            eprintln!("note: run {id} is run again: its row disagrees with its run ({why})");
        }
        rows.retain(|r| !found.disagreeing.iter().any(|(id, _)| *id == r.run_id));
        m.command = command;
        return Ok((m, rows));
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
        sweep_runs_planned: None,
        host,
        cgroup: String::new(),
        memdial_version: env!("CARGO_PKG_VERSION").to_string(),
        command,
        results_schema: None,
        model_content_hash: None,
        engines: vec![],
        model_identity: Some(id.model_identity.clone()),
        prompt_identities: id.prompt_identities.clone(),
        missing_shards: vec![],
        noise: (spec.noise != memdial::tools::noise::Thresholds::default()).then_some(spec.noise),
        opaque_model: None,
        repeats_auto: spec.auto_repeats(),
        predictions: None,
        delay_s: (spec.delay_s > 0.0).then_some(spec.delay_s),
        lossy_limits: spec.lossy.clone(),
    };
    Ok((meta, vec![]))
}

/// `sweep.json`: what a run directory holds.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Meta {
    /// Format version of the run directory.
    pub format: u32,
    /// Spec name.
    pub spec_name: Option<String>,
    /// SHA-256 of the canonical spec (shards and resumes must match).
    pub spec_sha256: String,
    /// Model directory (canonical path).
    pub model_dir: String,
    /// Tensor bytes of the model.
    pub model_bytes: u64,
    /// Generated tokens per run.
    pub max_tokens: usize,
    /// Creation time, UTC.
    pub created_utc: String,
    /// This directory's shard (`None` = the whole sweep).
    pub shard: Option<Shard>,
    /// Directories merged into this one (`memdial report merge`).
    #[serde(default)]
    pub merged_from: Vec<String>,
    /// Points in the whole spec.
    pub points_total: usize,
    /// Runs this directory is meant to hold (all shards when merged).
    pub runs_planned: usize,
    /// A shard's record of the runs the whole sweep plans (every shard): a merge with a
    /// shard missing still knows the total. Absent for unsharded sweeps and older shards.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sweep_runs_planned: Option<usize>,
    /// Host and storage facts, with the measured cold bandwidth.
    pub host: Host,
    /// Memory cgroup enforcement (`off`, `enforced (…)`, `not enforced: …`).
    pub cgroup: String,
    /// memdial version that ran the sweep.
    pub memdial_version: String,
    /// Command line.
    pub command: String,
    /// [`super::row::RESULTS_SCHEMA`] of the results (absent before version 2).
    #[serde(default)]
    pub results_schema: Option<u32>,
    /// [`memdial::format::checkpoint::model_content_hash`] of the model.
    #[serde(default)]
    pub model_content_hash: Option<String>,
    /// The engines of the sweep (empty for memdial-only sweeps).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub engines: Vec<super::engine_meta::EngineMeta>,
    /// The model's identity over its files ([`memdial::tools::identity::Identity`]): a
    /// resume onto a changed model is refused.
    #[serde(default)]
    pub model_identity: Option<InputIdentity>,
    /// The identities of the spec's prompt files, by path as written in the spec.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub prompt_identities: BTreeMap<String, InputIdentity>,
    /// Shards of an `i/n` split missing from a merge (`"2/3"`): the directory is
    /// incomplete.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub missing_shards: Vec<String>,
    /// The spec's `[noise]` thresholds when it sets them (absent: the defaults).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub noise: Option<memdial::tools::noise::Thresholds>,
    /// The model when memdial's engine does not read it: its files and the engines'
    /// floors (absent for checkpoints memdial reads).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub opaque_model: Option<super::engine_meta::OpaqueMeta>,
    /// `repeats = "auto"` resolved (absent: a fixed count): which planned runs a
    /// point that reached its precision did not need.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repeats_auto: Option<crate::sweep::spec::AutoRepeats>,
    /// The spec's `trace` replayed at every point (absent without one): what the
    /// report sets beside the measurements ([`crate::sweep::predict`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub predictions: Option<super::predictions::Predictions>,
    /// The spec's `delay_s`, the cool-down before every run after the first (absent: 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay_s: Option<f64>,
    /// The spec's `[lossy.NAME]` limits (absent: none), so a verdict made from the
    /// directory alone (a merge, `memdial report`) holds a lossy layout to them.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub lossy_limits: std::collections::BTreeMap<String, crate::sweep::layout::LossyLimits>,
}

impl Meta {
    /// What this directory's rows must fit ([`super::proof::check`]).
    pub fn expect(&self) -> super::proof::Expect {
        super::proof::Expect {
            points_total: self.points_total,
            shard: self.shard,
            max_tokens: self.max_tokens,
        }
    }

    /// Reads `dir/sweep.json`.
    pub fn load(dir: &Path) -> Result<Meta> {
        let p = dir.join("sweep.json");
        let t =
            std::fs::read_to_string(&p).with_context(|| format!("cannot read {}", p.display()))?;
        serde_json::from_str(&t).with_context(|| format!("{} is not a sweep.json", p.display()))
    }
    /// Writes `dir/sweep.json` atomically.
    pub fn save(&self, dir: &Path) -> Result<()> {
        crate::export::write_json(&dir.join("sweep.json"), self)
    }
}
