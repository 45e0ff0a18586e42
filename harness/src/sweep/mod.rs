//! `memdial sweep`: budget × IO × prefetch × cache × threads sweeps from a verified
//! cold cache, a SHA-256 verdict over the output ids, CSV/JSON/Markdown reports
//! and the memory/speed curve.
//!
//! - [`spec`]: the TOML spec and its expansion into points and runs;
//! - [`points`], [`rundir`], [`execute`]: the steps of `memdial sweep` (points with
//!   resolved budgets, the locked run directory, one run slot → one row);
//! - [`interrupt`]: SIGINT/SIGTERM print the command that resumes the sweep;
//! - [`runner`]: one child `memdial run --metrics-json` per run;
//! - [`coldcache`]: eviction and mincore verification before each run;
//! - [`cgroup`]: memory-cgroup enforcement of the budget (default on; v1, v2,
//!   systemd-run and sampling in submodules);
//! - [`memwatch`]: anon + page-cache memory sampled while a run is alive;
//! - [`row`]: the results schema (`results.csv` / `results.json`);
//! - [`verdict`], [`stats`], [`baseline`]: what the rows mean;
//! - [`report`], [`charts`]: `report.md`, `verdict.json`, `curve.*`, `io.*`;
//! - [`merge`]: combining shard directories;
//! - [`host`]: machine and storage facts;
//! - [`engines`]: other engines on the same points (the `engines` axis);
//! - [`start`]: the `start` axis (cold or warm caches).

pub mod analysis;
pub mod axes;
pub mod engines;
pub mod record;
pub mod run;
pub mod spec;
pub mod start;
pub mod util;
pub mod write;
