//! How many runs of each kind a sweep holds, overall and per start (`cold` / `warm`):
//! `verdict.json`'s `runs_by_start`, one naming for every count.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::sweep::record::row::Row;
use crate::sweep::record::status::RunStatus;

/// The runs of one start (or of all), warm-ups left out.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct RunCounts {
    /// Runs that finished and were read (`status = ok`): `quiet_runs + noisy_runs`.
    pub measured_runs: usize,
    /// Measured runs the statistics use (not marked `noisy`).
    pub quiet_runs: usize,
    /// Measured runs the noise sentinel marked `noisy`.
    pub noisy_runs: usize,
    /// Runs that failed, were refused or timed out.
    pub failed_runs: usize,
    /// Slots not run: below the floor or not applicable to their engine.
    pub not_run: usize,
}

impl RunCounts {
    fn add(&mut self, r: &Row) {
        match r.status {
            RunStatus::Ok if r.noisy.is_some() => {
                self.measured_runs += 1;
                self.noisy_runs += 1;
            }
            RunStatus::Ok => {
                self.measured_runs += 1;
                self.quiet_runs += 1;
            }
            RunStatus::Failed | RunStatus::Refused | RunStatus::Timeout => self.failed_runs += 1,
            RunStatus::BelowFloor | RunStatus::NotApplicable => self.not_run += 1,
        }
    }
}

/// The counts of `rows` (warm-ups left out) under `all` and under each start present
/// (`cold`, `warm`).
pub fn by_start(rows: &[Row]) -> BTreeMap<String, RunCounts> {
    let mut out: BTreeMap<String, RunCounts> = BTreeMap::new();
    out.insert("all".into(), RunCounts::default());
    for r in rows.iter().filter(|r| !r.warmup) {
        out.get_mut("all").expect("inserted").add(r);
        out.entry(r.start().to_string()).or_default().add(r);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_are_counted_per_start_and_overall() {
        let row = |status, noisy: bool, warm: bool, warmup: bool| {
            let mut r = Row {
                status,
                warmup,
                noisy: noisy.then(|| "cpu".to_string()),
                ..Default::default()
            };
            if warm {
                r.axes.insert("start".into(), "warm".into());
            }
            r
        };
        let rows = vec![
            row(RunStatus::Ok, false, false, false),
            row(RunStatus::Ok, true, false, false),
            row(RunStatus::Ok, false, true, false),
            row(RunStatus::Ok, false, true, true),
            row(RunStatus::Timeout, false, true, false),
            row(RunStatus::BelowFloor, false, false, false),
        ];
        let c = by_start(&rows);
        let cold = RunCounts {
            measured_runs: 2,
            quiet_runs: 1,
            noisy_runs: 1,
            failed_runs: 0,
            not_run: 1,
        };
        let warm = RunCounts {
            measured_runs: 1,
            quiet_runs: 1,
            noisy_runs: 0,
            failed_runs: 1,
            not_run: 0,
        };
        assert_eq!(c["cold"], cold);
        assert_eq!(c["warm"], warm);
        assert_eq!(
            c["all"],
            RunCounts {
                measured_runs: 3,
                quiet_runs: 2,
                noisy_runs: 1,
                failed_runs: 1,
                not_run: 1,
            }
        );
    }
}
