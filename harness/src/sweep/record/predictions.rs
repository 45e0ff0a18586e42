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
    /// Compute seconds per decoded token (`None`: not given, no predicted s/token).
    pub compute_s_per_token: Option<f64>,
    /// Where the compute time comes from.
    pub compute_source: String,
    /// Token ids the trace's decode forwards ran (the first generated tokens): a run
    /// whose output does not begin with them did not route as the trace did.
    pub decode_ids: Vec<u32>,
    /// Per point index: the replay of its configuration.
    pub points: BTreeMap<usize, PointPrediction>,
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
    /// Predicted decode s/token (`None` without a bandwidth and a compute time).
    pub s_per_token: Option<f64>,
    /// What the model leaves out for this point (page cache, timing-dependent guesses).
    pub caveat: Option<String>,
}
