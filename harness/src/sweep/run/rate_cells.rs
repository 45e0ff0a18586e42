//! The read-rate cells a sweep runs between its runs (`read_rates = "interleaved"`):
//! the store's two read patterns, measured on the machine the runs see.

use std::path::Path;
use std::time::Instant;

use anyhow::Result;
use memdial::io::IoMode;
use memdial::tools::iobench::{
    run_cell_measured, CacheState, CellSpec, Pattern, Workload, DEFAULT_SEED,
};

use crate::sweep::record::predictions::{BatchRate, RateSample};

/// Wall-time limit of each of the two cells, seconds (a cold cell ends after one pass
/// or this, whichever comes first).
pub const CELL_SECONDS: f64 = 1.0;

/// The batch sizes measured: the powers of two below `top_k`, then `top_k` (1, 2, 4, 8
/// for top-8): a layer's demand read queues top-k minus its cache hits.
pub fn batch_ladder(top_k: usize) -> Vec<usize> {
    let top_k = top_k.max(1);
    let mut v: Vec<usize> = std::iter::successors(Some(1usize), |k| k.checked_mul(2))
        .take_while(|&k| k < top_k)
        .collect();
    v.push(top_k);
    v
}

/// Measures iobench's cold `direct` `trunk` cell at queue depth 1 and its `experts:K`
/// cells at queue depth `io_threads` on `model`, K over [`batch_ladder`] of the
/// model's `num_experts_per_tok`: one [`RateSample`].
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
    let mut cold = trunk_cold;
    let mut batches = Vec::new();
    for k in batch_ladder(top_k) {
        let (gbps, c) = cell(Pattern::ExpertBatches(k), io_threads)?;
        cold &= c;
        batches.push(BatchRate {
            records: k as u32,
            gbps,
        });
    }
    let expert_gbps = batches.last().map_or(f64::NAN, |b| b.gbps);
    Ok(RateSample {
        after_runs,
        trunk_gbps,
        expert_gbps,
        expert_batch_gbps: batches,
        cold_verified: cold,
        elapsed_s: t0.elapsed().as_secs_f64(),
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn ladders() {
        assert_eq!(super::batch_ladder(8), vec![1, 2, 4, 8]);
        assert_eq!(super::batch_ladder(6), vec![1, 2, 4, 6]);
        assert_eq!(super::batch_ladder(1), vec![1]);
        assert_eq!(super::batch_ladder(0), vec![1]);
    }
}
