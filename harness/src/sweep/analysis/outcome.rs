//! The one outcome of a sweep (or of a merge of shards): every place that reports a
//! verdict — the stdout line, `verdict.json`, `report.md`, the exit code of `memdial
//! sweep` and `memdial report merge` — derives it from [`Outcome::decide`], so they
//! cannot disagree.
//!
//! Exit codes: 0 for [`Outcome::Pass`] only; 1 for every other outcome; 2 (not an
//! outcome) for a usage error or refused input (a changed model on resume, a
//! tampered run directory, a baseline of another sweep).

use serde::Serialize;

/// What a sweep concluded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// At least one group compared, every planned run accounted for, every finished
    /// run proved and matched its group, and the baseline gate (if any) passed.
    Pass,
    /// Something was checked and failed: differing ids, a failed or unproven run,
    /// an engine that must match and does not, or a baseline regression.
    Fail,
    /// Not every planned run has a row (an interrupted sweep, a merge with shards
    /// missing), and nothing failed so far.
    Incomplete,
    /// No run finished to compare (every point below the floor or `n/a`, an empty
    /// shard): nothing was checked.
    NothingCompared,
    /// The ids passed but the baseline gate cannot decide (too few repeats,
    /// unreadable baseline cells, no point in common) and `--baseline-undecided` is
    /// `fail` (the default).
    BaselineUndecided,
}

/// The facts an outcome is decided from.
#[derive(Debug, Clone, Copy, Default)]
pub struct Facts {
    /// Finished, proven runs compared within their groups.
    pub runs_compared: usize,
    /// No mismatch, no failed or unproven run, no engine that must match differs.
    pub checks_pass: bool,
    /// Every planned run (of every shard) has a row.
    pub complete: bool,
    /// Baseline points that regressed.
    pub regressions: usize,
    /// A baseline was given and its gate cannot decide.
    pub baseline_undecided: bool,
    /// `--baseline-undecided pass`.
    pub undecided_passes: bool,
}

impl Outcome {
    /// The outcome of `f`: a failure found wins; then an incomplete directory; then
    /// nothing compared; then the baseline gate.
    pub fn decide(f: &Facts) -> Outcome {
        if !f.checks_pass || f.regressions > 0 {
            Outcome::Fail
        } else if !f.complete {
            Outcome::Incomplete
        } else if f.runs_compared == 0 {
            Outcome::NothingCompared
        } else if f.baseline_undecided && !f.undecided_passes {
            Outcome::BaselineUndecided
        } else {
            Outcome::Pass
        }
    }

    /// The first word(s) of the verdict line: `PASS`, `FAIL`, `INCOMPLETE`,
    /// `NOTHING COMPARED`, `BASELINE UNDECIDED`.
    pub fn word(self) -> &'static str {
        match self {
            Outcome::Pass => "PASS",
            Outcome::Fail => "FAIL",
            Outcome::Incomplete => "INCOMPLETE",
            Outcome::NothingCompared => "NOTHING COMPARED",
            Outcome::BaselineUndecided => "BASELINE UNDECIDED",
        }
    }

    /// Whether this is a pass.
    pub fn is_pass(self) -> bool {
        self == Outcome::Pass
    }

    /// The process exit code: 0 for a pass, 1 otherwise.
    pub fn exit_code(self) -> u8 {
        if self.is_pass() {
            0
        } else {
            1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every outcome, from the facts that lead to it (hand-written table).
    #[test]
    fn every_outcome() {
        let good = Facts {
            runs_compared: 4,
            checks_pass: true,
            complete: true,
            ..Default::default()
        };
        let cases: Vec<(Facts, Outcome, u8)> = vec![
            (good, Outcome::Pass, 0),
            (
                Facts {
                    checks_pass: false,
                    ..good
                },
                Outcome::Fail,
                1,
            ),
            (
                Facts {
                    regressions: 1,
                    ..good
                },
                Outcome::Fail,
                1,
            ),
            (
                Facts {
                    complete: false,
                    ..good
                },
                Outcome::Incomplete,
                1,
            ),
            (
                Facts {
                    checks_pass: false,
                    complete: false,
                    ..good
                },
                Outcome::Fail,
                1,
            ),
            (
                Facts {
                    runs_compared: 0,
                    ..good
                },
                Outcome::NothingCompared,
                1,
            ),
            (
                Facts {
                    runs_compared: 0,
                    complete: false,
                    ..good
                },
                Outcome::Incomplete,
                1,
            ),
            (
                Facts {
                    baseline_undecided: true,
                    ..good
                },
                Outcome::BaselineUndecided,
                1,
            ),
            (
                Facts {
                    baseline_undecided: true,
                    undecided_passes: true,
                    ..good
                },
                Outcome::Pass,
                0,
            ),
            (
                Facts {
                    baseline_undecided: true,
                    regressions: 1,
                    ..good
                },
                Outcome::Fail,
                1,
            ),
        ];
        for (f, want, code) in cases {
            let o = Outcome::decide(&f);
            assert_eq!(o, want, "{f:?}");
            assert_eq!(o.exit_code(), code, "{f:?}");
        }
    }
}
