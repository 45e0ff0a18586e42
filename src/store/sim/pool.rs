//! The expert cache of the replay: the streaming store's request, protection and
//! eviction rules (`streaming/caches.rs`, `streaming/mod.rs`) with every read complete
//! at once, and a replacement policy: the store's own [`CachePolicy`] keys, a static
//! hot set, or Belady's optimum (evict the expert whose next fetch is farthest).

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};

use crate::store::eviction::CachePolicy;

/// (layer, expert).
pub type Id = (usize, usize);

type EvictKey = (u64, u64, usize, usize);

/// Replacement policy of the replayed expert cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SimPolicy {
    /// The store's `lru`.
    Lru,
    /// The store's `lfru`.
    Lfru,
    /// A static hot set learned from a prefix of the trace, held all run; the
    /// remaining buffers rotate by LRU (simulator only).
    Static,
    /// Belady's offline optimum, MIN: evict the expert fetched again farthest in the
    /// future (simulator only: it needs the future; the upper bound of any policy).
    Belady,
}

impl SimPolicy {
    /// Every policy, in the order of the command line's help.
    pub const ALL: [SimPolicy; 4] = [
        SimPolicy::Lru,
        SimPolicy::Lfru,
        SimPolicy::Static,
        SimPolicy::Belady,
    ];
    /// Name as on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            SimPolicy::Lru => "lru",
            SimPolicy::Lfru => "lfru",
            SimPolicy::Static => "static",
            SimPolicy::Belady => "belady",
        }
    }
    /// Parses `lru|lfru|static|belady`.
    ///
    /// Errors: [`crate::util::error::UsageError::UnknownName`] for any other text.
    pub fn parse(s: &str) -> Result<Self, crate::util::error::UsageError> {
        Self::ALL
            .into_iter()
            .find(|v| v.as_str() == s)
            .ok_or_else(|| {
                crate::util::error::UsageError::unknown(
                    "cache policy",
                    s,
                    &Self::ALL.map(Self::as_str),
                )
            })
    }
    /// The store's policy this one is, if any.
    pub fn store_policy(self) -> Option<CachePolicy> {
        match self {
            SimPolicy::Lru => Some(CachePolicy::Lru),
            SimPolicy::Lfru => Some(CachePolicy::Lfru),
            _ => None,
        }
    }
}

/// Outcome of a request (the store's `Req`, without `Wait`: no read is ever in flight).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Req {
    Queued,
    Skipped,
}

/// The replayed expert cache.
pub struct Pool {
    policy: SimPolicy,
    capacity: usize,
    cached: HashSet<Id>,
    /// (freq, last) per expert ever fetched (never dropped, as in the store).
    meta: HashMap<Id, (u64, u64)>,
    tick: u64,
    pub protected: HashSet<Id>,
    /// Static: the hot set (never evicted).
    hot: HashSet<Id>,
    /// Belady: remaining fetch times per expert, and the cached set ordered by next fetch.
    future: HashMap<Id, VecDeque<u64>>,
    by_next: BTreeSet<(u64, Id)>,
    next_of: HashMap<Id, u64>,
    /// lru / lfru / static: the cached experts (the hot set excepted) by the store's
    /// eviction key, smallest first.
    by_key: BTreeSet<(EvictKey, Id)>,
    /// Fetch events so far (Belady's clock).
    fetches: u64,
    /// Experts read (id, in order), and allocations beyond the capacity.
    pub reads: Vec<Id>,
    pub overflows: u64,
}

impl Pool {
    /// An empty cache of `capacity` experts. `fetch_seq` is the run's fetch order
    /// (Belady only; empty otherwise).
    pub fn new(policy: SimPolicy, capacity: usize, fetch_seq: &[Id]) -> Self {
        let mut future: HashMap<Id, VecDeque<u64>> = HashMap::new();
        if policy == SimPolicy::Belady {
            for (i, id) in fetch_seq.iter().enumerate() {
                future.entry(*id).or_default().push_back(i as u64);
            }
        }
        Pool {
            policy,
            capacity,
            cached: HashSet::new(),
            meta: HashMap::new(),
            tick: 0,
            protected: HashSet::new(),
            hot: HashSet::new(),
            future,
            by_next: BTreeSet::new(),
            next_of: HashMap::new(),
            by_key: BTreeSet::new(),
            fetches: 0,
            reads: Vec::new(),
            overflows: 0,
        }
    }

    /// Static: holds `hot` from the start (returns them: read at load, not counted
    /// in the run's reads).
    pub fn preload_hot(&mut self, hot: &[Id]) -> Vec<Id> {
        for &id in hot {
            self.hot.insert(id);
            self.insert(id);
        }
        hot.to_vec()
    }

    pub fn contains(&self, id: Id) -> bool {
        self.cached.contains(&id)
    }

    pub fn len(&self) -> usize {
        self.cached.len()
    }

    pub fn is_empty(&self) -> bool {
        self.cached.is_empty()
    }

    fn next_fetch(&self, id: Id) -> u64 {
        self.future
            .get(&id)
            .and_then(|q| q.front().copied())
            .unwrap_or(u64::MAX)
    }

    fn store_key(&self, id: Id) -> EvictKey {
        let p = self.policy.store_policy().unwrap_or(CachePolicy::Lru);
        let m = self.meta.get(&id).copied().unwrap_or((0, 0));
        p.key(m.0, m.1, id)
    }

    fn insert(&mut self, id: Id) {
        self.cached.insert(id);
        if self.policy != SimPolicy::Belady && !self.hot.contains(&id) {
            self.by_key.insert((self.store_key(id), id));
        }
        if self.policy == SimPolicy::Belady {
            let n = self.next_fetch(id);
            self.by_next.insert((n, id));
            self.next_of.insert(id, n);
        }
    }

    fn remove(&mut self, id: Id) {
        self.cached.remove(&id);
        let k = self.store_key(id);
        self.by_key.remove(&(k, id));
        if let Some(n) = self.next_of.remove(&id) {
            self.by_next.remove(&(n, id));
        }
    }

    fn evictable(&self, id: &Id) -> bool {
        !self.protected.contains(id) && !self.hot.contains(id)
    }

    fn victim(&self) -> Option<Id> {
        match self.policy {
            SimPolicy::Lru | SimPolicy::Lfru | SimPolicy::Static => self
                .by_key
                .iter()
                .map(|(_, id)| *id)
                .find(|id| self.evictable(id)),
            SimPolicy::Belady => self
                .by_next
                .iter()
                .rev()
                .map(|(_, id)| *id)
                .find(|id| self.evictable(id)),
        }
    }

    /// The store's `request` for an expert: nothing when cached; else make room
    /// (evict the policy's victim; none: `Skipped` when optional, else an
    /// allocation beyond the plan) and read it.
    pub fn request(&mut self, id: Id, optional: bool) -> Req {
        if self.cached.contains(&id) {
            return Req::Queued;
        }
        if self.cached.len() >= self.capacity.max(1) {
            match self.victim() {
                Some(v) => self.remove(v),
                None if optional => return Req::Skipped,
                None => self.overflows += 1,
            }
        }
        self.insert(id);
        self.reads.push(id);
        Req::Queued
    }

    /// The model's fetch of an expert (the store's `expert`): its use counts, and
    /// Belady's clock.
    pub fn note_fetch(&mut self, id: Id) {
        self.tick += 1;
        let keyed = self.policy != SimPolicy::Belady && self.cached.contains(&id);
        if keyed {
            let k = self.store_key(id);
            self.by_key.remove(&(k, id));
        }
        let m = self.meta.entry(id).or_insert((0, 0));
        m.0 += 1;
        m.1 = self.tick;
        if keyed && !self.hot.contains(&id) {
            self.by_key.insert((self.store_key(id), id));
        }
        if self.policy == SimPolicy::Belady {
            if let Some(q) = self.future.get_mut(&id) {
                while q.front().is_some_and(|&t| t <= self.fetches) {
                    q.pop_front();
                }
            }
            if self.cached.contains(&id) {
                let n = self.next_fetch(id);
                if let Some(old) = self.next_of.insert(id, n) {
                    self.by_next.remove(&(old, id));
                }
                self.by_next.insert((n, id));
            }
        }
        self.fetches += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Replays `steps` (each: the experts one token selects at one layer) with the
    /// store's decode protocol (protect the step's experts, request each, then fetch
    /// each); returns the hits.
    fn hits(policy: SimPolicy, cap: usize, steps: &[Vec<Id>]) -> u64 {
        let seq: Vec<Id> = steps.iter().flatten().copied().collect();
        let mut p = Pool::new(policy, cap, &seq);
        let mut h = 0;
        for s in steps {
            p.protected = s.iter().copied().collect();
            for &id in s {
                h += u64::from(p.contains(id));
                p.request(id, false);
            }
            for &id in s {
                p.note_fetch(id);
            }
        }
        assert_eq!(p.overflows, 0);
        h
    }

    #[test]
    fn belady_on_the_textbook_sequence() {
        // A B C A B D A B C D, 3 buffers. By hand:
        // MIN: misses A B C, hits A B, D misses (evicts C: next use farthest), hits A B,
        //      C misses (A and B never again: evicts B, the higher id), D hits → 5 hits.
        // LRU: D evicts C, C evicts D, D evicts A → 4 hits. LFRU: D evicts C (used once),
        //      C evicts D, D evicts C → 4 hits.
        let (a, b, c, d) = ((0, 0), (0, 1), (0, 2), (0, 3));
        let steps: Vec<Vec<Id>> = [a, b, c, a, b, d, a, b, c, d]
            .iter()
            .map(|&x| vec![x])
            .collect();
        assert_eq!(hits(SimPolicy::Belady, 3, &steps), 5);
        assert_eq!(hits(SimPolicy::Lru, 3, &steps), 4);
        assert_eq!(hits(SimPolicy::Lfru, 3, &steps), 4);
    }

    #[test]
    fn belady_with_two_per_step() {
        // Steps {A,B} {C,D} {A,B} {C,D} (fetches A0 B1 C2 D3 A4 B5 C6 D7). 2 buffers:
        // every step evicts the other pair (a step's experts are protected) → 0 hits.
        // 3 buffers, by hand. MIN: D evicts B (next 5 > A's 4); B evicts D (7 > C's 6),
        // hit A; D evicts B (A, B never again: the higher id), hit C → 2 hits.
        // LRU: D evicts A; A evicts C (B is protected), hit B; C evicts A, hit D → 2.
        let (a, b, c, d) = ((1, 0), (1, 1), (1, 2), (1, 3));
        let steps = vec![vec![a, b], vec![c, d], vec![a, b], vec![c, d]];
        for p in SimPolicy::ALL {
            if p != SimPolicy::Static {
                assert_eq!(hits(p, 2, &steps), 0, "{p:?}");
            }
        }
        assert_eq!(hits(SimPolicy::Belady, 3, &steps), 2);
        assert_eq!(hits(SimPolicy::Lru, 3, &steps), 2);
    }

    /// A skewed pseudo-random routing (xorshift; a few experts per layer popular).
    fn routing(seed: u64, steps: usize, layers: usize, experts: usize, k: usize) -> Vec<Vec<Id>> {
        let mut x = seed | 1;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut out = Vec::new();
        for _ in 0..steps {
            for l in 0..layers {
                let mut s: Vec<Id> = Vec::new();
                while s.len() < k {
                    // Square of a uniform: low ids chosen more often.
                    let u = (next() % 1000) as f64 / 1000.0;
                    let e = ((u * u) * experts as f64) as usize;
                    if !s.contains(&(l, e)) {
                        s.push((l, e));
                    }
                }
                out.push(s);
            }
        }
        out
    }

    #[test]
    fn belady_bounds_lru_and_lfru_on_every_trace() {
        for seed in 1..=12u64 {
            let steps = routing(seed * 7919, 40, 3, 16, 4);
            for cap in [4, 5, 8, 12, 20, 30, 48] {
                let best = hits(SimPolicy::Belady, cap, &steps);
                for p in [SimPolicy::Lru, SimPolicy::Lfru] {
                    let h = hits(p, cap, &steps);
                    assert!(
                        best >= h,
                        "seed {seed} cap {cap}: belady {best} < {p:?} {h}"
                    );
                }
            }
        }
    }
}
