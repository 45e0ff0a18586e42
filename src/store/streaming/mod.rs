//! The streaming store: resident memory stays under `--budget`; everything else is
//! read from disk when needed (or ahead of time, by the prefetch policy).
//!
//! Layout of memory (see [`super::plan`]): pinned globals and small per-layer
//! tensors, the trunk of a prefix of layers, rotating trunk slots for the other
//! layers, and an expert cache with `lru` or `lfru` replacement. Reads run on
//! background IO threads; the compute thread blocks only when the bytes it needs
//! are not there yet (that time is `io_wait_s`).
//!
//! Determinism: the bytes handed to the model are the bytes on disk, whatever was
//! cached or prefetched; the model accumulates experts in router order.
//!
//! Files: this one holds the store and its [`WeightStore`] protocol (requests,
//! hints, selection counters); `open.rs` builds it (plan, shards, pinned set, IO
//! threads); `caches.rs` decides what to read and evict; `io.rs` is the IO
//! workers; `rows.rs` the row-blocked and on-demand row reads; `mapped.rs` the
//! mmap mode; `verify_parts.rs` the checksums of tensors read in parts; `warm.rs`
//! the warm start (caches filled to capacity before the first forward).

mod caches;
mod io;
mod mapped;
mod open;
mod rows;
mod verify_parts;
mod warm;

pub use warm::WarmFill;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::thread::JoinHandle;

use anyhow::{bail, Context, Result};

use self::caches::{Entry, ExpertMeta, Inner, Key, Req};
use self::io::{lock, Loaded, Shared};
use super::eviction::CachePolicy;
use super::metrics::StoreMetrics;
use super::plan::{Plan, Prefetch};
use super::trace::{self, TraceRecord};
use super::{Bytes, ExpertWeights, WeightStore};
use crate::format::config::ExpertFormat;
use crate::format::schema::layer_name;
use crate::io::IoMode;

/// Settings of a streaming store.
#[derive(Debug, Clone)]
pub struct StreamOptions {
    pub budget: u64,
    pub io: IoMode,
    pub prefetch: Prefetch,
    pub cache: CachePolicy,
    pub max_context: usize,
    /// Background IO threads (queue depth).
    pub io_threads: usize,
    /// Write the router's expert choices per (token, layer) to this file (JSON lines).
    pub record_trace: Option<PathBuf>,
    /// Expert trace of an earlier run, for `--prefetch oracle`.
    pub trace: Option<PathBuf>,
    /// Check every read against `tensors.sha256`.
    pub verify_reads: bool,
}

/// A [`WeightStore`] that keeps resident memory under a budget.
/// Experts of an expert-grouped prefill chunk read ahead of the one being
/// multiplied ([`StreamingStore::read_chunk_ahead`]).
const CHUNK_READ_AHEAD: usize = 2;

pub struct StreamingStore {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    pinned: HashMap<String, Bytes>,
    prefix: String,
    expert_format: Option<ExpertFormat>,
    opts: StreamOptions,
    /// First group index that is not pinned (== number of groups when all are).
    first_streamed: usize,
    /// Group of every streamed trunk tensor key (whole tensors only).
    group_of: HashMap<String, usize>,
    /// Groups of each layer (index `num_layers`: the `lm_head` blocks).
    by_layer: Vec<Vec<usize>>,
    /// Row-blocked tensors (`lm_head`): their blocks and groups.
    row_groups: HashMap<String, Vec<(std::ops::Range<usize>, usize)>>,
    /// Shard, offset and length of the embedding table when it is read row by row.
    embedding_loc: Option<(usize, u64, u64)>,
    moe_layers: Vec<usize>,
    trace_in: HashMap<(usize, usize), Vec<usize>>,
    /// Bytes pinned at open.
    pub pinned_bytes: u64,
    /// Seconds spent opening (reading the pinned set).
    pub load_s: f64,
}

impl StreamingStore {
    /// The plan in force.
    pub fn plan(&self) -> &Plan {
        &self.shared.plan
    }

    /// A snapshot of the counters.
    pub fn metrics(&self) -> StoreMetrics {
        let mut m = lock(&self.shared).metrics.clone();
        if let Some(p) = &self.shared.lossless {
            use std::sync::atomic::Ordering::Relaxed;
            m.lossless_decoded_bytes = p.decoded_bytes.load(Relaxed);
            m.lossless_decode_s = p.decode_ns.load(Relaxed) as f64 * 1e-9;
        }
        m
    }

    /// Writes the recorded expert trace (if `record_trace` was set), format 2
    /// ([`trace`]). Call after generation.
    pub fn finish(&self) -> Result<()> {
        if let Some(p) = &self.opts.record_trace {
            let g = lock(&self.shared);
            let t = trace::Trace {
                header: g.trace_header.clone(),
                forwards: g.trace_forwards.clone(),
                records: g.trace_out.clone(),
            };
            drop(g);
            trace::write_full(p, &t)?;
        }
        Ok(())
    }

    /// Tells the trace recorder (`record_trace`) what the store cannot see: the
    /// prompt length, the prefill chunk and whether the caches were warmed
    /// ([`StreamingStore::warm_fill`]). No effect without `record_trace`.
    pub fn note_run(&self, prompt_tokens: usize, prefill_chunk: usize, warm: bool) {
        let mut g = lock(&self.shared);
        if let Some(h) = g.trace_header.as_mut() {
            h.prompt_tokens = prompt_tokens;
            h.prefill_chunk = prefill_chunk;
            if let Some(p) = h.plan.as_mut() {
                p.start = if warm { "warm" } else { "cold" }.into();
            }
        }
    }

    /// Page-cache-resident bytes of the model's shard files (mincore).
    pub fn page_cache_resident_bytes(&self) -> u64 {
        self.shared
            .files
            .iter()
            .map(|f| crate::io::pagecache::resident_bytes(&f.path).unwrap_or(0))
            .sum()
    }

    fn view(&self, key: Key, loaded: &Arc<Loaded>, member_key: &str) -> Result<Bytes> {
        let g = self.shared.group(key);
        let m = g
            .members
            .iter()
            .find(|m| m.key == member_key)
            .with_context(|| {
                format!(
                    "tensor {}{member_key} is not in this read group",
                    self.prefix
                )
            })?;
        let (owner, p) = loaded.locate(m.range, m.offset);
        Ok(Bytes::new(owner, p, m.len as usize))
    }
}

impl std::fmt::Debug for StreamingStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamingStore")
            .field("io", &self.opts.io)
            .field("prefetch", &self.opts.prefetch)
            .field("budget", &self.opts.budget)
            .finish()
    }
}

impl Drop for StreamingStore {
    fn drop(&mut self) {
        {
            let mut g = lock(&self.shared);
            g.shutdown = true;
        }
        self.shared.cv.notify_all();
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

impl WeightStore for StreamingStore {
    fn tensor(&self, layer: Option<usize>, name: &str) -> Result<Bytes> {
        let key = match layer {
            Some(l) => layer_name(l, name),
            None => name.to_string(),
        };
        if let Some(b) = self.pinned.get(&key) {
            return Ok(b.clone());
        }
        if let Some(&gi) = self.group_of.get(&key) {
            let loaded = self.load_group(gi)?;
            return self.view(Key::Group(gi), &loaded, &key);
        }
        // Whole-tensor access to a tensor the plan reads in parts (the model reads
        // `lm_head` by blocks and embedding rows on demand; tools and tests may ask for
        // the whole): read outside the plan's buffers.
        if let Some(blocks) = self.row_groups.get(&key) {
            let mut v = Vec::new();
            for (r, gi) in blocks {
                v.extend_from_slice(&self.block_bytes(&key, r.start, *gi)?);
            }
            return Ok(Bytes::from_vec(v));
        }
        if let (Some((shard, off, len)), true) =
            (self.embedding_loc, key == self.shared.plan.embedding_key)
        {
            return self.read_loose(shard, off, len);
        }
        bail!("tensor {}{key} is not in the checkpoint", self.prefix);
    }

    fn rows(
        &self,
        layer: Option<usize>,
        name: &str,
        row_bytes: usize,
        rows: &[usize],
    ) -> Result<Vec<Bytes>> {
        if self.opts.record_trace.is_some()
            && layer.is_none()
            && name == self.shared.plan.embedding_key
        {
            // A forward reads its embedding rows first (`begin_token` sets the position).
            lock(&self.shared)
                .trace_forwards
                .push(trace::ForwardRecord {
                    forward: 0,
                    ids: rows.to_vec(),
                    logits: 0,
                });
        }
        self.rows_on_demand(layer, name, row_bytes, rows)
    }

    fn row_blocks(
        &self,
        layer: Option<usize>,
        name: &str,
        rows: usize,
    ) -> Vec<std::ops::Range<usize>> {
        self.blocks_of(layer, name, rows)
    }

    fn tensor_rows(
        &self,
        layer: Option<usize>,
        name: &str,
        rows: std::ops::Range<usize>,
        row_bytes: usize,
    ) -> Result<Bytes> {
        self.block_of(layer, name, rows, row_bytes)
    }

    fn expert(&self, layer: usize, expert: usize) -> Result<ExpertWeights> {
        let fmt = self.expert_format.context("model has no routed experts")?;
        let (key, loaded) = self.fetch_expert(layer, expert)?;
        let codebooks = format!("model.layers.{layer}.block_sparse_moe.rvq_codebooks.");
        let mut get = |name: &str| -> Result<Bytes> {
            match name.strip_prefix(&codebooks) {
                // Pinned layer tensors, not members of the expert's read group.
                Some(m) => self.tensor(Some(layer), &format!("block_sparse_moe.rvq_codebooks.{m}")),
                None => self.view(key, &loaded, name),
            }
        };
        Ok(ExpertWeights {
            w1: crate::store::expert_mat(fmt, layer, expert, "w1", &mut get)?,
            w2: crate::store::expert_mat(fmt, layer, expert, "w2", &mut get)?,
            w3: crate::store::expert_mat(fmt, layer, expert, "w3", &mut get)?,
        })
    }

    fn stacked_expert(
        &self,
        layer: usize,
        expert: usize,
        _num_experts: usize,
        names: &[&str],
    ) -> Result<Vec<Bytes>> {
        let (key, loaded) = self.fetch_expert(layer, expert)?;
        names
            .iter()
            .map(|n| self.view(key, &loaded, &layer_name(layer, n)))
            .collect()
    }

    fn begin_token(&self, pos: usize) {
        let mut g = lock(&self.shared);
        g.token = pos;
        if let Some(f) = g.trace_forwards.last_mut() {
            f.forward = pos;
        }
        g.guesses.clear();
        g.protected.clear();
        g.layer_calls.clear();
        g.touched.clear();
        g.chunk = None;
    }

    fn wants_lookahead(&self) -> bool {
        self.opts.prefetch == Prefetch::Lookahead
    }

    fn note_activation_bytes(&self, bytes: u64) {
        let mut g = lock(&self.shared);
        g.metrics.activation_bytes = bytes;
        self.update_peak(&mut g);
    }

    fn prefetch_experts(&self, layer: usize, guesses: &[usize]) {
        let mut g = lock(&self.shared);
        self.issue_guesses(&mut g, layer, guesses);
    }

    fn begin_layer(&self, layer: usize) {
        let mut g = lock(&self.shared);
        // A streamed group is a miss even when prefetched: its bytes were read again.
        let groups = self.by_layer.get(layer).map_or(&[][..], |v| &v[..]);
        for &gi in groups {
            let tb = self.shared.plan.groups[gi].read.tensor_bytes;
            g.metrics.trunk_request_bytes += tb;
            if gi < self.first_streamed {
                g.metrics.trunk_hit_bytes += tb;
            }
        }
        // Start the layer's first streamed group now (and the one after it).
        if let Some(&gi) = groups.iter().find(|&&gi| gi >= self.first_streamed) {
            if g.touched.insert(gi) {
                g = self.request_blocking(g, Key::Group(gi));
                if self.opts.prefetch.trunk_ahead() {
                    if let Some(n) = self.next_streamed_group(gi) {
                        self.request(&mut g, Key::Group(n), true);
                    }
                }
            }
        }
        if self.opts.prefetch == Prefetch::Oracle {
            // Replay the trace: experts of the next MoE layer of this token (or the first of the next token).
            let next = self.moe_layers.iter().copied().find(|&m| m > layer);
            let (t, nl) = match next {
                Some(m) => (g.token, m),
                None => (g.token + 1, self.moe_layers.first().copied().unwrap_or(0)),
            };
            if let Some(ex) = self.trace_in.get(&(t, nl)).cloned() {
                if t == g.token {
                    self.issue_guesses(&mut g, nl, &ex);
                }
            }
            // Also the current layer if it was not guessed yet (first layer of a token).
            if !g.guesses.contains_key(&layer) {
                if let Some(ex) = self.trace_in.get(&(g.token, layer)).cloned() {
                    self.issue_guesses(&mut g, layer, &ex);
                }
            }
        }
    }

    fn experts_selected(&self, layer: usize, experts: &[usize]) {
        let mut g = lock(&self.shared);
        self.note_selection(&mut g, layer, experts);
        g.protected.retain(|(l, _)| *l > layer);
        for &e in experts {
            g.protected.insert((layer, e));
        }
        for &e in experts {
            let key = Key::Expert(layer, e);
            g.metrics.expert_requests += 1;
            if layer < g.metrics.expert_layer.len() {
                g.metrics.expert_layer[layer].0 += 1;
            }
            let present = g.entries.contains_key(&key);
            if present {
                g.metrics.expert_hits += 1;
                if matches!(g.entries.get(&key), Some(Entry::Loading)) {
                    g.metrics.expert_prefetch_hits += 1;
                }
                if layer < g.metrics.expert_layer.len() {
                    g.metrics.expert_layer[layer].1 += 1;
                }
            }
            g = self.request_blocking(g, key);
        }
    }

    fn groups_chunk_experts(&self) -> bool {
        true
    }

    fn chunk_experts_selected(&self, layer: usize, per_token: &[usize], k: usize, order: &[usize]) {
        // Same trace rows and per-token request counts as one `experts_selected` per
        // token; the loads happen in `expert` (each distinct expert once, in `order`).
        let mut g = lock(&self.shared);
        for experts in per_token.chunks(k.max(1)) {
            self.note_selection(&mut g, layer, experts);
            g.metrics.expert_requests += experts.len() as u64;
            if layer < g.metrics.expert_layer.len() {
                g.metrics.expert_layer[layer].0 += experts.len() as u64;
            }
        }
        // A request is a hit unless it is the one fetch of an expert not resident now.
        let total = per_token.len() as u64;
        let misses = order
            .iter()
            .filter(|&&e| !g.entries.contains_key(&Key::Expert(layer, e)))
            .count() as u64;
        let hits = total - misses.min(total);
        g.metrics.expert_hits += hits;
        if layer < g.metrics.expert_layer.len() {
            g.metrics.expert_layer[layer].1 += hits;
        }
        g.protected.retain(|(l, _)| *l > layer);
        g.metrics.prefill_expert_fetches += order.len() as u64;
        g.chunk = Some((layer, order.to_vec()));
    }

    fn end_layer(&self, _layer: usize) {}

    fn rewound(&self, pos: usize) {
        // The trace keeps the accepted positions only: routing rows past `pos` go,
        // and the last forward's ids are cut to the tokens that stayed.
        let mut g = lock(&self.shared);
        g.trace_out.retain(|r| r.token < pos);
        if let Some(f) = g.trace_forwards.last_mut() {
            let keep = pos.saturating_sub(f.forward);
            f.ids.truncate(keep);
            f.logits = f.logits.min(keep);
        }
    }
}

impl StreamingStore {
    /// Routed expert `expert` of `layer` from the expert cache (counted for the
    /// replacement policy; read now, or waited for, when it is not there).
    ///
    /// Errors: an expert the plan does not hold, IO failure.
    fn fetch_expert(&self, layer: usize, expert: usize) -> Result<(Key, Arc<Loaded>)> {
        let key = Key::Expert(layer, expert);
        if !self
            .shared
            .plan
            .expert_groups
            .contains_key(&(layer, expert))
        {
            bail!("expert {expert} of layer {layer} is not in the checkpoint");
        }
        let mut g = lock(&self.shared);
        g.tick += 1;
        let t = g.tick;
        let m = g
            .meta
            .entry((layer, expert))
            .or_insert(ExpertMeta { freq: 0, last: 0 });
        m.freq += 1;
        m.last = t;
        let ahead = self.read_chunk_ahead(&mut g, layer, expert);
        let loaded = self.wait(g, key)?;
        if ahead {
            // Protected while its own read-ahead ran (see `read_chunk_ahead`).
            lock(&self.shared).protected.remove(&(layer, expert));
        }
        Ok((key, loaded))
    }

    /// One token's router choice at `layer`: its trace row (with `--record-trace`) and,
    /// for the first call of the layer in a step, the look-ahead accuracy counters.
    /// Shared by the per-token and the chunk-grouped selection paths.
    fn note_selection(&self, g: &mut Inner, layer: usize, experts: &[usize]) {
        let sub = {
            let c = g.layer_calls.entry(layer).or_insert(0);
            *c += 1;
            *c - 1
        };
        let token = g.token + sub;
        if self.opts.record_trace.is_some() {
            let predicted = (self.opts.prefetch == Prefetch::Lookahead && sub == 0)
                .then(|| g.guesses.get(&layer).cloned())
                .flatten();
            g.trace_out.push(TraceRecord {
                token,
                layer,
                experts: experts.to_vec(),
                predicted,
            });
        }
        if let Some(gs) = g.guesses.get(&layer).filter(|_| sub == 0) {
            let correct = experts.iter().filter(|e| gs.contains(e)).count() as u64;
            g.metrics.lookahead_actual += experts.len() as u64;
            g.metrics.lookahead_correct += correct;
        }
    }

    /// Expert-grouped prefill under a prefetch policy other than `none`: when the
    /// model asks for `expert` of the chunk's order, queue its read first, then the
    /// next [`CHUNK_READ_AHEAD`] experts of the order (optional reads into free or
    /// evictable cache buffers, protected until used), so the device reads them while
    /// this one is multiplied. Which bytes are read can change, never the output.
    /// `expert` itself stays protected until the caller has it (returns `true`: the
    /// caller unprotects it), so its read-ahead never evicts it, whether its own read
    /// is still in flight or done: the bytes read do not depend on IO timing.
    fn read_chunk_ahead(&self, g: &mut Inner, layer: usize, expert: usize) -> bool {
        if self.opts.prefetch == Prefetch::None {
            return false;
        }
        let next: Vec<usize> = match &g.chunk {
            Some((l, order)) if *l == layer => match order.iter().position(|&e| e == expert) {
                Some(i) => order[i + 1..]
                    .iter()
                    .take(CHUNK_READ_AHEAD)
                    .copied()
                    .collect(),
                None => return false,
            },
            _ => return false,
        };
        g.protected.insert((layer, expert));
        let _ = self.request(g, Key::Expert(layer, expert), true);
        for e in next {
            if self.request(g, Key::Expert(layer, e), true) == Req::Queued {
                g.protected.insert((layer, e));
            }
        }
        true
    }

    fn issue_guesses(&self, g: &mut Inner, layer: usize, guesses: &[usize]) {
        if g.guesses.contains_key(&layer) {
            return;
        }
        g.guesses.insert(layer, guesses.to_vec());
        g.metrics.lookahead_guesses += guesses.len() as u64;
        for &e in guesses {
            if !self.shared.plan.expert_groups.contains_key(&(layer, e)) {
                continue;
            }
            if self.request(g, Key::Expert(layer, e), true) == Req::Queued {
                g.protected.insert((layer, e));
            }
        }
    }
}
