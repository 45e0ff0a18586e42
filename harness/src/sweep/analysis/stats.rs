//! Per-point statistics over the measured (non-warm-up, finished) repeats that the
//! noise sentinel found quiet; noisy ones are counted apart.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::sweep::record::row::Row;
use crate::sweep::record::status::RunStatus;
use memdial::util::stats::bootstrap::{interval, ratio, ratio_paired, Ratio, Run, MIN_RUNS};
use memdial::util::stats::{median, min_max};

/// Medians (and the spread of s/token) of one point.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct PointStats {
    /// Point index.
    pub point_index: usize,
    /// Point key.
    pub point_key: String,
    /// Budget as written.
    pub budget_spec: String,
    /// Budget, bytes.
    pub budget_bytes: u64,
    /// IO mode.
    pub io: String,
    /// Prefetch policy.
    pub prefetch: String,
    /// Cache policy.
    pub cache: String,
    /// Threads.
    pub threads: usize,
    /// Prompt index.
    pub prompt_index: usize,
    /// Floor (engine's when reported, else planned), bytes.
    pub floor_bytes: u64,
    /// Measured finished runs.
    pub n: usize,
    /// Runs of this point that failed.
    pub failed: usize,
    /// Whether every measured run started verified cold.
    pub cold_verified: bool,
    /// Median over runs of the per-run median decode time, seconds per token.
    pub s_per_token: Option<f64>,
    /// Minimum over runs of the per-run median decode time, seconds per token.
    pub s_per_token_min: Option<f64>,
    /// Maximum over runs of the per-run median decode time, seconds per token.
    pub s_per_token_max: Option<f64>,
    /// Decode tokens per second from the same figure as `s_per_token`:
    /// `1 / s_per_token` (the engine's per-run `tokens_per_s`, generated tokens over
    /// total decode time, is a mean and stays in `results.csv`).
    pub tokens_per_s: Option<f64>,
    /// Median time to first token, seconds.
    pub ttft_s: Option<f64>,
    /// Median bytes read per decoded token.
    pub bytes_read_per_token: Option<f64>,
    /// Median IO-wait share of generation (prefill + decode) time, [0, 1].
    pub io_wait_fraction: Option<f64>,
    /// Median trunk hit rate, [0, 1].
    pub trunk_hit_rate: Option<f64>,
    /// Median expert hit rate, [0, 1].
    pub expert_hit_rate: Option<f64>,
    /// Median peak RSS (VmHWM), bytes.
    pub peak_rss_bytes: Option<f64>,
    /// Median peak anonymous RSS, bytes.
    pub peak_rss_anon_bytes: Option<f64>,
    /// Median peak of the engine's own accounting, bytes.
    pub peak_accounted_bytes: Option<f64>,
    /// Whether the point was skipped as below the floor.
    pub below_floor: bool,
    /// Measured runs not held to the budget by a memory cgroup.
    pub unenforced: usize,
    /// Measured runs marked `over_budget`.
    pub over_budget: usize,
    /// 95 % interval of `s_per_token`, low end (hierarchical bootstrap, see
    /// [`memdial::util::stats::bootstrap`]); `None` when insufficient repeats.
    pub s_per_token_lo: Option<f64>,
    /// 95 % interval of `s_per_token`, high end.
    pub s_per_token_hi: Option<f64>,
    /// The interval is wider than ±10 % of the median.
    pub high_variance: bool,
    /// Engine (empty: memdial, in rows of older sweeps).
    pub engine: String,
    /// Why the engine cannot run this point (`n/a` rows), when it cannot.
    pub not_applicable: Option<String>,
    /// Too few runs (or decode tokens) for an interval.
    pub insufficient_repeats: bool,
    /// How the runs started (`cold` or `warm`, the `start` axis; `cold` in rows of
    /// sweeps before it).
    pub start: String,
    /// Measured finished runs marked `noisy` by the noise sentinel: counted here,
    /// left out of `n`, the medians and the interval — unless every run was noisy.
    pub noisy: usize,
    /// Every measured run was noisy: the figures (and `n`) are the noisy runs',
    /// shown for the table and the charts, and no decision (recommendation,
    /// comparison) uses the point.
    pub noisy_only: bool,
    /// The model layout read (`safetensors` or `lossless`, the `layout` axis;
    /// `safetensors` in rows of sweeps before it).
    pub layout: String,
    /// Context tokens before the prompt (the `depth` axis; 0 without it).
    #[serde(skip_serializing_if = "is_zero")]
    pub depth: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// Per-token decode times of each point's runs (by point index), with the round each run
/// was measured in: an interleaved sweep runs every point once per round, so two points'
/// runs of one round saw the same state of the machine. Derefs to the map of runs, so a
/// reader that needs no pairing reads it as before.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PointRuns {
    runs: BTreeMap<usize, Vec<Run>>,
    /// Per point, the round (the rows' `repeat`) of each run, in the order of `runs`;
    /// absent when the rounds are unknown.
    rounds: BTreeMap<usize, Vec<u32>>,
}

impl std::ops::Deref for PointRuns {
    type Target = BTreeMap<usize, Vec<Run>>;
    fn deref(&self) -> &Self::Target {
        &self.runs
    }
}

/// Runs whose rounds are unknown: ratios are never paired.
impl From<BTreeMap<usize, Vec<Run>>> for PointRuns {
    fn from(runs: BTreeMap<usize, Vec<Run>>) -> Self {
        PointRuns {
            runs,
            rounds: BTreeMap::new(),
        }
    }
}

impl PointRuns {
    /// The ratio of point `a`'s s/token to point `b`'s: on runs paired by round
    /// ([`ratio_paired`]) when at least [`MIN_RUNS`] rounds hold a run of both, else on
    /// the two points' runs as independent samples ([`ratio`]). `None` when either
    /// point has no run with a decode time.
    pub fn ratio(&self, a: usize, b: usize) -> Option<Ratio> {
        let (ra, rb) = (self.runs.get(&a)?, self.runs.get(&b)?);
        let seed = ((a as u64) << 32) | b as u64;
        if let (Some(qa), Some(qb)) = (self.rounds.get(&a), self.rounds.get(&b)) {
            let pairs: Vec<(&Run, &Run)> = qa
                .iter()
                .zip(ra)
                .filter(|(_, r)| !r.is_empty())
                .filter_map(|(round, x)| {
                    let j = qb.iter().position(|q| q == round)?;
                    Some((x, &rb[j])).filter(|(_, y)| !y.is_empty())
                })
                .collect();
            if pairs.len() >= MIN_RUNS {
                return ratio_paired(&pairs, seed);
            }
        }
        ratio(ra, rb, seed)
    }
}

/// Per-token decode times of each measured finished quiet run of every point (a run
/// with only a median contributes that one value; `noisy` runs are left out), with
/// their rounds.
pub fn point_runs(rows: &[Row]) -> PointRuns {
    point_runs_of(rows, Row::is_measured_quiet)
}

/// [`point_runs`] over the measured finished rows that `keep` accepts.
fn point_runs_of(rows: &[Row], keep: impl Fn(&Row) -> bool) -> PointRuns {
    let mut by = PointRuns::default();
    for r in rows.iter().filter(|r| r.is_measured_ok() && keep(r)) {
        let run: Run = if r.metrics.decode_s_per_token.is_empty() {
            r.metrics.decode_s_per_token_median.into_iter().collect()
        } else {
            r.metrics.decode_s_per_token.clone()
        };
        by.runs.entry(r.point_index).or_default().push(run);
        by.rounds.entry(r.point_index).or_default().push(r.repeat);
    }
    by
}

fn med(rs: &[&Row], f: impl Fn(&Row) -> Option<f64>) -> Option<f64> {
    median(&rs.iter().filter_map(|r| f(r)).collect::<Vec<_>>())
}

/// Statistics of every point present in `rows`, ordered by point index.
pub fn per_point(rows: &[Row]) -> Vec<PointStats> {
    let mut by: BTreeMap<usize, Vec<&Row>> = BTreeMap::new();
    for r in rows {
        by.entry(r.point_index).or_default().push(r);
    }
    let runs = point_runs(rows);
    by.into_values()
        .map(|all| {
            let first = all[0];
            let quiet: Vec<&Row> = all
                .iter()
                .copied()
                .filter(|r| r.is_measured_quiet())
                .collect();
            // Only noisy runs: shown from them, marked, and used for no decision.
            let noisy_only = quiet.is_empty() && all.iter().any(|r| r.is_measured_noisy());
            let ok: Vec<&Row> = if noisy_only {
                all.iter()
                    .copied()
                    .filter(|r| r.is_measured_noisy())
                    .collect()
            } else {
                quiet
            };
            let spt: Vec<f64> = ok
                .iter()
                .filter_map(|r| r.metrics.decode_s_per_token_median)
                .collect();
            let mm = min_max(&spt);
            let noisy_runs = noisy_only.then(|| {
                let rows: Vec<Row> = ok.iter().map(|r| (*r).clone()).collect();
                point_runs_of(&rows, |_| true)
            });
            let iv = noisy_runs
                .as_ref()
                .unwrap_or(&runs)
                .get(&first.point_index)
                .and_then(|r| interval(r, first.point_index as u64));
            PointStats {
                point_index: first.point_index,
                point_key: first.point_key.clone(),
                budget_spec: first.budget_spec.clone(),
                budget_bytes: first.budget_bytes,
                io: first.io.as_str().to_string(),
                prefetch: first.prefetch.as_str().to_string(),
                cache: first.cache.as_str().to_string(),
                threads: first.threads,
                prompt_index: first.prompt_index,
                floor_bytes: all
                    .iter()
                    .find_map(|r| r.metrics.floor_bytes)
                    .unwrap_or(first.planned_floor_bytes),
                n: ok.len(),
                failed: all.iter().filter(|r| r.status.is_failure()).count(),
                cold_verified: ok.iter().all(|r| r.cold_verified),
                s_per_token: median(&spt),
                s_per_token_min: mm.map(|m| m.0),
                s_per_token_max: mm.map(|m| m.1),
                tokens_per_s: median(&spt).filter(|s| *s > 0.0).map(|s| 1.0 / s),
                ttft_s: med(&ok, |r| r.metrics.ttft_s),
                bytes_read_per_token: med(&ok, |r| r.metrics.bytes_read_per_token),
                io_wait_fraction: med(&ok, |r| r.metrics.io_wait_fraction),
                trunk_hit_rate: med(&ok, |r| r.metrics.trunk_hit_rate),
                expert_hit_rate: med(&ok, |r| r.metrics.expert_hit_rate),
                peak_rss_bytes: med(&ok, |r| r.metrics.peak_rss_bytes.map(|x| x as f64)),
                peak_rss_anon_bytes: med(&ok, |r| r.metrics.peak_rss_anon_bytes.map(|x| x as f64)),
                peak_accounted_bytes: med(&ok, |r| {
                    r.metrics.peak_accounted_bytes.map(|x| x as f64)
                }),
                below_floor: all.iter().any(|r| r.status == RunStatus::BelowFloor),
                unenforced: ok.iter().filter(|r| !r.cgroup_enforced).count(),
                over_budget: ok.iter().filter(|r| r.over_budget).count(),
                s_per_token_lo: iv.as_ref().and_then(|i| i.lo),
                s_per_token_hi: iv.as_ref().and_then(|i| i.hi),
                high_variance: iv.as_ref().is_some_and(|i| i.high_variance),
                engine: first.engine.clone(),
                not_applicable: all
                    .iter()
                    .find(|r| r.status == RunStatus::NotApplicable)
                    .map(|r| r.error.clone().unwrap_or_default()),
                insufficient_repeats: iv.as_ref().is_some_and(|i| i.insufficient),
                start: first.start().to_string(),
                noisy: all.iter().filter(|r| r.is_measured_noisy()).count(),
                noisy_only,
                layout: first
                    .layout()
                    .map_or_else(|| "unknown".to_string(), |k| k.to_string()),
                depth: first.depth(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(point: usize, repeat: u32, s: f64) -> Row {
        Row {
            run_id: format!("p{point}#r{repeat}"),
            point_index: point,
            repeat,
            status: RunStatus::Ok,
            metrics: memdial::engine::metrics::RunMetrics {
                decode_s_per_token: vec![s; 4],
                decode_s_per_token_median: Some(s),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    /// Runs are paired by their round, not by their order in the rows: rounds at 1, 2 and
    /// 3 s/token with point 1 10 % slower in each give exactly 1.1 (by hand), significant,
    /// where independent samples of the same runs span 1.
    #[test]
    fn ratios_pair_runs_by_round() {
        let rows = vec![
            row(0, 0, 1.0),
            row(1, 2, 3.3),
            row(0, 1, 2.0),
            row(1, 0, 1.1),
            row(0, 2, 3.0),
            row(1, 1, 2.2),
        ];
        let runs = point_runs(&rows);
        let r = runs.ratio(1, 0).unwrap();
        assert!((r.ratio - 1.1).abs() < 1e-12, "{r:?}");
        assert_eq!(r.significant, Some(true));
        let unpaired = PointRuns::from(runs.runs.clone()).ratio(1, 0).unwrap();
        assert_eq!(unpaired.significant, Some(false));
        // Only one round in common: the points are compared as independent samples.
        let few = vec![
            row(0, 0, 1.0),
            row(0, 1, 2.0),
            row(1, 1, 2.2),
            row(1, 5, 2.4),
        ];
        let r = point_runs(&few).ratio(1, 0).unwrap();
        assert_eq!(
            r,
            PointRuns::from(point_runs(&few).runs.clone())
                .ratio(1, 0)
                .unwrap()
        );
    }
}
