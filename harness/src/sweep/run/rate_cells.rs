//! The read-rate cells a sweep runs between its runs (`read_rates = "interleaved"`):
//! the store's two read patterns, measured on the machine the runs see.

use std::path::Path;
use std::time::Instant;

use anyhow::Result;
use memdial::io::IoMode;
use memdial::tools::iobench::{
    run_cell_measured, CacheState, CellSpec, Pattern, Workload, DEFAULT_SEED,
};

use crate::sweep::record::predictions::RateSample;

/// Wall-time limit of each of the two cells, seconds (a cold cell ends after one pass
/// or this, whichever comes first).
pub const CELL_SECONDS: f64 = 1.0;

/// Measures iobench's cold `direct` `trunk` cell at queue depth 1 and its `experts:K`
/// cell at queue depth `io_threads` on `model` (K = the model's `num_experts_per_tok`):
/// one [`RateSample`].
///
/// Errors: an unreadable config; the model has no streamed trunk or no routed experts,
/// its files cannot be opened with O_DIRECT, or a read fails.
pub fn measure(model: &Path, io_threads: usize, after_runs: usize) -> Result<RateSample> {
    let t0 = Instant::now();
    let cfg = memdial::format::config::load_config(model)?;
    let top_k = cfg.routed_experts().map_or(1, |(_, k)| k.max(1));
    let cell = |pattern: Pattern, qd: usize| -> Result<(f64, bool)> {
        let w = Workload::from_model(model, &pattern, DEFAULT_SEED)?;
        let spec = CellSpec {
            mode: IoMode::Direct,
            qd: qd.max(1),
            cache: CacheState::Cold,
            seconds: CELL_SECONDS,
        };
        let row = run_cell_measured(&w, &spec)?;
        Ok((row.gb_per_s, row.cold_verified))
    };
    let (trunk_gbps, trunk_cold) = cell(Pattern::Trunk, 1)?;
    let (expert_gbps, expert_cold) = cell(Pattern::ExpertBatches(top_k.max(1)), io_threads)?;
    Ok(RateSample {
        after_runs,
        trunk_gbps,
        expert_gbps,
        cold_verified: trunk_cold && expert_cold,
        elapsed_s: t0.elapsed().as_secs_f64(),
    })
}
