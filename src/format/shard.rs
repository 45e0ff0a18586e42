//! The shard table of a checkpoint: where one tensor lies (shard file, absolute byte
//! offset, length, dtype, shape), what one shard file is, and reading a safetensors
//! shard's header. [`crate::format::checkpoint`] builds the table of a directory from
//! these; [`crate::format::lossless`] adds a pack's shard and tensors to it.
//!
//! Headers are parsed by deserializing `safetensors::tensor::Metadata` from bytes
//! `[8, 8+n)` of each shard (the crate's `read_metadata` wants the whole file, see
//! docs/io.md §1). The absolute offset of a tensor is `8 + n + data_offsets.0`.

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use sha2::{Digest, Sha256};

use crate::util::digest::hex;

/// Location and type of one tensor on disk.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorLoc {
    /// Index into [`crate::format::checkpoint::Checkpoint::shards`].
    pub shard: usize,
    /// Absolute byte offset in the shard file.
    pub offset: u64,
    /// Length in bytes.
    pub len: u64,
    /// safetensors dtype string (`BF16`, `F32`, `U8`, …).
    pub dtype: String,
    pub shape: Vec<usize>,
}

/// One shard file.
#[derive(Debug, Clone)]
pub struct Shard {
    pub path: PathBuf,
    /// File size in bytes.
    pub size: u64,
    /// Size of the 8-byte length prefix plus JSON header (start of the data region).
    pub data_start: u64,
}

/// The shard files of a table, open for reading tensors' bytes as they are stored (one
/// open file per shard). The tensors of a lossless pack's shard are coded blocks at
/// logical offsets: read them with [`crate::format::lossless::read::read_logical`].
pub struct ShardFiles<'a> {
    shards: &'a [Shard],
    files: Vec<File>,
}

impl<'a> ShardFiles<'a> {
    /// Opens every shard of `shards`. Errors: a shard that cannot be opened (named).
    pub fn open(shards: &'a [Shard]) -> Result<Self> {
        let files = shards
            .iter()
            .map(|s| {
                File::open(&s.path).with_context(|| format!("cannot open {}", s.path.display()))
            })
            .collect::<Result<_>>()?;
        Ok(ShardFiles { shards, files })
    }

    /// Fills `buf` with the bytes of tensor `name` (at `t`) from byte `off` of the tensor.
    ///
    /// Errors: a failed or short read, naming the tensor and its shard file.
    pub fn read_at(&self, name: &str, t: &TensorLoc, off: u64, buf: &mut [u8]) -> Result<()> {
        self.files[t.shard]
            .read_exact_at(buf, t.offset + off)
            .with_context(|| {
                format!(
                    "reading {name} from {}",
                    self.shards[t.shard].path.display()
                )
            })
    }

    /// Reads tensor `name` (at `t`) front to back in chunks of at most `buf.len()` bytes,
    /// handing each to `each`, and returns the tensor's SHA-256 (lower-case hex).
    ///
    /// Errors: as [`ShardFiles::read_at`]; `each`'s errors.
    pub fn read_chunks(
        &self,
        name: &str,
        t: &TensorLoc,
        buf: &mut [u8],
        mut each: impl FnMut(&[u8]) -> Result<()>,
    ) -> Result<String> {
        let mut h = Sha256::new();
        let mut off = 0u64;
        while off < t.len {
            let k = (t.len - off).min(buf.len() as u64) as usize;
            self.read_at(name, t, off, &mut buf[..k])?;
            h.update(&buf[..k]);
            each(&buf[..k])?;
            off += k as u64;
        }
        Ok(hex(&h.finalize()))
    }
}

/// Largest JSON header accepted (the format's own limit is 100 MB).
const MAX_HEADER: u64 = 100_000_000;

/// Opens a shard for reading its header without read-ahead (`POSIX_FADV_RANDOM`
/// on this open file), so indexing a checkpoint does not pull megabytes of tensor
/// data into the page cache behind the budget's back (a device's read-ahead is often
/// 128 KiB–8 MiB). Pair with [`drop_header_pages`].
pub(crate) fn open_for_header(path: &Path) -> Result<File> {
    let f = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let _ = rustix::fs::fadvise(&f, 0, None, rustix::fs::Advice::Random);
    Ok(f)
}

/// Drops the pages of `[0, len)` (rounded outward to whole pages) that reading a
/// header put in the page cache (`POSIX_FADV_DONTNEED`; pages another process has
/// mapped stay). Best effort.
pub(crate) fn drop_header_pages(f: &File, len: u64) {
    let ps = rustix::param::page_size() as u64;
    let end = len.div_ceil(ps) * ps;
    let _ = rustix::fs::fadvise(
        f,
        0,
        std::num::NonZeroU64::new(end),
        rustix::fs::Advice::DontNeed,
    );
}

/// Reads one shard's header (without read-ahead, and dropping the pages it read
/// from the page cache afterwards). Errors name the file.
pub fn read_header(path: &Path) -> Result<(u64, safetensors::tensor::Metadata)> {
    let mut f = open_for_header(path)?;
    let size = f.metadata()?.len();
    let mut len = [0u8; 8];
    f.read_exact(&mut len).with_context(|| {
        format!(
            "{}: file too short for a safetensors header",
            path.display()
        )
    })?;
    let n = u64::from_le_bytes(len);
    if n > MAX_HEADER || 8 + n > size {
        bail!(
            "{}: header length {n} is invalid for a file of {size} bytes",
            path.display()
        );
    }
    let mut buf = vec![0u8; n as usize];
    f.read_exact(&mut buf)
        .with_context(|| format!("{}: cannot read header", path.display()))?;
    drop_header_pages(&f, 8 + n);
    // The crate's map keeps the last of a repeated name and then reports the hole it
    // leaves as an "invalid offset": name the duplicate instead.
    if let Ok(Some(dup)) = first_duplicate_key(&buf) {
        bail!(
            "{}: malformed safetensors header: tensor name {dup:?} appears more than once",
            path.display()
        );
    }
    let meta: safetensors::tensor::Metadata = serde_json::from_slice(&buf)
        .with_context(|| format!("{}: malformed safetensors header", path.display()))?;
    Ok((8 + n, meta))
}

/// The first top-level key that a JSON object text repeats, if any (`Err` when the
/// text is not a JSON object; the caller's real parse reports that).
pub(crate) fn first_duplicate_key(json: &[u8]) -> serde_json::Result<Option<String>> {
    use serde::de::{Deserializer, IgnoredAny, MapAccess, Visitor};
    struct Dup;
    impl<'de> Visitor<'de> for Dup {
        type Value = Option<String>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a JSON object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Self::Value, A::Error> {
            let mut seen = std::collections::HashSet::new();
            let mut dup = None;
            while let Some(k) = m.next_key::<String>()? {
                m.next_value::<IgnoredAny>()?;
                if dup.is_none() && !seen.insert(k.clone()) {
                    dup = Some(k);
                }
            }
            Ok(dup)
        }
    }
    serde_json::Deserializer::from_slice(json).deserialize_map(Dup)
}
