//! What the rows mean: the verdict over the output ids, per-point statistics with
//! bootstrap intervals, the budget recommendation and same-budget comparisons.
//!
//! - [`verdict`]: every run of a prompt must produce the same ids;
//! - [`outcome`]: the one outcome of a sweep (pass, fail, incomplete, nothing
//!   compared, baseline undecided) and its exit code;
//! - [`stats`]: per-point medians and spreads;
//! - intervals and significance: `memdial::util::stats::bootstrap` (one method for every comparison);
//! - [`recommend`]: the smallest budget within reach of a mode's best speed;
//! - [`bottom_line`]: how sure that answer is (points within noise, undecided);
//! - [`anomaly`]: points slower than a smaller budget of their mode, and why;
//! - [`repeats`]: `repeats = "auto"`: when a point is precise enough, the runs each took;
//! - [`pick`]: a point as the recommendation names it;
//! - [`counts`]: how many runs of each kind, overall and per start;
//! - [`compare`]: IO modes and prefetch policies at the same budget;
//! - [`layouts`]: the lossless layout against safetensors at the same point;
//! - [`lossy`]: a lossy layout (`rvqN`) against the exact one, by agreement;
//! - [`uncontended`]: runs' uncontended times and the bottom line decided on them when the wall times do not decide;
//! - [`versus`]: two sweeps point by point (`memdial compare A B`);
//! - [`baseline`]: the baseline gate (`--baseline OLD --max-regression 25%`);
//! - [`agreement`], [`engine_ratio`]: other engines' ids against the reference engine's, and their speed;
//! - [`sweep_verdict`]: the sweep's verdict composed from all of the above (`verdict.json`).

pub mod agreement;
pub mod anomaly;
pub mod baseline;
pub mod bottom_line;
#[cfg(test)]
mod bottom_line_tests;
pub mod compare;
pub mod counts;
pub mod engine_ratio;
pub mod layouts;
pub mod lossy;
pub mod outcome;
pub mod pick;
pub mod recommend;
mod recommend_md;
pub mod repeats;
pub mod stats;
pub mod sweep_verdict;
pub mod uncontended;
pub mod verdict;
pub mod versus;
