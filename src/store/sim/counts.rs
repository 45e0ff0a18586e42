//! A replay's counters ([`SimCounts`]).

use std::collections::BTreeMap;

use serde::Serialize;

use crate::store::metrics::HitCounts;

/// Counters of a replay; names and meanings as [`crate::store::metrics::StoreMetrics`]
/// (bytes are bytes read after open; the warm fill and a static hot set apart).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SimCounts {
    pub bytes_read: u64,
    /// Trunk groups read, `lm_head` blocks included (as the engine counts them).
    pub trunk_bytes_read: u64,
    /// The `lm_head` part of `trunk_bytes_read`.
    pub lm_head_bytes_read: u64,
    pub expert_bytes_read: u64,
    pub embedding_bytes_read: u64,
    pub reads: u64,
    pub trunk_request_bytes: u64,
    pub trunk_hit_bytes: u64,
    pub expert_requests: u64,
    pub expert_hits: u64,
    pub prefill_expert_fetches: u64,
    pub lookahead_guesses: u64,
    pub lookahead_correct: u64,
    pub lookahead_actual: u64,
    pub budget_overflows: u64,
    /// Routed-expert reads by the batch they were queued in: records queued at once
    /// (a layer's selection minus its cache hits, or a look-ahead's guesses not
    /// cached) → (batches, bytes). Not serialized (the simulate report's columns are
    /// unchanged); the time model reads it ([`super::predict::DecodeBytes`]).
    #[serde(skip)]
    pub expert_batches: BTreeMap<u32, (u64, u64)>,
}

impl SimCounts {
    /// `self − o`, counter by counter (`o` an earlier snapshot of the same replay).
    pub(super) fn sub(&self, o: &SimCounts) -> SimCounts {
        let mut expert_batches = self.expert_batches.clone();
        for (k, (n, b)) in &o.expert_batches {
            let e = expert_batches.entry(*k).or_default();
            *e = (e.0.saturating_sub(*n), e.1.saturating_sub(*b));
            if *e == (0, 0) {
                expert_batches.remove(k);
            }
        }
        SimCounts {
            expert_batches,
            bytes_read: self.bytes_read - o.bytes_read,
            trunk_bytes_read: self.trunk_bytes_read - o.trunk_bytes_read,
            lm_head_bytes_read: self.lm_head_bytes_read - o.lm_head_bytes_read,
            expert_bytes_read: self.expert_bytes_read - o.expert_bytes_read,
            embedding_bytes_read: self.embedding_bytes_read - o.embedding_bytes_read,
            reads: self.reads - o.reads,
            trunk_request_bytes: self.trunk_request_bytes - o.trunk_request_bytes,
            trunk_hit_bytes: self.trunk_hit_bytes - o.trunk_hit_bytes,
            expert_requests: self.expert_requests - o.expert_requests,
            expert_hits: self.expert_hits - o.expert_hits,
            prefill_expert_fetches: self.prefill_expert_fetches - o.prefill_expert_fetches,
            lookahead_guesses: self.lookahead_guesses - o.lookahead_guesses,
            lookahead_correct: self.lookahead_correct - o.lookahead_correct,
            lookahead_actual: self.lookahead_actual - o.lookahead_actual,
            budget_overflows: self.budget_overflows - o.budget_overflows,
        }
    }
    /// The counts behind the hit rates and look-ahead ratios ([`HitCounts`]: the
    /// store's own definitions, so the two cannot drift apart).
    pub fn hits(&self) -> HitCounts {
        HitCounts {
            trunk_request_bytes: self.trunk_request_bytes,
            trunk_hit_bytes: self.trunk_hit_bytes,
            expert_requests: self.expert_requests,
            expert_hits: self.expert_hits,
            lookahead_guesses: self.lookahead_guesses,
            lookahead_correct: self.lookahead_correct,
            lookahead_actual: self.lookahead_actual,
        }
    }

    /// Counts one batch of expert reads queued at once: `records` reads of `bytes` in
    /// all (nothing when `records` is 0).
    pub(super) fn add_expert_batch(&mut self, records: u32, bytes: u64) {
        if records > 0 {
            let e = self.expert_batches.entry(records).or_default();
            *e = (e.0 + 1, e.1 + bytes);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_subtract_by_size() {
        // Prefill: one batch of 8 records (8 × 49,152 = 393,216 bytes); then decode adds
        // a batch of 3 (147,456) and another of 8: decode alone is {3: 1 × 147,456,
        // 8: 1 × 393,216}, and an emptied size disappears.
        let mut c = SimCounts::default();
        c.add_expert_batch(8, 393_216);
        c.add_expert_batch(0, 0);
        let prefill = c.clone();
        c.add_expert_batch(3, 147_456);
        c.add_expert_batch(8, 393_216);
        let d = c.sub(&prefill);
        let want: BTreeMap<u32, (u64, u64)> = [(3, (1, 147_456)), (8, (1, 393_216))].into();
        assert_eq!(d.expert_batches, want);
        assert!(prefill.sub(&prefill).expert_batches.is_empty());
    }
}
