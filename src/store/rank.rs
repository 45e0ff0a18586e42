//! What a pinned byte saves: the ranking behind the plan's allocation, and the bytes
//! read per token it predicts.
//!
//! A candidate's worth is *bytes read per token saved per byte pinned*:
//!
//! | candidate | saves per token | per byte pinned |
//! |---|---|---|
//! | trunk group, `lm_head` block | its read buffer (read once per token when streamed) | 1 |
//! | routed expert (cache buffer) | `k/E` of its buffer (uniform routing: a token needs `k` of `E` experts per MoE layer) | `k/E` |
//! | embedding table | one row per token | `row / table` = `1/vocab` |
//!
//! Ties (every trunk group is worth 1) are broken by forward order, so the pinned
//! set stays a prefix of the groups and the rotating slots serve the rest in a
//! cycle. [`crate::store::plan::plan_unchecked`] allocates in this order.

use serde::Serialize;

use super::plan::Plan;
use crate::format::config::{MlpKind, ModelConfig};

/// One class of pin candidates, as `memdial plan` lists them.
#[derive(Debug, Clone, Serialize)]
pub struct Candidate {
    /// What it is (`attention`, `dense MLP matrix`, `MoE trunk` (gpt-oss: the router), `lm_head row block`,
    /// `routed expert`, `embedding table`).
    pub what: String,
    /// How many there are, and how many the plan pins (experts: cache buffers).
    pub count: usize,
    pub pinned: usize,
    /// Bytes of the largest one (its buffer).
    pub bytes_each: u64,
    /// Bytes read per token saved per byte pinned.
    pub saves_per_byte: f64,
}

/// Routed-expert selections per token per MoE layer, over experts per layer (`k/E`), 0 without MoE.
pub fn expert_ratio(cfg: &ModelConfig) -> f64 {
    cfg.routed_experts()
        .map_or(0.0, |(e, k)| k as f64 / e.max(1) as f64)
}

/// The candidates in allocation order (highest `saves_per_byte` first, ties in
/// forward order).
pub fn ranking(p: &Plan, cfg: &ModelConfig) -> Vec<Candidate> {
    let mut out: Vec<Candidate> = Vec::new();
    for (i, g) in p.groups.iter().enumerate() {
        let what = if g.rows.is_some() {
            "lm_head row block"
        } else if g.what == "attn" {
            "attention projections"
        } else if g.what.starts_with("mlp.") {
            "dense MLP matrix"
        } else if cfg.gpt_oss.is_some() {
            "MoE trunk (router)"
        } else {
            "MoE trunk (router, shared experts, latent proj.)"
        };
        let pinned = usize::from(i < p.pinned_groups);
        match out.iter_mut().find(|c| c.what == what) {
            Some(c) => {
                c.count += 1;
                c.pinned += pinned;
                c.bytes_each = c.bytes_each.max(g.read.buffer_bytes);
            }
            None => out.push(Candidate {
                what: what.into(),
                count: 1,
                pinned,
                bytes_each: g.read.buffer_bytes,
                saves_per_byte: 1.0,
            }),
        }
    }
    if p.total_experts > 0 {
        out.push(Candidate {
            what: "routed expert".into(),
            count: p.total_experts,
            pinned: p.expert_cache_experts,
            bytes_each: p.expert_buffer_bytes,
            saves_per_byte: expert_ratio(cfg),
        });
    }
    out.push(Candidate {
        what: "embedding table".into(),
        count: 1,
        pinned: usize::from(p.embedding_pinned),
        bytes_each: p.embedding_bytes,
        saves_per_byte: 1.0 / cfg.vocab_size.max(1) as f64,
    });
    out
}

/// Predicted bytes read per decoded token (one forward with logits): every streamed
/// trunk group and `lm_head` block once, the expected expert-cache misses under
/// uniform routing (`MoE layers · k · (1 − cache/E) · expert buffer`), and one
/// embedding row when the table is not pinned.
pub fn bytes_per_token(p: &Plan, cfg: &ModelConfig) -> u64 {
    bytes_per_forward(p, cfg, 1)
}

/// Expected number of distinct experts `rows` tokens select in one MoE layer when each
/// picks `k` of `e` experts uniformly and independently: `e · (1 − (1 − k/e)^rows)`
/// (`k` exactly for one row; 0 when the model has no experts).
pub fn expected_distinct_experts(e: usize, k: usize, rows: usize) -> f64 {
    if e == 0 || rows == 0 {
        return 0.0;
    }
    if rows == 1 {
        return k.min(e) as f64;
    }
    let miss_one = 1.0 - k.min(e) as f64 / e as f64;
    e as f64 * (1.0 - miss_one.powi(rows as i32))
}

/// Predicted bytes read by one forward of `rows` tokens with logits for each (a
/// speculative verification pass, docs/speculation.md): every streamed trunk group and
/// `lm_head` block once, and per MoE layer the expected distinct experts of
/// [`expected_distinct_experts`] that miss the cache (uniform routing), and one
/// embedding row per token when the table is not pinned. [`bytes_per_token`] is
/// `rows = 1`.
pub fn bytes_per_forward(p: &Plan, cfg: &ModelConfig, rows: usize) -> u64 {
    // Whole byte counts below 2^53: the f64 sum is exact.
    decode_bytes_uniform(p, cfg, rows).bytes as u64
}

/// [`bytes_per_forward`] split as the time model needs it
/// ([`crate::store::sim::predict::DecodeBytes`]): the routed experts' and embedding
/// rows' parts apart from the total, bytes per forward of `rows` tokens (no look-ahead),
/// the experts in one batch per layer of its expected misses (rounded, at least 1).
pub fn decode_bytes_uniform(
    p: &Plan,
    cfg: &ModelConfig,
    rows: usize,
) -> crate::store::sim::predict::DecodeBytes {
    let rows = rows.max(1);
    let trunk: u64 = p.groups[p.pinned_groups.min(p.groups.len())..]
        .iter()
        .map(|g| g.read.buffer_bytes)
        .sum();
    let moe_layers = cfg.mlp_kinds.iter().filter(|k| **k == MlpKind::Moe).count() as f64;
    let (e, k) = cfg.routed_experts().unwrap_or((0, 0));
    let miss = 1.0 - p.predicted_expert_hit_rate_uniform;
    let experts =
        moe_layers * expected_distinct_experts(e, k, rows) * miss * p.expert_buffer_bytes as f64;
    let emb = if p.embedding_pinned {
        0
    } else {
        rows as u64 * p.embedding_row_buffer_bytes
    };
    // Uniform routing: every layer's demand read queues its expected misses at once.
    let records = (expected_distinct_experts(e, k, rows) * miss)
        .round()
        .max(1.0) as u32;
    let expert_batches = (experts.round() > 0.0)
        .then_some(crate::store::sim::predict::ExpertBatch {
            records,
            bytes: experts.round(),
        })
        .into_iter()
        .collect();
    crate::store::sim::predict::DecodeBytes {
        bytes: trunk as f64 + experts.round() + emb as f64,
        expert_bytes: experts.round(),
        embedding_bytes: emb as f64,
        lookahead_recall: None,
        streamed_compute_share: Some(streamed_compute_share(p)),
        expert_batches,
    }
}

/// Share of a plan's trunk-group bytes that stream (not pinned), [0, 1] (1 without
/// groups): the time model's `f` ([`crate::store::sim::predict::DecodeBytes`]).
pub fn streamed_compute_share(p: &Plan) -> f64 {
    let all: u64 = p.groups.iter().map(|g| g.read.buffer_bytes).sum();
    let streamed: u64 = p.groups[p.pinned_groups.min(p.groups.len())..]
        .iter()
        .map(|g| g.read.buffer_bytes)
        .sum();
    if all == 0 {
        1.0
    } else {
        streamed as f64 / all as f64
    }
}

/// The predicted effect of exact speculation at one budget: passes of `K + 1` rows
/// (every pass drafts `K`), `L` drafts accepted per pass on average, so each pass
/// emits `L + 1` tokens ([`bytes_per_forward`] ÷ `(L + 1)` per generated token).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct SpeculationPrediction {
    /// Drafts per pass (`K` of `ngram:K` / `replay:FILE:K`).
    pub draft_tokens: usize,
    /// Drafts accepted per pass, `0 ..= K` (the runs' `mean_accepted_length`).
    pub mean_accepted_length: f64,
    /// Expected distinct experts one pass reads per MoE layer (uniform routing).
    pub experts_per_layer: f64,
    /// Bytes one pass of `K + 1` rows reads.
    pub bytes_per_forward: u64,
    /// Bytes per generated token: `bytes_per_forward / (L + 1)`.
    pub bytes_per_token: u64,
    /// `bytes_per_token` over plain decoding's at the same budget (a plan without the
    /// restore point, whose bytes go to the expert cache there).
    pub ratio_to_plain: f64,
}

/// [`SpeculationPrediction`] for `draft_tokens = K ≥ 1` drafts and `accepted = L`
/// accepted per pass: `p` plans the speculating run (its restore point counted),
/// `plain` the same budget without it.
///
/// Errors: `K = 0`, or `L` not finite or outside `0 ..= K`
/// ([`crate::util::error::UsageError::Invalid`]).
pub fn predict_speculation(
    p: &Plan,
    plain: &Plan,
    cfg: &ModelConfig,
    draft_tokens: usize,
    accepted: f64,
) -> Result<SpeculationPrediction, crate::util::error::UsageError> {
    if draft_tokens == 0 {
        return Err(crate::util::error::UsageError::Invalid(
            "an acceptance length needs a speculating run: give --speculate ngram:K or replay:FILE:K"
                .into(),
        ));
    }
    if !(accepted.is_finite() && (0.0..=draft_tokens as f64).contains(&accepted)) {
        return Err(crate::util::error::UsageError::Invalid(format!(
            "mean accepted length {accepted} is outside 0..={draft_tokens} (the drafts per pass)"
        )));
    }
    let rows = draft_tokens + 1;
    let forward = bytes_per_forward(p, cfg, rows);
    let per_token = (forward as f64 / (accepted + 1.0)).round() as u64;
    let plain = plain.predicted_bytes_per_token;
    let (e, k) = cfg.routed_experts().unwrap_or((0, 0));
    Ok(SpeculationPrediction {
        draft_tokens,
        mean_accepted_length: accepted,
        experts_per_layer: expected_distinct_experts(e, k, rows),
        bytes_per_forward: forward,
        bytes_per_token: per_token,
        ratio_to_plain: if plain > 0 {
            per_token as f64 / plain as f64
        } else {
            1.0
        },
    })
}

impl Plan {
    /// The same layout allocated for another `budget` (cheap: no checkpoint lookups).
    pub fn with_budget(&self, cfg: &ModelConfig, budget: u64) -> Plan {
        let mut q = self.clone();
        q.allocate(cfg, budget);
        q
    }

    /// Allocates `budget` over the layout, in the order of [`crate::store::rank`].
    pub(crate) fn allocate(&mut self, cfg: &ModelConfig, budget: u64) {
        if self.embedding_pinned {
            self.pinned_global_bytes -= self.embedding_bytes;
            let key = self.embedding_key.clone();
            self.pinned_keys.retain(|k| *k != key);
            self.embedding_pinned = false;
        }
        let min_slots = self.min_slots();
        let min_exp = if self.total_experts == 0 {
            0
        } else {
            self.min_expert_buffers(cfg)
        };
        let rows_reserve = self.step_tokens() as u64 * self.embedding_row_buffer_bytes;
        let (slot_bytes, expert_buffer_bytes) = (self.slot_bytes, self.expert_buffer_bytes);
        // 1. Trunk groups and lm_head blocks (saves 1 byte/token per byte): a prefix.
        let mut left = budget.saturating_sub(self.floor_bytes);
        let mut pinned_groups = 0;
        let mut pinned_trunk = 0u64;
        let n_groups = self.groups.len();
        for (i, g) in self.groups.iter().enumerate() {
            let cost = g.read.buffer_bytes;
            // Pinning the last unpinned group also frees the rotating slots.
            let refund = if i + 1 == n_groups {
                min_slots as u64 * slot_bytes
            } else {
                0
            };
            if cost <= left + refund {
                left = left + refund - cost;
                pinned_groups += 1;
                pinned_trunk += cost;
            } else {
                break;
            }
        }
        // 2. Expert cache (k/E per byte under uniform routing).
        let total_experts = self.total_experts;
        let extra_experts = left.checked_div(expert_buffer_bytes).unwrap_or(0) as usize;
        let expert_cache = (min_exp + extra_experts).min(total_experts.max(min_exp));
        left -= ((expert_cache - min_exp) as u64 * expert_buffer_bytes).min(left);
        // 3. The embedding table (one row per token: ≈ 0 per byte), only with room to spare.
        let embedding_pinned = self.embedding_bytes <= left + rows_reserve;
        if embedding_pinned {
            left = left + rows_reserve - self.embedding_bytes;
            self.pinned_global_bytes += self.embedding_bytes;
            self.pinned_keys.insert(0, self.embedding_key.clone());
        }
        let groups = &self.groups;
        let pinned_layers = (0..cfg.num_hidden_layers)
            .take_while(|&l| {
                groups[..pinned_groups]
                    .iter()
                    .filter(|g| g.layer == l)
                    .count()
                    == groups.iter().filter(|g| g.layer == l).count()
            })
            .count();
        let pinned_trunk_tensor: u64 = groups[..pinned_groups]
            .iter()
            .map(|g| g.read.tensor_bytes)
            .sum();
        self.budget_bytes = budget;
        self.pinned_layers = pinned_layers;
        self.pinned_groups = pinned_groups;
        self.pinned_trunk_bytes = pinned_trunk;
        self.trunk_slots = if pinned_groups == n_groups {
            0
        } else {
            min_slots
        };
        self.expert_cache_experts = expert_cache;
        self.expert_cache_bytes = expert_cache as u64 * expert_buffer_bytes;
        self.embedding_pinned = embedding_pinned;
        self.embedding_rows_bytes = if embedding_pinned { 0 } else { rows_reserve };
        self.predicted_trunk_hit_rate = if self.trunk_bytes_per_token > 0 {
            pinned_trunk_tensor as f64 / self.trunk_bytes_per_token as f64
        } else {
            1.0
        };
        self.predicted_expert_hit_rate_uniform = if total_experts > 0 {
            expert_cache.min(total_experts) as f64 / total_experts as f64
        } else {
            1.0
        };
        self.unused_bytes = left;
        self.predicted_bytes_per_token = bytes_per_token(self, cfg);
    }
}

#[cfg(test)]
mod tests {
    use super::expected_distinct_experts;

    #[test]
    fn distinct_experts_of_several_rows_by_hand() {
        // One row picks exactly k.
        assert_eq!(expected_distinct_experts(64, 8, 1), 8.0);
        // mini, 5 rows: 64 · (1 − (7/8)^5) = 64 · 15961/32768 = 15961/512.
        assert_eq!(expected_distinct_experts(64, 8, 5), 15961.0 / 512.0);
        // Two rows of 1-of-2: 2 · (1 − 1/4) = 1.5.
        assert_eq!(expected_distinct_experts(2, 1, 2), 1.5);
        // k = e: every row reads all of them.
        assert_eq!(expected_distinct_experts(4, 4, 3), 4.0);
        assert_eq!(expected_distinct_experts(0, 0, 5), 0.0);
    }
}
