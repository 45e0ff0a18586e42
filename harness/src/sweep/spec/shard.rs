//! `--shard i/n`: which points of the full product one invocation runs.

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

/// `--shard i/n` (1-based `i`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shard {
    /// 1-based shard number.
    pub index: usize,
    /// Number of shards.
    pub count: usize,
}

impl Shard {
    /// Parses `i/n` with `1 ≤ i ≤ n`.
    pub fn parse(s: &str) -> Result<Self> {
        let (a, b) = s
            .split_once('/')
            .with_context(|| format!("invalid --shard {s:?} (expected i/n, e.g. 1/4)"))?;
        let index: usize = a.trim().parse().context("invalid shard number")?;
        let count: usize = b.trim().parse().context("invalid shard count")?;
        if count == 0 || index == 0 || index > count {
            bail!("invalid --shard {s:?}: need 1 ≤ i ≤ n");
        }
        Ok(Shard { index, count })
    }
    /// Whether point `index` belongs to this shard (round-robin, so every shard gets
    /// a mix of small and large budgets).
    pub fn contains(&self, point_index: usize) -> bool {
        point_index % self.count == self.index - 1
    }
}

impl std::fmt::Display for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}
