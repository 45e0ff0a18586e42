//! The device read rate a prediction assumes, from a `memdial iobench` report.

use std::path::{Path, PathBuf};

use anyhow::Result;
use memdial::io::IoMode;
use memdial::store::sim::predict::{BatchRates, TimeModel};
use memdial::tools::iobench::{CellStatus, Row};
use memdial::util::error::UsageError;

/// The rows of a `memdial iobench` report directory's `results.json`.
///
/// Errors (usage): the file cannot be read, or is not a list of iobench rows.
fn read_rows(dir: &Path) -> Result<(PathBuf, Vec<Row>)> {
    let path = dir.join("results.json");
    let text = std::fs::read_to_string(&path)
        .map_err(|e| UsageError::Invalid(format!("cannot read {}: {e}", path.display())))?;
    let rows: Vec<Row> = serde_json::from_str(&text).map_err(|e| {
        UsageError::Invalid(format!("{} is not an iobench report: {e}", path.display()))
    })?;
    Ok((path, rows))
}

/// Whether `r` is a successful cold-cache memdial cell of `io`.
fn cold_ok(r: &Row, io: IoMode) -> bool {
    r.tool == "memdial" && r.status == CellStatus::Ok && r.cache == "cold" && r.io == io.as_str()
}

/// The fastest cold-cache memdial cell of `rows` for `io`, with its description.
fn best_cell(path: &Path, rows: &[Row], io: IoMode) -> Result<(f64, String)> {
    rows.iter()
        .filter(|r| cold_ok(r, io))
        .max_by(|a, b| a.gb_per_s.total_cmp(&b.gb_per_s))
        .map(|r| {
            (
                r.gb_per_s,
                format!(
                    "{} pattern {} qd {} ({})",
                    path.display(),
                    r.pattern,
                    r.qd,
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

/// Best measured bandwidth (GB/s) of a `memdial iobench` report for `io`: the fastest
/// `memdial` row with status ok, cold cache and this IO mode; with its description.
///
/// Errors (usage): `results.json` unreadable or not an iobench report; no such row.
pub fn iobench_gbps(dir: &Path, io: IoMode) -> Result<(f64, String)> {
    let (path, rows) = read_rows(dir)?;
    best_cell(&path, &rows, io)
}

/// Read rates the time model assumes, GB/s, and where they come from.
#[derive(Debug, Clone, PartialEq)]
pub struct Rates {
    /// Trunk reads (one group in flight).
    pub trunk_gbps: f64,
    /// Routed-expert reads (a layer's selection queued at once).
    pub expert_gbps: f64,
    /// Routed-expert reads by batch size: `(K, GB/s)` of every `experts:K` cell found
    /// at the store's queue depth, ascending K (empty: `expert_gbps` for every batch).
    pub expert_batch_gbps: Vec<(u32, f64)>,
    /// The cells or flags they come from.
    pub source: String,
}

/// The store's own read patterns in a `memdial iobench` report for `io`: the cold
/// `trunk` cell at queue depth 1 (the store reads one trunk group at a time) and the
/// `experts:K` cell with K = `top_k` at queue depth `io_threads` (a layer's selection
/// queued at once on the store's IO threads), and every other `experts:K` cell at that
/// depth as the rates of smaller (or larger) batches. Without the first two, the best
/// cold cell of [`iobench_gbps`] for both rates and no batch rates, the source saying so.
///
/// Errors: as [`iobench_gbps`].
pub fn iobench_rates(dir: &Path, io: IoMode, top_k: usize, io_threads: usize) -> Result<Rates> {
    let (path, rows) = read_rows(dir)?;
    let (best, best_src) = best_cell(&path, &rows, io)?;
    let cell = |pattern: &str, qd: usize| {
        rows.iter()
            .filter(|r| cold_ok(r, io) && r.pattern == pattern && r.qd == qd)
            .map(|r| r.gb_per_s)
            .find(|g| *g > 0.0)
    };
    let experts = format!("experts:{top_k}");
    let mut batches: Vec<(u32, f64)> = rows
        .iter()
        .filter(|r| cold_ok(r, io) && r.qd == io_threads && r.gb_per_s > 0.0)
        .filter_map(|r| {
            let k = r.pattern.strip_prefix("experts:")?.parse::<u32>().ok()?;
            (k > 0).then_some((k, r.gb_per_s))
        })
        .collect();
    batches.sort_by_key(|b| b.0);
    batches.dedup_by_key(|b| b.0);
    Ok(match (cell("trunk", 1), cell(&experts, io_threads)) {
        (Some(t), Some(e)) => Rates {
            trunk_gbps: t,
            expert_gbps: e,
            source: format!(
                "{}: trunk qd 1 {t:.3} GB/s, {experts} qd {io_threads} {e:.3} GB/s{} (cold, {})",
                path.display(),
                batch_note(&batches, top_k),
                io.as_str()
            ),
            expert_batch_gbps: batches,
        },
        _ => Rates {
            trunk_gbps: best,
            expert_gbps: best,
            expert_batch_gbps: Vec::new(),
            source: format!(
                "{best_src}, one rate for all reads (no trunk qd 1 and {experts} qd {io_threads} cells)"
            ),
        },
    })
}

/// `", batches 1/2/4 records …"`: the other batch sizes measured, or a note that a
/// smaller batch takes the full batch's rate.
fn batch_note(batches: &[(u32, f64)], top_k: usize) -> String {
    let other: Vec<String> = batches
        .iter()
        .filter(|b| b.0 as usize != top_k)
        .map(|(k, g)| format!("experts:{k} {g:.3}"))
        .collect();
    if other.is_empty() {
        ", no smaller batch measured (every batch at the full batch's rate)".into()
    } else {
        format!(
            ", {} GB/s (batch rates, linear between sizes)",
            other.join(", ")
        )
    }
}

/// The time model of `r` with `compute_s_per_token` seconds of compute, the share
/// `expert_compute_share` after the router.
pub fn time_model(r: &Rates, compute_s_per_token: f64, expert_compute_share: f64) -> TimeModel {
    TimeModel {
        trunk_bytes_per_s: r.trunk_gbps * 1e9,
        expert_bytes_per_s: r.expert_gbps * 1e9,
        expert_batch_rates: BatchRates::new(r.expert_batch_gbps.iter().map(|&(k, g)| (k, g * 1e9))),
        compute_s_per_token,
        expert_compute_share,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A report of three cold direct cells (one failed) and a warm one: the rates are
    /// the cells' own figures, written here.
    #[test]
    fn rates_are_the_matching_cells_figures() {
        let dir = std::env::temp_dir().join(format!("memdial-rates-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let cell = |pattern: &str, qd: usize, cache: &str, status: CellStatus, g: f64| Row {
            tool: "memdial".into(),
            pattern: pattern.into(),
            io: "direct".into(),
            qd,
            cache: cache.into(),
            status,
            gb_per_s: g,
            ..Row::default()
        };
        let rows = vec![
            cell("trunk", 1, "cold", CellStatus::Ok, 1.5),
            cell("experts:8", 4, "cold", CellStatus::Ok, 2.25),
            cell("experts:8", 4, "warm", CellStatus::Ok, 9.0),
            cell("experts:2", 4, "cold", CellStatus::Ok, 0.75),
            cell("experts:2", 1, "cold", CellStatus::Ok, 0.5),
            cell("file", 8, "cold", CellStatus::Error, 7.0),
        ];
        std::fs::write(
            dir.as_path().join("results.json"),
            serde_json::to_string(&rows).unwrap(),
        )
        .unwrap();
        let (g, src) = iobench_gbps(dir.as_path(), IoMode::Direct).unwrap();
        assert_eq!(g, 2.25);
        assert!(src.ends_with("pattern experts:8 qd 4 (direct)"), "{src}");
        let r = iobench_rates(dir.as_path(), IoMode::Direct, 8, 4).unwrap();
        assert_eq!((r.trunk_gbps, r.expert_gbps), (1.5, 2.25));
        // The qd 4 experts cells as batch rates (not the qd 1 one).
        assert_eq!(r.expert_batch_gbps, vec![(2, 0.75), (8, 2.25)]);
        assert!(r.source.contains("experts:2 0.750 GB/s"), "{}", r.source);
        // No experts:3 cell at qd 4: the best cell for both rates.
        let r = iobench_rates(dir.as_path(), IoMode::Direct, 3, 4).unwrap();
        assert_eq!((r.trunk_gbps, r.expert_gbps), (2.25, 2.25));
        assert!(r.expert_batch_gbps.is_empty());
        let e = iobench_gbps(dir.as_path(), IoMode::Mmap).unwrap_err();
        assert!(format!("{e:#}").contains("no successful cold-cache memdial cell for IO mode mmap"));
        std::fs::write(dir.as_path().join("results.json"), "[{\"tool\": 1}]").unwrap();
        let e = iobench_gbps(dir.as_path(), IoMode::Direct).unwrap_err();
        assert!(
            format!("{e:#}").contains("is not an iobench report"),
            "{e:#}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
