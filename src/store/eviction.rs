//! Expert-cache replacement policies: which expert a full cache evicts (the
//! streaming store's cache, `streaming::caches`, and the simulator's, `sim`).
//!
//! - `lru`: evict the least recently used expert (the reference engine's choice);
//! - `lfru`: evict the least frequently used, recency breaking ties (WASTE's LFRU,
//!   docs/io.md §6).
//!
//! Both are deterministic: ties on every key fall back to the (layer, expert) id.

use crate::util::error::UsageError;

/// Replacement policy of the expert cache.
#[derive(
    Default, Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum CachePolicy {
    #[default]
    Lru,
    Lfru,
}

impl CachePolicy {
    /// Every policy, in the order of the command line's help.
    pub const ALL: [CachePolicy; 2] = [CachePolicy::Lru, CachePolicy::Lfru];
    /// Parses `lru|lfru`.
    ///
    /// Errors: [`UsageError::UnknownName`] for any other text.
    pub fn parse(s: &str) -> Result<Self, UsageError> {
        Self::ALL
            .into_iter()
            .find(|v| v.as_str() == s)
            .ok_or_else(|| UsageError::unknown("cache policy", s, &Self::ALL.map(Self::as_str)))
    }
    /// Name as on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            CachePolicy::Lru => "lru",
            CachePolicy::Lfru => "lfru",
        }
    }
    /// Eviction key: the candidate with the smallest key is evicted.
    /// `freq` = accesses so far, `last` = logical time of the last access.
    pub fn key(self, freq: u64, last: u64, id: (usize, usize)) -> (u64, u64, usize, usize) {
        match self {
            CachePolicy::Lru => (last, 0, id.0, id.1),
            CachePolicy::Lfru => (freq, last, id.0, id.1),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn lru_vs_lfru_victims() {
        // A: used 5 times, last at t=1. B: used once, at t=9.
        let a = ((0, 0), 5, 1);
        let b = ((0, 1), 1, 9);
        let victim = |p: CachePolicy| {
            [a, b]
                .into_iter()
                .min_by_key(|(id, f, l)| p.key(*f, *l, *id))
                .unwrap()
                .0
        };
        assert_eq!(victim(CachePolicy::Lru), (0, 0)); // least recent
        assert_eq!(victim(CachePolicy::Lfru), (0, 1)); // least frequent
    }
}
