//! Trunk read groups below layer granularity: what one rotating trunk slot holds.
//!
//! A layer's streamed trunk is split into the pieces the forward pass uses one after
//! the other and never holds at the same time (`src/model/mod.rs` `Model::layer`):
//!
//! | group | tensors | K3 size |
//! |---|---|---|
//! | `attn` | every `self_attn.*` projection (norms, conv, gate parameters stay pinned) | 886 MB (KDA), 464 MB (MLA) |
//! | `mlp.gate_proj`, `mlp.up_proj`, `mlp.down_proj` | one dense MLP matrix each | 484 MB each (layer 0) |
//! | `moe` | router (unless pinned), shared experts, latent projections | 392 MB |
//! | `lm_head rows a..b` | a block of `lm_head` rows (after the last layer) | ≤ the largest group above |
//!
//! so a slot is the largest *group*, not the largest layer (K3: 886 MB instead of
//! 1.45 GB + attention). Groups stay tens of MiB and up, and their tensors are still
//! coalesced into as few reads as [`super::plan::COALESCE_GAP`] allows. `lm_head` in row
//! blocks computes every logit with the same dot product as the whole matrix (each
//! output row is one fixed-order dot product, `src/kernels/dense.rs`), so logits are
//! bit-identical.

use std::ops::Range as Rows;

use anyhow::Result;

use std::collections::BTreeMap;

use super::plan::{coalesce, group_for, Member, Piece, Range, ReadGroup};
use crate::format::checkpoint::Checkpoint;
use crate::format::config::ModelConfig;
use crate::format::schema::{Role, TensorSpec};
use crate::io::IoMode;

/// One unit of trunk streaming: a group of a layer's trunk, or a block of `lm_head` rows.
#[derive(Debug, Clone)]
pub struct TrunkGroup {
    /// Decoder layer, or `num_hidden_layers` for `lm_head` blocks (they run after the last layer).
    pub layer: usize,
    /// What it holds: `attn`, `mlp.gate_proj`, `moe`, `lm_head rows 0..40960`, …
    pub what: String,
    /// For a block of rows: the tensor key (without weight prefix) and the rows `[a, b)`.
    pub rows: Option<(String, Rows<usize>)>,
    /// The coalesced reads.
    pub read: ReadGroup,
}

/// Which group of its layer a streamed trunk tensor belongs to.
fn group_label(name: &str) -> String {
    if name.contains(".self_attn.") {
        "attn".into()
    } else if let Some(rest) = name
        .split(".mlp.")
        .nth(1)
        .filter(|r| !r.starts_with("router."))
    {
        // Dense MLP: one group per matrix (`mlp.gate_proj`).
        format!("mlp.{}", rest.trim_end_matches(".weight"))
    } else {
        "moe".into()
    }
}

/// The streamed trunk groups of every layer, in forward order (layer by layer; within
/// a layer in first-use order). `streamed(spec)` says which trunk tensors are streamed
/// (the others are pinned as small tensors).
///
/// Errors: a tensor missing from the checkpoint.
pub fn layer_groups(
    cfg: &ModelConfig,
    specs: &[TensorSpec],
    ck: &Checkpoint,
    io: IoMode,
    align: u64,
    streamed: impl Fn(&TensorSpec) -> bool,
) -> Result<Vec<TrunkGroup>> {
    let prefix = cfg.weight_prefix.as_str();
    let mut per_layer: Vec<Vec<(String, Vec<&TensorSpec>)>> = vec![vec![]; cfg.num_hidden_layers];
    for s in specs {
        let (Role::Trunk, Some(l)) = (s.role, s.layer) else {
            continue;
        };
        if !streamed(s) {
            continue;
        }
        let label = group_label(&s.name);
        let list = &mut per_layer[l];
        match list.iter_mut().find(|(w, _)| *w == label) {
            Some((_, v)) => v.push(s),
            None => list.push((label, vec![s])),
        }
    }
    let mut out = Vec::new();
    for (l, list) in per_layer.into_iter().enumerate() {
        for (what, ss) in list {
            out.push(TrunkGroup {
                layer: l,
                what,
                rows: None,
                read: group_for(&ss, ck, prefix, io, align)?,
            });
        }
    }
    Ok(out)
}

/// The read group of every routed expert of tensors stacked over the experts
/// (gpt-oss `mlp.experts.*`, `[E, …]`): expert `e` of layer `l` is the slice
/// `[e·len/E, (e+1)·len/E)` of each of `l`'s stacked tensors `stacked` (blocks,
/// scales and biases), read as one unit (slices that abut are one range).
/// Keyed `(layer, expert)`; members are the tensors' keys (without `prefix`), partial.
///
/// Errors: a tensor missing from the checkpoint, or one whose bytes do not split
/// into `num_experts` equal slices.
pub fn stacked_expert_groups(
    stacked: &[&TensorSpec],
    num_experts: usize,
    ck: &Checkpoint,
    prefix: &str,
    io: IoMode,
    align: u64,
) -> Result<BTreeMap<(usize, usize), ReadGroup>> {
    let mut per_layer: BTreeMap<usize, Vec<(String, usize, u64, u64)>> = BTreeMap::new();
    let e_count = num_experts.max(1) as u64;
    for s in stacked {
        let Some(l) = s.layer else { continue };
        let loc = ck.get(&s.name).ok_or_else(|| {
            anyhow::anyhow!("tensor {} is missing from {}", s.name, ck.dir.display())
        })?;
        if !loc.len.is_multiple_of(e_count) {
            anyhow::bail!(
                "tensor {}: {} bytes do not split into {num_experts} experts",
                s.name,
                loc.len
            );
        }
        let key = s.name.strip_prefix(prefix).unwrap_or(&s.name).to_string();
        per_layer
            .entry(l)
            .or_default()
            .push((key, loc.shard, loc.offset, loc.len / e_count));
    }
    let mut out = BTreeMap::new();
    for (l, tensors) in per_layer {
        for e in 0..num_experts {
            let pieces = tensors
                .iter()
                .map(|(key, shard, off, each)| Piece {
                    shard: *shard,
                    offset: off + e as u64 * each,
                    len: *each,
                    key: key.clone(),
                    partial: true,
                })
                .collect();
            // No gap is read: between one expert's slices lie the other experts'.
            out.insert((l, e), coalesce(pieces, 0, io, align));
        }
    }
    Ok(out)
}

/// Splits a `[rows, row_bytes]` tensor at `offset` of `shard` into blocks of rows whose
/// buffers are at most `max_buffer` bytes (at least one aligned block): the block row
/// count is a multiple of `align / gcd(row_bytes, align)` so that every block boundary
/// falls on an `align` boundary relative to the tensor start.
#[allow(clippy::too_many_arguments)]
pub fn row_blocks(
    key: &str,
    shard: usize,
    offset: u64,
    rows: usize,
    row_bytes: u64,
    max_buffer: u64,
    io: IoMode,
    align: u64,
    layer: usize,
) -> Vec<TrunkGroup> {
    let step = (align / gcd(row_bytes, align)).max(1) as usize;
    // Direct IO may add up to one alignment unit at each end.
    let room = max_buffer.saturating_sub(if io == IoMode::Direct { 2 * align } else { 0 });
    let fit = (room / row_bytes.max(1)) as usize;
    let per = (fit / step * step).max(step).min(rows.max(1));
    let mut out = Vec::new();
    let mut a = 0;
    while a < rows {
        let b = (a + per).min(rows);
        let start = offset + a as u64 * row_bytes;
        let end = offset + b as u64 * row_bytes;
        let buffer_bytes = match io {
            IoMode::Direct => end.div_ceil(align) * align - start / align * align,
            _ => end - start,
        };
        out.push(TrunkGroup {
            layer,
            what: format!("{key} rows {a}..{b}"),
            rows: Some((key.to_string(), a..b)),
            read: ReadGroup {
                ranges: vec![Range { shard, start, end }],
                members: vec![Member {
                    key: key.to_string(),
                    range: 0,
                    offset: 0,
                    len: end - start,
                    partial: true,
                }],
                tensor_bytes: end - start,
                buffer_bytes,
            },
        });
        a = b;
    }
    out
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a.max(1)
    } else {
        gcd(b, a % b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn row_blocks_cover_the_tensor_on_aligned_boundaries() {
        // K3 lm_head rows: 7168 BF16 = 14,336 bytes; 4096 / gcd(14336, 4096) = 2 rows.
        let bs = row_blocks(
            "lm_head.weight",
            0,
            8192,
            163_840,
            14_336,
            886_000_000,
            IoMode::Direct,
            4096,
            93,
        );
        let mut next = 0;
        for b in &bs {
            let (_, r) = b.rows.clone().unwrap();
            assert_eq!(r.start, next);
            assert_eq!(r.start % 2, 0);
            assert!(b.read.buffer_bytes <= 886_000_000);
            next = r.end;
        }
        assert_eq!(next, 163_840);
        assert_eq!(
            bs.iter().map(|b| b.read.tensor_bytes).sum::<u64>(),
            163_840 * 14_336
        );
    }

    #[test]
    fn labels_split_dense_mlp_by_matrix() {
        assert_eq!(
            group_label("model.layers.0.mlp.up_proj.weight"),
            "mlp.up_proj"
        );
        assert_eq!(
            group_label("model.layers.3.self_attn.q_proj.weight"),
            "attn"
        );
        assert_eq!(
            group_label("model.layers.3.block_sparse_moe.gate.weight"),
            "moe"
        );
        assert_eq!(group_label("model.layers.3.mlp.router.weight"), "moe");
    }
}
