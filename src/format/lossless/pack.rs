//! The `lossless.pack` file: a preamble, coded blocks at 4096-byte aligned offsets,
//! and a footer (JSON index + binary block table). Spec: `docs/lossless.md`.
//!
//! Packed tensors live in a *logical* address space: tensor `t` occupies
//! `[t.offset, t.offset + t.len)`, offsets 4096-aligned in source order, and its bytes
//! are blocks of [`BLOCK_BYTES`] decoded bytes (the last one shorter). A checkpoint
//! lists packed tensors at their logical offsets in the pack's shard, so read plans
//! computed over them (coalescing, alignment, buffer sizes) hold the decoded bytes.

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::Path;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::codec::Kind;
use crate::util::digest::hex;

/// File name of the pack inside a packed checkpoint directory.
pub const PACK_FILE: &str = "lossless.pack";
/// Magic bytes at offset 0.
pub const MAGIC: &[u8; 8] = b"MDLPACK\0";
/// Format version this build reads and writes.
pub const VERSION: u32 = 1;
/// Decoded bytes per block (the last block of a tensor may be shorter).
pub const BLOCK_BYTES: usize = 256 << 10;
/// Alignment of every block's offset and stored size, and of logical tensor offsets.
pub const PAGE: u64 = 4096;
/// Bytes of the preamble (the first block starts here).
pub const PREAMBLE: u64 = 4096;
/// Bytes of one block record in the footer's table.
pub const RECORD: usize = 24;

/// One coded block: where it is, how it is coded, its CRC-32 (of the stored bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockRec {
    /// File offset (multiple of [`PAGE`]).
    pub offset: u64,
    /// Coded bytes (the stored size is this rounded up to [`PAGE`]).
    pub coded_len: u32,
    pub kind: Kind,
    /// CRC-32 (IEEE) of the `coded_len` bytes.
    pub crc32: u32,
    /// Decoded bytes.
    pub decoded_len: u32,
}

impl BlockRec {
    fn to_bytes(self) -> [u8; RECORD] {
        let mut b = [0u8; RECORD];
        b[0..8].copy_from_slice(&self.offset.to_le_bytes());
        b[8..12].copy_from_slice(&self.coded_len.to_le_bytes());
        b[12] = self.kind as u8;
        b[16..20].copy_from_slice(&self.crc32.to_le_bytes());
        b[20..24].copy_from_slice(&self.decoded_len.to_le_bytes());
        b
    }
    fn from_bytes(b: &[u8]) -> Option<Self> {
        Some(BlockRec {
            offset: u64::from_le_bytes(b[0..8].try_into().ok()?),
            coded_len: u32::from_le_bytes(b[8..12].try_into().ok()?),
            kind: Kind::from_u8(b[12])?,
            crc32: u32::from_le_bytes(b[16..20].try_into().ok()?),
            decoded_len: u32::from_le_bytes(b[20..24].try_into().ok()?),
        })
    }
    /// Stored bytes on disk (coded length rounded up to [`PAGE`]).
    pub fn stored_len(&self) -> u64 {
        (self.coded_len as u64).div_ceil(PAGE) * PAGE
    }
}

/// One packed tensor of the footer's index.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PackedTensor {
    /// Name as in the source checkpoint.
    pub name: String,
    pub dtype: String,
    pub shape: Vec<usize>,
    /// Logical offset (multiple of [`PAGE`]) and decoded length, bytes.
    pub offset: u64,
    pub len: u64,
    /// Index of its first block in the block table; it has `⌈len / block_bytes⌉` blocks.
    pub first_block: usize,
    /// SHA-256 (hex) of the decoded bytes (= the source's `tensors.sha256` entry).
    pub sha256: String,
}

/// Identity of the checkpoint files a pack belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity {
    /// [`crate::format::checkpoint::model_content_hash`]-style hash of the safetensors shards.
    pub safetensors_hash: String,
    /// SHA-256 of `tensors.sha256`.
    pub manifest_sha256: String,
}

/// The footer's JSON part.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PackHeader {
    pub format: String,
    pub version: u32,
    pub codec: String,
    pub block_bytes: usize,
    /// The source checkpoint (directory as given, its identity).
    pub source_dir: String,
    pub source: Identity,
    /// The raw tensors' safetensors and manifest written next to the pack.
    pub companion: Identity,
    /// Logical size: end of the last tensor.
    pub logical_bytes: u64,
    pub tensors: Vec<PackedTensor>,
}

/// A pack's index as read at open.
#[derive(Debug, Clone)]
pub struct PackIndex {
    pub header: PackHeader,
    pub blocks: Vec<BlockRec>,
    /// File size, bytes.
    pub file_bytes: u64,
    /// Tensor indices sorted by logical offset (they are written in that order).
    order: Vec<usize>,
}

/// SHA-256 hex of a file's bytes, read in 8 MiB chunks.
pub fn file_sha256(path: &Path) -> Result<String> {
    let f = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 8 << 20];
    let mut off = 0u64;
    loop {
        let n = f
            .read_at(&mut buf, off)
            .with_context(|| format!("reading {}", path.display()))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
        off += n as u64;
    }
    Ok(hex(&h.finalize()))
}

/// Identity of the checkpoint files in `dir`: the content hash of its `*.safetensors`
/// shards (sorted names; name ‖ 0 ‖ size u64 LE ‖ length prefix and JSON header) and
/// the SHA-256 of its `tensors.sha256` (`"none"` when absent).
///
/// Errors: an unreadable directory or shard.
pub fn identity_of(dir: &Path) -> Result<Identity> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .with_context(|| format!("cannot list {}", dir.display()))?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".safetensors"))
        .collect();
    names.sort();
    let mut h = Sha256::new();
    for n in &names {
        let p = dir.join(n);
        let size = std::fs::metadata(&p)?.len();
        let (start, _) = crate::format::shard::read_header(&p)?;
        let f = File::open(&p)?;
        let mut head = vec![0u8; start as usize];
        f.read_exact_at(&mut head, 0)
            .with_context(|| format!("{}: cannot read header", p.display()))?;
        h.update(n.as_bytes());
        h.update([0u8]);
        h.update(size.to_le_bytes());
        h.update(&head);
    }
    let man = dir.join("tensors.sha256");
    let manifest_sha256 = if man.exists() {
        file_sha256(&man)?
    } else {
        "none".into()
    };
    Ok(Identity {
        safetensors_hash: hex(&h.finalize()),
        manifest_sha256,
    })
}

/// Writes a pack: blocks streamed in, then the footer and the preamble.
pub struct PackWriter {
    file: File,
    pos: u64,
    blocks: Vec<BlockRec>,
    tensors: Vec<PackedTensor>,
    logical: u64,
    pad: Vec<u8>,
}

impl PackWriter {
    /// Creates `path` (truncating it).
    pub fn create(path: &Path) -> Result<Self> {
        let file =
            File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
        file.write_all_at(&[0u8; PREAMBLE as usize], 0)?;
        Ok(PackWriter {
            file,
            pos: PREAMBLE,
            blocks: Vec::new(),
            tensors: Vec::new(),
            logical: 0,
            pad: vec![0u8; PAGE as usize],
        })
    }

    /// Starts tensor `name` of `len` decoded bytes; its blocks follow with [`Self::block`].
    pub fn begin_tensor(&mut self, name: &str, dtype: &str, shape: &[usize], len: u64) {
        self.logical = self.logical.div_ceil(PAGE) * PAGE;
        self.tensors.push(PackedTensor {
            name: name.to_string(),
            dtype: dtype.to_string(),
            shape: shape.to_vec(),
            offset: self.logical,
            len,
            first_block: self.blocks.len(),
            sha256: String::new(),
        });
        self.logical += len;
    }

    /// Appends one coded block (`coded`, of kind `kind`, decoding to `decoded_len` bytes).
    pub fn block(&mut self, kind: Kind, coded: &[u8], decoded_len: usize) -> Result<()> {
        let rec = BlockRec {
            offset: self.pos,
            coded_len: coded.len() as u32,
            kind,
            crc32: crc32fast::hash(coded),
            decoded_len: decoded_len as u32,
        };
        self.file.write_all_at(coded, self.pos)?;
        let pad = (rec.stored_len() - coded.len() as u64) as usize;
        self.file
            .write_all_at(&self.pad[..pad], self.pos + coded.len() as u64)?;
        self.pos += rec.stored_len();
        self.blocks.push(rec);
        Ok(())
    }

    /// Records the decoded SHA-256 of the tensor begun last.
    pub fn end_tensor(&mut self, sha256: String) {
        if let Some(t) = self.tensors.last_mut() {
            t.sha256 = sha256;
        }
    }

    /// Writes the footer and the preamble, syncs, and returns the index written.
    pub fn finish(
        mut self,
        source_dir: &str,
        codec: super::codec::Codec,
        source: Identity,
        companion: Identity,
    ) -> Result<PackHeader> {
        let header = PackHeader {
            format: "memdial-lossless".into(),
            version: VERSION,
            codec: format!("bf16-planes-{}", codec.as_str()),
            block_bytes: BLOCK_BYTES,
            source_dir: source_dir.to_string(),
            source,
            companion,
            logical_bytes: self.logical,
            tensors: std::mem::take(&mut self.tensors),
        };
        let json = serde_json::to_vec(&header)?;
        let mut table = Vec::with_capacity(self.blocks.len() * RECORD);
        for b in &self.blocks {
            table.extend_from_slice(&b.to_bytes());
        }
        let footer_at = self.pos;
        self.file.write_all_at(&json, footer_at)?;
        self.file
            .write_all_at(&table, footer_at + json.len() as u64)?;
        let mut h = Sha256::new();
        h.update(&json);
        h.update(&table);
        let mut pre = Vec::with_capacity(80);
        pre.extend_from_slice(MAGIC);
        pre.extend_from_slice(&VERSION.to_le_bytes());
        pre.extend_from_slice(&0u32.to_le_bytes());
        pre.extend_from_slice(&footer_at.to_le_bytes());
        pre.extend_from_slice(&(json.len() as u64).to_le_bytes());
        pre.extend_from_slice(&(self.blocks.len() as u64).to_le_bytes());
        pre.extend_from_slice(&h.finalize());
        self.file.write_all_at(&pre, 0)?;
        self.file.flush()?;
        self.file.sync_all()?;
        Ok(header)
    }
}

impl PackIndex {
    /// Reads and checks the preamble and footer of the pack at `path`.
    ///
    /// Errors: not a pack, an unsupported version, a footer whose SHA-256 does not
    /// match the preamble, or block records inconsistent with the tensors.
    pub fn read(path: &Path) -> Result<Self> {
        let f = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
        let file_bytes = f.metadata()?.len();
        let mut pre = [0u8; 72];
        f.read_exact_at(&mut pre, 0)
            .with_context(|| format!("{}: too short for a pack preamble", path.display()))?;
        if &pre[0..8] != MAGIC {
            bail!(
                "{} is not a memdial lossless pack (bad magic)",
                path.display()
            );
        }
        let version = u32::from_le_bytes(pre[8..12].try_into()?);
        if version != VERSION {
            bail!(
                "{}: pack format version {version}, this build reads version {VERSION} \
                 (re-run `memdial pack --lossless`)",
                path.display()
            );
        }
        let u = |a: usize| u64::from_le_bytes(pre[a..a + 8].try_into().expect("8 bytes"));
        let (footer_at, json_len, nblocks) = (u(16), u(24), u(32));
        let table_len = nblocks
            .checked_mul(RECORD as u64)
            .filter(|t| {
                footer_at
                    .checked_add(json_len)
                    .and_then(|x| x.checked_add(*t))
                    == Some(file_bytes)
            })
            .with_context(|| {
                format!(
                    "{}: footer at {footer_at} ({json_len} + {nblocks} blocks) does not end the {file_bytes}-byte file (truncated?)",
                    path.display()
                )
            })?;
        let mut foot = vec![0u8; (json_len + table_len) as usize];
        f.read_exact_at(&mut foot, footer_at)?;
        if Sha256::digest(&foot)[..] != pre[40..72] {
            bail!(
                "{}: footer checksum mismatch (corrupt pack)",
                path.display()
            );
        }
        let (json, table) = foot.split_at(json_len as usize);
        let header: PackHeader = serde_json::from_slice(json)
            .with_context(|| format!("{}: malformed pack index", path.display()))?;
        let blocks = table
            .chunks_exact(RECORD)
            .map(BlockRec::from_bytes)
            .collect::<Option<Vec<_>>>()
            .with_context(|| format!("{}: a block record has an unknown kind", path.display()))?;
        let idx = PackIndex {
            order: (0..header.tensors.len()).collect(),
            header,
            blocks,
            file_bytes,
        };
        idx.check(path, footer_at)?;
        Ok(idx)
    }

    fn check(&self, path: &Path, footer_at: u64) -> Result<()> {
        let bb = self.header.block_bytes as u64;
        let mut next_block = 0usize;
        let mut prev_end = 0u64;
        for t in &self.header.tensors {
            let n = t.len.div_ceil(bb) as usize;
            let ok = t.first_block == next_block
                && t.offset.is_multiple_of(PAGE)
                && t.offset >= prev_end
                && t.first_block + n <= self.blocks.len()
                && (0..n).all(|k| {
                    let b = &self.blocks[t.first_block + k];
                    b.decoded_len as u64 == bb.min(t.len - k as u64 * bb)
                        && b.offset.is_multiple_of(PAGE)
                        && b.offset >= PREAMBLE
                        && b.offset + b.stored_len() <= footer_at
                });
            if !ok {
                bail!(
                    "{}: the index of tensor {} does not match its blocks (corrupt pack)",
                    path.display(),
                    t.name
                );
            }
            next_block += n;
            prev_end = t.offset + t.len;
        }
        if next_block != self.blocks.len() {
            bail!("{}: blocks not owned by any tensor", path.display());
        }
        Ok(())
    }

    /// Tensors overlapping logical range `[start, end)`, in offset order.
    pub fn overlapping(&self, start: u64, end: u64) -> impl Iterator<Item = &PackedTensor> {
        let ts = &self.header.tensors;
        let first = self
            .order
            .partition_point(|&i| ts[i].offset + ts[i].len <= start);
        self.order[first..]
            .iter()
            .map(move |&i| &ts[i])
            .take_while(move |t| t.offset < end)
    }

    /// Stored bytes of all blocks (the pack's data size).
    pub fn stored_bytes(&self) -> u64 {
        self.blocks.iter().map(|b| b.stored_len()).sum()
    }

    /// Largest stored size of a tensor's blocks (bounds one staging buffer's use).
    pub fn max_tensor_stored(&self) -> u64 {
        let bb = self.header.block_bytes as u64;
        self.header
            .tensors
            .iter()
            .map(|t| {
                let n = t.len.div_ceil(bb) as usize;
                self.blocks[t.first_block..t.first_block + n]
                    .iter()
                    .map(|b| b.stored_len())
                    .sum::<u64>()
            })
            .max()
            .unwrap_or(0)
    }
}
