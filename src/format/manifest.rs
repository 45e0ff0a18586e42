//! The per-tensor checksum manifest `tensors.sha256` of a checkpoint directory:
//! one `<sha256 hex>  <tensor name>` line per tensor, in file order (the
//! `sha256sum` line format). Written by `memdial checksum`; the streaming store
//! checks every read against it when asked to verify reads.

use std::collections::HashMap;
use std::path::Path;

use anyhow::{Context, Result};

use crate::format::checkpoint::Checkpoint;
use crate::format::config::ModelConfig;
use crate::util::digest::sha256_hex;
use crate::util::error::UsageError;

/// Reads `tensors.sha256` of `dir` as tensor name (without `prefix`) → SHA-256 hex.
///
/// Errors: the file is missing (write it with `memdial checksum`) or a line is not
/// `<sha256>  <tensor name>`.
pub fn load_manifest(dir: &Path, prefix: &str) -> Result<HashMap<String, String>> {
    let p = dir.join("tensors.sha256");
    let text = std::fs::read_to_string(&p).with_context(|| {
        format!(
            "verifying reads needs {} (write it with `memdial checksum --model {}`)",
            p.display(),
            dir.display()
        )
    })?;
    let mut m = HashMap::new();
    for (i, line) in text.lines().enumerate() {
        let (sum, name) = line.split_once("  ").with_context(|| {
            format!(
                "{}:{}: expected `<sha256>  <tensor name>`",
                p.display(),
                i + 1
            )
        })?;
        m.insert(
            name.strip_prefix(prefix).unwrap_or(name).to_string(),
            sum.to_string(),
        );
    }
    Ok(m)
}

/// The manifest a run that verifies its reads checks against: `tensors.sha256` keyed by
/// canonical tensor names (without the weight prefix; an entry under an alias name,
/// e.g. the transformers form, also serves its canonical name). `read` is the keys of
/// the tensors the run reads, in read-plan order (`store::plan::Plan::read_keys`).
///
/// Errors: a missing, empty or incomplete manifest is a [`UsageError::Invalid`] (exit 2
/// in `memdial`) naming `memdial checksum --model DIR`, which writes it; for an
/// incomplete one, the first tensor of the read plan (pinned tensors, layer trunks by
/// layer, routed experts by layer and expert) that has no entry is named, with the
/// count. A malformed line is an ordinary error.
pub fn manifest_for_run(
    dir: &Path,
    cfg: &ModelConfig,
    read: &[String],
) -> Result<HashMap<String, String>> {
    let p = dir.join("tensors.sha256");
    let fix = format!("write it with `memdial checksum --model {}`", dir.display());
    if !p.exists() {
        return Err(
            UsageError::Invalid(format!("verifying reads needs {} ({fix})", p.display())).into(),
        );
    }
    let mut m = load_manifest(dir, &cfg.weight_prefix)?;
    if m.is_empty() {
        return Err(UsageError::Invalid(format!(
            "verifying reads: {} is empty, so it would verify nothing ({fix})",
            p.display()
        ))
        .into());
    }
    let strip = |n: &str| n.strip_prefix(&cfg.weight_prefix).unwrap_or(n).to_string();
    for spec in crate::format::schema::expected_tensors(cfg) {
        let key = strip(&spec.name);
        if !m.contains_key(&key) {
            if let Some(sum) = spec.aliases.iter().find_map(|a| m.get(&strip(a)).cloned()) {
                m.insert(key, sum);
            }
        }
    }
    let read = read.iter();
    let (mut missing, mut total, mut first) = (0usize, 0usize, None);
    for key in read {
        total += 1;
        if !m.contains_key(key) {
            missing += 1;
            first.get_or_insert_with(|| key.clone());
        }
    }
    if let Some(first) = first {
        return Err(UsageError::Invalid(format!(
            "verifying reads: {} has no entry for tensor {}{first} ({missing} of the {total} \
             tensors this run reads are missing; {fix})",
            p.display(),
            cfg.weight_prefix
        ))
        .into());
    }
    Ok(m)
}

/// Writes `tensors.sha256` for the checkpoint in `dir` (atomically: a temporary
/// file, then rename). Returns the number of tensors.
///
/// Errors: unreadable checkpoint or shard; the directory is not writable.
pub fn write_checksum_manifest(dir: &Path) -> Result<usize> {
    let ck = Checkpoint::open(dir)?;
    if ck.lossless.is_some() {
        anyhow::bail!(
            "{} is a packed (lossless) directory: its tensors.sha256 is the source's,              checked by `memdial pack`; checksum the source checkpoint instead",
            dir.display()
        );
    }
    let mut names: Vec<&String> = ck.tensors.keys().collect();
    names.sort_by_key(|n| {
        let t = &ck.tensors[*n];
        (t.shard, t.offset)
    });
    let mut out = String::new();
    let mut files: Vec<Option<std::fs::File>> = (0..ck.shards.len()).map(|_| None).collect();
    for n in &names {
        let t = &ck.tensors[*n];
        let f = match &mut files[t.shard] {
            Some(f) => f,
            slot => {
                *slot = Some(std::fs::File::open(&ck.shards[t.shard].path)?);
                slot.as_mut().unwrap()
            }
        };
        let mut buf = vec![0u8; t.len as usize];
        std::os::unix::fs::FileExt::read_exact_at(f, &mut buf, t.offset)
            .with_context(|| format!("reading {n} from {}", ck.shards[t.shard].path.display()))?;
        out.push_str(&format!("{}  {n}\n", sha256_hex(&buf)));
    }
    let tmp = dir.join(".tensors.sha256.tmp");
    std::fs::write(&tmp, out)?;
    std::fs::rename(&tmp, dir.join("tensors.sha256"))?;
    Ok(names.len())
}
