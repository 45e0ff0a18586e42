//! The packed layouts a sweep's `lossless` and `raw` points read (the `layout` axis,
//! [`crate::sweep::layout`]): for `lossless` a directory given with `--packed`, else
//! the model packed once (`memdial pack --lossless`, default codec, or `memdial pack
//! --raw`) into a cache outside the model directory, keyed by the source's identity
//! and the layout so a changed model is packed again.
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

/// The layout of `kind` in `packed`, if prepared.
pub fn find(packed: &[PackedLayout], kind: LayoutKind) -> Option<&PackedLayout> {
    packed.iter().find(|p| p.kind == kind)
}

/// The packed layout `kind` (`lossless` or `raw`) of `model`: `given` (checked to be
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
    let codec = kind
        .codec()
        .context("internal: the safetensors layout is not packed")?;
    let source = identity_of(model)?;
    if let Some(d) = given {
        return open_checked(d, kind, &source).map_err(|e| usage(format!("--packed: {e:#}")));
    }
    if source.manifest_sha256 == "none" {
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
    memdial::tools::pack::pack_checkpoint_with(model, Some(&dir), codec, &mut |_, _| {})
        .with_context(|| format!("packing {} for the `{kind}` layout", model.display()))?;
    open_checked(&dir, kind, &source)
}

/// The cache key of a source and layout: SHA-256 (hex) of its identity, the layout's
/// codec and the pack format version (the lossless key is the one caches were made
/// with before the `raw` layout existed).
fn cache_key(source: &Identity, kind: LayoutKind) -> String {
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
