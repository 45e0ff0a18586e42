//! Counters kept by the streaming store (reported in `--metrics-json`).

use serde::Serialize;

/// Store counters; all byte counts are bytes, times seconds.
#[derive(Debug, Clone, Default, Serialize)]
pub struct StoreMetrics {
    /// Bytes read from disk (or faulted in, mmap) after open: trunk + experts + embedding rows.
    pub bytes_read: u64,
    pub trunk_bytes_read: u64,
    pub expert_bytes_read: u64,
    /// Bytes read while opening (pinned set).
    pub load_bytes_read: u64,
    pub reads: u64,
    /// Time the compute thread spent blocked waiting for IO.
    pub io_wait_s: f64,
    /// `io_wait_s` by what was waited for (the parts sum to it).
    pub io_wait_split: IoWaitSplit,
    /// Trunk bytes the model needed, per token summed, and the part served from
    /// pinned memory (a hit); streamed layers are misses even when prefetched.
    pub trunk_request_bytes: u64,
    pub trunk_hit_bytes: u64,
    /// Expert requests (router selections) and those already resident or in flight.
    pub expert_requests: u64,
    pub expert_hits: u64,
    /// Hits that were in flight thanks to a prefetch when selected.
    pub expert_prefetch_hits: u64,
    /// Distinct routed experts fetched by expert-grouped prefill chunks (one fetch
    /// per expert per chunk and layer; decode tokens are not counted).
    pub prefill_expert_fetches: u64,
    /// Per layer: (requests, hits).
    pub expert_layer: Vec<(u64, u64)>,
    /// Look-ahead / oracle guesses issued, and guesses the router then selected.
    pub lookahead_guesses: u64,
    pub lookahead_correct: u64,
    /// Experts the router selected in layers where a guess had been made.
    pub lookahead_actual: u64,
    /// Peak of self-accounted resident bytes (pinned + slots + expert buffers + state + the model's activation arena).
    pub peak_accounted_bytes: u64,
    /// Times a buffer had to be allocated beyond the plan (should stay 0).
    pub budget_overflows: u64,
    pub verified_tensors: u64,
    /// Bytes read for embedding rows on demand (included in `bytes_read`).
    pub embedding_bytes_read: u64,
    /// Seconds during which at least one read of an IO thread was in flight (mmap:
    /// faulting in). Bytes read ÷ this is the device throughput the store got.
    pub read_busy_s: f64,
    /// Bytes of the model's scratch arena as last reported by the forward
    /// ([`crate::store::WeightStore::note_activation_bytes`]); 0 before the first
    /// forward, when the plan's `activation_bytes` is accounted instead.
    pub activation_bytes: u64,
    /// Lossless layout: bytes decoded from coded blocks (included in what the model
    /// read; `bytes_read` counts the coded bytes), and the IO threads' CPU seconds
    /// checking and decoding them.
    pub lossless_decoded_bytes: u64,
    pub lossless_decode_s: f64,
}

/// The compute thread's IO wait by what it waited for, seconds; the parts sum to
/// [`StoreMetrics::io_wait_s`]. A layer's trunk groups are waited for before its
/// router runs (the `moe` group holds the router), its routed experts after, so the
/// classes are also the phases. *Prefetched*: the read was queued ahead by the
/// prefetch policy (`next-layer`'s next group, a look-ahead or oracle guess, a
/// prefill chunk's read-ahead) and was still in flight when the forward needed it;
/// *demand*: queued when needed, or waiting for a buffer to free.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct IoWaitSplit {
    pub trunk_demand_s: f64,
    pub trunk_prefetched_s: f64,
    pub expert_demand_s: f64,
    pub expert_prefetched_s: f64,
    /// Embedding rows read on demand.
    pub rows_s: f64,
}

/// The counts behind the store's four ratios, and the ratios: one definition shared
/// by the store ([`StoreMetrics`]) and its simulator (`store::sim::SimCounts`), so
/// both report the same figure from the same counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HitCounts {
    /// Trunk bytes needed, and the part served from pinned memory.
    pub trunk_request_bytes: u64,
    pub trunk_hit_bytes: u64,
    /// Expert requests, and those already resident or in flight.
    pub expert_requests: u64,
    pub expert_hits: u64,
    /// Look-ahead / oracle guesses, those the router then selected, and the experts
    /// selected in layers where a guess had been made.
    pub lookahead_guesses: u64,
    pub lookahead_correct: u64,
    pub lookahead_actual: u64,
}

impl HitCounts {
    /// Fraction of needed trunk bytes served from pinned memory (1.0 when none were
    /// needed); comparable with the plan's `predicted_trunk_hit_rate`.
    pub fn trunk_hit_rate(&self) -> f64 {
        ratio(self.trunk_hit_bytes, self.trunk_request_bytes)
    }
    /// Expert requests served from the cache (1.0 when none).
    pub fn expert_hit_rate(&self) -> f64 {
        ratio(self.expert_hits, self.expert_requests)
    }
    /// Fraction of guesses the router then selected (`None` without guesses).
    pub fn lookahead_precision(&self) -> Option<f64> {
        (self.lookahead_guesses > 0)
            .then(|| self.lookahead_correct as f64 / self.lookahead_guesses as f64)
    }
    /// Fraction of selected experts that had been guessed (`None` without guesses).
    pub fn lookahead_recall(&self) -> Option<f64> {
        (self.lookahead_actual > 0)
            .then(|| self.lookahead_correct as f64 / self.lookahead_actual as f64)
    }
}

impl StoreMetrics {
    /// The counts behind the ratios below.
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
    /// [`HitCounts::trunk_hit_rate`].
    pub fn trunk_hit_rate(&self) -> f64 {
        self.hits().trunk_hit_rate()
    }
    /// [`HitCounts::expert_hit_rate`].
    pub fn expert_hit_rate(&self) -> f64 {
        self.hits().expert_hit_rate()
    }
    /// [`HitCounts::lookahead_precision`].
    pub fn lookahead_precision(&self) -> Option<f64> {
        self.hits().lookahead_precision()
    }
    /// [`HitCounts::lookahead_recall`].
    pub fn lookahead_recall(&self) -> Option<f64> {
        self.hits().lookahead_recall()
    }
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        1.0
    } else {
        a as f64 / b as f64
    }
}
