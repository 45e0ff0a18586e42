//! IO benchmark: replays the engine's real read requests in each IO mode, cold and
//! warm, at several queue depths, and (optionally) runs the equivalent `fio` job.
//!
//! This is the one implementation of read-bandwidth measurement in memdial:
//! `memdial iobench` drives the whole matrix, and [`cold_read_gbps`] /
//! [`sequential_cold_read`] ([`probe`]) are the small probes other reports quote.
//!
//! Files: [`workload`] (patterns and the requests they replay), [`cells`] (one
//! measured cell, cold/warm), [`fio`] (the equivalent fio job), [`probe`]
//! (sequential bandwidth probes); the matrix that runs them all is here.
//! This sits above [`crate::store`]: a workload is built from the store's plan.
//!
//! # What is replayed
//! A [`Workload`] is a list of distinct requests and an order to issue them in.
//! A request is what the streaming store reads as one unit — a
//! [`ReadGroup`](crate::store::plan::ReadGroup) of coalesced byte ranges:
//! - [`Pattern::Trunk`]: every streamed layer's trunk, in layer order (what one
//!   token reads when no trunk is pinned);
//! - [`Pattern::Experts`]: every routed expert record, in a uniformly random order
//!   (a Fisher–Yates permutation from a fixed seed);
//! - [`Pattern::Trace`]: the experts of a routing trace recorded by
//!   `memdial run --record-trace`, in the order the engine needed them.
//!
//! Each range is read exactly as the engine reads it: [`read_range`](crate::io::reader::read_range) (one
//! `pread`, aligned over-read in direct mode) into a 4096-aligned buffer, or in
//! mmap mode `madvise(WILLNEED)` and then a load of every byte of the mapping (a
//! checksum; the engine's kernels read every byte too, and touching one byte per
//! page would time page-table walks, not reads).
//!
//! # Cold and warm
//! - **cold**: every file of the workload is evicted (fsync + `fadvise(DONTNEED)`,
//!   no live mappings), the residency is measured with `mincore` just before the
//!   timed reads and recorded; `cold_verified` is true only if it is 0. A pass
//!   reads each distinct request at most once (re-reading would hit the page cache
//!   in buffered and mmap modes); a cold cell of `memdial iobench` repeats evict +
//!   verify + pass until its timed reads reach 2 s or 2 GB (or `seconds`): one pass
//!   of `mini`'s trunk is 263 MB in ~0.1 s, too short to measure
//!   ([`run_cell_measured`]).
//! - **warm**: the requests' ranges are first read once through the page cache
//!   (untimed); the sequence is then replayed cyclically for `seconds`.
//!
//! # Queue depth
//! `qd` threads issue synchronous requests from one shared sequence (a thread takes
//! the next request when its previous one finishes), so up to `qd` requests are in
//! flight — the streaming store's `--io-threads` (alias `--io-depth`) model.
//!
//! # Figures
//! GB/s = requested bytes (the ranges' lengths, not the direct-IO over-read) / wall
//! seconds; latency per request from an HDR histogram; CPU seconds (user + system,
//! `getrusage`) per GB; device bytes from `getrusage`'s `ru_inblock` (bytes the
//! kernel fetched from storage for this process — 0 when a "read" was served by the
//! page cache, which is how a too-good number is caught).

pub mod cells;
pub mod fio;
pub mod probe;
pub mod replay;
pub mod workload;

pub use cells::*;
pub use fio::*;
pub use replay::*;
pub use workload::*;

use crate::io::IoMode;

#[derive(Debug, Clone, PartialEq)]
pub struct Matrix {
    /// IO modes.
    pub modes: Vec<IoMode>,
    /// Queue depths (threads).
    pub qds: Vec<usize>,
    /// Cache states (cold cells run first).
    pub caches: Vec<CacheState>,
    /// Wall-time limit per cell, seconds.
    pub seconds: f64,
    /// Also run the equivalent fio job after each cell.
    pub fio: bool,
}

impl Matrix {
    /// The cells in run order: cold before warm, then mode, then queue depth.
    pub fn cells(&self) -> Vec<CellSpec> {
        let mut caches = self.caches.clone();
        caches.sort();
        caches.dedup();
        let mut v = Vec::new();
        for &cache in &caches {
            for &mode in &self.modes {
                for &qd in &self.qds {
                    v.push(CellSpec {
                        mode,
                        qd,
                        cache,
                        seconds: self.seconds,
                    });
                }
            }
        }
        v
    }
}

/// Runs every cell of `m` on `w` (and its fio twin when `m.fio`), calling `on_row`
/// as each row finishes. A cell that fails becomes an error row; the rest still run.
pub fn run_matrix(w: &Workload, m: &Matrix, on_row: &mut dyn FnMut(&Row)) -> Vec<Row> {
    let mut rows = Vec::new();
    for spec in m.cells() {
        let row = run_cell_measured(w, &spec)
            .unwrap_or_else(|e| Row::error("memdial", &w.name, &spec, &e));
        on_row(&row);
        rows.push(row);
        if m.fio {
            let ours = rows.last();
            let row = run_fio_cell(w, &spec, ours)
                .unwrap_or_else(|e| Row::error("fio", &w.name, &spec, &e));
            on_row(&row);
            rows.push(row);
        }
    }
    rows
}

/// A series is within this fraction of its best GB/s at its knee.
pub const KNEE_TOLERANCE: f64 = 0.05;

/// The io-depth knee of a series of `(queue depth, GB/s)` points: the smallest depth
/// whose GB/s is at least (1 − [`KNEE_TOLERANCE`]) × the series' best. `None` for
/// fewer than 2 distinct depths or no positive figure.
pub fn knee_of(points: &[(usize, f64)]) -> Option<usize> {
    let mut depths: Vec<usize> = points.iter().map(|p| p.0).collect();
    depths.sort_unstable();
    depths.dedup();
    let best = points.iter().map(|p| p.1).fold(0.0f64, f64::max);
    if depths.len() < 2 || best <= 0.0 {
        return None;
    }
    points
        .iter()
        .filter(|p| p.1 >= (1.0 - KNEE_TOLERANCE) * best)
        .map(|p| p.0)
        .min()
}

/// Sets [`Row::knee`] on every row: true on the knee ([`knee_of`]) of its series, the
/// `ok` rows with the same tool, pattern, io mode and cache state.
pub fn mark_knees(rows: &mut [Row]) {
    let key = |r: &Row| {
        (
            r.tool.clone(),
            r.pattern.clone(),
            r.io.clone(),
            r.cache.clone(),
        )
    };
    let knees: Vec<bool> = rows
        .iter()
        .map(|r| {
            let pts: Vec<(usize, f64)> = rows
                .iter()
                .filter(|x| x.status == CellStatus::Ok && key(x) == key(r))
                .map(|x| (x.qd, x.gb_per_s))
                .collect();
            r.status == CellStatus::Ok && knee_of(&pts) == Some(r.qd)
        })
        .collect();
    for (r, k) in rows.iter_mut().zip(knees) {
        r.knee = k;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Hand-derived: best 2.00 GB/s at qd 16; 5 % below is 1.90; qd 4 (1.92) is the
    /// smallest depth at or above it (qd 2 at 1.50 is not).
    #[test]
    fn knee_is_the_smallest_depth_within_5_percent_of_the_best() {
        let pts = [(1, 1.0), (2, 1.5), (4, 1.92), (8, 1.95), (16, 2.0)];
        assert_eq!(knee_of(&pts), Some(4));
        assert_eq!(knee_of(&[(1, 1.0), (4, 0.96)]), Some(1));
        assert_eq!(knee_of(&[(4, 1.0)]), None, "one depth has no knee");
        assert_eq!(knee_of(&[(1, 0.0), (2, 0.0)]), None);
        let row = |tool: &str, qd, gb| Row {
            tool: tool.into(),
            pattern: "trunk".into(),
            io: "direct".into(),
            cache: "cold".into(),
            qd,
            gb_per_s: gb,
            status: CellStatus::Ok,
            ..Default::default()
        };
        let mut rows = vec![
            row("memdial", 1, 1.0),
            row("fio", 1, 2.0),
            row("memdial", 2, 1.97),
            row("fio", 2, 1.0),
            row("memdial", 4, 2.0),
        ];
        mark_knees(&mut rows);
        let k: Vec<bool> = rows.iter().map(|r| r.knee).collect();
        assert_eq!(k, [false, true, true, false, false]);
    }
}
