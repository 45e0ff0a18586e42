//! `memdial simulate`'s model of the streaming store: a trace ([`crate::store::trace`],
//! format 2) replayed against the store's own plan ([`crate::store::plan`]) at any
//! budget, with every read complete the moment it is issued.
//!
//! What it replays is the store's protocol, call for call: per forward the embedding
//! rows (one read per distinct id unless the table is pinned), `begin_token`, per
//! layer `begin_layer` (trunk requests and hits, the layer's first streamed group and,
//! with trunk prefetch, the group after it; oracle guesses), look-ahead guesses (decode
//! forwards, from the trace's `predicted` sets), the layer's other trunk groups, the
//! routed experts (one token: `experts_selected` then a fetch per expert in rank order;
//! several: `chunk_experts_selected` then one fetch per distinct expert in first-use
//! order, reading ahead two with a prefetch policy), then `lm_head`'s row blocks when
//! the forward computes logits. Trunk slots rotate oldest-first; the expert cache
//! evicts by the store's [`crate::store::eviction::CachePolicy`] keys, or a static hot
//! set, or Belady's optimum ([`pool::SimPolicy`]).
//!
//! Exact (equal to the engine's counters, tested) for `direct` and `buffered` IO
//! with safetensors shards, for `lru`/`lfru` with `none`, `next-layer` and `oracle`
//! prefetch, cold or warm start. Approximate where the engine's choices depend on IO
//! timing (look-ahead guesses still in flight when a buffer is needed are not evictable
//! in the engine) and for `mmap` (page-cache folios, not read sizes). Reads are sized
//! with the plan's 4096-byte direct-IO alignment.

pub mod counts;
pub mod passes;
pub mod pool;
pub mod predict;

use std::collections::{BTreeMap, HashMap, HashSet};

use anyhow::{bail, Result};
use serde::Serialize;

use crate::format::config::{MlpKind, ModelConfig};
use crate::io::IoMode;
use crate::store::plan::{Plan, Prefetch};
use crate::store::trace::{Trace, TraceHeader};
pub use counts::SimCounts;
use pool::{Id, Pool, Req, SimPolicy};

/// Where the embedding table sits (for the size of a row read on demand).
#[derive(Debug, Clone, Copy)]
pub struct EmbeddingRows {
    /// Byte offset of the table in its shard, and bytes per row.
    pub offset: u64,
    pub row_bytes: u64,
}

/// What to replay.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SimOptions {
    pub policy: SimPolicy,
    /// Fill the caches before the first forward (`memdial run --start warm`).
    pub warm: bool,
    /// Static policy: the hot set is learned from the routing of the tokens before
    /// this position.
    pub hot_prefix_tokens: usize,
    /// Replay decode as speculative verification passes ([`passes`]); `None`: as recorded.
    pub speculate: Option<passes::Speculation>,
}

/// The outcome of one replay.
#[derive(Debug, Clone, Serialize)]
pub struct SimReport {
    /// The whole run (after open).
    pub total: SimCounts,
    /// The prompt's forwards (what the engine's `prefill_*` figures count).
    pub prefill: SimCounts,
    /// Decode forwards (after the prompt).
    pub decode: SimCounts,
    pub decode_tokens: usize,
    /// Bytes the warm start read (0 cold).
    pub warm_fill_bytes: u64,
    /// Static policy: bytes of the hot set (read at load).
    pub hot_set_bytes: u64,
}

/// The checked contents of a format-2 trace, indexed for replay.
pub struct Replayable<'t> {
    pub header: &'t TraceHeader,
    trace: &'t Trace,
    route: HashMap<(usize, usize), &'t [usize]>,
    predicted: HashMap<(usize, usize), &'t [usize]>,
}

impl<'t> Replayable<'t> {
    /// Checks `t` against `cfg`: a header (format 2), the model's shape, a routing
    /// line for every token of every forward at every MoE layer.
    ///
    /// Errors: a format-1 trace (no header), another shape, a missing routing line,
    /// ids out of range — each naming what and where.
    pub fn new(t: &'t Trace, cfg: &ModelConfig, what: &str) -> Result<Self> {
        let Some(h) = &t.header else {
            bail!(
                "{what} has no header: it is a format-1 trace (routing lines only), which does \
                 not say how the prompt was chunked or which token ids each forward read; \
                 re-record it with `memdial run --record-trace` (format 2, docs/simulate.md)"
            );
        };
        let shape = crate::store::trace::TraceModel::of(cfg);
        let k = cfg.routed_experts().map_or(0, |(_, k)| k);
        let mism = |f: &str, a: String, b: String| {
            anyhow::anyhow!(
                "{what} was recorded on another model shape: {f} {a} in the trace, {b} here"
            )
        };
        macro_rules! same {
            ($f:ident) => {
                if h.model.$f != shape.$f {
                    return Err(mism(
                        stringify!($f),
                        format!("{:?}", h.model.$f),
                        format!("{:?}", shape.$f),
                    ));
                }
            };
        }
        same!(num_hidden_layers);
        same!(hidden_size);
        same!(vocab_size);
        same!(num_experts);
        same!(moe_layers);
        if h.top_k != k {
            return Err(mism("top_k", h.top_k.to_string(), k.to_string()));
        }
        if t.forwards.is_empty() {
            bail!("{what} has no forward lines: nothing to replay");
        }
        let mut route = HashMap::new();
        let mut predicted = HashMap::new();
        for r in &t.records {
            if r.experts.iter().any(|&e| e >= shape.num_experts) {
                bail!(
                    "{what}: token {} layer {}: an expert id is ≥ num_experts {}",
                    r.token,
                    r.layer,
                    shape.num_experts
                );
            }
            route.insert((r.token, r.layer), &r.experts[..]);
            if let Some(p) = &r.predicted {
                predicted.insert((r.token, r.layer), &p[..]);
            }
        }
        for f in &t.forwards {
            if let Some(&id) = f.ids.iter().find(|&&i| i >= cfg.vocab_size) {
                bail!(
                    "{what}: forward at {} reads token id {id} ≥ vocab_size {}",
                    f.forward,
                    cfg.vocab_size
                );
            }
            for tok in f.forward..f.forward + f.ids.len() {
                for &l in &shape.moe_layers {
                    match route.get(&(tok, l)) {
                        Some(e) if e.len() == k => {}
                        Some(e) => bail!(
                            "{what}: token {tok} layer {l} routes to {} experts, top_k is {k}",
                            e.len()
                        ),
                        None => bail!("{what}: no routing line for token {tok} layer {l}"),
                    }
                }
            }
        }
        Ok(Replayable {
            header: h,
            trace: t,
            route,
            predicted,
        })
    }

    /// Whether any routing line has a look-ahead guess.
    pub fn has_predictions(&self) -> bool {
        !self.predicted.is_empty()
    }

    /// Decode forwards (those starting at or after the prompt's end).
    pub fn decode_tokens(&self) -> usize {
        let p = self.header.prompt_tokens;
        self.trace
            .forwards
            .iter()
            .filter(|f| f.forward >= p)
            .map(|f| f.ids.len())
            .sum()
    }

    /// Distinct experts of `layer` used by the forward at `pos0` of `n` tokens, in
    /// first-use order (token, then rank): the model's chunk order.
    fn chunk_order(&self, pos0: usize, n: usize, layer: usize) -> Vec<usize> {
        let mut seen = HashSet::new();
        let mut order = Vec::new();
        for t in pos0..pos0 + n {
            for &e in self.route[&(t, layer)] {
                if seen.insert(e) {
                    order.push(e);
                }
            }
        }
        order
    }

    /// The run's expert fetches in order (what Belady looks ahead at).
    fn fetch_sequence(&self, moe_layers: &[usize]) -> Vec<Id> {
        let mut v = Vec::new();
        for f in &self.trace.forwards {
            let n = f.ids.len();
            for &l in moe_layers {
                if n == 1 {
                    v.extend(self.route[&(f.forward, l)].iter().map(|&e| (l, e)));
                } else {
                    v.extend(
                        self.chunk_order(f.forward, n, l)
                            .into_iter()
                            .map(|e| (l, e)),
                    );
                }
            }
        }
        v
    }

    /// The `count` experts used most often by tokens before `before` (ties: lower
    /// (layer, expert) first).
    pub fn hot_set(&self, before: usize, count: usize) -> Vec<Id> {
        let mut freq: BTreeMap<Id, u64> = BTreeMap::new();
        for r in &self.trace.records {
            if r.token < before {
                for &e in &r.experts {
                    *freq.entry((r.layer, e)).or_default() += 1;
                }
            }
        }
        let mut v: Vec<(Id, u64)> = freq.into_iter().collect();
        v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        v.into_iter().take(count).map(|(id, _)| id).collect()
    }
}

/// Replays `t` against `plan` (the store's plan at one budget, for `cfg`).
///
/// Errors: a plan without rotating trunk slots where groups stream (a plan bug).
pub fn replay(
    plan: &Plan,
    cfg: &ModelConfig,
    t: &Replayable<'_>,
    emb: EmbeddingRows,
    opts: &SimOptions,
) -> Result<SimReport> {
    Sim::new(plan, cfg, t, emb, opts).run()
}

struct Sim<'a, 't> {
    plan: &'a Plan,
    t: &'a Replayable<'t>,
    emb: EmbeddingRows,
    opts: SimOptions,
    moe_layers: Vec<usize>,
    num_layers: usize,
    first_streamed: usize,
    by_layer: Vec<Vec<usize>>,
    c: SimCounts,
    slots: std::collections::VecDeque<usize>,
    touched: HashSet<usize>,
    pool: Pool,
    guesses: HashMap<usize, Vec<usize>>,
    token: usize,
}

impl<'a, 't> Sim<'a, 't> {
    fn new(
        plan: &'a Plan,
        cfg: &ModelConfig,
        t: &'a Replayable<'t>,
        emb: EmbeddingRows,
        opts: &SimOptions,
    ) -> Self {
        let moe_layers: Vec<usize> = (0..cfg.num_hidden_layers)
            .filter(|&l| cfg.mlp_kinds[l] == MlpKind::Moe)
            .collect();
        let seq = if opts.policy == SimPolicy::Belady {
            t.fetch_sequence(&moe_layers)
        } else {
            Vec::new()
        };
        let mut by_layer = vec![Vec::new(); cfg.num_hidden_layers + 1];
        for (i, g) in plan.groups.iter().enumerate() {
            by_layer[g.layer.min(cfg.num_hidden_layers)].push(i);
        }
        Sim {
            plan,
            t,
            emb,
            opts: *opts,
            moe_layers,
            num_layers: cfg.num_hidden_layers,
            first_streamed: plan.pinned_groups,
            by_layer,
            c: SimCounts::default(),
            slots: Default::default(),
            touched: HashSet::new(),
            pool: Pool::new(opts.policy, plan.expert_cache_experts, &seq),
            guesses: HashMap::new(),
            token: 0,
        }
    }

    fn expert_bytes(&self, id: Id) -> u64 {
        self.plan
            .expert_groups
            .get(&id)
            .map_or(0, |g| g.buffer_bytes)
    }

    /// Moves the pool's new reads into the counters: one batch, queued at once.
    fn drain_reads(&mut self) {
        let (mut n, mut bytes) = (0u32, 0u64);
        for id in std::mem::take(&mut self.pool.reads) {
            let b = self.expert_bytes(id);
            self.c.bytes_read += b;
            self.c.expert_bytes_read += b;
            self.c.reads += 1;
            (n, bytes) = (n + 1, bytes + b);
        }
        self.c.add_expert_batch(n, bytes);
        self.c.budget_overflows = self.pool.overflows;
    }

    fn run(mut self) -> Result<SimReport> {
        let mut hot_set_bytes = 0;
        if self.opts.policy == SimPolicy::Static {
            let n = self
                .plan
                .expert_cache_experts
                .saturating_sub(self.plan.min_expert_buffers_of(self.t.header.top_k));
            let hot = self.t.hot_set(self.opts.hot_prefix_tokens, n);
            for id in self.pool.preload_hot(&hot) {
                hot_set_bytes += self.expert_bytes(id);
            }
        }
        let warm_fill_bytes = if self.opts.warm { self.warm_fill() } else { 0 };
        let prompt = self.t.header.prompt_tokens;
        let forwards = &self.t.trace.forwards;
        let first_decode = forwards
            .iter()
            .position(|f| f.forward >= prompt)
            .unwrap_or(forwards.len());
        for f in &forwards[..first_decode] {
            self.forward(f.forward, &f.ids, f.logits > 0)?;
        }
        let prefill = self.c.clone();
        match self.opts.speculate {
            None => {
                for f in &forwards[first_decode..] {
                    self.forward(f.forward, &f.ids, f.logits > 0)?;
                }
            }
            Some(s) => {
                for (pos, ids) in passes::passes(&forwards[first_decode..], s)? {
                    self.forward(pos, &ids, true)?;
                }
            }
        }
        Ok(SimReport {
            decode: self.c.sub(&prefill),
            total: self.c.clone(),
            prefill,
            decode_tokens: self.t.decode_tokens(),
            warm_fill_bytes,
            hot_set_bytes,
        })
    }

    /// The store's `warm_fill`: the first `trunk_slots` streamed groups, then experts
    /// round-robin over the MoE layers up to the cache's capacity (optional reads,
    /// counted apart).
    fn warm_fill(&mut self) -> u64 {
        let plan = self.plan;
        let before = self.c.clone();
        for gi in (self.first_streamed..plan.groups.len()).take(plan.trunk_slots) {
            self.request_group(gi, true, None);
        }
        let mut bytes = self.c.bytes_read - before.bytes_read;
        self.c = before;
        let per_layer = plan
            .expert_groups
            .keys()
            .map(|&(_, e)| e + 1)
            .max()
            .unwrap_or(0);
        let mut n = 0;
        'fill: for e in 0..per_layer {
            for li in 0..self.moe_layers.len() {
                let l = self.moe_layers[li];
                if n >= plan.expert_cache_experts {
                    break 'fill;
                }
                if plan.expert_groups.contains_key(&(l, e)) {
                    n += 1;
                    self.pool.request((l, e), true);
                }
            }
        }
        for id in std::mem::take(&mut self.pool.reads) {
            bytes += self.expert_bytes(id);
        }
        bytes
    }

    /// A trunk slot request (the store's `request` for a group): `true` when read.
    /// `busy` is the group just requested by the same call (in flight: not evictable).
    fn request_group(&mut self, gi: usize, optional: bool, busy: Option<usize>) -> bool {
        if self.slots.contains(&gi) {
            return false;
        }
        if self.slots.len() >= self.plan.trunk_slots.max(1) {
            match self.slots.iter().position(|&g| Some(g) != busy) {
                Some(i) => {
                    self.slots.remove(i);
                }
                None if optional => return false,
                None => self.c.budget_overflows += 1,
            }
        }
        self.slots.push_back(gi);
        let g = &self.plan.groups[gi];
        let b = g.read.buffer_bytes;
        self.c.bytes_read += b;
        self.c.trunk_bytes_read += b;
        if g.rows.is_some() {
            self.c.lm_head_bytes_read += b;
        }
        self.c.reads += 1;
        true
    }

    fn next_streamed_group(&self, gi: usize) -> Option<usize> {
        let n = self.plan.groups.len();
        let next = if gi + 1 < n {
            gi + 1
        } else {
            self.first_streamed
        };
        (next != gi && next < n).then_some(next)
    }

    /// The store's `load_group`: first use in this forward requests it (and the next).
    fn load_group(&mut self, gi: usize) {
        if self.touched.insert(gi) {
            self.request_group(gi, false, None);
            if self.plan.prefetch.trunk_ahead() {
                if let Some(n) = self.next_streamed_group(gi) {
                    self.request_group(n, true, Some(gi));
                }
            }
        }
    }

    fn issue_guesses(&mut self, layer: usize, guesses: &[usize]) {
        if self.guesses.contains_key(&layer) {
            return;
        }
        self.guesses.insert(layer, guesses.to_vec());
        self.c.lookahead_guesses += guesses.len() as u64;
        for &e in guesses {
            if !self.plan.expert_groups.contains_key(&(layer, e)) {
                continue;
            }
            if self.pool.request((layer, e), true) == Req::Queued {
                self.pool.protected.insert((layer, e));
            }
        }
        self.drain_reads();
    }

    fn note_selection(&mut self, layer: usize, experts: &[usize], first: bool) {
        if let Some(gs) = self.guesses.get(&layer).filter(|_| first) {
            let correct = experts.iter().filter(|e| gs.contains(e)).count() as u64;
            self.c.lookahead_actual += experts.len() as u64;
            self.c.lookahead_correct += correct;
        }
    }

    fn forward(&mut self, pos0: usize, ids: &[usize], logits: bool) -> Result<()> {
        let n = ids.len();
        // Embedding rows (read before `begin_token`), one read per distinct id.
        if !self.plan.embedding_pinned {
            let mut seen = HashSet::new();
            for &r in ids {
                if seen.insert(r) {
                    let off = self.emb.offset + r as u64 * self.emb.row_bytes;
                    let b = match self.plan.io {
                        IoMode::Direct => {
                            let a = 4096;
                            (off + self.emb.row_bytes).div_ceil(a) * a - off / a * a
                        }
                        _ => self.emb.row_bytes,
                    };
                    self.c.bytes_read += b;
                    self.c.embedding_bytes_read += b;
                    self.c.reads += 1;
                }
            }
        }
        // begin_token
        self.token = pos0;
        self.guesses.clear();
        self.pool.protected.clear();
        self.touched.clear();
        let lookahead = n == 1 && self.plan.prefetch == Prefetch::Lookahead;
        for i in 0..self.num_layers {
            self.begin_layer(i);
            if lookahead {
                if let Some(&j) = self.moe_layers.iter().find(|&&m| m > i) {
                    if let Some(p) = self.t.predicted.get(&(pos0, j)).copied() {
                        self.issue_guesses(j, p);
                    }
                }
            }
            // The layer's other groups, in forward order.
            let (groups, fs) = (self.by_layer[i].clone(), self.first_streamed);
            for gi in groups.into_iter().filter(|&g| g >= fs) {
                self.load_group(gi);
            }
            if self.moe_layers.contains(&i) {
                if n == 1 {
                    self.select_one(i, pos0);
                } else {
                    self.select_chunk(i, pos0, n);
                }
            }
        }
        if logits {
            let blocks = self.by_layer[self.num_layers].clone();
            for gi in blocks {
                let tb = self.plan.groups[gi].read.tensor_bytes;
                self.c.trunk_request_bytes += tb;
                if gi < self.first_streamed {
                    self.c.trunk_hit_bytes += tb;
                } else {
                    self.load_group(gi);
                }
            }
        }
        Ok(())
    }

    fn begin_layer(&mut self, layer: usize) {
        let groups = self.by_layer[layer].clone();
        for &gi in &groups {
            let tb = self.plan.groups[gi].read.tensor_bytes;
            self.c.trunk_request_bytes += tb;
            if gi < self.first_streamed {
                self.c.trunk_hit_bytes += tb;
            }
        }
        if let Some(&gi) = groups.iter().find(|&&gi| gi >= self.first_streamed) {
            self.load_group(gi);
        }
        if self.plan.prefetch == Prefetch::Oracle {
            let token = self.token;
            if let Some(&m) = self.moe_layers.iter().find(|&&m| m > layer) {
                if let Some(ex) = self.t.route.get(&(token, m)).copied() {
                    self.issue_guesses(m, ex);
                }
            }
            if !self.guesses.contains_key(&layer) {
                if let Some(ex) = self.t.route.get(&(token, layer)).copied() {
                    self.issue_guesses(layer, ex);
                }
            }
        }
    }

    /// One token: `experts_selected`, then one fetch per expert in rank order.
    fn select_one(&mut self, layer: usize, tok: usize) {
        let experts: Vec<usize> = self.t.route[&(tok, layer)].to_vec();
        self.note_selection(layer, &experts, true);
        self.pool.protected.retain(|(l, _)| *l > layer);
        for &e in &experts {
            self.pool.protected.insert((layer, e));
        }
        for &e in &experts {
            self.c.expert_requests += 1;
            if self.pool.contains((layer, e)) {
                self.c.expert_hits += 1;
            }
            self.pool.request((layer, e), false);
        }
        for &e in &experts {
            self.pool.note_fetch((layer, e));
        }
        self.drain_reads();
    }

    /// A chunk: `chunk_experts_selected`, then one fetch per distinct expert.
    fn select_chunk(&mut self, layer: usize, pos0: usize, n: usize) {
        let k = self.t.header.top_k as u64;
        for (s, tok) in (pos0..pos0 + n).enumerate() {
            let experts: Vec<usize> = self.t.route[&(tok, layer)].to_vec();
            self.note_selection(layer, &experts, s == 0);
            self.c.expert_requests += k;
        }
        let order = self.t.chunk_order(pos0, n, layer);
        let total = n as u64 * k;
        let misses = order
            .iter()
            .filter(|&&e| !self.pool.contains((layer, e)))
            .count() as u64;
        self.c.expert_hits += total - misses.min(total);
        self.pool.protected.retain(|(l, _)| *l > layer);
        self.c.prefill_expert_fetches += order.len() as u64;
        for (i, &e) in order.iter().enumerate() {
            self.pool.note_fetch((layer, e));
            let ahead = self.plan.prefetch != Prefetch::None;
            if ahead {
                self.pool.protected.insert((layer, e));
                self.pool.request((layer, e), true);
                for &nx in order[i + 1..].iter().take(2) {
                    if self.pool.request((layer, nx), true) == Req::Queued {
                        self.pool.protected.insert((layer, nx));
                    }
                }
            }
            self.pool.request((layer, e), false);
            if ahead {
                self.pool.protected.remove(&(layer, e));
            }
        }
        self.drain_reads();
    }
}

impl Plan {
    /// The smallest expert cache the plan's prefetch policy needs for top-`k` routing
    /// (`k`, or `2k` when experts are read ahead).
    pub fn min_expert_buffers_of(&self, k: usize) -> usize {
        if self.prefetch.experts_ahead() {
            2 * k
        } else {
            k
        }
    }
}
