//! The recorded form of a sweep's predictions (`sweep.json`'s `predictions`); the
//! predict module makes and times them.

use std::collections::BTreeMap;

use memdial::io::IoMode;
use memdial::store::plan::Prefetch;
use memdial::store::sim::predict::DecodeBytes;
use serde::{Deserialize, Serialize};

use crate::sweep::start::StartMode;

/// The predictions of a sweep given a trace (`sweep.json`'s `predictions`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Predictions {
    /// The trace, as the spec gives it (absolute).
    pub trace: String,
    /// Device read bandwidth, GB/s (`None`: unknown, no predicted s/token).
    pub device_gbps: Option<f64>,
    /// Where the bandwidth comes from.
    pub device_source: String,
    /// Routed-expert read rate, GB/s, when the source gives one apart from the trunk's
    /// (`device_gbps`); `None`: `device_gbps` for every read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expert_gbps: Option<f64>,
    /// Routed-expert read rates by batch size (records queued at once), ascending;
    /// empty: `expert_gbps` for every batch.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub expert_batch_gbps: Vec<BatchRate>,
    /// Compute seconds per decoded token (`None`: not given, no predicted s/token).
    pub compute_s_per_token: Option<f64>,
    /// Where the compute time comes from.
    pub compute_source: String,
    /// Share of that compute after the router (the time model's `s`, [0, 1]; 0 when
    /// the resident run was not profiled).
    #[serde(default)]
    pub expert_compute_share: f64,
    /// Token ids the trace's decode forwards ran (the first generated tokens): a run
    /// whose output does not begin with them did not route as the trace did.
    pub decode_ids: Vec<u32>,
    /// Per point index: the replay of its configuration.
    pub points: BTreeMap<usize, PointPrediction>,
    /// With `read_rates = "interleaved"`: the store's read patterns measured between
    /// the runs, in the order taken; the rates above are their medians.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rate_samples: Vec<RateSample>,
    /// The spec asked for interleaved read rates (`read_rates = "interleaved"`): the
    /// rates come from `rate_samples` only, never from the sweep's cold probe.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub interleaved_rates: bool,
}

/// One measurement of the store's two read patterns, taken between a sweep's runs
/// (`read_rates = "interleaved"`): iobench's cold `direct` `trunk` cell at queue depth 1
/// and its `experts:K` cell (K = the model's top-k) at the store's IO-thread count.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RateSample {
    /// Runs this invocation had finished when the sample was taken.
    pub after_runs: usize,
    /// Trunk read rate, GB/s (10⁹ bytes/s).
    pub trunk_gbps: f64,
    /// Routed-expert read rate, GB/s.
    pub expert_gbps: f64,
    /// The `experts:K` cells at smaller batches (and K = top-k), GB/s, ascending K
    /// (empty in samples recorded before batch rates were measured).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub expert_batch_gbps: Vec<BatchRate>,
    /// Every cell started from a page cache verified cold (mincore).
    pub cold_verified: bool,
    /// Seconds the two cells took, wall clock.
    pub elapsed_s: f64,
}

/// The routed-expert read rate of one batch size.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct BatchRate {
    /// Expert records queued at once (iobench's `experts:K`).
    pub records: u32,
    /// GB/s (10⁹ bytes/s).
    pub gbps: f64,
}

/// One point's replay.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PointPrediction {
    /// IO mode, prefetch policy and start of the point (for the chart and report).
    pub io: IoMode,
    pub prefetch: Prefetch,
    pub start: StartMode,
    pub budget_bytes: u64,
    /// Decode bytes read per token (the simulator's), by what the time model needs.
    pub bytes: DecodeBytes,
    /// Decode expert hit rate, [0, 1].
    pub expert_hit_rate: f64,
    /// Predicted decode s/token (`None` without a bandwidth and a compute time, and
    /// for `buffered` and `mmap`: unpredicted).
    pub s_per_token: Option<f64>,
    /// Predicted IO wait before the layers' routers, seconds per token (with
    /// `s_per_token`; the measured figure is the runs' `io_wait_trunk_s_per_token`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trunk_wait_s_per_token: Option<f64>,
    /// Predicted IO wait after the routers (experts, embedding rows), seconds per token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expert_wait_s_per_token: Option<f64>,
    /// What the model leaves out for this point (page cache, timing-dependent guesses).
    pub caveat: Option<String>,
}
