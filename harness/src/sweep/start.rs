//! The `start` axis: how a run's caches begin.
//!
//! - `cold` (the default, and every sweep before the axis): empty expert cache and
//!   trunk slots, and a verified cold page cache — the first tokens pay for filling
//!   the caches, which a user at that budget pays once per process, not per token;
//! - `warm`: `memdial run --start warm` fills the expert cache and the trunk slots to
//!   capacity at load, from disk (the page cache still starts cold), before the first
//!   forward; the fill is timed and counted apart (`warm_fill_s`, `warm_fill_bytes`),
//!   not in `load_s` or the decode figures. Decode then measures the steady state.
//!
//! Other engines run `warm` points only when their adapter declares a warm start
//! (`warm = true` in `[engine.NAME]`, with `{start}` in its command); otherwise those
//! points are `n/a`.

use serde::{Deserialize, Serialize};

use super::axes::Axis;

/// How a run's caches begin (`--start`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum StartMode {
    /// Empty caches: what the first tokens of a fresh process see.
    Cold,
    /// Expert cache and trunk slots filled to capacity before the first forward.
    Warm,
}

impl StartMode {
    /// `cold` or `warm`.
    pub fn as_str(self) -> &'static str {
        match self {
            StartMode::Cold => "cold",
            StartMode::Warm => "warm",
        }
    }
}

impl std::fmt::Display for StartMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The `start` axis (spec key `start = ["warm", "cold"]`).
pub struct Start;

impl Axis for Start {
    const NAME: &'static str = "start";
    type Value = StartMode;
    fn default_value() -> StartMode {
        StartMode::Cold
    }
}
