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
//! Each range is read exactly as the engine reads it: [`read_range`] (one
//! `pread`, aligned over-read in direct mode) into a 4096-aligned buffer, or in
//! mmap mode `madvise(WILLNEED)` and then a load of every byte of the mapping (a
//! checksum; the engine's kernels read every byte too, and touching one byte per
//! page would time page-table walks, not reads).
//!
//! # Cold and warm
//! - **cold**: every file of the workload is evicted (fsync + `fadvise(DONTNEED)`,
//!   no live mappings), the residency is measured with `mincore` just before the
//!   timed reads and recorded; `cold_verified` is true only if it is 0. A cold cell
//!   reads each distinct request at most once (re-reading would hit the page cache
//!   in buffered and mmap modes), so it ends after one pass or `seconds`,
//!   whichever comes first.
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
pub mod workload;

pub use cells::*;
pub use fio::*;
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
        let row = run_cell(w, &spec).unwrap_or_else(|e| Row::error("memdial", &w.name, &spec, &e));
        on_row(&row);
        rows.push(row);
        if m.fio {
            let row =
                run_fio_cell(w, &spec).unwrap_or_else(|e| Row::error("fio", &w.name, &spec, &e));
            on_row(&row);
            rows.push(row);
        }
    }
    rows
}
