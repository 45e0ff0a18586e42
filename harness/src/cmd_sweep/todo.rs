//! The sweep's run loop: the slots still to do, one after the other, with the reports
//! rewritten after each and, under `read_rates = "interleaved"`, the read-rate cells
//! between rounds.

use std::io::IsTerminal;

use anyhow::Result;
use indicatif::{ProgressBar, ProgressStyle};

use crate::sweep::analysis::repeats;
use crate::sweep::record::baseline::Baseline;
use crate::sweep::record::row::Row;
use crate::sweep::record::rundir::Meta;
use crate::sweep::run::execute::{outcome_label, run_label, RunEnv};
use crate::sweep::run::points::Selection;
use crate::sweep::spec::read_rates::ReadRates;
use crate::sweep::spec::RunSlot;
use crate::sweep::write::report::write_all;

/// The loop's switches from the command line.
pub(super) struct LoopOpts {
    /// `--check`: no progress bar, one line per run.
    pub check: bool,
    /// `--test-stop-after N`: stop after N executed runs (tests of resume).
    pub stop_after: Option<usize>,
}

/// The order rows are written in: measured after warm-up, then by repeat and point.
pub(super) fn run_order_key(r: &Row) -> (bool, u32, usize) {
    (!r.warmup, r.repeat, r.point_index)
}

fn progress_bar(a: &LoopOpts, runs: usize) -> ProgressBar {
    let pb = if a.check {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(runs as u64)
    };
    pb.set_style(
        ProgressStyle::with_template("{prefix} [{bar:24}] {pos}/{len} eta {eta} | {msg}")
            .expect("valid template")
            .progress_chars("=> "),
    );
    pb.set_prefix("sweep");
    pb
}

/// Runs the slots of `todo` one after the other, rewriting the reports after each;
/// returns how many ran and whether `--test-stop-after` stopped the loop. Under
/// `repeats = "auto"` a measured slot of a point that already reached its precision
/// is skipped (not needed: no row, accounted by [`crate::sweep::analysis::repeats`]).
pub(super) fn run_todo(
    a: &LoopOpts,
    env: &RunEnv,
    sel: &Selection,
    todo: &[&RunSlot],
    meta: &mut Meta,
    rows: &mut Vec<Row>,
    base: Option<&Baseline>,
) -> Result<(usize, bool)> {
    let tty = std::io::stderr().is_terminal();
    let n_todo = todo.len();
    let pb = progress_bar(a, n_todo);
    let mut last = String::from("–");
    let mut executed = 0usize;
    let mut spared = 0usize;
    let mut stopped = false;
    let auto = env.spec.auto_repeats();
    for &slot in todo {
        let r = sel.by_index[&slot.point.index];
        let label = run_label(slot, r.budget_bytes);
        if let Some(auto) = auto.filter(|_| !slot.warmup) {
            if repeats::reached(rows, slot.point.index, &auto) {
                spared += 1;
                if a.check || !tty {
                    eprintln!(
                        "[{}/{}] {label}: not needed (precision reached)",
                        executed + spared,
                        n_todo
                    );
                }
                pb.inc(1);
                continue;
            }
        }
        pb.set_message(format!("{label} | last {last}"));
        if executed.is_multiple_of(ReadRates::period(sel.by_index.len())) {
            sample_read_rates(env, meta, executed)?;
        }
        if executed > 0 && env.spec.delay_s > 0.0 {
            std::thread::sleep(std::time::Duration::from_secs_f64(env.spec.delay_s));
        }
        let row = env.run_slot(slot, r)?;
        last = outcome_label(&row);
        // One line per finished run on a log (or under --check, where the bar is
        // hidden), so a CI log never looks hung.
        if a.check || !tty {
            eprintln!("[{}/{}] {label}: {last}", executed + spared + 1, n_todo);
        }
        rows.retain(|x| x.run_id != row.run_id);
        rows.push(row);
        rows.sort_by_key(run_order_key);
        write_all(env.out, meta, rows, base)?;
        pb.inc(1);
        executed += 1;
        if a.stop_after == Some(executed) {
            stopped = true;
            break;
        }
    }
    pb.finish_and_clear();
    if executed > 0 {
        sample_read_rates(env, meta, executed)?;
    }
    Ok((executed, stopped))
}

/// With `read_rates = "interleaved"`: measures the store's two read patterns now
/// ([`crate::sweep::run::rate_cells`]), retimes the predictions and saves `sweep.json`.
/// A cell that fails is a warning, recorded as a sample with no rate.
fn sample_read_rates(env: &RunEnv, meta: &mut Meta, runs: usize) -> Result<()> {
    let Some(p) = meta.predictions.as_mut().filter(|p| p.interleaved_rates) else {
        return Ok(());
    };
    let io_threads = crate::store_flags::DEFAULT_IO_THREADS;
    let s =
        crate::sweep::run::rate_cells::measure(env.model, io_threads, runs).unwrap_or_else(|e| {
            eprintln!("warning: read-rate cells after {runs} run(s) failed: {e:#}");
            crate::sweep::record::predictions::RateSample {
                after_runs: runs,
                trunk_gbps: f64::NAN,
                expert_gbps: f64::NAN,
                expert_batch_gbps: Vec::new(),
                cold_verified: false,
                elapsed_s: 0.0,
            }
        });
    p.add_rate_sample(s);
    meta.save(env.out)
}
