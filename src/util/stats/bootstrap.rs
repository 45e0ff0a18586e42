//! Noise told apart from signal: one method for a point's interval and for the
//! significance of a difference between two points (or a point and its baseline).
//!
//! **Method: a two-level (hierarchical) percentile bootstrap** (Davison & Hinkley,
//! *Bootstrap Methods and their Application*, 1997, §3.8 "hierarchical data").
//! A point's statistic is the median over its runs of each run's median decode time
//! per token (s/token). One bootstrap replicate draws the point's `n` runs with
//! replacement and, inside every drawn run, its `m` per-token decode times with
//! replacement, then takes the median of the resampled runs' medians. Run-level
//! resampling carries the run-to-run noise (cold cache, disk, other load), token-
//! level resampling the noise within a run; with 3 runs an interval over the run
//! medians alone would be just their min–max. [`RESAMPLES`] replicates with a fixed
//! seed make the report reproducible.
//!
//! - The 95 % interval of a point is the 2.5th–97.5th percentile of its replicates.
//! - The ratio of two points A/B is computed per replicate pair (independent draws
//!   from each), and its 95 % interval likewise; the difference is **significant**
//!   when that interval excludes 1. When the runs of A and B come in rounds (an
//!   interleaved sweep runs every point once per round), [`ratio_paired`] resamples
//!   the rounds instead, so drift of the machine between rounds cancels.
//! - A point is **high-variance** when its interval is wider than ±[`HIGH_VARIANCE`]
//!   of its median (hint: more repeats, a quieter machine).
//! - With fewer than [`MIN_RUNS`] finished runs, or fewer than [`MIN_TOKENS`] decode
//!   times in a run, the method cannot decide: **insufficient repeats**.

use serde::Serialize;

use super::{median, percentile};
use crate::util::rng::SplitMix64;

/// Bootstrap replicates per estimate.
pub const RESAMPLES: usize = 2000;
/// Fewest finished runs for a decision.
pub const MIN_RUNS: usize = 2;
/// Fewest decode times per run for a decision.
pub const MIN_TOKENS: usize = 2;
/// Relative half-width of the 95 % interval above which a point is high-variance.
pub const HIGH_VARIANCE: f64 = 0.10;
/// Seed of the generator (fixed: the same data always gives the same report).
pub const SEED: u64 = 0x6d65_6d64_6961_6c21;

/// One run's decode times per token, seconds (the engine's `decode_s_per_token`);
/// a run that reported only its median is one value.
pub type Run = Vec<f64>;

/// Interval of one point's s/token.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Interval {
    /// Median over runs of the per-run median, seconds per token.
    pub median: f64,
    /// 2.5th percentile of the replicates (`None` when insufficient).
    pub lo: Option<f64>,
    /// 97.5th percentile of the replicates (`None` when insufficient).
    pub hi: Option<f64>,
    /// Interval wider than ±10 % of the median.
    pub high_variance: bool,
    /// Too few runs or tokens to decide.
    pub insufficient: bool,
}

/// Ratio A/B of two points' s/token with its interval.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Ratio {
    /// median(A) / median(B).
    pub ratio: f64,
    /// 2.5th percentile of the replicate ratios.
    pub lo: Option<f64>,
    /// 97.5th percentile of the replicate ratios.
    pub hi: Option<f64>,
    /// The interval excludes 1 (`None`: insufficient repeats).
    pub significant: Option<bool>,
}

impl Ratio {
    /// The ratio as a person reads it: `("slower", r)` at or above 1, else
    /// `("faster", 1 / r)`.
    pub fn in_words(&self) -> (&'static str, f64) {
        if self.ratio >= 1.0 {
            ("slower", self.ratio)
        } else {
            ("faster", 1.0 / self.ratio)
        }
    }

    /// `1.23× [1.10–1.40], significant` / `… not significant` / `insufficient repeats`.
    pub fn describe(&self) -> String {
        match (self.lo, self.hi, self.significant) {
            (Some(l), Some(h), Some(s)) => format!(
                "{:.2}× [{l:.2}–{h:.2}], {}",
                self.ratio,
                if s { "significant" } else { "not significant" }
            ),
            _ => format!("{:.2}×, insufficient repeats", self.ratio),
        }
    }
}

fn usable(runs: &[Run]) -> Vec<&Run> {
    runs.iter().filter(|r| !r.is_empty()).collect()
}

fn decidable(runs: &[&Run]) -> bool {
    runs.len() >= MIN_RUNS && runs.iter().all(|r| r.len() >= MIN_TOKENS)
}

fn point_median(runs: &[&Run]) -> Option<f64> {
    let meds: Vec<f64> = runs.iter().filter_map(|r| median(r)).collect();
    median(&meds)
}

fn pick(rng: &mut SplitMix64, n: usize) -> usize {
    (((rng.next_u64() >> 11) as u128 * n as u128) >> 53) as usize
}

/// One replicate: runs and, inside each, tokens drawn with replacement.
fn replicate(runs: &[&Run], rng: &mut SplitMix64, buf: &mut Vec<f64>) -> f64 {
    let mut meds = Vec::with_capacity(runs.len());
    for _ in 0..runs.len() {
        let r = runs[pick(rng, runs.len())];
        buf.clear();
        buf.extend((0..r.len()).map(|_| r[pick(rng, r.len())]));
        meds.push(median(buf).unwrap_or(f64::NAN));
    }
    median(&meds).unwrap_or(f64::NAN)
}

fn replicates(runs: &[&Run], seed: u64) -> Vec<f64> {
    let mut rng = SplitMix64::new(seed);
    let mut buf = vec![];
    (0..RESAMPLES)
        .map(|_| replicate(runs, &mut rng, &mut buf))
        .collect()
}

/// The interval of a point from its runs (`None` when no run has a decode time).
/// `seed` varies the stream per point (e.g. the point index).
pub fn interval(runs: &[Run], seed: u64) -> Option<Interval> {
    let rs = usable(runs);
    let median = point_median(&rs)?;
    if !decidable(&rs) {
        return Some(Interval {
            median,
            lo: None,
            hi: None,
            high_variance: false,
            insufficient: true,
        });
    }
    let reps = replicates(&rs, SEED ^ seed);
    let lo = percentile(&reps, 0.025).unwrap_or(f64::NAN);
    let hi = percentile(&reps, 0.975).unwrap_or(f64::NAN);
    Some(Interval {
        median,
        lo: Some(lo),
        hi: Some(hi),
        high_variance: (hi - lo) / 2.0 > HIGH_VARIANCE * median,
        insufficient: false,
    })
}

/// The ratio A/B of two points' s/token (`None` when either has no decode time).
pub fn ratio(a: &[Run], b: &[Run], seed: u64) -> Option<Ratio> {
    let (ra, rb) = (usable(a), usable(b));
    let (ma, mb) = (point_median(&ra)?, point_median(&rb)?);
    if mb <= 0.0 {
        return None;
    }
    if !decidable(&ra) || !decidable(&rb) {
        return Some(Ratio {
            ratio: ma / mb,
            lo: None,
            hi: None,
            significant: None,
        });
    }
    let xa = replicates(&ra, SEED ^ seed);
    let xb = replicates(&rb, SEED ^ seed.rotate_left(32) ^ 0x5bd1_e995);
    let q: Vec<f64> = xa.iter().zip(&xb).map(|(x, y)| x / y).collect();
    let lo = percentile(&q, 0.025).unwrap_or(f64::NAN);
    let hi = percentile(&q, 0.975).unwrap_or(f64::NAN);
    Some(Ratio {
        ratio: ma / mb,
        lo: Some(lo),
        hi: Some(hi),
        significant: Some(lo > 1.0 || hi < 1.0),
    })
}

/// The ratio A/B of two points' s/token from runs **paired by round**: `pairs[i]` holds
/// the run of A and the run of B measured in the same round of an interleaved sweep, so
/// a slow stretch of the machine that hits both cancels in their ratio. The statistic is
/// the median over rounds of `median(a_r) / median(b_r)`; one replicate draws the rounds
/// with replacement and, inside each drawn round, both runs' tokens, and takes the
/// median of the per-round ratios (the same two levels as [`ratio`]). Pairs with an
/// empty side are dropped; `None` when none is left or a median is not positive; fewer
/// than [`MIN_RUNS`] pairs (or runs of fewer than [`MIN_TOKENS`] tokens): insufficient.
pub fn ratio_paired(pairs: &[(&Run, &Run)], seed: u64) -> Option<Ratio> {
    let ps: Vec<(&Run, &Run)> = pairs
        .iter()
        .copied()
        .filter(|(a, b)| !a.is_empty() && !b.is_empty())
        .collect();
    let per_round: Vec<f64> = ps
        .iter()
        .map(|(a, b)| Some(median(a)? / median(b)?))
        .collect::<Option<Vec<f64>>>()?;
    if per_round.iter().any(|r| !r.is_finite() || *r <= 0.0) {
        return None;
    }
    let r = median(&per_round)?;
    let enough = ps.len() >= MIN_RUNS
        && ps
            .iter()
            .all(|(a, b)| a.len() >= MIN_TOKENS && b.len() >= MIN_TOKENS);
    if !enough {
        return Some(Ratio {
            ratio: r,
            lo: None,
            hi: None,
            significant: None,
        });
    }
    let mut rng = SplitMix64::new(SEED ^ seed ^ 0x7061_6972);
    let (mut ba, mut bb, mut rounds) = (vec![], vec![], Vec::with_capacity(ps.len()));
    let draw = |r: &Run, buf: &mut Vec<f64>, rng: &mut SplitMix64| {
        buf.clear();
        buf.extend((0..r.len()).map(|_| r[pick(rng, r.len())]));
        median(buf).unwrap_or(f64::NAN)
    };
    let q: Vec<f64> = (0..RESAMPLES)
        .map(|_| {
            rounds.clear();
            for _ in 0..ps.len() {
                let (a, b) = ps[pick(&mut rng, ps.len())];
                let ma = draw(a, &mut ba, &mut rng);
                let mb = draw(b, &mut bb, &mut rng);
                rounds.push(ma / mb);
            }
            median(&rounds).unwrap_or(f64::NAN)
        })
        .collect();
    let lo = percentile(&q, 0.025).unwrap_or(f64::NAN);
    let hi = percentile(&q, 0.975).unwrap_or(f64::NAN);
    Some(Ratio {
        ratio: r,
        lo: Some(lo),
        hi: Some(hi),
        significant: Some(lo > 1.0 || hi < 1.0),
    })
}

/// The ratio A/B of the medians of two points' per-run figures (one value per run,
/// e.g. bytes read per token), its interval by resampling the runs only: the method
/// of [`ratio`] with each run one repeated value, so the token level draws nothing.
/// `None` when either side has no value.
pub fn ratio_of_run_values(a: &[f64], b: &[f64], seed: u64) -> Option<Ratio> {
    let runs = |v: &[f64]| -> Vec<Run> { v.iter().map(|x| vec![*x; MIN_TOKENS]).collect() };
    ratio(&runs(a), &runs(b), seed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constant_runs_have_a_point_interval() {
        let runs = vec![vec![0.2; 5]; 3];
        let i = interval(&runs, 1).unwrap();
        assert_eq!((i.median, i.lo, i.hi), (0.2, Some(0.2), Some(0.2)));
        assert!(!i.high_variance && !i.insufficient);
    }

    #[test]
    fn one_run_is_insufficient() {
        let i = interval(&[vec![0.1, 0.2, 0.3]], 0).unwrap();
        assert!(i.insufficient && i.lo.is_none());
        assert_eq!(i.median, 0.2);
        let r = ratio(&[vec![0.1, 0.2, 0.3]], &[vec![0.1; 3], vec![0.1; 3]], 0).unwrap();
        assert_eq!(r.significant, None);
        assert!(r.describe().contains("insufficient repeats"));
        assert!(interval(&[vec![]], 0).is_none());
    }

    #[test]
    fn pairing_by_round_cancels_drift_between_rounds() {
        // Rounds at 1, 2 and 3 s/token (the machine slowing down), B 10 % slower than A
        // in every round: each round's ratio is 1/1.1, so every paired replicate is too.
        let a: Vec<Run> = [1.0, 2.0, 3.0].iter().map(|x| vec![*x; 4]).collect();
        let b: Vec<Run> = [1.1, 2.2, 3.3].iter().map(|x| vec![*x; 4]).collect();
        let pairs: Vec<(&Run, &Run)> = a.iter().zip(&b).collect();
        let p = ratio_paired(&pairs, 3).unwrap();
        let r = 1.0 / 1.1;
        assert!((p.ratio - r).abs() < 1e-12, "{p:?}");
        assert!((p.lo.unwrap() - r).abs() < 1e-12 && (p.hi.unwrap() - r).abs() < 1e-12);
        assert_eq!(p.significant, Some(true));
        // Unpaired, the same runs cannot tell: replicates mix slow and fast rounds
        // (e.g. 1.0 / 3.3 and 3.0 / 1.1), so the interval spans 1.
        assert_eq!(ratio(&a, &b, 3).unwrap().significant, Some(false));
        // One pair, or a pair with an empty side dropped down to one: insufficient.
        let one = ratio_paired(&pairs[..1], 3).unwrap();
        assert_eq!((one.significant, one.lo), (None, None));
        let empty: Run = vec![];
        let dropped = ratio_paired(&[pairs[0], (&a[1], &empty)], 3).unwrap();
        assert_eq!(dropped.significant, None);
        assert!(ratio_paired(&[(&empty, &empty)], 3).is_none());
    }

    #[test]
    fn per_run_values_resample_runs_only() {
        // Medians 300 and 400 (by hand): ratio 0.75; every replicate ratio is one of
        // the run values' medians over another's, all below 1 here.
        let r = ratio_of_run_values(&[290.0, 300.0, 310.0], &[390.0, 400.0, 410.0], 1).unwrap();
        assert_eq!(r.ratio, 0.75);
        assert_eq!(r.significant, Some(true));
        assert!(
            r.lo.unwrap() >= 290.0 / 410.0 && r.hi.unwrap() <= 310.0 / 390.0,
            "{r:?}"
        );
        let one = ratio_of_run_values(&[1.0], &[2.0, 2.0], 1).unwrap();
        assert_eq!((one.ratio, one.significant), (0.5, None));
        assert!(ratio_of_run_values(&[], &[1.0], 1).is_none());
    }

    #[test]
    fn clear_and_unclear_differences() {
        // Runs of B are twice A's with small jitter: A/B ≈ 0.5, significant.
        let a: Vec<Run> = (0..3)
            .map(|k| {
                (0..8)
                    .map(|t| 0.100 + 0.001 * ((t + k) % 3) as f64)
                    .collect()
            })
            .collect();
        let b: Vec<Run> = a
            .iter()
            .map(|r| r.iter().map(|x| x * 2.0).collect())
            .collect();
        let r = ratio(&a, &b, 3).unwrap();
        assert_eq!(r.ratio, 0.5);
        assert_eq!(r.significant, Some(true));
        assert!(r.hi.unwrap() < 1.0);
        // Same distribution, shuffled runs: ratio ≈ 1, not significant.
        let c: Vec<Run> = a.iter().rev().cloned().collect();
        let r = ratio(&a, &c, 3).unwrap();
        assert_eq!(r.significant, Some(false));
        assert!(r.lo.unwrap() <= 1.0 && r.hi.unwrap() >= 1.0);
        // One run much slower than the others: wide interval, high variance.
        let noisy = vec![vec![0.1; 4], vec![0.1; 4], vec![0.3; 4]];
        let i = interval(&noisy, 0).unwrap();
        assert!(i.high_variance, "{i:?}");
        assert_eq!((i.lo, i.hi), (Some(0.1), Some(0.3)));
    }
}
