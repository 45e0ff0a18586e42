//! `read_rates = "interleaved"`: the read rates of a sweep's predictions measured by the
//! sweep itself, between its runs, so they see the machine the runs see.

use serde::{Deserialize, Serialize};

/// Where a sweep's predictions take their read rates from when the spec names no
/// `device_gbps` or `iobench` report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReadRates {
    /// The store's two read patterns (iobench's cold `direct` `trunk` cell at queue
    /// depth 1 and its `experts:K` cell at the store's IO-thread count) measured before
    /// the first run and again after every round of the sweep's points; the
    /// predictions use the medians.
    Interleaved,
}

impl ReadRates {
    /// Runs between two samples: one per round of `points` points, at least one.
    pub fn period(points: usize) -> usize {
        points.max(1)
    }
}
