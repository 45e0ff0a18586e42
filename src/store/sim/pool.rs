//! The expert cache of the replay: the streaming store's request, protection and
//! eviction rules (`streaming/caches.rs`, `streaming/mod.rs`) with every read complete
//! at once, and a replacement policy: the store's own [`CachePolicy`] keys, a static
//! hot set, or Belady's optimum (evict the expert whose next fetch is farthest).

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};

use crate::store::cache::CachePolicy;

/// (layer, expert).
pub type Id = (usize, usize);

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
    /// Errors: [`crate::error::UsageError::UnknownName`] for any other text.
    pub fn parse(s: &str) -> Result<Self, crate::error::UsageError> {
        Self::ALL
            .into_iter()
            .find(|v| v.as_str() == s)
            .ok_or_else(|| {
                crate::error::UsageError::unknown("cache policy", s, &Self::ALL.map(Self::as_str))
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

    fn insert(&mut self, id: Id) {
        self.cached.insert(id);
        if self.policy == SimPolicy::Belady {
            let n = self.next_fetch(id);
            self.by_next.insert((n, id));
            self.next_of.insert(id, n);
        }
    }

    fn remove(&mut self, id: Id) {
        self.cached.remove(&id);
        if let Some(n) = self.next_of.remove(&id) {
            self.by_next.remove(&(n, id));
        }
    }

    fn evictable(&self, id: &Id) -> bool {
        !self.protected.contains(id) && !self.hot.contains(id)
    }

    fn victim(&self) -> Option<Id> {
        match self.policy {
            SimPolicy::Lru | SimPolicy::Lfru | SimPolicy::Static => {
                let p = self.policy.store_policy().unwrap_or(CachePolicy::Lru);
                self.cached
                    .iter()
                    .filter(|id| self.evictable(id))
                    .min_by_key(|id| {
                        let m = self.meta.get(id).copied().unwrap_or((0, 0));
                        p.key(m.0, m.1, **id)
                    })
                    .copied()
            }
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
        let m = self.meta.entry(id).or_insert((0, 0));
        m.0 += 1;
        m.1 = self.tick;
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
