//! Anomalies: a point slower than a smaller budget of the same mode (same IO mode,
//! prefetch and cache policy, threads, prompt, engine and start), with the cause its
//! own measured figures support:
//!
//! - **cold cache**: the run started from empty caches (`start = cold`) and still
//!   missed the expert cache ([`COLD_HIT_RATE`]) and read from disk per token: a
//!   short run never reaches the steady state its budget allows (compare
//!   `start = "warm"`); when the sweep has the same point started warm, only if that
//!   one hit the expert cache more often;
//! - **noisy runs**: some of its runs were marked `noisy` by the noise sentinel (they
//!   are left out of its figures, which then rest on fewer runs);
//! - otherwise **unexplained**.
//!
//! "Slower" means a larger median s/token whose ratio to the smaller budget's is
//! significant ([`memdial::util::stats::bootstrap`]), or, without enough repeats to decide, a larger
//! median (said so).

use memdial::util::units::fmt_bytes;
use serde::Serialize;

use super::stats::PointStats;

/// Below this expert hit rate a cold-start run is still filling its cache.
pub const COLD_HIT_RATE: f64 = 0.9;

/// One point slower than a smaller budget of its mode.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Anomaly {
    /// The slower point (larger budget).
    pub point_index: usize,
    /// The faster point at a smaller budget.
    pub faster_point: usize,
    /// Its budget as written.
    pub faster_budget_spec: String,
    /// s/token of the slower over the faster point.
    pub ratio: f64,
    /// Whether the difference is significant (`None`: insufficient repeats).
    pub significant: Option<bool>,
    /// The causes its figures support (`unexplained` when none).
    pub causes: Vec<String>,
}

/// The causes `p`'s own figures support for being slower than a smaller budget;
/// `warm_twin` is the same point started warm, when the sweep has it: a cold cache is
/// a cause only if the warm start hit the expert cache more often (at a budget whose
/// cache is small, the steady state misses as much).
pub fn causes(p: &PointStats, warm_twin: Option<&PointStats>) -> Vec<String> {
    let mut v = vec![];
    let warm_hits_more = match (warm_twin.and_then(|w| w.expert_hit_rate), p.expert_hit_rate) {
        (Some(w), Some(c)) => w > c + 0.05,
        _ => true,
    };
    if p.start != "warm" && warm_hits_more {
        if let (Some(h), Some(b)) = (p.expert_hit_rate, p.bytes_read_per_token) {
            if h < COLD_HIT_RATE && b > 0.0 {
                v.push(format!(
                    "cold cache: expert hit rate {:.0} %, {} read per token (from empty caches the run does not reach the steady state of its budget; compare start = \"warm\")",
                    h * 100.0,
                    fmt_bytes(b.round() as u64)
                ));
            }
        }
    }
    if p.noisy > 0 {
        v.push(format!(
            "noisy runs: {} of its runs were marked noisy and left out",
            p.noisy
        ));
    }
    if v.is_empty() {
        v.push("unexplained".into());
    }
    v
}

/// Every point slower than some smaller budget of the same mode, against the
/// fastest such smaller budget, in point order.
pub fn anomalies(
    stats: &[PointStats],
    runs: &crate::sweep::analysis::stats::PointRuns,
) -> Vec<Anomaly> {
    let usable: Vec<&PointStats> = stats
        .iter()
        .filter(|p| !p.below_floor && p.n > 0 && p.over_budget == 0 && p.s_per_token.is_some())
        .collect();
    let same_mode = |a: &PointStats, b: &PointStats| {
        (
            &a.io,
            &a.prefetch,
            &a.cache,
            a.threads,
            a.prompt_index,
            &a.engine,
            &a.start,
            &a.layout,
        ) == (
            &b.io,
            &b.prefetch,
            &b.cache,
            b.threads,
            b.prompt_index,
            &b.engine,
            &b.start,
            &b.layout,
        )
    };
    let mut out = vec![];
    for p in &usable {
        let spt = p.s_per_token.unwrap_or(f64::NAN);
        let faster = usable
            .iter()
            .filter(|q| same_mode(p, q) && q.budget_bytes < p.budget_bytes)
            .filter(|q| q.s_per_token.unwrap_or(f64::NAN) < spt)
            .min_by(|a, b| a.s_per_token.unwrap().total_cmp(&b.s_per_token.unwrap()));
        let Some(q) = faster else { continue };
        let r = runs.ratio(p.point_index, q.point_index);
        let significant = r.as_ref().and_then(|r| r.significant);
        // Only where the intervals say it: a 1.00–1.01× lead of a smaller budget, or
        // one that could not be tested, is no anomaly.
        if significant != Some(true) {
            continue;
        }
        out.push(Anomaly {
            point_index: p.point_index,
            faster_point: q.point_index,
            faster_budget_spec: q.budget_spec.clone(),
            ratio: spt / q.s_per_token.unwrap_or(f64::NAN),
            significant,
            causes: causes(p, warm_twin(stats, p)),
        });
    }
    out
}

/// The point of `stats` equal to `p` but started warm.
fn warm_twin<'a>(stats: &'a [PointStats], p: &PointStats) -> Option<&'a PointStats> {
    stats.iter().find(|w| {
        w.start == "warm"
            && (
                &w.budget_spec,
                &w.io,
                &w.prefetch,
                &w.cache,
                w.threads,
                w.prompt_index,
                &w.engine,
            ) == (
                &p.budget_spec,
                &p.io,
                &p.prefetch,
                &p.cache,
                p.threads,
                p.prompt_index,
                &p.engine,
            )
    })
}

impl Anomaly {
    /// `p7 is 1.70× slower than p4 (50%), significant: cold cache: …`.
    pub fn describe(&self, faster_label: &str) -> String {
        format!(
            "p{} is {:.2}× slower than p{} ({faster_label}){}: {}",
            self.point_index,
            self.ratio,
            self.faster_point,
            match self.significant {
                Some(_) => ", significant",
                None => " (insufficient repeats to test it)",
            },
            self.causes.join("; ")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sweep::analysis::recommend::tests::p;
    use memdial::util::stats::bootstrap::Run;
    use std::collections::BTreeMap;

    fn runs_of(v: &[(usize, f64)]) -> BTreeMap<usize, Vec<Run>> {
        // Three runs of three identical decode times: every bootstrap replicate is
        // that value, so a ratio's interval is the ratio itself.
        v.iter().map(|&(i, x)| (i, vec![vec![x; 3]; 3])).collect()
    }

    #[test]
    fn a_cold_start_slower_at_more_memory_is_explained_by_its_cache() {
        // direct: 0.048 s/token at 50 %, 0.081 at 100 % (hit rate 51 %, 27 MiB/token):
        // 0.081 / 0.048 = 1.6875×, significant (the intervals are points).
        let mut s = vec![
            p(0, "direct", "50%", 500, 0.048),
            p(1, "direct", "100%", 1000, 0.081),
        ];
        s[1].expert_hit_rate = Some(0.51);
        s[1].bytes_read_per_token = Some(27.0 * 1048576.0);
        let a = anomalies(&s, &runs_of(&[(0, 0.048), (1, 0.081)]).into());
        assert_eq!(a.len(), 1);
        assert_eq!((a[0].point_index, a[0].faster_point), (1, 0));
        assert!((a[0].ratio - 1.6875).abs() < 1e-12);
        assert_eq!(a[0].significant, Some(true));
        assert_eq!(a[0].causes.len(), 1);
        assert!(
            a[0].causes[0]
                .starts_with("cold cache: expert hit rate 51 %, 27.00 MiB read per token"),
            "{:?}",
            a[0].causes
        );
        assert_eq!(
            a[0].describe("50%").split(':').next().unwrap(),
            "p1 is 1.69× slower than p0 (50%), significant"
        );
    }

    #[test]
    fn a_cold_start_is_no_cause_where_the_warm_start_misses_as_much() {
        // Cold 0.80 at b vs 0.65 at a: slower, hit rate 11 %. The warm start at b hit
        // 11 % too (a small cache misses in the steady state as well): unexplained.
        // With the warm start at 40 % (> 11 % + 5 points) the cold cache is the cause.
        let mut s = vec![
            p(0, "buffered", "a", 100, 0.65),
            p(1, "buffered", "b", 200, 0.80),
            p(2, "buffered", "b", 200, 0.75),
        ];
        s[2].start = "warm".into();
        for x in &mut s[1..] {
            x.expert_hit_rate = Some(0.11);
            x.bytes_read_per_token = Some(1e8);
        }
        let runs = runs_of(&[(0, 0.65), (1, 0.80), (2, 0.75)]);
        let a = anomalies(&s, &runs.clone().into());
        assert_eq!(a.len(), 1, "{a:?}");
        assert_eq!(a[0].causes, ["unexplained"]);
        s[2].expert_hit_rate = Some(0.40);
        let a = anomalies(&s, &runs.clone().into());
        assert!(
            a[0].causes[0].starts_with("cold cache: expert hit rate 11 %"),
            "{a:?}"
        );
    }

    #[test]
    fn noisy_runs_and_unexplained() {
        // Warm starts: a low hit rate is not a cold cache. p1 had 2 noisy runs.
        let mut s = vec![
            p(0, "mmap", "a", 100, 0.10),
            p(1, "mmap", "b", 200, 0.20),
            p(2, "mmap", "c", 400, 0.30),
        ];
        for x in &mut s {
            x.start = "warm".into();
            x.expert_hit_rate = Some(0.5);
            x.bytes_read_per_token = Some(1e6);
        }
        s[1].noisy = 2;
        let a = anomalies(&s, &runs_of(&[(0, 0.10), (1, 0.20), (2, 0.30)]).into());
        // Both are slower than the fastest smaller budget, p0.
        assert_eq!(a.iter().map(|x| x.faster_point).collect::<Vec<_>>(), [0, 0]);
        assert_eq!(
            a[0].causes,
            ["noisy runs: 2 of its runs were marked noisy and left out"]
        );
        assert_eq!(a[1].causes, ["unexplained"]);
    }

    #[test]
    fn differences_within_noise_and_other_modes_are_not_anomalies() {
        // p1 is slower than p0 by median, but the runs overlap: 0.10 and 0.11 in
        // each run's decode times alike, so the ratio interval contains 1. p2 is
        // another IO mode (buffered), never compared with direct.
        let s = vec![
            p(0, "direct", "a", 100, 0.10),
            p(1, "direct", "b", 200, 0.105),
            p(2, "buffered", "c", 400, 0.5),
        ];
        let mixed = vec![vec![0.10, 0.11, 0.10, 0.11]; 3];
        let runs: BTreeMap<usize, Vec<Run>> =
            [(0, mixed.clone()), (1, mixed), (2, vec![vec![0.5; 3]; 3])].into();
        assert!(anomalies(&s, &runs.clone().into()).is_empty());
        // Without runs to test it, a larger median is no anomaly either.
        assert!(anomalies(&s[..2], &Default::default()).is_empty());
    }
}
