//! What a spec expands into: points (one combination of axis values) and the run
//! slots that repeat them.

use memdial::io::IoMode;
use memdial::store::eviction::CachePolicy;
use memdial::store::plan::Prefetch;
use memdial::util::budget::BudgetExpr;

use super::engines::name::EngineName;
use crate::sweep::axes::Coord;
use crate::sweep::layout::LayoutKind;
use crate::sweep::start::StartMode;

/// One point of the sweep (a combination of axis values).
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    /// Position in the full (unsharded) product.
    pub index: usize,
    /// The budget as written in the spec (the key's `budget=`).
    pub budget_spec: String,
    /// The budget parsed.
    pub budget: BudgetExpr,
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
    pub engine: EngineName,
    /// The spec has several engines: the key names the engine.
    pub engine_in_key: bool,
    /// Values on the axes declared after engines ([`crate::sweep::axes`]) as text,
    /// innermost last: the key's and the CSV's; the fields below are the same values typed.
    pub axes: Vec<Coord>,
    /// How the run's caches begin (`start`).
    pub start: StartMode,
    /// The model layout read (`layout`).
    pub layout: LayoutKind,
    /// Concurrent clients (`concurrency`; 1: the ordinary run).
    pub concurrency: u32,
    /// The `--speculate` value (`speculate`; `None` for `off`).
    pub speculate: Option<String>,
    /// Context tokens before the prompt (`depth`).
    pub depth: u32,
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
