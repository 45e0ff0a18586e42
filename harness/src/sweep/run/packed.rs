//! The lossless layout a sweep's `lossless` points read (the `layout` axis,
//! [`crate::sweep::layout`]): a directory given with `--packed`, or the model packed
//! once (`memdial pack --lossless`, default codec) into a cache outside the model
//! directory, keyed by the source's identity so a changed model is packed again.
//!
//! The cache is `$MEMDIAL_CACHE_DIR/packed/`, else `$XDG_CACHE_HOME/memdial/packed/`,
//! else `~/.cache/memdial/packed/`; one entry per source identity,
//! `<model dir name>-<16 hex digits>`. Two sweeps packing the same model wait for
//! each other (a lock file next to the entry).

use std::fs::OpenOptions;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use memdial::format::checkpoint::Checkpoint;
use memdial::format::lossless::pack::{identity_of, Identity, VERSION};

use crate::args::usage;

/// Environment variable naming the cache directory (the packed layouts go in its
/// `packed/`).
pub const CACHE_ENV: &str = "MEMDIAL_CACHE_DIR";

/// The packed layout of the sweep's model.
#[derive(Debug, Clone)]
pub struct PackedLayout {
    /// The packed checkpoint directory (canonical).
    pub dir: PathBuf,
    /// Its files the store reads (`model.safetensors`, `lossless.pack`): evicted
    /// before every run and watched during `lossless` runs.
    pub shard_files: Vec<PathBuf>,
    /// Stored bytes / decoded bytes of its packed tensors.
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

/// The packed layout of `model`: `given` (checked to be packed from `model`), else
/// the cached one, packing it first when there is none or it is of another source.
/// Progress notes go to stderr unless `quiet`.
///
/// Errors (usage): `model` has no `tensors.sha256` (packing verifies against it),
/// `given` is not a packed layout of `model`; packing errors.
pub fn prepare(model: &Path, given: Option<&Path>, quiet: bool) -> Result<PackedLayout> {
    let source = identity_of(model)?;
    if let Some(d) = given {
        return open_checked(d, &source).map_err(|e| usage(format!("--packed: {e:#}")));
    }
    if source.manifest_sha256 == "none" {
        return Err(usage(format!(
            "the lossless layout is packed from {m} and every tensor verified against its \
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
        &cache_key(&source)[..16]
    );
    let dir = root.join(&name);
    let _lock = lock(&root.join(format!("{name}.lock")))?;
    if dir.exists() {
        match open_checked(&dir, &source) {
            Ok(p) => {
                if !quiet {
                    eprintln!(
                        "sweep: lossless layout: {} (cached; packed tensors at {:.4} of their bytes)",
                        p.dir.display(),
                        p.ratio
                    );
                }
                return Ok(p);
            }
            Err(e) => {
                eprintln!(
                    "note: the cached lossless layout {} is not usable ({e:#}); packing again",
                    dir.display()
                );
                std::fs::remove_dir_all(&dir)
                    .with_context(|| format!("cannot remove {}", dir.display()))?;
            }
        }
    }
    if !quiet {
        eprintln!(
            "sweep: packing the lossless layout of {} into {} (once per model)",
            model.display(),
            dir.display()
        );
    }
    memdial::tools::pack::pack_checkpoint(model, Some(&dir), &mut |_, _| {})
        .with_context(|| format!("packing {} for the `lossless` layout", model.display()))?;
    open_checked(&dir, &source)
}

/// The cache key of a source: SHA-256 (hex) of its identity, the default codec and
/// the pack format version.
fn cache_key(source: &Identity) -> String {
    crate::sweep::util::sha256_hex(
        format!(
            "{}\n{}\nbf16-planes-smallest\nv{VERSION}",
            source.safetensors_hash, source.manifest_sha256
        )
        .as_bytes(),
    )
}

/// Opens the packed directory `dir` (its pack refused when stale) and checks it was
/// packed from the checkpoint of identity `source`.
fn open_checked(dir: &Path, source: &Identity) -> Result<PackedLayout> {
    let ck = Checkpoint::open(dir)?;
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
    Ok(PackedLayout {
        dir: std::fs::canonicalize(dir)?,
        shard_files: ck.shards.iter().map(|s| s.path.clone()).collect(),
        ratio: p.ratio(),
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
