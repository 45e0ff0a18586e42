//! A point as the recommendation names it: budget, prefetch policy, median s/token
//! and its interval.

use serde::Serialize;

/// Knee: within this fraction of the mode's best s/token.
pub const KNEE_WITHIN: f64 = 0.10;

/// One point on a frontier.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Pick {
    /// Point index.
    pub point_index: usize,
    /// Budget as written.
    pub budget_spec: String,
    /// Budget, bytes.
    pub budget_bytes: u64,
    /// Prefetch policy of the point.
    pub prefetch: String,
    /// Median s/token.
    pub s_per_token: f64,
    /// 95 % interval, when decidable.
    pub lo: Option<f64>,
    /// 95 % interval, when decidable.
    pub hi: Option<f64>,
    /// Quiet measured runs behind the median.
    pub n: usize,
    /// The point's model layout, when the sweep has a `layout` axis (points of a
    /// layout other than `safetensors`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub layout: Option<String>,
}

impl Pick {
    /// `next-layer`, or `lossless, next-layer` when the pick names its layout: the
    /// settings the recommendation quotes beside the IO mode.
    pub fn settings(&self) -> String {
        match &self.layout {
            Some(l) => format!("{l}, {}", self.prefetch),
            None => self.prefetch.clone(),
        }
    }
}

/// `0.1467 [0.1223–0.4722]`: a pick's median s/token and its 95 % interval.
pub fn ci(p: &Pick) -> String {
    match (p.lo, p.hi) {
        (Some(l), Some(h)) => format!("{:.4} [{l:.4}–{h:.4}]", p.s_per_token),
        _ => format!("{:.4} (insufficient repeats)", p.s_per_token),
    }
}

/// A pick with its IO mode, as the recommendation names a point.
pub type Named = (String, Pick);
