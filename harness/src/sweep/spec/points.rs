//! What a spec expands into: points (one combination of axis values), the run slots
//! that repeat them, and shards of the point list.

use anyhow::{bail, Context, Result};
use memdial::io::IoMode;
use memdial::store::eviction::CachePolicy;
use memdial::store::plan::Prefetch;
use serde::{Deserialize, Serialize};

use crate::sweep::axes::Coord;

/// One point of the sweep (a combination of axis values).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Point {
    /// Position in the full (unsharded) product.
    pub index: usize,
    /// The budget as written in the spec.
    pub budget_spec: String,
    /// IO mode.
    pub io: IoMode,
    /// Prefetch policy.
    pub prefetch: Prefetch,
    /// Expert cache policy.
    pub cache: CachePolicy,
    /// Kernel threads.
    pub threads: usize,
    /// Index into `Spec::prompts`.
    pub prompt_index: usize,
    /// Engine (`memdial` unless the spec lists others).
    #[serde(default)]
    pub engine: String,
    /// The spec has several engines: the key names the engine.
    #[serde(default)]
    pub engine_in_key: bool,
    /// Values on the axes declared after engines ([`super::axes`]), innermost last.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub axes: Vec<Coord>,
}

impl Point {
    /// Stable identity of the point, independent of sharding and of the run directory.
    /// `;engine=NAME` is appended only when the spec has several engines, so keys (and
    /// baselines) of single-engine sweeps are unchanged.
    pub fn key(&self) -> String {
        let mut k = format!(
            "budget={};io={};prefetch={};cache={};threads={};prompt={}",
            self.budget_spec,
            self.io.as_str(),
            self.prefetch.as_str(),
            self.cache.as_str(),
            self.threads,
            self.prompt_index
        );
        if self.engine_in_key {
            k += &format!(";engine={}", self.engine);
        }
        for c in self.axes.iter().filter(|c| c.in_key) {
            k += &format!(";{}={}", c.name, c.value);
        }
        k
    }
}

/// One run: a point, a repeat index and whether it is a warm-up.
#[derive(Debug, Clone, PartialEq)]
pub struct RunSlot {
    /// The point.
    pub point: Point,
    /// Repeat index (0-based, counted separately for warm-ups and measured runs).
    pub repeat: u32,
    /// Whether this run is a discarded warm-up.
    pub warmup: bool,
}

impl RunSlot {
    /// Stable id of the run: `<point key>#r<repeat>` or `#w<repeat>` for warm-ups.
    pub fn run_id(&self) -> String {
        format!(
            "{}#{}{}",
            self.point.key(),
            if self.warmup { "w" } else { "r" },
            self.repeat
        )
    }
    /// Directory name under `runs/`: `p003-r1`.
    pub fn dir_name(&self) -> String {
        format!(
            "p{:03}-{}{}",
            self.point.index,
            if self.warmup { "w" } else { "r" },
            self.repeat
        )
    }
}

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
