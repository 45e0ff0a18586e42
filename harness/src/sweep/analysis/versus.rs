//! `memdial compare A B`: two sweeps' decode speed point by point, B against A.
//!
//! Points are matched on the baseline gate's key ([`crate::sweep::record::baseline::Key`]:
//! point key, budget bytes, prompt tokens, max tokens); nothing else of the two sweeps
//! has to agree (spec hash, results schema, memdial version may differ: comparing two
//! commits' sweeps is the point). Noisy runs are left out of both sides and counted.
//!
//! Per matched point:
//! - **ratio** B/A of the medians over runs of each run's median s/token, with its 95 %
//!   interval from the two-level bootstrap of [`memdial::util::stats::bootstrap`] (the method of every
//!   other interval memdial reports); **significant** when that interval excludes 1;
//! - **p (Welch)**: Welch's two-sided t-test on the logarithms of the runs' median s/token
//!   (runs are the independent units; the log makes a ratio a difference), with the
//!   Welch–Satterthwaite degrees of freedom: the figure `hyperfine`'s and
//!   `compare-llama-bench`'s users read. It is reported beside the bootstrap's verdict and
//!   does not change it. Fewer than 2 runs on a side: no p.

use std::collections::BTreeMap;

use serde::Serialize;
use statrs::distribution::{ContinuousCDF, StudentsT};

use crate::sweep::record::baseline::{Key, Runs};
use memdial::util::stats::bootstrap::{ratio, Ratio, Run};
use memdial::util::stats::median;

/// One sweep's side of a comparison: its runs by match key and how many noisy runs were
/// left out per key.
#[derive(Debug, Clone, Default)]
pub struct Side {
    /// Measured, finished, quiet runs by match key.
    pub runs: Runs,
    /// Noisy runs left out, by match key.
    pub noisy: BTreeMap<Key, usize>,
}

/// One matched point.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct PointVersus {
    /// The point key (the same in A and B).
    pub point_key: String,
    /// Budget in bytes.
    pub budget_bytes: u64,
    /// Prompt tokens (`None` when the runs did not report them).
    pub prompt_tokens: Option<u64>,
    /// Tokens generated per run.
    pub max_tokens: usize,
    /// Quiet runs of A / B used.
    pub a_runs: usize,
    /// See `a_runs`.
    pub b_runs: usize,
    /// Noisy runs left out of A / B.
    pub a_noisy: usize,
    /// See `a_noisy`.
    pub b_noisy: usize,
    /// A's median s/token (median over runs of the runs' medians).
    pub a_s_per_token: f64,
    /// B's median s/token.
    pub b_s_per_token: f64,
    /// B / A with its bootstrap interval and significance (above 1: B is slower).
    pub ratio: Ratio,
    /// Welch's two-sided p on log run medians (`None`: fewer than 2 runs on a side).
    pub p_welch: Option<f64>,
    /// Significantly slower (interval above 1) by more than the tolerance.
    pub regressed: bool,
}

impl PointVersus {
    /// `1.23× slower [1.10–1.40], significant` and the like, B relative to A.
    pub fn verdict(&self) -> String {
        let r = &self.ratio;
        let (word, f) = r.in_words();
        match (r.lo, r.hi, r.significant) {
            (Some(lo), Some(hi), Some(true)) => {
                format!("{f:.2}× {word} [{lo:.2}–{hi:.2}], significant")
            }
            (Some(lo), Some(hi), Some(false)) => {
                format!("{:.2}× [{lo:.2}–{hi:.2}], not significant", r.ratio)
            }
            _ => format!("{:.2}×, insufficient repeats", r.ratio),
        }
    }
}

/// The whole comparison.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Versus {
    /// Allowed slow-down (0.25 = 25 %) for `regressed`.
    pub tolerance: f64,
    /// Points in both, by budget, then point key.
    pub points: Vec<PointVersus>,
    /// Point keys only A has (with their budget bytes).
    pub only_a: Vec<(String, u64)>,
    /// Point keys only B has.
    pub only_b: Vec<(String, u64)>,
}

impl Versus {
    /// Points significantly slower in B by more than the tolerance.
    pub fn regressions(&self) -> Vec<&PointVersus> {
        self.points.iter().filter(|p| p.regressed).collect()
    }

    /// Matched points whose ratio cannot be judged (too few runs on a side).
    pub fn undecided(&self) -> Vec<&PointVersus> {
        self.points
            .iter()
            .filter(|p| p.ratio.significant.is_none())
            .collect()
    }

    /// The one line `--check` prints: `compare: 1 of 4 points slower by more than 25%
    /// (e.g. KEY +40%)`, or `compare: undecided: …` when nothing could be judged.
    pub fn line(&self) -> String {
        let judged = self.points.len() - self.undecided().len();
        if judged == 0 {
            return format!(
                "compare: undecided: no point could be judged ({} matched, {} only in A, {} only in B)",
                self.points.len(),
                self.only_a.len(),
                self.only_b.len()
            );
        }
        let mut l = format!(
            "compare: {} of {judged} points slower by more than {:.0}%",
            self.regressions().len(),
            self.tolerance * 100.0
        );
        if let Some(w) = self.regressions().first() {
            l += &format!(
                " (e.g. {} {:+.0}%)",
                w.point_key,
                (w.ratio.ratio - 1.0) * 100.0
            );
        }
        let u = self.undecided().len();
        if u > 0 {
            l += &format!("; {u} undecided (insufficient repeats)");
        }
        l
    }
}

/// Compares B against A point by point; `tolerance` as in `--max-regression`.
pub fn versus(a: &Side, b: &Side, tolerance: f64) -> Versus {
    let mut points = vec![];
    let mut only_a = vec![];
    for (i, (key, ra)) in a.runs.iter().enumerate() {
        let Some(rb) = b.runs.get(key) else {
            only_a.push((key.0.clone(), key.1));
            continue;
        };
        let Some(r) = ratio(rb, ra, i as u64) else {
            only_a.push((key.0.clone(), key.1));
            continue;
        };
        let (la, lb) = (log_medians(ra), log_medians(rb));
        points.push(PointVersus {
            point_key: key.0.clone(),
            budget_bytes: key.1,
            prompt_tokens: key.2,
            max_tokens: key.3,
            a_runs: la.len(),
            b_runs: lb.len(),
            a_noisy: a.noisy.get(key).copied().unwrap_or(0),
            b_noisy: b.noisy.get(key).copied().unwrap_or(0),
            a_s_per_token: point_median(ra),
            b_s_per_token: point_median(rb),
            p_welch: welch_p(&la, &lb),
            regressed: r.significant == Some(true)
                && r.lo.is_some_and(|lo| lo > 1.0)
                && r.ratio - 1.0 > tolerance,
            ratio: r,
        });
    }
    points.sort_by(|x, y| (x.budget_bytes, &x.point_key).cmp(&(y.budget_bytes, &y.point_key)));
    let only_b = b
        .runs
        .keys()
        .filter(|k| !a.runs.contains_key(*k))
        .map(|k| (k.0.clone(), k.1))
        .collect();
    Versus {
        tolerance,
        points,
        only_a,
        only_b,
    }
}

/// The logarithms of each run's median s/token (runs without a positive median dropped).
fn log_medians(runs: &[Run]) -> Vec<f64> {
    runs.iter()
        .filter_map(|r| median(r))
        .filter(|m| *m > 0.0)
        .map(f64::ln)
        .collect()
}

fn point_median(runs: &[Run]) -> f64 {
    let m: Vec<f64> = runs.iter().filter_map(|r| median(r)).collect();
    median(&m).unwrap_or(f64::NAN)
}

/// Welch's two-sided p-value for equal means of `x` and `y` (`None` when either has
/// fewer than 2 values). Both samples constant: p = 1 when the means are equal, else 0.
pub fn welch_p(x: &[f64], y: &[f64]) -> Option<f64> {
    if x.len() < 2 || y.len() < 2 {
        return None;
    }
    let mean_var = |v: &[f64]| {
        let n = v.len() as f64;
        let m = v.iter().sum::<f64>() / n;
        let s2 = v.iter().map(|a| (a - m) * (a - m)).sum::<f64>() / (n - 1.0);
        (m, s2 / n)
    };
    let ((mx, vx), (my, vy)) = (mean_var(x), mean_var(y));
    let se2 = vx + vy;
    if se2 <= 0.0 {
        return Some(if mx == my { 1.0 } else { 0.0 });
    }
    let t = (mx - my) / se2.sqrt();
    let df = se2 * se2 / (vx * vx / (x.len() as f64 - 1.0) + vy * vy / (y.len() as f64 - 1.0));
    let dist = StudentsT::new(0.0, 1.0, df).ok()?;
    Some((2.0 * (1.0 - dist.cdf(t.abs()))).clamp(0.0, 1.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn side(points: &[(&str, u64, &[&[f64]])]) -> Side {
        let mut s = Side::default();
        for (k, b, runs) in points {
            s.runs.insert(
                (k.to_string(), *b, Some(5), 8),
                runs.iter().map(|r| r.to_vec()).collect(),
            );
        }
        s
    }

    #[test]
    fn welch_against_the_closed_form_at_two_degrees_of_freedom() {
        // Two values a side with equal sample variances: Welch's df is exactly 2
        // (by hand: se² = s²/2 + s²/2 = s², df = s⁴ / (2 (s²/2)²) = 2), and Student's t
        // with 2 df has the CDF F(t) = 1/2 + t / (2 √(2 + t²)).
        // x = {0, 2}: mean 1, s² = 2; y = {3, 5}: mean 4, s² = 2; se = √2, t = −3/√2.
        let p = welch_p(&[0.0, 2.0], &[3.0, 5.0]).unwrap();
        let t: f64 = 3.0 / 2f64.sqrt();
        let want = 2.0 * (1.0 - (0.5 + t / (2.0 * (2.0 + t * t).sqrt())));
        assert!((p - want).abs() < 1e-9, "{p} vs {want}");
        // Same samples: t = 0, p = 1.
        assert!((welch_p(&[1.0, 2.0], &[1.0, 2.0]).unwrap() - 1.0).abs() < 1e-12);
        // Constant samples.
        assert_eq!(welch_p(&[1.0, 1.0], &[1.0, 1.0]), Some(1.0));
        assert_eq!(welch_p(&[1.0, 1.0], &[2.0, 2.0]), Some(0.0));
        assert_eq!(welch_p(&[1.0], &[2.0, 2.0]), None);
    }

    #[test]
    fn matched_unmatched_and_a_regression() {
        // p0: B's runs are A's × 1.5 (by hand: ratio 1.5, every bootstrap replicate
        // ratio lies in [0.30·1.5/0.32, 0.32·1.5/0.30] = [1.41, 1.6]: significant).
        let a = side(&[
            (
                "p0",
                100,
                &[
                    &[0.30, 0.31, 0.30],
                    &[0.31, 0.32, 0.31],
                    &[0.30, 0.30, 0.31],
                ],
            ),
            ("p1", 200, &[&[0.10, 0.10], &[0.10, 0.10]]),
            ("gone", 300, &[&[0.2, 0.2], &[0.2, 0.2]]),
        ]);
        let b = side(&[
            (
                "p0",
                100,
                &[
                    &[0.45, 0.465, 0.45],
                    &[0.465, 0.48, 0.465],
                    &[0.45, 0.45, 0.465],
                ],
            ),
            ("p1", 200, &[&[0.10, 0.10]]),
            ("new", 400, &[&[0.2, 0.2], &[0.2, 0.2]]),
        ]);
        let v = versus(&a, &b, 0.25);
        assert_eq!(v.points.len(), 2);
        let p0 = &v.points[0];
        assert_eq!(p0.point_key, "p0");
        assert!((p0.ratio.ratio - 1.5).abs() < 1e-12);
        assert_eq!(p0.ratio.significant, Some(true));
        assert!(p0.ratio.lo.unwrap() >= 1.40 && p0.ratio.hi.unwrap() <= 1.61);
        assert!(p0.regressed);
        assert!(p0.p_welch.unwrap() < 0.01);
        // p1: one run in B: undecided, no p.
        let p1 = &v.points[1];
        assert_eq!((p1.ratio.significant, p1.p_welch), (None, None));
        assert!(!p1.regressed);
        assert_eq!(v.only_a, vec![("gone".to_string(), 300)]);
        assert_eq!(v.only_b, vec![("new".to_string(), 400)]);
        assert_eq!(
            v.line(),
            "compare: 1 of 1 points slower by more than 25% (e.g. p0 +50%); 1 undecided (insufficient repeats)"
        );
        // A tolerance above the slow-down: significant but not a regression.
        assert!(versus(&a, &b, 0.6).regressions().is_empty());
        // Faster is never a regression.
        assert!(versus(&b, &a, 0.0).regressions().is_empty());
    }
}
