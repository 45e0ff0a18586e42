//! What the streaming store holds and what it reads next: the entries of trunk
//! slots and the expert cache, their buffers and accounting, eviction (one helper
//! for both kinds) and the one blocking helper that counts IO wait.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, MutexGuard};
use std::time::Instant;

use anyhow::{bail, Result};

use super::io::{Job, Loaded, LoadedData};
use super::StreamingStore;
use crate::io::{AlignedBuf, IoMode};
use crate::store::metrics::StoreMetrics;
use crate::store::trace::{ForwardRecord, TraceHeader, TraceRecord};

/// Outcome of [`StreamingStore::request`].
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Req {
    /// The entry exists or its read was queued.
    Queued,
    /// An optional read found no evictable buffer and was dropped.
    Skipped,
    /// A required read must wait for an in-flight read to free a buffer.
    Wait,
}

/// What a blocked compute thread waits for: `key` (`true`: its read was queued by
/// a prefetch), or the warm fill (not counted: the fill's figures are reported apart).
#[derive(Clone, Copy, Debug)]
pub(super) enum Waited {
    Key(Key, bool),
    Fill,
}

/// What an entry holds: a streamed trunk group (index into `Plan::groups`), or one
/// routed expert (layer, expert).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub(super) enum Key {
    Group(usize),
    Expert(usize, usize),
}

/// State of an entry.
pub(super) enum Entry {
    Loading,
    Ready(Arc<Loaded>),
    Failed(String),
}

/// Use counts of an expert for the replacement policy.
pub(super) struct ExpertMeta {
    pub(super) freq: u64,
    pub(super) last: u64,
}

/// Everything behind the store's mutex.
#[derive(Default)]
pub(super) struct Inner {
    pub(super) entries: HashMap<Key, Entry>,
    /// Groups currently occupying trunk slots (loading or ready), oldest first.
    pub(super) slot_groups: VecDeque<usize>,
    /// Streamed groups touched in the current forward (their prefetch was issued).
    pub(super) touched: HashSet<usize>,
    /// Experts currently occupying cache buffers.
    pub(super) cached_experts: HashSet<(usize, usize)>,
    pub(super) meta: HashMap<(usize, usize), ExpertMeta>,
    /// Experts that must not be evicted now (selected for the current layer, or guessed).
    pub(super) protected: HashSet<(usize, usize)>,
    pub(super) free_slot_bufs: Vec<AlignedBuf>,
    pub(super) free_expert_bufs: Vec<AlignedBuf>,
    /// Buffers carved at first need for every trunk slot / expert buffer of the plan
    /// ([`AlignedBuf::carve`]: 2 MiB pages for direct reads) and not handed out yet;
    /// `None` until then. Only handed-out buffers are accounted (and touched).
    pub(super) carved_slot_bufs: Option<Vec<AlignedBuf>>,
    pub(super) carved_expert_bufs: Option<Vec<AlignedBuf>>,
    pub(super) allocated_slot_bufs: usize,
    pub(super) allocated_expert_bufs: usize,
    pub(super) queue: VecDeque<Job>,
    /// Entries whose read a prefetch queued and no forward has waited for yet.
    pub(super) prefetched: HashSet<Key>,
    /// mmap mode: evicted records whose pages an IO thread drops before its next read.
    pub(super) releases: Vec<Key>,
    /// Page ranges `(shard, lo, hi)` an IO thread is dropping now (no read of an
    /// overlapping record starts until they are done).
    pub(super) releasing: Vec<(usize, u64, u64)>,
    /// mmap mode: byte ranges `(shard, start, end)` of the pinned tensors (never dropped).
    pub(super) pinned_ranges: Vec<(usize, u64, u64)>,
    /// Reads in progress, and since when at least one has been (for `read_busy_s`).
    pub(super) in_flight: usize,
    pub(super) busy_since: Option<Instant>,
    pub(super) shutdown: bool,
    pub(super) tick: u64,
    pub(super) token: usize,
    /// Router calls per layer in the current forward (a prefill forward routes several tokens).
    pub(super) layer_calls: HashMap<usize, usize>,
    /// Guesses per layer for the current token (lookahead / oracle).
    pub(super) guesses: HashMap<usize, Vec<usize>>,
    /// The expert-grouped chunk being run: its MoE layer and the distinct experts
    /// in the order the model fetches them (`chunk_experts_selected`), so `expert`
    /// can keep the next reads in flight.
    pub(super) chunk: Option<(usize, Vec<usize>)>,
    pub(super) metrics: StoreMetrics,
    pub(super) trace_out: Vec<TraceRecord>,
    /// `--record-trace`: the header (completed by [`StreamingStore::note_run`]) and
    /// one line per forward pass.
    pub(super) trace_header: Option<TraceHeader>,
    pub(super) trace_forwards: Vec<ForwardRecord>,
}

impl Inner {
    /// Whether `key`'s buffer can be given to another entry now: ready and referenced
    /// by nobody else, or failed.
    fn evictable(&self, key: Key) -> bool {
        match self.entries.get(&key) {
            Some(Entry::Ready(a)) => Arc::strong_count(a) == 1,
            Some(Entry::Failed(_)) => true,
            _ => false,
        }
    }
}

impl StreamingStore {
    /// Self-accounted resident bytes right now: pinned + allocated slot and expert
    /// buffers + state + the model's activation arena (as reported by the model;
    /// the plan's figure before the first forward) + the reserve for embedding rows
    /// read on demand.
    fn accounted(&self, g: &Inner) -> u64 {
        let p = &self.shared.plan;
        let act = match g.metrics.activation_bytes {
            0 => p.activation_bytes,
            a => a,
        };
        self.pinned_bytes
            + g.allocated_slot_bufs as u64 * p.slot_bytes
            + g.allocated_expert_bufs as u64 * p.expert_buffer_bytes
            + p.state_bytes
            + act
            + p.embedding_rows_bytes
            + p.staging_bytes
    }

    /// Raises `peak_accounted_bytes` to the current accounting.
    pub(super) fn update_peak(&self, g: &mut Inner) {
        let a = self.accounted(g);
        if a > g.metrics.peak_accounted_bytes {
            g.metrics.peak_accounted_bytes = a;
        }
    }

    /// Removes `victim`'s entry (already taken out of its slot list or cache set),
    /// queues the drop of its mapped pages (mmap: an IO thread does it), and recycles its buffer into the free list of its kind.
    fn evict(&self, g: &mut Inner, victim: Key) {
        if let Some(Entry::Ready(a)) = g.entries.remove(&victim) {
            if self.shared.io == IoMode::Mmap {
                g.releases.push(victim);
            }
            if let Ok(loaded) = Arc::try_unwrap(a) {
                if let LoadedData::Buf(b) = loaded.data {
                    match victim {
                        Key::Group(_) => g.free_slot_bufs.push(b),
                        Key::Expert(..) => g.free_expert_bufs.push(b),
                    }
                }
            }
        }
    }

    /// Makes room for one more entry of `key`'s kind when its slots or cache are
    /// full: evicts the oldest evictable slot layer, or the expert the cache policy
    /// ranks lowest among unprotected evictable ones. `None` when there is room
    /// (possibly counted as a budget overflow), else `Skipped` / `Wait` for the caller.
    fn make_room(&self, g: &mut Inner, key: Key, optional: bool) -> Option<Req> {
        let plan = &self.shared.plan;
        let full = match key {
            Key::Group(_) => g.slot_groups.len() >= plan.trunk_slots.max(1),
            Key::Expert(..) => g.cached_experts.len() >= plan.expert_cache_experts.max(1),
        };
        if !full {
            return None;
        }
        let victim = match key {
            Key::Group(_) => g
                .slot_groups
                .iter()
                .find(|&&ol| g.evictable(Key::Group(ol)))
                .map(|&ol| Key::Group(ol)),
            Key::Expert(..) => {
                let policy = self.opts.cache;
                g.cached_experts
                    .iter()
                    .filter(|id| !g.protected.contains(id) && g.evictable(Key::Expert(id.0, id.1)))
                    .min_by_key(|id| {
                        let m = g.meta.get(id).map(|m| (m.freq, m.last)).unwrap_or((0, 0));
                        policy.key(m.0, m.1, **id)
                    })
                    .map(|id| Key::Expert(id.0, id.1))
            }
        };
        match victim {
            Some(v) => {
                match v {
                    Key::Group(ol) => g.slot_groups.retain(|&x| x != ol),
                    Key::Expert(l, e) => {
                        g.cached_experts.remove(&(l, e));
                    }
                }
                self.evict(g, v);
                None
            }
            None if optional => Some(Req::Skipped),
            None => {
                let loading = |k: Key| matches!(g.entries.get(&k), Some(Entry::Loading));
                let in_flight = match key {
                    Key::Group(_) => g.slot_groups.iter().any(|&ol| loading(Key::Group(ol))),
                    Key::Expert(..) => g
                        .cached_experts
                        .iter()
                        .any(|id| !g.protected.contains(id) && loading(Key::Expert(id.0, id.1))),
                };
                if in_flight {
                    return Some(Req::Wait);
                }
                g.metrics.budget_overflows += 1;
                None
            }
        }
    }

    /// Queues a load of `key` unless present. Returns `Skipped` if no buffer can be
    /// had without evicting something protected (only for optional prefetches), and
    /// `Wait` when a required load must wait for an in-flight read to finish before
    /// its buffer can be reused (the caller waits on the condvar and retries).
    pub(super) fn request(&self, g: &mut Inner, key: Key, optional: bool) -> Req {
        if g.entries.contains_key(&key) {
            return Req::Queued;
        }
        // Evicted and wanted again before its pages were dropped: keep them.
        g.releases.retain(|k| *k != key);
        if let Some(r) = self.make_room(g, key, optional) {
            return r;
        }
        let buf = match key {
            Key::Group(l) => {
                g.slot_groups.push_back(l);
                self.take_buf(g, true)
            }
            Key::Expert(l, e) => {
                g.cached_experts.insert((l, e));
                self.take_buf(g, false)
            }
        };
        g.entries.insert(key, Entry::Loading);
        if optional {
            g.prefetched.insert(key);
        } else {
            g.prefetched.remove(&key);
        }
        g.queue.push_back(Job { key, buf });
        self.update_peak(g);
        self.shared.cv.notify_all();
        Req::Queued
    }

    fn take_buf(&self, g: &mut Inner, slot: bool) -> Option<AlignedBuf> {
        if self.shared.io == IoMode::Mmap {
            // mmap: the "buffer" is the mapping; account the resident range instead.
            if slot {
                g.allocated_slot_bufs = g.allocated_slot_bufs.max(g.slot_groups.len());
            } else {
                g.allocated_expert_bufs = g.allocated_expert_bufs.max(g.cached_experts.len());
            }
            return None;
        }
        let plan = &self.shared.plan;
        if slot {
            if let Some(b) = g.free_slot_bufs.pop() {
                return Some(b);
            }
            g.allocated_slot_bufs += 1;
            let carved = g.carved_slot_bufs.get_or_insert_with(|| {
                let mut v = AlignedBuf::carve(plan.trunk_slots, plan.slot_bytes as usize);
                v.reverse(); // handed out from the mapping's start
                v
            });
            Some(
                carved
                    .pop()
                    .unwrap_or_else(|| AlignedBuf::new(plan.slot_bytes as usize)),
            )
        } else {
            if let Some(b) = g.free_expert_bufs.pop() {
                return Some(b);
            }
            g.allocated_expert_bufs += 1;
            let carved = g.carved_expert_bufs.get_or_insert_with(|| {
                let n = plan.expert_cache_experts;
                let mut v = AlignedBuf::carve(n, plan.expert_buffer_bytes as usize);
                v.reverse(); // handed out from the mapping's start
                v
            });
            Some(
                carved
                    .pop()
                    .unwrap_or_else(|| AlignedBuf::new(plan.expert_buffer_bytes as usize)),
            )
        }
    }

    /// Runs `step` under the lock until it returns `Some`, sleeping on the condvar
    /// between tries; the time from the first sleep on counts as IO wait (`io_wait_s`,
    /// and its part in `io_wait_split` for what `on` says was waited for).
    pub(super) fn block_on<'a, T>(
        &'a self,
        mut g: MutexGuard<'a, Inner>,
        on: Waited,
        mut step: impl FnMut(&mut Inner) -> Option<T>,
    ) -> (MutexGuard<'a, Inner>, T) {
        let t0 = Instant::now();
        let mut waited = false;
        loop {
            if let Some(v) = step(&mut g) {
                if waited {
                    let dt = t0.elapsed().as_secs_f64();
                    g.metrics.io_wait_s += dt;
                    let w = &mut g.metrics.io_wait_split;
                    match on {
                        Waited::Key(Key::Group(_), false) => w.trunk_demand_s += dt,
                        Waited::Key(Key::Group(_), true) => w.trunk_prefetched_s += dt,
                        Waited::Key(Key::Expert(..), false) => w.expert_demand_s += dt,
                        Waited::Key(Key::Expert(..), true) => w.expert_prefetched_s += dt,
                        Waited::Fill => {}
                    }
                }
                return (g, v);
            }
            waited = true;
            g = self.shared.cv.wait(g).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Queues a required load of `key`, waiting while its buffer is held by an
    /// in-flight read.
    pub(super) fn request_blocking<'a>(
        &'a self,
        g: MutexGuard<'a, Inner>,
        key: Key,
    ) -> MutexGuard<'a, Inner> {
        self.block_on(g, Waited::Key(key, false), |g| {
            (self.request(g, key, false) != Req::Wait).then_some(())
        })
        .0
    }

    /// Blocks until `key` is loaded (requesting it if needed).
    pub(super) fn wait(&self, mut g: MutexGuard<'_, Inner>, key: Key) -> Result<Arc<Loaded>> {
        let ahead = g.prefetched.remove(&key);
        let (_g, r) = self.block_on(g, Waited::Key(key, ahead), |g| match g.entries.get(&key) {
            Some(Entry::Ready(a)) => Some(Ok(a.clone())),
            Some(Entry::Failed(e)) => Some(Err(e.clone())),
            Some(Entry::Loading) => None,
            None => {
                // Queued: the next look finds it loading; Wait: sleep, then retry.
                self.request(g, key, false);
                match g.entries.get(&key) {
                    Some(Entry::Ready(a)) => Some(Ok(a.clone())),
                    _ => None,
                }
            }
        });
        match r {
            Ok(a) => Ok(a),
            Err(e) => bail!("{e}"),
        }
    }
}
