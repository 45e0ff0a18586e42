//! `--verify-reads` for tensors the plan reads in parts: `lm_head` (or any tensor) in
//! row blocks, the embedding table's rows on demand, and tensors stacked over the
//! experts (gpt-oss `mlp.experts.*`, read one expert's slice at a time). The manifest (`tensors.sha256`)
//! hashes whole tensors, so a block or a row cannot be checked by itself: each such
//! tensor is hashed whole once when the store opens, in [`CHUNK`]-byte reads through the
//! run's IO mode (a transient buffer, freed before the first forward). Every later read
//! of its parts checks that the shard is unchanged (size and mtime, as all reads do; an
//! mmap run's truncation is an error through `io::mmap_guard`), so the bytes used are
//! the bytes verified.

use anyhow::{bail, Context, Result};
use sha2::{Digest, Sha256};

use super::io::Shared;
use crate::format::checkpoint::Checkpoint;
use crate::io::{AlignedBuf, IoMode};
use crate::util::digest::hex;

/// Bytes hashed per read (4 MiB).
pub(super) const CHUNK: u64 = 4 << 20;

/// Keys (without weight prefix) of the tensors the plan reads in parts.
pub(super) fn partial_keys(shared: &Shared) -> Vec<String> {
    let plan = &shared.plan;
    let mut v: Vec<String> = Vec::new();
    for g in &plan.groups {
        if let Some((k, _)) = &g.rows {
            if !v.contains(k) {
                v.push(k.clone());
            }
        }
    }
    if !plan.embedding_pinned && !v.contains(&plan.embedding_key) {
        v.push(plan.embedding_key.clone());
    }
    for g in plan.expert_groups.values() {
        for m in g.members.iter().filter(|m| m.partial) {
            if !v.contains(&m.key) {
                v.push(m.key.clone());
            }
        }
    }
    v
}

/// Hashes each tensor of `keys` whole and compares it with the manifest; returns the
/// bytes read. No-op without a manifest.
///
/// Errors: a tensor missing from the checkpoint or the manifest, a read error, or a
/// hash that differs from the manifest (naming tensor, file and offset).
pub(super) fn verify_partial_tensors(
    shared: &Shared,
    ck: &Checkpoint,
    prefix: &str,
    keys: &[String],
) -> Result<u64> {
    let Some(man) = &shared.manifest else {
        return Ok(0);
    };
    let mut read = 0u64;
    let mut buf: Option<AlignedBuf> = None;
    for key in keys {
        let full = format!("{prefix}{key}");
        let loc = ck
            .get(&full)
            .with_context(|| format!("tensor {full} is missing from {}", ck.dir.display()))?;
        let Some(want) = man.get(key) else {
            bail!("verifying reads: the manifest has no entry for tensor {full}");
        };
        let f = &shared.files[loc.shard];
        let mut h = Sha256::new();
        let mut off = loc.offset;
        let end = loc.offset + loc.len;
        while off < end {
            let len = CHUNK.min(end - off);
            if shared.io == IoMode::Mmap {
                let map = f.map().context("internal: mmap mode without a map")?;
                h.update(&map[off as usize..(off + len) as usize]);
                read += len;
            } else {
                let b = buf.get_or_insert_with(|| AlignedBuf::new((CHUNK + 8192) as usize));
                let (d, n) = shared.read_buf(loc.shard, off, len, b)?;
                h.update(&b.as_ref()[d..d + len as usize]);
                read += n;
            }
            off += len;
        }
        let got = hex(&h.finalize());
        super::io::check_sha(&full, &f.path, loc.offset, &got, Some(want))?;
    }
    Ok(read)
}
