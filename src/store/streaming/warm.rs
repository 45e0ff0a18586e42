//! The warm start: the expert cache and the trunk slots filled to capacity before the
//! first forward, from disk, so a measured run starts in the steady state a user at
//! that budget lives in rather than from empty caches.
//!
//! Which experts: the plan's cache holds `expert_cache_experts` of them; they are taken
//! round-robin over the MoE layers (expert 0 of every MoE layer, then expert 1, …), so
//! every layer holds the same number (± 1). Under uniform routing any set of that size
//! gives the same expected hit rate; spreading it evenly keeps every layer's rate the
//! same. At a budget that holds every expert, all are read and decode hits on every
//! request, as resident decode does. Which trunk groups: the first `trunk_slots`
//! streamed groups in forward order (what the first forward needs first; rotating slots
//! are re-read every token in the steady state anyway).
//!
//! The fill goes through the same request path as prefetches (optional reads into the
//! plan's buffers), so the budget and its accounting hold; the store's counters are
//! restored afterwards, so the run's figures (bytes read, reads, IO wait, busy time)
//! exclude it and [`WarmFill`] reports it apart. In `mmap` mode the fill makes the
//! cached ranges resident in the page cache (the mapping is the buffer there).

use std::time::Instant;

use anyhow::{bail, Result};

use super::caches::{Entry, Key, Req, Waited};
use super::io::lock;
use super::StreamingStore;

/// What [`StreamingStore::warm_fill`] read.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct WarmFill {
    /// Wall time of the fill, seconds.
    pub seconds: f64,
    /// Bytes read from the model files.
    pub bytes: u64,
    /// Routed experts now in the cache.
    pub experts: usize,
    /// Trunk groups now in the rotating slots.
    pub groups: usize,
}

impl StreamingStore {
    /// Fills the expert cache and the trunk slots to capacity (see the module docs) and
    /// waits for every read. Call once, after open and before the first forward.
    ///
    /// Errors: a read that fails (naming the tensor group), as a forward's would.
    pub fn warm_fill(&self) -> Result<WarmFill> {
        let t0 = Instant::now();
        let plan = &self.shared.plan;
        let mut keys: Vec<Key> = (self.first_streamed..plan.groups.len())
            .take(plan.trunk_slots)
            .map(Key::Group)
            .collect();
        let per_layer = plan
            .expert_groups
            .keys()
            .map(|&(_, e)| e + 1)
            .max()
            .unwrap_or(0);
        let mut experts = Vec::new();
        'fill: for e in 0..per_layer {
            for &l in &self.moe_layers {
                if experts.len() >= plan.expert_cache_experts {
                    break 'fill;
                }
                if plan.expert_groups.contains_key(&(l, e)) {
                    experts.push(Key::Expert(l, e));
                }
            }
        }
        keys.extend(experts);
        let mut g = lock(&self.shared);
        let before = g.metrics.clone();
        let mut queued = Vec::with_capacity(keys.len());
        for key in keys {
            // Optional: a buffer the plan cannot give is a smaller fill, never an overflow.
            if self.request(&mut g, key, true) == Req::Queued {
                queued.push(key);
            }
        }
        let (mut g, failed) = self.block_on(g, Waited::Fill, |g| {
            let mut loading = false;
            for k in &queued {
                match g.entries.get(k) {
                    Some(Entry::Failed(e)) => return Some(Some(e.clone())),
                    Some(Entry::Loading) => loading = true,
                    _ => {}
                }
            }
            (!loading).then_some(None)
        });
        if let Some(e) = failed {
            bail!("warm start: {e}");
        }
        let bytes = g.metrics.bytes_read - before.bytes_read;
        let (peak, overflows) = (g.metrics.peak_accounted_bytes, g.metrics.budget_overflows);
        g.metrics = before;
        g.metrics.peak_accounted_bytes = peak;
        g.metrics.budget_overflows = overflows;
        Ok(WarmFill {
            seconds: t0.elapsed().as_secs_f64(),
            bytes,
            experts: g.cached_experts.len(),
            groups: g.slot_groups.len(),
        })
    }
}
