//! What a sweep runs: points with resolved budgets, one run slot after another, each
//! a child process from a verified cold cache, held to its budget by a memory
//! cgroup and sampled while it lives.
//!
//! - [`points`]: the spec's points with their budgets resolved against the floor;
//! - [`execute`]: one run slot → one row;
//! - [`child`]: how every child process starts: under a supervisor ([`child_shim`])
//!   that ends its whole process group with it, or with the harness;
//! - [`runner`]: one child `memdial run --metrics-json` (or another engine) per run;
//! - [`clients`]: a run at a concurrency above 1: `memdial serve` and its clients;
//! - [`coldcache`]: eviction and mincore verification before each run;
//! - [`cgroup`]: memory-cgroup enforcement of the budget (v1, v2, systemd-run and
//!   sampling in submodules);
//! - [`memwatch`]: anon + page-cache memory sampled while a run is alive;
//! - [`packed`]: the packed layouts (`lossless`, `raw`, `rvqN`) points read, packed
//!   once and cached;
//! - [`logits`]: one resident `memdial run --logits-out`, for the steps after the runs;
//! - [`lossy`]: after the runs, a lossy layout's agreement with the exact one;
//! - [`interrupt`]: SIGINT/SIGTERM print the command that resumes the sweep.

pub mod cgroup;
pub mod child;
pub mod child_shim;
pub mod clients;
pub mod coldcache;
pub mod execute;
pub mod interrupt;
pub mod logits;
pub mod lossy;
pub mod memwatch;
pub mod packed;
pub mod plugin;
pub mod points;
pub mod rate_cells;
pub mod runner;
