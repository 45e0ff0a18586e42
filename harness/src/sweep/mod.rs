//! `memdial sweep`: budget × IO × prefetch × cache × threads sweeps from a verified
//! cold cache, a SHA-256 verdict over the output ids, CSV/JSON/Markdown reports
//! and the memory/speed curve.
//!
//! By stage, with no circle among the modules (`harness/tests/module_graph.rs`):
//!
//! - [`spec`]: the TOML spec and its expansion into points and runs; [`axes`]: the
//!   one way to add an axis;
//! - [`run`]: what runs — points with resolved budgets, one run slot → one row, the
//!   child process, the cold cache, the memory cgroup, memory sampling, interrupts;
//! - [`record`]: what it records — the row schema and [`record::status::RunStatus`],
//!   the run directory and its `sweep.json`, merged shards, the baseline, host facts;
//! - [`analysis`]: what the rows mean — the verdict, per-point statistics, the
//!   bootstrap, the recommendation, same-budget comparisons;
//! - [`write`]: what it writes — `verdict.json`, `report.md` and the charts, through
//!   [`crate::export`];
//! - [`engines`]: other engines on the same points (the `engines` axis), their
//!   cross-engine verdict layered over the ids verdict;
//! - [`start`]: the `start` axis (cold or warm caches); [`layout`]: the `layout`
//!   axis (safetensors or the lossless streamed layout); [`concurrency`]: the
//!   `concurrency` axis (concurrent clients of `memdial serve`); [`depth`]: the
//!   `depth` axis (decode after a deterministic context, `run --depth`); [`goodput`]: the
//!   share and rate of requests meeting the spec's `slo`;
//! - [`predict`]: the spec's `trace` checked against the sweep and replayed at
//!   every point (predicted bytes and s/token beside the measured ones);
//! - [`verify`]: a finished run directory re-checked offline (`memdial report
//!   verify`), over every stage's output;
//! - [`util`]: UTC timestamps and SHA-256 hex.

pub mod analysis;
pub mod axes;
#[cfg(test)]
mod axes_example;
pub mod concurrency;
pub mod depth;
#[cfg(test)]
mod depth_tests;
pub mod engines;
pub mod goodput;
#[cfg(test)]
mod goodput_tests;
pub mod layout;
#[cfg(test)]
mod layout_tests;
pub mod predict;
pub mod record;
pub mod run;
pub mod spec;
pub mod speculate;
#[cfg(test)]
mod speculate_tests;
pub mod start;
pub mod util;
pub mod verify;
pub mod write;
