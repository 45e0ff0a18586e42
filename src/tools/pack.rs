//! Packing a checkpoint directory into the lossless layout (`memdial pack --lossless`,
//! [`crate::format::lossless`]), or only measuring what packing it would save. A tool
//! over the format: it reads the source as a run would ([`Checkpointed`]) and keeps the
//! tensors the plan pins small in the plain layout ([`is_small_pinned`]).

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use serde::Serialize;

use crate::engine::loader::Checkpointed;
use crate::format::checkpoint::Checkpoint;
use crate::format::lossless::codec::{self, Codec, Kind};
use crate::format::lossless::decode_tensor;
use crate::format::lossless::pack::{identity_of, PackWriter, BLOCK_BYTES, PACK_FILE, PAGE};
use crate::format::lossless::read::StagingPool;
use crate::format::lossless::stats::{PlaneHist, PlaneStats};
use crate::format::schema::Role;
use crate::format::shard::{ShardFiles, TensorLoc};
use crate::store::plan::is_small_pinned;
use crate::util::digest::sha256_hex;

/// Bytes copied per read when copying raw tensors.
const COPY_CHUNK: usize = 8 << 20;

/// Per tensor class: how many bytes, what they are stored in, their byte statistics.
#[derive(Debug, Clone, Serialize)]
pub struct ClassReport {
    /// `attn`, `dense mlp`, `moe trunk`, `lm_head`, `embedding`, `experts`, `small`.
    pub class: String,
    pub tensors: usize,
    /// Whether the class is packed (else kept as is).
    pub packed: bool,
    pub bytes: u64,
    /// Bytes on disk in the packed layout (packed classes: stored blocks).
    pub stored_bytes: u64,
    /// Blocks kept raw because coding would not shrink them (packed classes).
    pub raw_blocks: u64,
    pub blocks: u64,
    pub stats: PlaneStats,
}

/// What packing did (or would do).
#[derive(Debug, Clone, Serialize)]
pub struct PackReport {
    pub source: String,
    /// The packed directory (`None` for `--stats`).
    pub out: Option<String>,
    pub classes: Vec<ClassReport>,
    pub packed_tensors: usize,
    pub raw_tensors: usize,
    /// Packed tensors whose decoded SHA-256 matched `tensors.sha256` after writing.
    pub verified_tensors: usize,
    /// The block kinds allowed ([`Codec::as_str`]).
    pub codec: String,
    pub seconds: f64,
}

impl PackReport {
    /// Stored ÷ decoded bytes over the packed classes.
    pub fn packed_ratio(&self) -> f64 {
        let (s, b) = self
            .classes
            .iter()
            .filter(|c| c.packed)
            .fold((0u64, 0u64), |a, c| (a.0 + c.stored_bytes, a.1 + c.bytes));
        if b == 0 {
            1.0
        } else {
            s as f64 / b as f64
        }
    }
}

/// The class of tensor `name` (role `role`), and whether the lossless layout packs it:
/// streamed BF16 trunk matrices and `lm_head`; not routed experts (MXFP4 nibbles are
/// near 8 bits/byte), not the embedding table (read one row at a time), not the small
/// always-pinned tensors.
fn classify(name: &str, role: Option<Role>, dtype: &str) -> (&'static str, bool) {
    let bf16 = dtype == "BF16";
    match role {
        Some(Role::Expert) if name.ends_with("weight_scale") => ("expert scales", false),
        Some(Role::Expert) => ("experts", false),
        Some(Role::Embedding) => ("embedding", false),
        Some(Role::LmHead) => ("lm_head", bf16),
        Some(Role::Trunk) if is_small_pinned(name) => ("small", false),
        Some(Role::Trunk) if name.contains(".self_attn.") => ("attn", bf16),
        Some(Role::Trunk) if name.contains(".mlp.") => ("dense mlp", bf16),
        Some(Role::Trunk) => ("moe trunk", bf16),
        _ => ("small", false),
    }
}

#[derive(Default)]
struct ClassAcc {
    tensors: usize,
    packed: bool,
    bytes: u64,
    stored: u64,
    raw_blocks: u64,
    blocks: u64,
    hist: PlaneHist,
}

/// Packs checkpoint `src` into directory `out` (which must not exist), or with `out`
/// `None` only measures: every packed tensor is coded in memory, block by block.
/// `progress(done_bytes, total_bytes)` is called after each tensor.
///
/// The new directory holds `model.safetensors` (tensors kept as they are),
/// `lossless.pack`, and the source's other files (`config.json`, tokenizer files,
/// `tensors.sha256`; not `checksums.sha256`, whose file sums do not apply). It is
/// written as `OUT.partial` and renamed when complete, after every packed tensor was
/// decoded back from disk and matched `tensors.sha256` (and every kept one was re-read
/// and matched). Memory: a few blocks and copy buffers, plus the block table.
///
/// Errors: an invalid source, a source that is itself packed, a missing or incomplete
/// `tensors.sha256` (write it with `memdial checksum`), a source tensor whose bytes do
/// not match it, an existing `out`, IO errors.
pub fn pack_checkpoint(
    src: &Path,
    out: Option<&Path>,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<PackReport> {
    pack_checkpoint_with(src, out, Codec::Smallest, progress)
}

/// [`pack_checkpoint`] with the block kinds `codec` allows.
pub fn pack_checkpoint_with(
    src: &Path,
    out: Option<&Path>,
    codec: Codec,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<PackReport> {
    let t0 = Instant::now();
    let c = Checkpointed::read(src)?.validated()?;
    let ck = &c.ck;
    if ck.lossless.is_some() {
        bail!("{} is already packed", src.display());
    }
    let man_path = src.join("tensors.sha256");
    if !man_path.exists() {
        return Err(crate::util::error::UsageError::Invalid(format!(
            "packing verifies every tensor against {} (write it with `memdial checksum --model {}`)",
            man_path.display(),
            src.display()
        ))
        .into());
    }
    let manifest = crate::format::manifest::load_manifest(src, "")?;
    let mut roles: HashMap<&str, Role> = HashMap::new();
    for s in &c.specs {
        for n in std::iter::once(&s.name).chain(s.aliases.iter()) {
            roles.insert(n.as_str(), s.role);
        }
    }
    let mut names: Vec<(&String, &TensorLoc)> = ck.tensors.iter().collect();
    names.sort_by_key(|(_, t)| (t.shard, t.offset));
    for (n, _) in &names {
        if !manifest.contains_key(n.as_str()) {
            bail!(
                "{} has no entry for tensor {n} (write it with `memdial checksum --model {}`)",
                man_path.display(),
                src.display()
            );
        }
    }
    let class_of = |n: &str, t: &TensorLoc| classify(n, roles.get(n).copied(), &t.dtype);
    let total: u64 = names.iter().map(|(_, t)| t.len).sum();

    let tmp = out.map(|o| {
        let mut s = o.as_os_str().to_owned();
        s.push(".partial");
        PathBuf::from(s)
    });
    if let (Some(o), Some(tmp)) = (out, &tmp) {
        if o.exists() {
            return Err(crate::util::error::UsageError::Invalid(format!(
                "{} already exists (remove it or choose another --out)",
                o.display()
            ))
            .into());
        }
        if tmp.exists() {
            std::fs::remove_dir_all(tmp)
                .with_context(|| format!("cannot remove the leftover {}", tmp.display()))?;
        }
        std::fs::create_dir_all(tmp).with_context(|| format!("cannot create {}", tmp.display()))?;
    }
    let shards = ShardFiles::open(&ck.shards)?;
    let mut acc: BTreeMap<&'static str, ClassAcc> = BTreeMap::new();
    let mut done = 0u64;

    // 1. Tensors kept as they are: model.safetensors (data 4096-aligned, contiguous).
    let raw: Vec<&(&String, &TensorLoc)> =
        names.iter().filter(|(n, t)| !class_of(n, t).1).collect();
    let mut header = serde_json::Map::new();
    header.insert(
        "__metadata__".into(),
        serde_json::json!({ "format": "pt", "packed_by": "memdial pack --lossless" }),
    );
    let mut pos = 0u64;
    for (n, t) in &raw {
        header.insert(
            n.to_string(),
            serde_json::json!({ "dtype": t.dtype, "shape": t.shape, "data_offsets": [pos, pos + t.len] }),
        );
        pos += t.len;
    }
    let mut json = serde_json::to_vec(&serde_json::Value::Object(header))?;
    let data_start = (8 + json.len() as u64).div_ceil(PAGE) * PAGE;
    json.resize((data_start - 8) as usize, b' ');
    let st = match &tmp {
        Some(d) => {
            let mut f = File::create(d.join("model.safetensors"))?;
            f.write_all(&(json.len() as u64).to_le_bytes())?;
            f.write_all(&json)?;
            Some(f)
        }
        None => None,
    };
    let mut buf = vec![0u8; COPY_CHUNK];
    let mut wpos = data_start;
    for (n, t) in &raw {
        let (class, _) = class_of(n, t);
        let a = acc.entry(class).or_default();
        let sha = shards.read_chunks(n, t, &mut buf, |chunk| {
            if t.dtype == "BF16" {
                a.hist.add_bf16(chunk);
            } else {
                a.hist.add_bytes(chunk);
            }
            if let Some(f) = &st {
                f.write_all_at(chunk, wpos)?;
            }
            wpos += chunk.len() as u64;
            Ok(())
        })?;
        check_source(n, &sha, &manifest)?;
        a.tensors += 1;
        a.bytes += t.len;
        a.stored += t.len;
        done += t.len;
        progress(done, total);
    }
    if let Some(f) = st {
        f.sync_all()?;
    }

    // 2. Packed tensors: lossless.pack.
    let packed: Vec<&(&String, &TensorLoc)> =
        names.iter().filter(|(n, t)| class_of(n, t).1).collect();
    let mut writer = match &tmp {
        Some(d) => Some(PackWriter::create(&d.join(PACK_FILE))?),
        None => None,
    };
    let mut coded = Vec::with_capacity(BLOCK_BYTES + 64);
    for (n, t) in &packed {
        let (class, _) = class_of(n, t);
        let a = acc.entry(class).or_default();
        a.packed = true;
        if let Some(w) = &mut writer {
            w.begin_tensor(n, &t.dtype, &t.shape, t.len);
        }
        let sha = shards.read_chunks(n, t, &mut buf[..BLOCK_BYTES], |block| {
            a.hist.add_bf16(block);
            let kind = codec::encode_as(codec, block, PAGE as usize, &mut coded);
            a.blocks += 1;
            if kind == Kind::Raw {
                a.raw_blocks += 1;
            }
            a.stored += (coded.len() as u64).div_ceil(PAGE) * PAGE;
            if let Some(w) = &mut writer {
                w.block(kind, &coded, block.len())?;
            }
            Ok(())
        })?;
        check_source(n, &sha, &manifest)?;
        if let Some(w) = &mut writer {
            w.end_tensor(sha);
        }
        a.tensors += 1;
        a.bytes += t.len;
        done += t.len;
        progress(done, total);
    }
    let mut verified = 0;
    if let (Some(tmp), Some(w), Some(o)) = (&tmp, writer, out) {
        copy_other_files(src, tmp)?;
        let source = identity_of(src)?;
        let companion = identity_of(tmp)?;
        w.finish(&src.display().to_string(), codec, source, companion)?;
        verified = verify_written(tmp, &manifest)?;
        sync_dir(tmp);
        std::fs::rename(tmp, o)
            .with_context(|| format!("cannot rename {} to {}", tmp.display(), o.display()))?;
        if let Some(parent) = o.parent() {
            sync_dir(parent);
        }
    }
    let classes = acc
        .into_iter()
        .map(|(class, a)| ClassReport {
            class: class.to_string(),
            tensors: a.tensors,
            packed: a.packed,
            bytes: a.bytes,
            stored_bytes: a.stored,
            raw_blocks: a.raw_blocks,
            blocks: a.blocks,
            stats: a.hist.summary(),
        })
        .collect();
    Ok(PackReport {
        source: src.display().to_string(),
        out: out.map(|o| o.display().to_string()),
        classes,
        packed_tensors: packed.len(),
        raw_tensors: raw.len(),
        verified_tensors: verified,
        codec: codec.as_str().to_string(),
        seconds: t0.elapsed().as_secs_f64(),
    })
}

fn check_source(name: &str, got: &str, manifest: &HashMap<String, String>) -> Result<()> {
    match manifest.get(name) {
        Some(w) if w == got => Ok(()),
        w => bail!(
            "source tensor {name} has sha256 {got}, tensors.sha256 says {} (corrupt source or stale manifest)",
            w.map(|s| s.as_str()).unwrap_or("nothing")
        ),
    }
}

/// Copies the regular files of `src` other than safetensors shards, their index and
/// `checksums.sha256` into `dst`.
fn copy_other_files(src: &Path, dst: &Path) -> Result<()> {
    for e in std::fs::read_dir(src).with_context(|| format!("cannot list {}", src.display()))? {
        let e = e?;
        let name = e.file_name().to_string_lossy().into_owned();
        let skip = name.ends_with(".safetensors")
            || name == "model.safetensors.index.json"
            || name == "checksums.sha256"
            || name == PACK_FILE;
        if skip || !e.file_type()?.is_file() {
            continue;
        }
        std::fs::copy(e.path(), dst.join(&name))
            .with_context(|| format!("cannot copy {name} to {}", dst.display()))?;
    }
    Ok(())
}

/// Opens the written directory as a checkpoint, decodes every packed tensor from disk
/// and re-reads every kept one, comparing each with the manifest; returns the number
/// of packed tensors verified.
fn verify_written(dir: &Path, manifest: &HashMap<String, String>) -> Result<usize> {
    let ck = Checkpoint::open(dir)?;
    let packed = ck
        .lossless
        .clone()
        .context("internal: the written directory has no pack")?;
    let pool = StagingPool::new(&packed.index);
    let path = ck.shards[packed.shard].path.clone();
    let mut n = 0;
    for t in &packed.index.header.tensors {
        let bytes = decode_tensor(&packed, &path, &t.name, &pool)?;
        let got = sha256_hex(&bytes);
        if manifest.get(&t.name) != Some(&got) || t.sha256 != got {
            bail!(
                "packing failed: tensor {} decodes from {} to sha256 {got}, tensors.sha256 says {}",
                t.name,
                path.display(),
                manifest
                    .get(&t.name)
                    .map(|s| s.as_str())
                    .unwrap_or("nothing")
            );
        }
        n += 1;
    }
    let mut buf = vec![0u8; COPY_CHUNK];
    let shards = ShardFiles::open(&ck.shards)?;
    for (name, t) in ck.tensors.iter().filter(|(_, t)| t.shard != packed.shard) {
        let got = shards.read_chunks(name, t, &mut buf, |_| Ok(()))?;
        if manifest.get(name) != Some(&got) {
            bail!("packing failed: kept tensor {name} reads back with sha256 {got}");
        }
    }
    Ok(n)
}

fn sync_dir(d: &Path) {
    if let Ok(f) = File::open(d) {
        let _ = f.sync_all();
    }
}
