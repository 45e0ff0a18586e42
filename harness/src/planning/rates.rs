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
