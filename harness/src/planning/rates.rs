//! The device read rate a prediction assumes, from a `memdial iobench` report.

use std::path::Path;

use anyhow::Result;
use memdial::io::IoMode;
use memdial::util::error::UsageError;

/// Best measured bandwidth (GB/s) of a `memdial iobench` report for `io`: the fastest
/// `memdial` row with status ok, cold cache and this IO mode; with its description.
pub fn iobench_gbps(dir: &Path, io: IoMode) -> Result<(f64, String)> {
    let path = dir.join("results.json");
    let text = std::fs::read_to_string(&path)
        .map_err(|e| UsageError::Invalid(format!("cannot read {}: {e}", path.display())))?;
    let rows: Vec<serde_json::Value> = serde_json::from_str(&text).map_err(|e| {
        UsageError::Invalid(format!("{} is not an iobench report: {e}", path.display()))
    })?;
    let s = |r: &serde_json::Value, k: &str| r[k].as_str().unwrap_or("").to_string();
    rows.iter()
        .filter(|r| {
            s(r, "tool") == "memdial" && s(r, "status") == "ok" && s(r, "io") == io.as_str()
        })
        .filter(|r| s(r, "cache") == "cold")
        .filter_map(|r| r["gb_per_s"].as_f64().map(|g| (g, r)))
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(g, r)| {
            (
                g,
                format!(
                    "{} pattern {} qd {} ({})",
                    path.display(),
                    s(r, "pattern"),
                    r["qd"],
                    io.as_str()
                ),
            )
        })
        .ok_or_else(|| {
            UsageError::Invalid(format!(
                "{} has no successful cold-cache memdial cell for IO mode {}",
                path.display(),
                io.as_str()
            ))
            .into()
        })
}

/// Read rates the time model assumes, GB/s, and where they come from.
#[derive(Debug, Clone, PartialEq)]
pub struct Rates {
    /// Trunk reads (one group in flight).
    pub trunk_gbps: f64,
    /// Routed-expert reads (a layer's selection queued at once).
    pub expert_gbps: f64,
    /// The cells or flags they come from.
    pub source: String,
}

/// The store's own read patterns in a `memdial iobench` report for `io`: the cold
/// `trunk` cell at queue depth 1 (the store reads one trunk group at a time) and the
/// `experts:K` cell with K = `top_k` at queue depth `io_threads` (a layer's selection
/// queued at once on the store's IO threads). Without both, the best cold cell of
/// [`iobench_gbps`] for both rates, the source saying so.
///
/// Errors: as [`iobench_gbps`].
pub fn iobench_rates(dir: &Path, io: IoMode, top_k: usize, io_threads: usize) -> Result<Rates> {
    let path = dir.join("results.json");
    let (best, best_src) = iobench_gbps(dir, io)?;
    let text = std::fs::read_to_string(&path).unwrap_or_default();
    let rows: Vec<serde_json::Value> = serde_json::from_str(&text).unwrap_or_default();
    let cell = |pattern: &str, qd: usize| {
        rows.iter()
            .filter(|r| r["tool"] == "memdial" && r["status"] == "ok" && r["cache"] == "cold")
            .filter(|r| r["io"] == io.as_str() && r["pattern"] == pattern)
            .filter(|r| r["qd"].as_u64() == Some(qd as u64))
            .find_map(|r| r["gb_per_s"].as_f64().filter(|g| *g > 0.0))
    };
    let experts = format!("experts:{top_k}");
    Ok(match (cell("trunk", 1), cell(&experts, io_threads)) {
        (Some(t), Some(e)) => Rates {
            trunk_gbps: t,
            expert_gbps: e,
            source: format!(
                "{}: trunk qd 1 {t:.3} GB/s, {experts} qd {io_threads} {e:.3} GB/s (cold, {})",
                path.display(),
                io.as_str()
            ),
        },
        _ => Rates {
            trunk_gbps: best,
            expert_gbps: best,
            source: format!(
                "{best_src}, one rate for all reads (no trunk qd 1 and {experts} qd {io_threads} cells)"
            ),
        },
    })
}
