//! What the rows mean: the verdict over the output ids, per-point statistics with
//! bootstrap intervals, the budget recommendation and same-budget comparisons.
//!
//! - [`verdict`]: every run of a prompt must produce the same ids;
//! - [`outcome`]: the one outcome of a sweep (pass, fail, incomplete, nothing
//!   compared, baseline undecided) and its exit code;
//! - [`stats`]: per-point medians and spreads;
//! - [`bootstrap`]: intervals and significance (one method for every comparison);
//! - [`recommend`]: the smallest budget within reach of a mode's best speed;
//! - [`compare`]: IO modes and prefetch policies at the same budget.

pub mod bootstrap;
pub mod compare;
pub mod outcome;
pub mod recommend;
pub mod stats;
pub mod verdict;
