//! The packed layouts a sweep's `lossless`, `raw` and `rvqN` points read (the
//! `layout` axis, [`crate::sweep::layout`]): for `lossless` a directory given with
//! `--packed`, else the model packed once (`memdial pack --lossless`, default codec,
//! `memdial pack --raw` or `memdial pack --rvq N`) into a cache outside the model
//! directory, keyed by the source's identity and the layout so a changed model is
//! packed again. An `rvqN` entry records its source in [`RVQ_SOURCE`].
//!
//! The cache is `$MEMDIAL_CACHE_DIR/packed/`, else `$XDG_CACHE_HOME/memdial/packed/`,
//! else `~/.cache/memdial/packed/`; one entry per source identity and layout,
//! `<model dir name>-<16 hex digits>`. Two sweeps packing the same model wait for
//! each other (a lock file next to the entry).

use std::fs::OpenOptions;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use memdial::format::checkpoint::Checkpoint;
use memdial::format::lossless::pack::{identity_of, Identity, VERSION};

use crate::args::usage;
use crate::sweep::layout::LayoutKind;

/// Environment variable naming the cache directory (the packed layouts go in its
/// `packed/`).
pub const CACHE_ENV: &str = "MEMDIAL_CACHE_DIR";

/// The file of an `rvqN` cache entry naming the checkpoint it was packed from (its
/// safetensors identity) and its expert bytes ratio.
pub const RVQ_SOURCE: &str = "memdial-rvq-source.json";

/// What [`RVQ_SOURCE`] holds.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
struct RvqSource {
    /// The source's safetensors identity ([`Identity::safetensors_hash`]).
    safetensors_hash: String,
    /// Bits per routed weight.
    bits: usize,
    /// (codes + codebooks) bytes ÷ the source's routed expert bytes.
    ratio: f64,
}

/// A packed layout of the sweep's model.
#[derive(Debug, Clone)]
pub struct PackedLayout {
    /// Which layout (`lossless` or `raw`).
    pub kind: LayoutKind,
    /// The packed checkpoint directory (canonical).
    pub dir: PathBuf,
    /// Its files the store reads (`model.safetensors`, `lossless.pack`): evicted
    /// before every run and watched during `lossless` runs.
    pub shard_files: Vec<PathBuf>,
    /// Stored bytes / decoded bytes of its packed tensors (`rvqN`: codes and codebooks
    /// ÷ the source's routed expert bytes).
    pub ratio: f64,
}

/// The cache root: `$MEMDIAL_CACHE_DIR`, `$XDG_CACHE_HOME/memdial` or
/// `$HOME/.cache/memdial`. Errors: none of them is set.
pub fn cache_root() -> Result<PathBuf> {
    let var = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    if let Some(d) = var(CACHE_ENV) {
        return Ok(d);
    }
    if let Some(d) = var("XDG_CACHE_HOME") {
        return Ok(d.join("memdial"));
    }
    match var("HOME") {
        Some(h) => Ok(h.join(".cache").join("memdial")),
        None => Err(usage(format!(
            "no cache directory for the packed layout: set {CACHE_ENV} or give --packed DIR"
        ))),
    }
}

/// The layout of `kind` in `packed`, if prepared.
pub fn find(packed: &[PackedLayout], kind: LayoutKind) -> Option<&PackedLayout> {
    packed.iter().find(|p| p.kind == kind)
}

/// The packed layout `kind` (`lossless`, `raw` or `rvqN`) of `model`: `given` (checked to be
/// packed from `model`), else the cached one, packing it first when there is none or
/// it is of another source. Progress notes go to stderr unless `quiet`.
///
/// Errors (usage): `model` has no `tensors.sha256` (packing verifies against it),
/// `given` is not a packed layout of `model`; packing errors.
pub fn prepare(
    model: &Path,
    kind: LayoutKind,
    given: Option<&Path>,
    quiet: bool,
) -> Result<PackedLayout> {
    if kind == LayoutKind::Safetensors {
        bail!("internal: the safetensors layout is not packed");
    }
    let source = identity_of(model)?;
    if let Some(d) = given {
        return open_checked(d, kind, &source).map_err(|e| usage(format!("--packed: {e:#}")));
    }
    if source.manifest_sha256 == "none" && !kind.is_lossy() {
        return Err(usage(format!(
            "the {kind} layout is packed from {m} and every tensor verified against its \
             tensors.sha256, which it lacks: write it with `memdial checksum --model {m}`, \
             or give --packed DIR",
            m = model.display()
        )));
    }
    let root = cache_root()?.join("packed");
    std::fs::create_dir_all(&root).with_context(|| format!("cannot create {}", root.display()))?;
    let name = format!(
        "{}-{}",
        model
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "model".into()),
        &cache_key(&source, kind)[..16]
    );
    let dir = root.join(&name);
    let _lock = lock(&root.join(format!("{name}.lock")))?;
    if dir.exists() {
        match open_checked(&dir, kind, &source) {
            Ok(p) => {
                if !quiet {
                    eprintln!(
                        "sweep: {kind} layout: {} (cached; packed tensors at {:.4} of their bytes)",
                        p.dir.display(),
                        p.ratio
                    );
                }
                return Ok(p);
            }
            Err(e) => {
                eprintln!(
                    "note: the cached {kind} layout {} is not usable ({e:#}); packing again",
                    dir.display()
                );
                std::fs::remove_dir_all(&dir)
                    .with_context(|| format!("cannot remove {}", dir.display()))?;
            }
        }
    }
    if !quiet {
        eprintln!(
            "sweep: packing the {kind} layout of {} into {} (once per model)",
            model.display(),
            dir.display()
        );
    }
    match (kind, kind.codec()) {
        (LayoutKind::Rvq(bits), _) => pack_rvq(model, &dir, bits as usize, &source, quiet)?,
        (_, Some(codec)) => {
            memdial::tools::pack::pack_checkpoint_with(model, Some(&dir), codec, &mut |_, _| {})
                .with_context(|| format!("packing {} for the `{kind}` layout", model.display()))?;
        }
        _ => bail!("internal: no packer for the `{kind}` layout"),
    }
    open_checked(&dir, kind, &source)
}

/// `memdial pack --rvq bits` of `model` into `dir` (absent), then [`RVQ_SOURCE`];
/// progress on stderr unless `quiet`.
fn pack_rvq(model: &Path, dir: &Path, bits: usize, source: &Identity, quiet: bool) -> Result<()> {
    // Coding a large model takes minutes: a note every tenth of the matrices.
    let mut shown = 0;
    let mut progress = |done: u64, total: u64| {
        let tenth = (done * 10).checked_div(total).unwrap_or(10);
        if tenth > shown && !quiet {
            shown = tenth;
            eprintln!("sweep: rvq{bits}: {done} of {total} expert matrices coded");
        }
    };
    let r = memdial::tools::rvq::pack_rvq(model, dir, bits, &mut progress)
        .with_context(|| format!("packing {} for the `rvq{bits}` layout", model.display()))?;
    let rec = RvqSource {
        safetensors_hash: source.safetensors_hash.clone(),
        bits,
        ratio: (r.rvq_expert_bytes + r.codebook_bytes) as f64 / r.source_expert_bytes.max(1) as f64,
    };
    crate::export::write_json(&dir.join(RVQ_SOURCE), &rec)
}

/// The cache key of a source and layout: SHA-256 (hex) of its identity, the layout's
/// codec and the pack format version (the lossless key is the one caches were made
/// with before the `raw` layout existed).
fn cache_key(source: &Identity, kind: LayoutKind) -> String {
    if let LayoutKind::Rvq(bits) = kind {
        // The training settings are fixed by the format (docs/lossless.md).
        return crate::sweep::util::sha256_hex(
            format!("{}\nrvq{bits}", source.safetensors_hash).as_bytes(),
        );
    }
    let codec = kind.codec().map_or("none", |c| c.as_str());
    crate::sweep::util::sha256_hex(
        format!(
            "{}\n{}\nbf16-planes-{codec}\nv{VERSION}",
            source.safetensors_hash, source.manifest_sha256
        )
        .as_bytes(),
    )
}

/// Opens the packed directory `dir` (its pack refused when stale) and checks it was
/// packed from the checkpoint of identity `source` with the codec of `kind`.
fn open_checked(dir: &Path, kind: LayoutKind, source: &Identity) -> Result<PackedLayout> {
    let ck = Checkpoint::open(dir)?;
    if let LayoutKind::Rvq(bits) = kind {
        return open_rvq(dir, ck, bits as usize, source);
    }
    let Some(p) = ck.lossless.as_ref() else {
        bail!(
            "{} is not a packed layout (no lossless.pack)",
            dir.display()
        );
    };
    if p.index.header.source != *source {
        bail!(
            "{} was packed from another checkpoint ({}), not from this model",
            dir.display(),
            p.index.header.source_dir
        );
    }
    // `raw` must be the raw control; `lossless` any coded pack (a `--packed` dict15 one too).
    let is_raw = p.index.header.codec == "bf16-planes-raw";
    if is_raw != (kind == LayoutKind::Raw) {
        bail!(
            "{} is packed with {} blocks, which is not the {kind} layout{}",
            dir.display(),
            p.index.header.codec,
            if is_raw {
                " (it is `memdial pack --raw` output)"
            } else {
                ""
            }
        );
    }
    Ok(PackedLayout {
        kind,
        dir: std::fs::canonicalize(dir)?,
        shard_files: ck.shards.iter().map(|s| s.path.clone()).collect(),
        ratio: p.ratio(),
    })
}

/// [`open_checked`] for an `rvqN` entry: its [`RVQ_SOURCE`] names `source` and `bits`,
/// and its config is `memdial-rvq` at those bits.
fn open_rvq(dir: &Path, ck: Checkpoint, bits: usize, source: &Identity) -> Result<PackedLayout> {
    let rec: RvqSource = serde_json::from_str(
        &std::fs::read_to_string(dir.join(RVQ_SOURCE))
            .with_context(|| format!("{} has no {RVQ_SOURCE}", dir.display()))?,
    )
    .with_context(|| format!("{}: unreadable {RVQ_SOURCE}", dir.display()))?;
    if rec.safetensors_hash != source.safetensors_hash || rec.bits != bits {
        bail!(
            "{} holds rvq{} of another checkpoint, not rvq{bits} of this model",
            dir.display(),
            rec.bits
        );
    }
    let cfg = memdial::format::config::load_config(dir)?;
    let stages = match cfg.moe.as_ref().map(|m| m.expert_format) {
        Some(memdial::format::config::ExpertFormat::Rvq(r)) => Some(r.stages),
        _ => None,
    };
    if stages != Some(bits) {
        bail!(
            "{}: its config is not memdial-rvq at {bits} bits",
            dir.display()
        );
    }
    Ok(PackedLayout {
        kind: LayoutKind::Rvq(bits as u8),
        dir: std::fs::canonicalize(dir)?,
        shard_files: ck.shards.iter().map(|s| s.path.clone()).collect(),
        ratio: rec.ratio,
    })
}

/// An exclusive lock on `path`, waiting for another holder.
fn lock(path: &Path) -> Result<std::fs::File> {
    let f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .with_context(|| format!("cannot open {}", path.display()))?;
    rustix::fs::flock(&f, rustix::fs::FlockOperation::LockExclusive)
        .with_context(|| format!("cannot lock {}", path.display()))?;
    Ok(f)
}
