//! Memory plan: how a `--budget` is split between pinned weights, rotating trunk
//! slots, the expert cache, recurrent/attention state and activations.
//!
//! Everything the engine holds is counted: pinned weights (final norms, every
//! layer's norms and small tensors, a prefix of the trunk groups, the embedding table
//! when there is room), rotating trunk slots (one, or two when the next group is
//! prefetched) of the largest trunk group ([`crate::store::groups`]: attention,
//! each dense MLP matrix, the MoE trunk, `lm_head` row blocks), the expert cache,
//! embedding rows read on demand for a prefill chunk, KDA states and the MLA latent
//! cache for `max_context` positions, IO alignment slack and the model's activation
//! arena ([`Activations`]: given by the engine, which reads it off the table the model
//! allocates from, so it is exact).
//!
//! Trunk bytes are pinned first (they are read for every token; a cyclic scan of
//! groups through an LRU would hit 0%), then the rest of the budget becomes expert
//! cache, then the embedding table ([`crate::store::rank`] ranks them). The floor is
//! the smallest budget that can run at all.

use std::collections::BTreeMap;

use anyhow::Result;
use serde::Serialize;

use crate::format::checkpoint::Checkpoint;
use crate::format::config::ModelConfig;
use crate::format::schema::{expected_tensors, Role, TensorSpec};
use crate::io::IoMode;
use crate::store::groups::{layer_groups, row_blocks, stacked_expert_groups, TrunkGroup};
use crate::util::error::UsageError;
use crate::util::units::fmt_bytes;

/// Prefetch policy (cumulative: each policy does what the one before it does, plus more).
#[derive(Default, Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Prefetch {
    /// Read on demand only.
    #[default]
    None,
    /// Read layer L+1's trunk while layer L computes; in an expert-grouped prefill
    /// chunk, also the next two experts of the chunk's order while one is multiplied
    /// (every policy but `None` does the latter).
    NextLayer,
    /// next-layer + run layer L+1's router on layer L's hidden state and read its likely experts early.
    Lookahead,
    /// next-layer + read the experts an earlier run recorded (`--trace`): the upper bound for any predictor.
    Oracle,
}

impl Prefetch {
    /// Every policy, in the order of the command line's help.
    pub const ALL: [Prefetch; 4] = [
        Prefetch::None,
        Prefetch::NextLayer,
        Prefetch::Lookahead,
        Prefetch::Oracle,
    ];
    /// Parses `none|next-layer|lookahead|oracle`.
    ///
    /// Errors: [`UsageError::UnknownName`] for any other text.
    pub fn parse(s: &str) -> Result<Self, UsageError> {
        Self::ALL
            .into_iter()
            .find(|v| v.as_str() == s)
            .ok_or_else(|| UsageError::unknown("prefetch policy", s, &Self::ALL.map(Self::as_str)))
    }
    /// Name as on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Prefetch::None => "none",
            Prefetch::NextLayer => "next-layer",
            Prefetch::Lookahead => "lookahead",
            Prefetch::Oracle => "oracle",
        }
    }
    /// Whether the next layer's trunk is read ahead.
    pub fn trunk_ahead(self) -> bool {
        self != Prefetch::None
    }
    /// Whether experts are read ahead (needs room for a second layer's experts).
    pub fn experts_ahead(self) -> bool {
        matches!(self, Prefetch::Lookahead | Prefetch::Oracle)
    }
}

/// One contiguous byte range of a shard to read.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Range {
    pub shard: usize,
    pub start: u64,
    pub end: u64,
}

/// Where one tensor sits inside a read group: (tensor key, range index, offset in range, length).
#[derive(Debug, Clone, Serialize)]
pub struct Member {
    pub key: String,
    pub range: usize,
    pub offset: u64,
    pub len: u64,
    /// Part of the tensor only (a block of `lm_head` rows): not checkable against the
    /// tensor's whole-tensor sha256.
    pub partial: bool,
}

/// A set of tensors read together (a layer's streamed trunk, or one routed expert),
/// as coalesced ranges.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ReadGroup {
    pub ranges: Vec<Range>,
    pub members: Vec<Member>,
    /// Bytes of tensor data in the group.
    pub tensor_bytes: u64,
    /// Bytes of buffer needed to read it in the planned IO mode (alignment slack included).
    pub buffer_bytes: u64,
}

/// Ranges closer than this are read as one (the gap is read and discarded).
pub const COALESCE_GAP: u64 = 256 << 10;

/// True for the small per-layer tensors that are always pinned: norms, routers,
/// KDA gate parameters, conv weights, AttnRes weights, gpt-oss router biases, RVQ
/// expert codebooks (every expert of the layer decodes against them).
/// (Routers, [`is_router`], are streamed with their layer's `moe` group unless
/// [`routers_pinned`].)
pub fn is_small_pinned(name: &str) -> bool {
    name.ends_with("norm.weight")
        || name.ends_with("_layernorm.weight")
        || name.ends_with("A_log")
        || name.ends_with("dt_bias")
        || name.ends_with("conv1d.weight")
        || name.ends_with("_res_proj.weight")
        || name.ends_with(".gate.weight")
        || name.ends_with("e_score_correction_bias")
        || name.ends_with("mlp.router.bias")
        || name.contains(".rvq_codebooks.")
        || is_router(name)
}

/// True for a MoE router's weight matrix: Kimi `block_sparse_moe.gate.weight` (F32
/// `[E, D]`), gpt-oss `mlp.router.weight` (BF16 `[E, D]`).
pub fn is_router(name: &str) -> bool {
    name.ends_with("block_sparse_moe.gate.weight") || name.ends_with("mlp.router.weight")
}

/// Whether MoE routers (`block_sparse_moe.gate.weight`, F32 `[E, D]`: 25.7 MB per K3
/// layer, 2.4 GB over 92 layers) stay pinned: only for look-ahead prefetch, which runs
/// layer L+1's router while layer L computes. Otherwise a router is read with its
/// layer's `moe` group (it saves one byte read per token per byte pinned, like any
/// trunk byte, and is ranked with them).
pub fn routers_pinned(prefetch: Prefetch) -> bool {
    prefetch == Prefetch::Lookahead
}

/// Coalesced reads of the tensors `specs` (locations from `ck`, keys without `prefix`).
///
/// Errors: a tensor (and its aliases) missing from the checkpoint.
pub fn group_for(
    specs: &[&TensorSpec],
    ck: &Checkpoint,
    prefix: &str,
    mode: IoMode,
    align: u64,
) -> Result<ReadGroup> {
    let mut locs = Vec::new();
    for s in specs {
        let loc = std::iter::once(&s.name)
            .chain(s.aliases.iter())
            .find_map(|n| ck.get(n))
            .ok_or_else(|| {
                anyhow::anyhow!("tensor {} is missing from {}", s.name, ck.dir.display())
            })?;
        let key = s.name.strip_prefix(prefix).unwrap_or(&s.name).to_string();
        locs.push(Piece {
            shard: loc.shard,
            offset: loc.offset,
            len: loc.len,
            key,
            partial: false,
        });
    }
    Ok(coalesce(locs, COALESCE_GAP, mode, align))
}

/// One byte range of a tensor to read: a whole tensor, or a part of it (`partial`:
/// one expert's slice of a stacked tensor).
#[derive(Debug, Clone)]
pub struct Piece {
    pub shard: usize,
    /// Offset in the shard and length, in bytes.
    pub offset: u64,
    pub len: u64,
    /// Tensor key (without weight prefix).
    pub key: String,
    pub partial: bool,
}

/// The read group of `pieces`: sorted by place, ranges at most `gap` bytes apart
/// read as one (whole tensors: [`COALESCE_GAP`]; an expert's slices of stacked
/// tensors: 0, as the gaps are other experts), buffer bytes as `mode` needs them
/// (direct IO: `align`ed ends).
pub fn coalesce(mut pieces: Vec<Piece>, gap: u64, mode: IoMode, align: u64) -> ReadGroup {
    pieces.sort_by_key(|p| (p.shard, p.offset));
    let mut g = ReadGroup::default();
    for Piece {
        shard,
        offset: off,
        len,
        key,
        partial,
    } in pieces
    {
        g.tensor_bytes += len;
        let merge = match g.ranges.last() {
            Some(r) => r.shard == shard && off >= r.end && off - r.end <= gap,
            None => false,
        };
        if !merge {
            g.ranges.push(Range {
                shard,
                start: off,
                end: off + len,
            });
        }
        let ri = g.ranges.len() - 1;
        let r = &mut g.ranges[ri];
        r.end = r.end.max(off + len);
        g.members.push(Member {
            key,
            range: ri,
            offset: off - r.start,
            len,
            partial,
        });
    }
    g.buffer_bytes = g
        .ranges
        .iter()
        .map(|r| match mode {
            IoMode::Direct => (r.end.div_ceil(align) * align) - (r.start / align * align),
            _ => r.end - r.start,
        })
        .sum();
    g
}

/// The allocation of a budget.
#[derive(Debug, Clone, Serialize)]
pub struct Plan {
    pub budget_bytes: u64,
    pub io: IoMode,
    pub prefetch: Prefetch,
    /// Positions of one sequence (its MLA latent cache holds them all).
    pub max_context: usize,
    /// Sequences decoded together at most ([`Sequences::max_batch`]; 1 for `run`).
    pub max_batch: usize,
    /// Kernel threads the activation arena holds a workspace region for.
    pub threads: usize,
    pub model_bytes: u64,
    /// Final norm / AttnRes output weights, plus the embedding table when pinned.
    pub pinned_global_bytes: u64,
    /// Norms, gate parameters, conv weights of every layer (and routers with
    /// look-ahead prefetch, [`routers_pinned`]).
    pub pinned_small_bytes: u64,
    /// Number of leading layers whose whole streamed trunk is pinned.
    pub pinned_layers: usize,
    /// Number of leading [`Plan::groups`] pinned (the pinned set is a prefix of them).
    pub pinned_groups: usize,
    /// Buffer bytes of the pinned groups.
    pub pinned_trunk_bytes: u64,
    /// Rotating trunk slots (0 when every group is pinned).
    pub trunk_slots: usize,
    /// Bytes of one slot: the largest group's buffer.
    pub slot_bytes: u64,
    /// Expert cache capacity in experts, and bytes per expert buffer.
    pub expert_cache_experts: usize,
    pub expert_buffer_bytes: u64,
    pub expert_cache_bytes: u64,
    pub total_experts: usize,
    /// KDA recurrent + conv state (all KDA layers) and MLA latent cache for
    /// max_context, of every sequence: `max_batch × state_bytes_per_sequence`.
    pub state_bytes: u64,
    /// The state of one sequence ([`state_estimate`]).
    pub state_bytes_per_sequence: u64,
    /// The model's scratch arena for forwards of [`Plan::step_tokens`] tokens
    /// (as given: [`Activations::bytes`]; a batch's arena is shared by its sequences).
    pub activation_bytes: u64,
    /// The embedding table `[vocab, hidden]` in bytes, and whether it is pinned (only
    /// when the budget has room after everything that saves more per byte).
    pub embedding_bytes: u64,
    pub embedding_pinned: bool,
    /// Buffer of one embedding row read on demand (direct IO: aligned), and the
    /// reserve for a prefill chunk of them (0 when the table is pinned).
    pub embedding_row_buffer_bytes: u64,
    pub embedding_rows_bytes: u64,
    /// `lm_head` row blocks (groups after the last layer).
    pub lm_head_blocks: usize,
    /// Staging buffers for reading a lossless pack's coded blocks before they are
    /// decoded into the slots ([`crate::format::lossless::read::staging_bytes`]; 0 for a
    /// safetensors layout).
    pub staging_bytes: u64,
    /// The smallest budget that can run with this IO mode and prefetch policy.
    pub floor_bytes: u64,
    /// Bytes per token of trunk (streamed part, `lm_head` included) across all layers.
    pub trunk_bytes_per_token: u64,
    /// Fraction of per-token trunk bytes served from pinned memory.
    pub predicted_trunk_hit_rate: f64,
    /// Expert-cache hit rate if routing were uniform: capacity / total experts.
    pub predicted_expert_hit_rate_uniform: f64,
    /// Predicted bytes read per decoded token ([`crate::store::rank::bytes_per_token`]).
    pub predicted_bytes_per_token: u64,
    /// Budget left unallocated (< one expert buffer).
    pub unused_bytes: u64,
    /// Tokens per forward of the activation arena ([`Activations::step_tokens`]).
    #[serde(skip)]
    step_tokens: usize,
    /// Trunk groups in forward order (layers, then `lm_head` blocks); the first
    /// `pinned_groups` are pinned.
    #[serde(skip)]
    pub groups: Vec<TrunkGroup>,
    #[serde(skip)]
    pub expert_groups: BTreeMap<(usize, usize), ReadGroup>,
    /// Whole tensors read at open (keys without weight prefix).
    #[serde(skip)]
    pub pinned_keys: Vec<String>,
    /// Key of the embedding table (without weight prefix).
    #[serde(skip)]
    pub embedding_key: String,
}

/// What a run holds state for: up to `max_batch` sequences (decoded together,
/// sharing one activation arena) of up to `max_context` positions each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sequences {
    /// Positions of one sequence.
    pub max_context: usize,
    /// Sequences at once (≥ 1; 0 counts as 1).
    pub max_batch: usize,
}

impl Sequences {
    /// One sequence of `max_context` positions (`memdial run`).
    pub fn single(max_context: usize) -> Self {
        Sequences {
            max_context,
            max_batch: 1,
        }
    }
}

/// The model's activation arena as a plan counts it: what it is sized for and its
/// bytes. The plan is given it, never computes it: the engine reads it off the table
/// the model allocates from (`memdial::engine::arena::Scratch::activations(cfg, seqs,
/// threads)`), so the plan counts exactly what the model allocates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Activations {
    /// The sequences the arena (and the plan's state) is for.
    pub seqs: Sequences,
    /// Kernel threads the arena holds a workspace region for (≥ 1).
    pub threads: usize,
    /// Tokens per forward the arena holds (the planned prefill chunk, or one token per
    /// sequence of a batch when that is more); the plan reserves as many embedding rows.
    pub step_tokens: usize,
    /// Bytes of the arena.
    pub bytes: u64,
}

impl Plan {
    /// Tokens per forward the activation arena and the embedding-row reserve
    /// hold ([`Activations::step_tokens`]: the prefill chunk, or one token per
    /// sequence of a batch when that is more).
    pub fn step_tokens(&self) -> usize {
        self.step_tokens
    }

    /// Keys of every tensor the plan reads (pinned, in groups, experts), each once.
    pub fn read_keys(&self) -> Vec<String> {
        let mut v: Vec<String> = self.pinned_keys.clone();
        for g in &self.groups {
            for m in &g.read.members {
                if v.last().is_none_or(|l| *l != m.key) {
                    v.push(m.key.clone());
                }
            }
        }
        for g in self.expert_groups.values() {
            for m in &g.members {
                // A stacked tensor (gpt-oss) is a member of each of its experts' groups.
                if !(m.partial && v.contains(&m.key)) {
                    v.push(m.key.clone());
                }
            }
        }
        if !self.embedding_pinned && !v.contains(&self.embedding_key) {
            v.push(self.embedding_key.clone());
        }
        v
    }
}

/// State bytes for `max_context` positions: KDA states of every KDA layer and the
/// MLA latent cache (f32) of every MLA layer, or gpt-oss's key/value caches
/// ([`crate::format::config::GptOssConfig::kv_cache_bytes`]). (AttnRes block vectors
/// live only within a forward call and are counted in the activation arena.)
pub fn state_estimate(cfg: &ModelConfig, max_context: usize) -> u64 {
    let (kda, mla) = cfg.layer_counts();
    kda as u64 * cfg.kda_state_bytes() as u64
        + mla as u64 * max_context as u64 * cfg.mla_cache_bytes_per_position() as u64
        + cfg
            .gpt_oss
            .as_ref()
            .map_or(0, |g| g.kv_cache_bytes(max_context))
}

/// Builds the plan for `budget` bytes for `act.seqs` on `act.threads` kernel threads
/// (their states and the activation arena `act` are part of the floor).
///
/// Errors: [`UsageError::BelowFloor`] (with the floor and what makes it up, the
/// state as sequences × bytes each) when `budget` is below the floor;
/// checkpoint/config mismatches from [`plan_unchecked`].
pub fn plan(
    cfg: &ModelConfig,
    ck: &Checkpoint,
    budget: u64,
    io: IoMode,
    prefetch: Prefetch,
    act: Activations,
) -> Result<Plan> {
    let p = plan_unchecked(cfg, ck, budget, io, prefetch, act)?;
    if budget < p.floor_bytes {
        let batch = if p.max_batch > 1 {
            format!("max batch {}, ", p.max_batch)
        } else {
            String::new()
        };
        return Err(UsageError::BelowFloor {
            budget,
            floor: p.floor_bytes,
            detail: format!(
                "IO mode {}, prefetch {}, {batch}max context {}, {} kernel thread(s): \
                 pinned globals {} + pinned norms/gates {} + {} trunk slot(s) × {} + {} expert buffers × {} \
                 + state {} + activations {} + embedding rows {} + staging {}",
                io.as_str(),
                prefetch.as_str(),
                p.max_context,
                p.threads,
                fmt_bytes(p.pinned_global_bytes),
                fmt_bytes(p.pinned_small_bytes),
                p.min_slots(),
                fmt_bytes(p.slot_bytes),
                p.min_expert_buffers(cfg),
                fmt_bytes(p.expert_buffer_bytes),
                if p.max_batch > 1 {
                    format!(
                        "{} ({} sequences × {})",
                        fmt_bytes(p.state_bytes),
                        p.max_batch,
                        fmt_bytes(p.state_bytes_per_sequence)
                    )
                } else {
                    fmt_bytes(p.state_bytes)
                },
                fmt_bytes(p.activation_bytes),
                fmt_bytes(p.embedding_rows_bytes),
                fmt_bytes(p.staging_bytes)
            ),
        }
        .into());
    }
    Ok(p)
}

impl Plan {
    pub(crate) fn min_slots(&self) -> usize {
        if self.prefetch.trunk_ahead() {
            2
        } else {
            1
        }
    }
    pub(crate) fn min_expert_buffers(&self, cfg: &ModelConfig) -> usize {
        let k = cfg.routed_experts().map_or(0, |(_, k)| k);
        if self.prefetch.experts_ahead() {
            2 * k
        } else {
            k
        }
    }
}

/// Like [`plan`] but never refuses a budget (for printing the floor of any budget).
///
/// The allocation ranks what it could pin by bytes read per token saved per byte
/// pinned ([`crate::store::rank`]): trunk groups and `lm_head` blocks save 1 (each is
/// read once per token when streamed), in layer order so the pinned set is a prefix;
/// then the expert cache (k/E under uniform routing); then the embedding table (one
/// row per token for the whole table: ≈ 0).
///
/// Errors: config dimensions the checkpoint cannot hold
/// ([`crate::format::limits::check_dimensions`], checked before the tensor table is built).
pub fn plan_unchecked(
    cfg: &ModelConfig,
    ck: &Checkpoint,
    budget: u64,
    io: IoMode,
    prefetch: Prefetch,
    act: Activations,
) -> Result<Plan> {
    let Sequences {
        max_context,
        max_batch,
    } = act.seqs;
    let max_batch = max_batch.max(1);
    crate::format::limits::check_dimensions(cfg, ck)?;
    let specs = expected_tensors(cfg);
    let prefix = cfg.weight_prefix.as_str();
    let align = 4096u64; // planning uses the minimum direct-IO alignment we ever use
    let strip = |n: &str| n.strip_prefix(prefix).unwrap_or(n).to_string();
    let streamed = |s: &TensorSpec| {
        !is_small_pinned(&s.name) || (!routers_pinned(prefetch) && is_router(&s.name))
    };
    let mut global = 0u64;
    let mut small = 0u64;
    let mut pinned_keys = Vec::new();
    let mut expert_specs: BTreeMap<(usize, usize), Vec<&TensorSpec>> = BTreeMap::new();
    let mut stacked = Vec::new();
    let mut embedding = None;
    let mut head = None;
    for s in &specs {
        match (s.role, s.layer, s.expert) {
            (Role::Expert, Some(l), Some(e)) => expert_specs.entry((l, e)).or_default().push(s),
            (Role::Expert, Some(_), None) => stacked.push(s),
            (Role::Trunk, Some(_), _) if streamed(s) => {}
            (Role::Trunk, Some(_), _) => {
                small += s.nbytes() as u64;
                pinned_keys.push(strip(&s.name));
            }
            (Role::Embedding, ..) => embedding = Some(s),
            (Role::LmHead, ..) => head = Some(s),
            _ => {
                global += s.nbytes() as u64;
                pinned_keys.push(strip(&s.name));
            }
        }
    }
    let emb = embedding.ok_or_else(|| anyhow::anyhow!("the config implies no embedding table"))?;
    let emb_key = strip(&emb.name);
    let emb_loc = ck.get(&emb.name).ok_or_else(|| {
        anyhow::anyhow!("tensor {} is missing from {}", emb.name, ck.dir.display())
    })?;
    let emb_row = emb_loc.len / (cfg.vocab_size.max(1) as u64);
    let mut groups = layer_groups(cfg, &specs, ck, io, align, streamed)?;
    let max_layer_group = groups
        .iter()
        .map(|g| g.read.buffer_bytes)
        .max()
        .unwrap_or(0);
    // lm_head (or the tied embedding) in row blocks no larger than the largest layer group.
    let head_spec = head.unwrap_or(emb);
    let head_loc = ck.get(&head_spec.name).ok_or_else(|| {
        anyhow::anyhow!(
            "tensor {} is missing from {}",
            head_spec.name,
            ck.dir.display()
        )
    })?;
    let head_row = head_loc.len / (cfg.vocab_size.max(1) as u64);
    let blocks = row_blocks(
        &strip(&head_spec.name),
        head_loc.shard,
        head_loc.offset,
        cfg.vocab_size,
        head_row,
        if max_layer_group == 0 {
            u64::MAX
        } else {
            max_layer_group
        },
        io,
        align,
        cfg.num_hidden_layers,
    );
    let lm_head_blocks = blocks.len();
    groups.extend(blocks);
    let num_experts = cfg.routed_experts().map_or(0, |(e, _)| e);
    let mut expert_groups = stacked_expert_groups(&stacked, num_experts, ck, prefix, io, align)?;
    for (k, es) in &expert_specs {
        expert_groups.insert(*k, group_for(es, ck, prefix, io, align)?);
    }
    let slot_bytes = groups
        .iter()
        .map(|g| g.read.buffer_bytes)
        .max()
        .unwrap_or(0);
    let expert_buffer_bytes = expert_groups
        .values()
        .map(|g| g.buffer_bytes)
        .max()
        .unwrap_or(0);
    let trunk_bytes_per_token: u64 = groups.iter().map(|g| g.read.tensor_bytes).sum();
    let k = cfg.routed_experts().map_or(0, |(_, k)| k);
    let total_experts = expert_groups.len();
    let min_slots = if prefetch.trunk_ahead() { 2 } else { 1 };
    let min_exp = if total_experts == 0 {
        0
    } else if prefetch.experts_ahead() {
        2 * k
    } else {
        k
    };
    let state_each = state_estimate(cfg, max_context);
    let state = state_each * max_batch as u64;
    let chunk = act.step_tokens;
    let threads = act.threads.max(1);
    let row_buffer = match io {
        IoMode::Direct => emb_row.div_ceil(align) * align + align,
        _ => emb_row,
    };
    let rows_reserve = chunk as u64 * row_buffer;
    // A lossless pack's coded blocks pass through a fixed set of staging buffers.
    let staging = ck.lossless.as_ref().map_or(0, |p| {
        crate::format::lossless::read::staging_bytes(&p.index)
    });
    let base = global + small + state + act.bytes + rows_reserve + staging;
    let floor = base + min_slots as u64 * slot_bytes + min_exp as u64 * expert_buffer_bytes;
    // Tensors the model uses (present-and-unused MTP layers excluded).
    let model_bytes = crate::format::inspect::model_bytes(cfg, ck);

    let mut p = Plan {
        budget_bytes: 0,
        io,
        prefetch,
        max_context,
        max_batch,
        threads,
        model_bytes,
        pinned_global_bytes: global,
        pinned_small_bytes: small,
        pinned_layers: 0,
        pinned_groups: 0,
        pinned_trunk_bytes: 0,
        trunk_slots: min_slots,
        slot_bytes,
        expert_cache_experts: min_exp,
        expert_buffer_bytes,
        expert_cache_bytes: 0,
        total_experts,
        state_bytes: state,
        state_bytes_per_sequence: state_each,
        activation_bytes: act.bytes,
        embedding_bytes: emb_loc.len,
        embedding_pinned: false,
        embedding_row_buffer_bytes: row_buffer,
        embedding_rows_bytes: rows_reserve,
        lm_head_blocks,
        staging_bytes: staging,
        floor_bytes: floor,
        trunk_bytes_per_token,
        predicted_trunk_hit_rate: 0.0,
        predicted_expert_hit_rate_uniform: 0.0,
        predicted_bytes_per_token: 0,
        unused_bytes: 0,
        step_tokens: chunk,
        groups,
        expert_groups,
        pinned_keys,
        embedding_key: emb_key,
    };
    p.allocate(cfg, budget);
    Ok(p)
}
