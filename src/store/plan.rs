//! Memory plan: how a `--budget` is split between pinned weights, rotating trunk
//! slots, the expert cache, recurrent/attention state and activations.
//!
//! Everything the engine holds is counted: pinned weights (embeddings, lm_head,
//! final norms, every layer's norms/routers/small tensors, the trunk of a prefix
//! of layers), rotating trunk slots (one, or two when the next layer is
//! prefetched), the expert cache, KDA states and the MLA latent cache for
//! `max_context` positions, IO alignment slack and the model's activation arena
//! (exact: the same table the model allocates from, [`crate::arena`]).
//!
//! Trunk bytes are pinned first (they are read for every token; a cyclic scan of
//! layers through an LRU would hit 0%), then the rest of the budget becomes expert
//! cache. The floor is the smallest budget that can run at all.

use std::collections::BTreeMap;

use anyhow::Result;
use serde::Serialize;

pub use crate::arena::{planned_prefill_chunk, PLANNED_PREFILL_CHUNK};
use crate::checkpoint::Checkpoint;
use crate::config::ModelConfig;
use crate::error::UsageError;
use crate::io::IoMode;
use crate::schema::{expected_tensors, Role, TensorSpec};
pub use crate::units::{fmt_bytes, parse_size};

/// Prefetch policy (cumulative: each policy does what the one before it does, plus more).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Prefetch {
    /// Read on demand only.
    None,
    /// Read layer L+1's trunk while layer L computes.
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
/// KDA gate parameters, conv weights, AttnRes weights.
pub fn is_small_pinned(name: &str) -> bool {
    name.ends_with("norm.weight")
        || name.ends_with("_layernorm.weight")
        || name.ends_with("A_log")
        || name.ends_with("dt_bias")
        || name.ends_with("conv1d.weight")
        || name.ends_with("_res_proj.weight")
        || name.ends_with(".gate.weight")
        || name.ends_with("e_score_correction_bias")
}

fn group_for(
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
        locs.push((loc.shard, loc.offset, loc.len, key));
    }
    locs.sort_by_key(|a| (a.0, a.1));
    let mut g = ReadGroup::default();
    for (shard, off, len, key) in locs {
        g.tensor_bytes += len;
        let merge = match g.ranges.last() {
            Some(r) => r.shard == shard && off >= r.end && off - r.end <= COALESCE_GAP,
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
    Ok(g)
}

/// The allocation of a budget.
#[derive(Debug, Clone, Serialize)]
pub struct Plan {
    pub budget_bytes: u64,
    pub io: IoMode,
    pub prefetch: Prefetch,
    pub max_context: usize,
    pub model_bytes: u64,
    /// Embeddings + lm_head + final norm / AttnRes output weights.
    pub pinned_global_bytes: u64,
    /// Norms, routers, gate parameters, conv weights of every layer.
    pub pinned_small_bytes: u64,
    /// Number of leading layers whose whole trunk is pinned.
    pub pinned_layers: usize,
    pub pinned_trunk_bytes: u64,
    /// Rotating trunk slots (0 when every layer is pinned).
    pub trunk_slots: usize,
    pub slot_bytes: u64,
    /// Expert cache capacity in experts, and bytes per expert buffer.
    pub expert_cache_experts: usize,
    pub expert_buffer_bytes: u64,
    pub expert_cache_bytes: u64,
    pub total_experts: usize,
    /// KDA recurrent + conv state (all KDA layers) and MLA latent cache for max_context.
    pub state_bytes: u64,
    /// The model's scratch arena for a [`planned_prefill_chunk`]-token prefill
    /// (exact: [`activation_bytes`]).
    pub activation_bytes: u64,
    /// The smallest budget that can run with this IO mode and prefetch policy.
    pub floor_bytes: u64,
    /// Bytes per token of trunk (streamed part) across all layers.
    pub trunk_bytes_per_token: u64,
    /// Fraction of per-token trunk bytes served from pinned memory.
    pub predicted_trunk_hit_rate: f64,
    /// Expert-cache hit rate if routing were uniform: capacity / total experts.
    pub predicted_expert_hit_rate_uniform: f64,
    /// Budget left unallocated (< one expert buffer).
    pub unused_bytes: u64,
    #[serde(skip)]
    pub layer_groups: Vec<Option<ReadGroup>>,
    #[serde(skip)]
    pub expert_groups: BTreeMap<(usize, usize), ReadGroup>,
    #[serde(skip)]
    pub pinned_keys: Vec<String>,
}

/// Activation memory of forwards of up to `chunk` tokens (bytes, exact): the
/// model's scratch arena, [`crate::arena::Scratch::planned_bytes`] — the same
/// table the model allocates from (every buffer listed by
/// [`crate::arena::Scratch::planned_buffers`]).
pub fn activation_bytes(cfg: &ModelConfig, chunk: usize) -> u64 {
    crate::arena::Scratch::planned_bytes(cfg, chunk)
}

/// State bytes for `max_context` positions: KDA states of every KDA layer and the
/// MLA latent cache (f32) of every MLA layer. (AttnRes block vectors live only
/// within a forward call and are counted in the activation arena.)
pub fn state_estimate(cfg: &ModelConfig, max_context: usize) -> u64 {
    let (kda, mla) = cfg.layer_counts();
    kda as u64 * cfg.kda_state_bytes() as u64
        + mla as u64 * max_context as u64 * cfg.mla_cache_bytes_per_position() as u64
}

/// Builds the plan for `budget` bytes.
///
/// Errors: [`UsageError::BelowFloor`] (with the floor and what makes it up) when
/// `budget` is below the floor; checkpoint/config mismatches from [`plan_unchecked`].
pub fn plan(
    cfg: &ModelConfig,
    ck: &Checkpoint,
    budget: u64,
    io: IoMode,
    prefetch: Prefetch,
    max_context: usize,
) -> Result<Plan> {
    let p = plan_unchecked(cfg, ck, budget, io, prefetch, max_context)?;
    if budget < p.floor_bytes {
        return Err(UsageError::BelowFloor {
            budget,
            floor: p.floor_bytes,
            detail: format!(
                "IO mode {}, prefetch {}, max context {}: \
                 pinned globals {} + pinned norms/routers {} + {} trunk slot(s) × {} + {} expert buffers × {} \
                 + state {} + activations {}",
                io.as_str(),
                prefetch.as_str(),
                max_context,
                fmt_bytes(p.pinned_global_bytes),
                fmt_bytes(p.pinned_small_bytes),
                p.min_slots(),
                fmt_bytes(p.slot_bytes),
                p.min_expert_buffers(cfg),
                fmt_bytes(p.expert_buffer_bytes),
                fmt_bytes(p.state_bytes),
                fmt_bytes(p.activation_bytes)
            ),
        }
        .into());
    }
    Ok(p)
}

impl Plan {
    fn min_slots(&self) -> usize {
        if self.prefetch.trunk_ahead() {
            2
        } else {
            1
        }
    }
    fn min_expert_buffers(&self, cfg: &ModelConfig) -> usize {
        let k = cfg
            .moe
            .as_ref()
            .map(|m| m.num_experts_per_token)
            .unwrap_or(0);
        if self.prefetch.experts_ahead() {
            2 * k
        } else {
            k
        }
    }
}

/// Like [`plan`] but never refuses a budget (for printing the floor of any budget).
///
/// Errors: config dimensions the checkpoint cannot hold
/// ([`crate::limits::check_dimensions`], checked before the tensor table is built).
pub fn plan_unchecked(
    cfg: &ModelConfig,
    ck: &Checkpoint,
    budget: u64,
    io: IoMode,
    prefetch: Prefetch,
    max_context: usize,
) -> Result<Plan> {
    crate::limits::check_dimensions(cfg, ck)?;
    let specs = expected_tensors(cfg);
    let prefix = cfg.weight_prefix.as_str();
    let align = 4096u64; // planning uses the minimum direct-IO alignment we ever use
    let mut global = 0u64;
    let mut small = 0u64;
    let mut pinned_keys = Vec::new();
    let mut layer_specs: Vec<Vec<&TensorSpec>> = vec![vec![]; cfg.num_hidden_layers];
    let mut expert_specs: BTreeMap<(usize, usize), Vec<&TensorSpec>> = BTreeMap::new();
    for s in &specs {
        let key = s.name.strip_prefix(prefix).unwrap_or(&s.name).to_string();
        match (s.role, s.layer, s.expert) {
            (Role::Expert, Some(l), Some(e)) => expert_specs.entry((l, e)).or_default().push(s),
            (Role::Trunk, Some(l), _) if !is_small_pinned(&s.name) => layer_specs[l].push(s),
            (Role::Trunk, Some(_), _) => {
                small += s.nbytes() as u64;
                pinned_keys.push(key);
            }
            _ => {
                global += s.nbytes() as u64;
                pinned_keys.push(key);
            }
        }
    }
    let mut layer_groups = Vec::new();
    for ls in &layer_specs {
        layer_groups.push(if ls.is_empty() {
            None
        } else {
            Some(group_for(ls, ck, prefix, io, align)?)
        });
    }
    let mut expert_groups = BTreeMap::new();
    for (k, es) in &expert_specs {
        expert_groups.insert(*k, group_for(es, ck, prefix, io, align)?);
    }
    let slot_bytes = layer_groups
        .iter()
        .flatten()
        .map(|g| g.buffer_bytes)
        .max()
        .unwrap_or(0);
    let expert_buffer_bytes = expert_groups
        .values()
        .map(|g| g.buffer_bytes)
        .max()
        .unwrap_or(0);
    let trunk_bytes_per_token: u64 = layer_groups.iter().flatten().map(|g| g.tensor_bytes).sum();
    let k = cfg
        .moe
        .as_ref()
        .map(|m| m.num_experts_per_token)
        .unwrap_or(0);
    let total_experts = expert_groups.len();
    let min_slots = if prefetch.trunk_ahead() { 2 } else { 1 };
    let min_exp = if total_experts == 0 {
        0
    } else if prefetch.experts_ahead() {
        2 * k
    } else {
        k
    };
    let state = state_estimate(cfg, max_context);
    let act = activation_bytes(cfg, planned_prefill_chunk(max_context));
    let base = global + small + state + act;
    let floor = base + min_slots as u64 * slot_bytes + min_exp as u64 * expert_buffer_bytes;
    // Tensors the model uses (present-and-unused MTP layers excluded).
    let model_bytes = crate::inspect::model_bytes(cfg, ck);

    // Allocate: pin layer trunks in order, then experts.
    let mut left = budget.saturating_sub(floor);
    let mut pinned_layers = 0;
    let mut pinned_trunk = 0u64;
    let n_groups = layer_groups.len();
    for (i, g) in layer_groups.iter().enumerate() {
        let cost = g.as_ref().map(|g| g.buffer_bytes).unwrap_or(0);
        let last = i + 1 == n_groups;
        // Pinning the last unpinned layer also frees the rotating slots.
        let refund = if last {
            min_slots as u64 * slot_bytes
        } else {
            0
        };
        if cost <= left + refund {
            left = left + refund - cost;
            pinned_layers += 1;
            pinned_trunk += cost;
        } else {
            break;
        }
    }
    let trunk_slots = if pinned_layers == n_groups {
        0
    } else {
        min_slots
    };
    let extra_experts = left.checked_div(expert_buffer_bytes).unwrap_or(0) as usize;
    let expert_cache = (min_exp + extra_experts).min(total_experts.max(min_exp));
    let used_by_experts = (expert_cache - min_exp) as u64 * expert_buffer_bytes;
    let unused = left - used_by_experts.min(left);
    let pinned_trunk_tensor: u64 = layer_groups
        .iter()
        .take(pinned_layers)
        .flatten()
        .map(|g| g.tensor_bytes)
        .sum();
    Ok(Plan {
        budget_bytes: budget,
        io,
        prefetch,
        max_context,
        model_bytes,
        pinned_global_bytes: global,
        pinned_small_bytes: small,
        pinned_layers,
        pinned_trunk_bytes: pinned_trunk,
        trunk_slots,
        slot_bytes,
        expert_cache_experts: expert_cache,
        expert_buffer_bytes,
        expert_cache_bytes: expert_cache as u64 * expert_buffer_bytes,
        total_experts,
        state_bytes: state,
        activation_bytes: act,
        floor_bytes: floor,
        trunk_bytes_per_token,
        predicted_trunk_hit_rate: if trunk_bytes_per_token > 0 {
            pinned_trunk_tensor as f64 / trunk_bytes_per_token as f64
        } else {
            1.0
        },
        predicted_expert_hit_rate_uniform: if total_experts > 0 {
            expert_cache.min(total_experts) as f64 / total_experts as f64
        } else {
            1.0
        },
        unused_bytes: unused,
        layer_groups,
        expert_groups,
        pinned_keys,
    })
}
