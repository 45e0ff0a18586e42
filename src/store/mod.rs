//! The weight store: every weight access of the model goes through [`WeightStore`].
//!
//! Model math asks for *what* it needs — a tensor of layer L, or routed expert e of
//! layer L — and the store decides *how* it is held: fully resident
//! ([`resident::ResidentStore`]), or streamed from disk under a memory budget
//! (the streaming store). Keeping this interface narrow keeps IO policy out of
//! model code.
//!
//! Returned [`Bytes`] are cheap reference-counted views; a streaming store may
//! recycle a buffer only after every view of it has been dropped.

pub mod eviction;
pub mod groups;
pub mod metrics;
pub mod paper;
pub mod plan;
pub mod rank;
pub mod resident;
pub mod sim;
pub mod streaming;
pub mod trace;

use std::ops::Deref;
use std::sync::Arc;

use anyhow::Result;

/// A shared, immutable view of tensor bytes (little-endian, as on disk).
#[derive(Clone)]
pub struct Bytes {
    owner: Arc<dyn AsRef<[u8]> + Send + Sync>,
    start: usize,
    len: usize,
}

impl Bytes {
    /// A view of `owner[start..start+len]`. Panics if out of range (a store bug).
    pub fn new(owner: Arc<dyn AsRef<[u8]> + Send + Sync>, start: usize, len: usize) -> Self {
        assert!(
            start + len <= owner.as_ref().as_ref().len(),
            "Bytes view out of range"
        );
        Bytes { owner, start, len }
    }
    /// Wraps an owned vector.
    pub fn from_vec(v: Vec<u8>) -> Self {
        let len = v.len();
        Bytes {
            owner: Arc::new(v),
            start: 0,
            len,
        }
    }
    /// A sub-view `[off, off+len)` of this view.
    pub fn slice(&self, off: usize, len: usize) -> Self {
        assert!(off + len <= self.len, "Bytes::slice out of range");
        Bytes {
            owner: self.owner.clone(),
            start: self.start + off,
            len,
        }
    }
}

impl Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &(*self.owner).as_ref()[self.start..self.start + self.len]
    }
}

impl std::fmt::Debug for Bytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Bytes({} bytes)", self.len)
    }
}

/// Views of rows `rows` (`row_bytes` each) of tensor bytes `t` (named `name` in errors).
///
/// Errors: a row past the end of `t`.
pub fn slice_rows(t: &Bytes, name: &str, row_bytes: usize, rows: &[usize]) -> Result<Vec<Bytes>> {
    rows.iter()
        .map(|&r| {
            if (r + 1) * row_bytes > t.len() {
                anyhow::bail!(
                    "row {r} out of range for tensor {name} ({} rows)",
                    t.len() / row_bytes.max(1)
                );
            }
            Ok(t.slice(r * row_bytes, row_bytes))
        })
        .collect()
}

/// Expert `expert`'s slice of `t`, layer `layer`'s tensor `name` stacked over
/// `num_experts` experts.
///
/// Errors: `t` does not split into `num_experts` equal slices, or `expert` is out of range.
pub fn slice_expert(
    t: &Bytes,
    layer: usize,
    name: &str,
    expert: usize,
    num_experts: usize,
) -> Result<Bytes> {
    if num_experts == 0 || !t.len().is_multiple_of(num_experts) || expert >= num_experts {
        anyhow::bail!(
            "expert {expert} of tensor model.layers.{layer}.{name}: {} bytes do not hold \
             {num_experts} equal expert slices",
            t.len()
        );
    }
    let each = t.len() / num_experts;
    Ok(t.slice(expert * each, each))
}

/// One weight matrix of a routed expert, as stored.
#[derive(Clone, Debug)]
pub enum ExpertMat {
    /// BF16 `[out, in]`.
    Bf16(Bytes),
    /// MXFP4 `weight_packed` U8 `[out, in/2]` + `weight_scale` U8 `[out, in/32]`.
    Mxfp4 { packed: Bytes, scale: Bytes },
    /// RVQ `rvq_codes` U8 `[out, in/8, stages]` + the layer's `rvq_codebooks` of this
    /// matrix kind, F32 `[stages, 256, 8]` (`memdial pack --rvq`; lossy).
    Rvq {
        codes: Bytes,
        codebooks: Bytes,
        stages: usize,
    },
}

/// The routed-expert matrix `m` (`w1`, `w2`, `w3`) of expert `expert` of layer `layer`
/// in format `fmt`, its tensors fetched by `get` (full names without the weight
/// prefix; RVQ codebooks are layer tensors, `model.layers.{layer}.block_sparse_moe.rvq_codebooks.{m}`).
///
/// Errors: `get`'s.
pub fn expert_mat(
    fmt: crate::format::config::ExpertFormat,
    layer: usize,
    expert: usize,
    m: &str,
    get: &mut dyn FnMut(&str) -> Result<Bytes>,
) -> Result<ExpertMat> {
    use crate::format::config::ExpertFormat;
    let base = format!("model.layers.{layer}.block_sparse_moe.experts.{expert}.{m}");
    Ok(match fmt {
        ExpertFormat::Bf16 => ExpertMat::Bf16(get(&format!("{base}.weight"))?),
        ExpertFormat::Mxfp4 => ExpertMat::Mxfp4 {
            packed: get(&format!("{base}.weight_packed"))?,
            scale: get(&format!("{base}.weight_scale"))?,
        },
        ExpertFormat::Rvq(r) => ExpertMat::Rvq {
            codes: get(&format!("{base}.rvq_codes"))?,
            codebooks: get(&format!(
                "model.layers.{layer}.block_sparse_moe.rvq_codebooks.{m}"
            ))?,
            stages: r.stages,
        },
    })
}

/// The three matrices of a routed expert (Kimi names: `w1` gate, `w2` down, `w3` up).
#[derive(Clone, Debug)]
pub struct ExpertWeights {
    pub w1: ExpertMat,
    pub w2: ExpertMat,
    pub w3: ExpertMat,
}

impl ExpertWeights {
    /// [`crate::format::integrity::check_e8m0`] on the three matrices of routed expert
    /// `expert` of layer `layer` (a no-op for BF16 experts).
    ///
    /// Errors: names the scale tensor and its first NaN block.
    pub fn check_e8m0(&self, layer: usize, expert: usize) -> Result<()> {
        for (m, mat) in [("w1", &self.w1), ("w2", &self.w2), ("w3", &self.w3)] {
            if let ExpertMat::Mxfp4 { scale, .. } = mat {
                crate::format::integrity::check_e8m0(
                    &format!(
                        "model.layers.{layer}.block_sparse_moe.experts.{expert}.{m}.weight_scale"
                    ),
                    scale,
                )?;
            }
        }
        Ok(())
    }
}

/// Source of every weight the model reads.
///
/// Names are the checkpoint's names *without* the model's weight prefix and,
/// for layer tensors, without `model.layers.{i}.`:
/// `tensor(Some(3), "self_attn.q_proj.weight")`, `tensor(None, "lm_head.weight")`.
/// Implementations must be deterministic: the bytes returned never depend on
/// cache state or IO timing.
pub trait WeightStore: Send + Sync {
    /// Bytes of a tensor of layer `layer` (or a global tensor when `None`).
    /// Errors: unknown tensor, IO failure (with file and offset named).
    fn tensor(&self, layer: Option<usize>, name: &str) -> Result<Bytes>;

    /// Rows `rows` (each `row_bytes` long) of the 2-D tensor `name` of `layer`, one
    /// view per requested row in request order (the embedding lookup of a forward's
    /// tokens). A streaming store may read only these rows (one read per distinct row).
    /// Errors: unknown tensor, a row out of range, IO failure.
    fn rows(
        &self,
        layer: Option<usize>,
        name: &str,
        row_bytes: usize,
        rows: &[usize],
    ) -> Result<Vec<Bytes>> {
        let t = self.tensor(layer, name)?;
        slice_rows(&t, name, row_bytes, rows)
    }

    /// The row blocks `[a, b)` (in order, covering `0..rows`) in which the store holds
    /// or streams the 2-D tensor `name` of `layer` with `rows` rows; read each with
    /// [`WeightStore::tensor_rows`]. Default: one block.
    fn row_blocks(
        &self,
        _layer: Option<usize>,
        _name: &str,
        rows: usize,
    ) -> Vec<std::ops::Range<usize>> {
        std::iter::once(0..rows).collect()
    }

    /// Bytes of rows `rows` (a block of [`WeightStore::row_blocks`]) of tensor `name`,
    /// `row_bytes` per row. Errors: unknown tensor, rows that are not a block, IO failure.
    fn tensor_rows(
        &self,
        layer: Option<usize>,
        name: &str,
        rows: std::ops::Range<usize>,
        row_bytes: usize,
    ) -> Result<Bytes> {
        let t = self.tensor(layer, name)?;
        if rows.end * row_bytes > t.len() {
            anyhow::bail!("rows {rows:?} out of range for tensor {name}");
        }
        Ok(t.slice(rows.start * row_bytes, rows.len() * row_bytes))
    }

    /// Routed expert `expert` of MoE layer `layer`.
    fn expert(&self, layer: usize, expert: usize) -> Result<ExpertWeights>;

    /// Routed expert `expert` of MoE layer `layer` of a model that stacks a layer's
    /// experts in tensors `[E, …]` (gpt-oss `mlp.experts.*`): expert `expert`'s slice
    /// (`len / num_experts` bytes at `expert · len / num_experts`) of each tensor of
    /// `names` (layer tensor names, as for [`WeightStore::tensor`]), in that order.
    /// A streaming store reads the slices as one unit and caches them like any
    /// routed expert; the default slices the whole tensors.
    ///
    /// Errors: an unknown tensor, one whose bytes do not split into `num_experts`
    /// slices, an expert out of range, IO failure.
    fn stacked_expert(
        &self,
        layer: usize,
        expert: usize,
        num_experts: usize,
        names: &[&str],
    ) -> Result<Vec<Bytes>> {
        names
            .iter()
            .map(|name| {
                let t = self.tensor(Some(layer), name)?;
                slice_expert(&t, layer, name, expert, num_experts)
            })
            .collect()
    }

    /// Hint: a new token (position `pos`) starts its forward pass.
    fn begin_token(&self, _pos: usize) {}

    /// Whether the store wants router look-ahead guesses ([`WeightStore::prefetch_experts`]).
    fn wants_lookahead(&self) -> bool {
        false
    }

    /// Hint: experts `guesses` of MoE layer `layer` are likely to be selected soon.
    /// A wrong guess costs bandwidth, never correctness.
    fn prefetch_experts(&self, _layer: usize, _guesses: &[usize]) {}

    /// Hint: the model is about to run layer `layer` (streaming stores start IO here).
    fn begin_layer(&self, _layer: usize) {}

    /// Hint: the router of `layer` selected `experts` (in router rank order) for the
    /// current token; a look-ahead predictor may report guesses for later layers here.
    fn experts_selected(&self, _layer: usize, _experts: &[usize]) {}

    /// Whether the model may run a multi-token forward expert-grouped: report the
    /// chunk's routing once ([`WeightStore::chunk_experts_selected`]) and fetch each
    /// distinct expert once. Stores that keep the default (`false`) see the
    /// token-by-token protocol (`experts_selected`, then that token's experts in
    /// router-rank order). Output is bit-identical either way.
    fn groups_chunk_experts(&self) -> bool {
        false
    }

    /// Hint for an expert-grouped prefill chunk: `per_token[t·k .. (t+1)·k]` are the
    /// `k` experts the router of `layer` selected for the chunk's token `t` (router
    /// rank order; `per_token: [n, k]` flat);
    /// the model then fetches each expert of `order` (the distinct ones, in that
    /// order) once with [`WeightStore::expert`] and holds at most one at a time.
    /// Called instead of one [`WeightStore::experts_selected`] per token.
    fn chunk_experts_selected(
        &self,
        _layer: usize,
        _per_token: &[usize],
        _k: usize,
        _order: &[usize],
    ) {
    }

    /// Hint: layer `layer` is finished for the current token.
    fn end_layer(&self, _layer: usize) {}

    /// Report: the sequence was rewound to `pos` positions after a forward that ran
    /// past it (a rejected speculative draft), so what the store recorded for
    /// positions `pos ..` (trace rows) describes tokens that are not in the sequence.
    fn rewound(&self, _pos: usize) {}

    /// Report: the model's scratch arena holds `bytes` (called at every forward,
    /// so a store that accounts memory counts what the model really holds).
    fn note_activation_bytes(&self, _bytes: u64) {}
}
