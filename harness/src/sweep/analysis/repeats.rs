//! `repeats = "auto"`: whether a point has been measured precisely enough, and how
//! many runs each point took.
//!
//! A point stops once it has at least `min_repeats` quiet measured runs and the 95 %
//! interval of its s/token ([`memdial::util::stats::bootstrap::interval`], the interval the medians
//! table shows, same seed) has a half-width of at most `precision` × its median;
//! otherwise it runs up to `max_repeats`. The decision is a function of the point's
//! rows alone, so the run loop (which skips the point's remaining slots) and any
//! later reading of the directory (`report.md`, a merge, `memdial report verify`)
//! agree on which slots were not needed.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use super::stats::point_runs;
use crate::sweep::record::row::Row;
use crate::sweep::record::status::RunStatus;
use crate::sweep::spec::AutoRepeats;
use memdial::util::stats::bootstrap::{interval, Run};

/// How many measured runs one point took under `repeats = "auto"`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PointRepeats {
    /// Point index.
    pub point_index: usize,
    /// Measured runs with a row (finished, failed or noisy).
    pub runs: usize,
    /// Of those, quiet finished runs (what the interval is over).
    pub quiet: usize,
    /// Half-width of the 95 % interval over the median (`None`: no interval yet).
    pub half_width: Option<f64>,
    /// The interval reached `precision`: the point's remaining slots are not needed.
    pub reached: bool,
}

/// Whether quiet runs `runs` of point `point_index` meet `auto`, and the interval's
/// relative half-width (`None` when there is no interval).
pub fn precision_of(auto: &AutoRepeats, runs: &[Run], point_index: usize) -> (bool, Option<f64>) {
    let n = runs.iter().filter(|r| !r.is_empty()).count();
    let half = interval(runs, point_index as u64).and_then(|i| match (i.lo, i.hi) {
        (Some(lo), Some(hi)) if i.median > 0.0 => Some((hi - lo) / 2.0 / i.median),
        _ => None,
    });
    let reached = n >= auto.min_repeats as usize && half.is_some_and(|h| h <= auto.precision);
    (reached, half)
}

/// The repeats of every point of `rows` that has measured runs, by point index.
pub fn per_point(rows: &[Row], auto: &AutoRepeats) -> Vec<PointRepeats> {
    let mut measured: BTreeMap<usize, BTreeSet<&str>> = BTreeMap::new();
    for r in rows.iter().filter(|r| {
        !r.warmup && !matches!(r.status, RunStatus::BelowFloor | RunStatus::NotApplicable)
    }) {
        measured
            .entry(r.point_index)
            .or_default()
            .insert(r.run_id.as_str());
    }
    let quiet = point_runs(rows);
    measured
        .into_iter()
        .map(|(point_index, ids)| {
            let runs = quiet.get(&point_index).map(Vec::as_slice).unwrap_or(&[]);
            let (reached, half_width) = precision_of(auto, runs, point_index);
            PointRepeats {
                point_index,
                runs: ids.len(),
                quiet: runs.len(),
                half_width,
                reached,
            }
        })
        .collect()
}

/// Whether point `point_index` of `rows` has reached `auto`'s precision (its next
/// measured slots are skipped).
pub fn reached(rows: &[Row], point_index: usize, auto: &AutoRepeats) -> bool {
    let mine: Vec<Row> = rows
        .iter()
        .filter(|r| r.point_index == point_index)
        .cloned()
        .collect();
    per_point(&mine, auto).first().is_some_and(|p| p.reached)
}

/// Planned measured slots not needed: `max_repeats` minus the runs made, summed over
/// the points that reached the precision.
pub fn not_needed(points: &[PointRepeats], auto: &AutoRepeats) -> usize {
    points
        .iter()
        .filter(|p| p.reached)
        .map(|p| (auto.max_repeats as usize).saturating_sub(p.runs))
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sweep::util::ids_sha256;

    const AUTO: AutoRepeats = AutoRepeats {
        precision: 0.05,
        min_repeats: 3,
        max_repeats: 6,
    };

    fn row(point: usize, rep: u32, s: &[f64]) -> Row {
        let ids = [1, 2];
        Row {
            run_id: format!("p{point}#r{rep}"),
            point_index: point,
            repeat: rep,
            status: RunStatus::Ok,
            max_tokens: 2,
            metrics: memdial::engine::metrics::RunMetrics {
                output_ids: ids.to_vec(),
                output_ids_sha256: Some(ids_sha256(&ids)),
                generated_tokens: Some(2),
                decode_s_per_token: s.to_vec(),
                decode_s_per_token_median: memdial::util::stats::median(s),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    /// Identical runs have a zero-width interval: reached at the third run, not
    /// before (min_repeats), and 6 − 3 = 3 slots are not needed.
    #[test]
    fn identical_runs_stop_at_min_repeats() {
        let two = vec![row(0, 0, &[0.1, 0.1]), row(0, 1, &[0.1, 0.1])];
        assert!(!reached(&two, 0, &AUTO));
        let mut three = two.clone();
        three.push(row(0, 2, &[0.1, 0.1]));
        let p = per_point(&three, &AUTO);
        assert_eq!(
            p,
            vec![PointRepeats {
                point_index: 0,
                runs: 3,
                quiet: 3,
                half_width: Some(0.0),
                reached: true
            }]
        );
        assert_eq!(not_needed(&p, &AUTO), 3);
    }

    /// Runs of 0.1 and 0.2 s/token: every bootstrap replicate's median is 0.1, 0.2 or
    /// in between, so the interval is [0.1, 0.2] at the median 0.1 (three runs of
    /// 0.1, one of 0.2): half-width 0.05 / 0.1 = 50 % > 5 %: not reached, no slot
    /// spared.
    #[test]
    fn a_spread_point_goes_on() {
        let rows = vec![
            row(0, 0, &[0.1, 0.1]),
            row(0, 1, &[0.2, 0.2]),
            row(0, 2, &[0.1, 0.1]),
            row(0, 3, &[0.1, 0.1]),
        ];
        let p = &per_point(&rows, &AUTO)[0];
        assert!(!p.reached);
        assert_eq!(p.runs, 4);
        assert_eq!(p.half_width, Some(0.5));
        assert_eq!(not_needed(&per_point(&rows, &AUTO), &AUTO), 0);
    }

    /// Noisy runs count as runs made but not toward the precision: three identical
    /// runs, one of them noisy, are two quiet runs — not reached.
    #[test]
    fn noisy_runs_do_not_count_toward_precision() {
        let mut rows = vec![
            row(0, 0, &[0.1, 0.1]),
            row(0, 1, &[0.1, 0.1]),
            row(0, 2, &[0.1, 0.1]),
        ];
        rows[1].noisy = Some("other processes".into());
        let p = &per_point(&rows, &AUTO)[0];
        assert_eq!((p.runs, p.quiet, p.reached), (3, 2, false));
    }

    /// The accounting the outcome rests on (hand-counted): two points, max_repeats 6,
    /// so 12 planned runs. Point 0 reached the precision after 3 identical runs (3 not
    /// needed); point 1 has 2 runs, short of min_repeats: 5 + 3 < 12, INCOMPLETE —
    /// and the not-needed runs are named apart. When point 1 has run all 6 (never
    /// precise) the directory is complete: 9 rows + 3 not needed = 12, a PASS.
    #[test]
    fn fewer_runs_complete_only_when_the_precision_was_reached() {
        use crate::sweep::analysis::outcome::{Facts, Outcome};
        use crate::sweep::analysis::verdict::verdict;
        let decide = |rows: &[Row]| {
            let v = verdict(rows).with_planned(12, not_needed(&per_point(rows, &AUTO), &AUTO));
            let o = Outcome::decide(&Facts {
                runs_compared: v.runs_compared,
                checks_pass: v.checks_pass(),
                complete: v.complete,
                ..Default::default()
            });
            (v.runs_done, v.runs_not_needed, v.complete, o)
        };
        let mut rows: Vec<Row> = (0..3).map(|r| row(0, r, &[0.1, 0.1])).collect();
        rows.push(row(1, 0, &[0.1, 0.1]));
        rows.push(row(1, 1, &[0.3, 0.3]));
        assert_eq!(decide(&rows), (5, 3, false, Outcome::Incomplete));
        for r in 2..6 {
            rows.push(row(1, r, &[if r % 2 == 0 { 0.1 } else { 0.3 }; 2]));
        }
        assert!(!per_point(&rows, &AUTO)[1].reached);
        assert_eq!(decide(&rows), (9, 3, true, Outcome::Pass));
        // No run at all is never a pass, whatever was spared.
        assert_eq!(decide(&[]), (0, 0, false, Outcome::Incomplete));
    }
}
