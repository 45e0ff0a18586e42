//! A spec's `trace` and the settings of its predictions (`crate::sweep::predict`),
//! checked to go together and grouped.

use std::path::{Path, PathBuf};

/// Device bandwidth of a trace's predictions.
#[derive(Debug, Clone, PartialEq)]
pub enum DeviceRate {
    /// `device_gbps`: GB/s (10⁹ bytes/s), finite and positive.
    Gbps(f64),
    /// `iobench`: a `memdial iobench` report directory.
    Iobench(PathBuf),
    /// `read_rates = "interleaved"`: the store's two read patterns measured between
    /// the sweep's runs ([`super::read_rates::ReadRates::Interleaved`]).
    Interleaved,
}

/// Compute time per decoded token of a trace's predictions.
#[derive(Debug, Clone, PartialEq)]
pub enum ComputeTime {
    /// `compute_s_per_token`: seconds, finite and ≥ 0.
    SecondsPerToken(f64),
    /// `resident_metrics`: a `memdial run --metrics-json` file of a resident run.
    ResidentMetrics(PathBuf),
}

/// A spec's `trace` and the settings of its predictions.
#[derive(Debug, Clone, PartialEq)]
pub struct Prediction {
    /// The routing trace (checked to be a file).
    pub trace: PathBuf,
    /// `device_gbps`, `iobench` or `read_rates` (`None`: the sweep's own cold `direct`
    /// probe).
    pub device: Option<DeviceRate>,
    /// `compute_s_per_token` or `resident_metrics` (`None`: not given).
    pub compute: Option<ComputeTime>,
}

impl Prediction {
    /// `compute_s_per_token`, when given.
    pub fn compute_s_per_token(&self) -> Option<f64> {
        match self.compute {
            Some(ComputeTime::SecondsPerToken(s)) => Some(s),
            _ => None,
        }
    }

    /// `resident_metrics`, when given.
    pub fn resident_metrics(&self) -> Option<&Path> {
        match &self.compute {
            Some(ComputeTime::ResidentMetrics(p)) => Some(p),
            _ => None,
        }
    }
}
