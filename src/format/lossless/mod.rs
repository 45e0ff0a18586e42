//! The lossless streamed layout: BF16 tensors re-encoded into independent, 4096-byte
//! aligned blocks that decode to the same bits, so a streamed token reads fewer bytes.
//!
//! A packed checkpoint directory (written by `memdial pack --lossless`) holds
//! `model.safetensors` with the tensors kept as they are (routed experts, the embedding
//! table, norms and other small tensors), `lossless.pack` with the packed ones (trunk
//! matrices and `lm_head`), and the source's `config.json`, tokenizer files and
//! `tensors.sha256` (the decoded tensors hash the same). Opening such a directory
//! ([`crate::format::checkpoint::Checkpoint::open`]) lists every packed tensor at its logical
//! offset in the pack's shard; the streaming store decodes on its IO threads
//! ([`read::read_logical`]), the resident store at open ([`decode_tensor`]).
//!
//! Files: `codec.rs` codes one block; `pack.rs` is the file format (spec in
//! `docs/lossless.md`); `read.rs` reads logical ranges through staging buffers;
//! `stats.rs` measures byte-plane entropy. Writing a pack from a checkpoint is a tool
//! over this layout: `crate::tools::pack`.

pub mod codec;
pub mod pack;
pub mod read;
pub mod stats;

use std::path::Path;
use std::sync::Arc;

use anyhow::{bail, Context, Result};

pub use pack::{PackIndex, PACK_FILE};

use crate::format::shard::{Shard, TensorLoc};
use crate::io::{IoMode, ShardFile};

/// A pack attached to a checkpoint: its index and the checkpoint shard it occupies.
#[derive(Debug)]
pub struct Packed {
    pub index: PackIndex,
    /// Index into [`crate::format::checkpoint::Checkpoint::shards`].
    pub shard: usize,
}

impl Packed {
    /// Decoded bytes of all packed tensors.
    pub fn decoded_bytes(&self) -> u64 {
        self.index.header.tensors.iter().map(|t| t.len).sum()
    }
    /// Stored bytes / decoded bytes (1.0 for an empty pack).
    pub fn ratio(&self) -> f64 {
        let d = self.decoded_bytes();
        if d == 0 {
            1.0
        } else {
            self.index.stored_bytes() as f64 / d as f64
        }
    }
}

/// Reads `dir/lossless.pack` (if present), refuses it when it does not belong to the
/// files next to it, and returns its shard and tensor locations for the checkpoint
/// whose safetensors shards are `shards`.
///
/// Errors: a corrupt or unsupported pack ([`PackIndex::read`]); a stale pack (the
/// `*.safetensors` or `tensors.sha256` of `dir` are not the ones it was written with);
/// a packed tensor that is also in a safetensors shard.
pub(crate) fn attach(
    dir: &Path,
    shards: &mut Vec<Shard>,
    tensors: &mut std::collections::HashMap<String, TensorLoc>,
) -> Result<Option<Arc<Packed>>> {
    let path = dir.join(PACK_FILE);
    if !path.exists() {
        return Ok(None);
    }
    let index = PackIndex::read(&path)?;
    let now = pack::identity_of(dir)?;
    if now != index.header.companion {
        bail!(
            "{}: stale lossless pack: the safetensors shards or tensors.sha256 of {} are not \
             the ones it was packed with (re-run `memdial pack --lossless --model {}`)",
            path.display(),
            dir.display(),
            index.header.source_dir
        );
    }
    let si = shards.len();
    shards.push(Shard {
        path: path.clone(),
        size: index.file_bytes,
        data_start: pack::PREAMBLE,
    });
    for t in &index.header.tensors {
        let loc = TensorLoc {
            shard: si,
            offset: t.offset,
            len: t.len,
            dtype: t.dtype.clone(),
            shape: t.shape.clone(),
        };
        if tensors.insert(t.name.clone(), loc).is_some() {
            bail!(
                "tensor {} is both in {} and in a safetensors shard",
                t.name,
                path.display()
            );
        }
    }
    Ok(Some(Arc::new(Packed { index, shard: si })))
}

/// Decodes whole tensor `name` of `packed` (file at `path`) through `pool`, in
/// buffered IO. Errors: unknown tensor, IO or block errors ([`read::read_logical`]).
pub fn decode_tensor(
    packed: &Packed,
    path: &Path,
    name: &str,
    pool: &read::StagingPool,
) -> Result<Vec<u8>> {
    let t = packed
        .index
        .header
        .tensors
        .iter()
        .find(|t| t.name == name)
        .with_context(|| format!("tensor {name} is not in {}", path.display()))?;
    let f = ShardFile::open(path, IoMode::Buffered)?;
    let mut v = vec![0u8; t.len as usize];
    read::read_logical(&packed.index, &f, pool, t.offset, &mut v)?;
    Ok(v)
}
