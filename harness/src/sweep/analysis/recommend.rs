//! The answer to "which budget, which IO mode?": per IO mode the Pareto frontier of
//! budget vs s/token and its knee, and per budget the winning mode, by how much and
//! whether significantly ([`memdial::util::stats::bootstrap`]). Points with `over_budget` runs are
//! left out (their speed was bought with memory the budget does not count), and so
//! are points whose every run was `noisy`. With a `start` axis the answer is made from
//! the `warm` points (the steady state) and the cold start shown beside it
//! ([`recommend_steady`]), and with a `depth` axis from the deepest points; how sure the answer is, is [`super::bottom_line`]'s.
//!
//! Definitions:
//! - a mode's point at a budget is its fastest prefetch policy there (lowest median
//!   s/token);
//! - **Pareto frontier** of a mode: its points, by increasing budget, that are faster
//!   than every point of that mode at a smaller budget;
//! - **knee**: the smallest budget whose s/token is within 10 % of the mode's best.

use serde::Serialize;

pub use super::bottom_line::ColdBeside;
use super::bottom_line::{decide, BottomLine, Candidates, NoQuiet};
pub use super::pick::{ci, Pick, KNEE_WITHIN};
use super::stats::PointStats;
use memdial::util::stats::bootstrap::{ratio, Ratio};

/// One IO mode's frontier and knee.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Mode {
    /// IO mode.
    pub io: String,
    /// Pareto frontier, by increasing budget.
    pub frontier: Vec<Pick>,
    /// Smallest budget within 10 % of the best.
    pub knee: Option<Pick>,
    /// The fastest point.
    pub best: Option<Pick>,
}

/// The winner at one budget.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Winner {
    /// Budget as written.
    pub budget_spec: String,
    /// Winning IO mode and its point.
    pub winner: Pick,
    /// IO mode of the winner.
    pub io: String,
    /// The next-fastest mode at this budget and its point.
    pub runner_up: Option<(String, Pick)>,
    /// s/token of the runner-up over the winner's, with interval and significance.
    pub margin: Option<Ratio>,
}

/// The recommendation.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Recommendation {
    /// Per IO mode.
    pub modes: Vec<Mode>,
    /// Per budget, in spec order.
    pub by_budget: Vec<Winner>,
    /// Points left out because runs went over budget.
    pub excluded_over_budget: Vec<usize>,
    /// The fastest point over every IO mode, with its IO mode.
    pub overall_best: Option<(String, Pick)>,
    /// The smallest budget at which some IO mode comes within [`KNEE_WITHIN`] of
    /// `overall_best` (the fastest mode there), with its IO mode: the answer to
    /// "which budget, which mode?".
    pub overall_knee: Option<(String, Pick)>,
    /// How sure `overall_knee` is ([`super::bottom_line`]).
    pub bottom_line: Option<BottomLine>,
    /// The runs recommended from: `warm` when the sweep has warm-start points (the
    /// steady state), else `cold`.
    pub start: String,
    /// The cold-start figures of the recommended point, when the sweep has warm and
    /// cold points.
    pub cold_beside: Option<ColdBeside>,
    /// Measured runs of every point considered (the `start` recommended from) that
    /// were marked `noisy`.
    pub noisy_runs: usize,
    /// Measured finished runs of every point considered (the `start` recommended
    /// from; quiet and noisy).
    pub finished_runs: usize,
    /// Some point has finished runs but none has a decode time: every run generated
    /// one token (s/token needs two; the first is the time to first token).
    pub first_token_only: bool,
    /// The point with the lowest median time to first token (quiet points first),
    /// with its IO mode: what a sweep without decode times can still say.
    pub fastest_ttft: Option<(String, TtftPick)>,
    /// When the wall times did not decide and the uncontended times were tried and
    /// did not decide either: why, in words (`None`: not tried, or they decided).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uncontended_undecided: Option<String>,
}

/// A point's time to first token.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct TtftPick {
    /// Point index.
    pub point_index: usize,
    /// Budget as written.
    pub budget_spec: String,
    /// Budget, bytes.
    pub budget_bytes: u64,
    /// Prefetch policy.
    pub prefetch: String,
    /// Median time to first token, seconds.
    pub ttft_s: f64,
    /// Only noisy runs measured it.
    pub noisy: bool,
}

/// The fastest first token over the points run within their budget (quiet ones
/// first).
fn fastest_ttft(stats: &[PointStats]) -> Option<(String, TtftPick)> {
    stats
        .iter()
        .filter(|p| !p.below_floor && p.n > 0 && p.over_budget == 0)
        .filter_map(|p| p.ttft_s.map(|t| (p, t)))
        .min_by(|(a, x), (b, y)| {
            (a.noisy_only, x)
                .partial_cmp(&(b.noisy_only, y))
                .unwrap_or(std::cmp::Ordering::Equal)
        })
        .map(|(p, t)| {
            (
                p.io.clone(),
                TtftPick {
                    point_index: p.point_index,
                    budget_spec: p.budget_spec.clone(),
                    budget_bytes: p.budget_bytes,
                    prefetch: p.prefetch.clone(),
                    ttft_s: t,
                    noisy: p.noisy_only,
                },
            )
        })
}

/// The sweep has a `layout` axis: some point reads a layout other than the default.
fn names_layout(stats: &[PointStats]) -> bool {
    stats.iter().any(|p| p.layout != "safetensors")
}

/// `p` as the recommendation names it; with its layout when `named`.
fn pick(p: &PointStats, named: bool) -> Option<Pick> {
    Some(Pick {
        layout: named.then(|| p.layout.clone()),
        point_index: p.point_index,
        budget_spec: p.budget_spec.clone(),
        budget_bytes: p.budget_bytes,
        prefetch: p.prefetch.clone(),
        s_per_token: p.s_per_token?,
        lo: p.s_per_token_lo,
        hi: p.s_per_token_hi,
        n: p.n,
    })
}

/// A point the recommendation may use: run, quiet, within its budget, with a median.
fn usable(p: &PointStats) -> bool {
    !p.below_floor && !p.noisy_only && p.n > 0 && p.over_budget == 0 && p.s_per_token.is_some()
}

/// Computes the recommendation from the per-point statistics and their runs.
pub fn recommend(
    stats: &[PointStats],
    runs: &crate::sweep::analysis::stats::PointRuns,
) -> Recommendation {
    let excluded_over_budget: Vec<usize> = stats
        .iter()
        .filter(|p| p.over_budget > 0)
        .map(|p| p.point_index)
        .collect();
    let ok: Vec<&PointStats> = stats.iter().filter(|p| usable(p)).collect();
    let named = names_layout(stats);
    let mut ios: Vec<String> = vec![];
    let mut budgets: Vec<String> = vec![];
    for p in stats {
        if !ios.contains(&p.io) {
            ios.push(p.io.clone());
        }
        if !budgets.contains(&p.budget_spec) {
            budgets.push(p.budget_spec.clone());
        }
    }
    // Fastest point of `io` at `budget`.
    let best_at = |io: &str, budget: &str| -> Option<Pick> {
        ok.iter()
            .filter(|p| p.io == io && p.budget_spec == budget)
            .min_by(|a, b| a.s_per_token.unwrap().total_cmp(&b.s_per_token.unwrap()))
            .and_then(|p| pick(p, named))
    };
    let mut modes = vec![];
    let mut cands: Vec<(String, Pick)> = vec![];
    for io in &ios {
        let mut pts: Vec<Pick> = budgets.iter().filter_map(|b| best_at(io, b)).collect();
        pts.sort_by_key(|p| p.budget_bytes);
        cands.extend(pts.iter().map(|p| (io.clone(), p.clone())));
        modes.push(mode_of(io, &pts));
    }
    let mut by_budget = vec![];
    for b in &budgets {
        let mut cands: Vec<(String, Pick)> = ios
            .iter()
            .filter_map(|io| best_at(io, b).map(|p| (io.clone(), p)))
            .collect();
        cands.sort_by(|x, y| x.1.s_per_token.total_cmp(&y.1.s_per_token));
        let mut it = cands.into_iter();
        let Some((io, winner)) = it.next() else {
            continue;
        };
        let runner_up = it.next();
        let margin = runner_up.as_ref().and_then(|(_, r)| {
            let (ra, rb) = (runs.get(&r.point_index)?, runs.get(&winner.point_index)?);
            ratio(
                ra,
                rb,
                ((r.point_index as u64) << 32) | winner.point_index as u64,
            )
        });
        by_budget.push(Winner {
            budget_spec: b.clone(),
            winner,
            io,
            runner_up,
            margin,
        });
    }
    let overall_best = modes
        .iter()
        .filter_map(|m| m.best.clone().map(|b| (m.io.clone(), b)))
        .min_by(|a, b| a.1.s_per_token.total_cmp(&b.1.s_per_token));
    let overall_knee = overall_best
        .as_ref()
        .and_then(|(_, best)| knee_of(&by_budget, best));
    let noisy_runs = stats.iter().map(|p| p.noisy).sum();
    let at_knee: Vec<(String, Pick)> = overall_knee
        .as_ref()
        .map(|(_, k)| at_budget(stats, &ok, &ios, &k.budget_spec))
        .unwrap_or_default();
    let no_quiet = no_quiet(stats);
    let bottom_line = overall_knee
        .as_ref()
        .zip(overall_best.as_ref())
        .map(|(k, b)| {
            let c = Candidates {
                by_mode: &cands,
                at_knee: &at_knee,
                no_quiet: &no_quiet,
            };
            decide(k, b, c, runs, noisy_runs)
        });
    Recommendation {
        modes,
        by_budget,
        excluded_over_budget,
        overall_best,
        overall_knee,
        bottom_line,
        start: stats
            .first()
            .map(|p| p.start.clone())
            .unwrap_or_else(|| "cold".into()),
        cold_beside: None,
        noisy_runs,
        finished_runs: stats
            .iter()
            .map(|p| if p.noisy_only { p.n } else { p.n + p.noisy })
            .sum(),
        first_token_only: stats.iter().any(|p| p.n > 0)
            && stats.iter().all(|p| p.n == 0 || p.s_per_token.is_none()),
        fastest_ttft: fastest_ttft(stats),
        uncontended_undecided: None,
    }
}

/// One IO mode's frontier, knee and best from its points `pts` (the fastest at each
/// budget, by increasing budget).
fn mode_of(io: &str, pts: &[Pick]) -> Mode {
    let best = pts
        .iter()
        .min_by(|a, b| a.s_per_token.total_cmp(&b.s_per_token))
        .cloned();
    let mut frontier: Vec<Pick> = vec![];
    for p in pts {
        if frontier
            .last()
            .is_none_or(|l| p.s_per_token < l.s_per_token)
        {
            frontier.push(p.clone());
        }
    }
    let knee = best.as_ref().and_then(|b| {
        pts.iter()
            .find(|p| p.s_per_token <= b.s_per_token * (1.0 + KNEE_WITHIN))
            .cloned()
    });
    Mode {
        io: io.to_string(),
        frontier,
        knee,
        best,
    }
}

/// The fastest usable point (of `ok`) of each IO mode and prefetch policy at `budget`.
fn at_budget(
    stats: &[PointStats],
    ok: &[&PointStats],
    ios: &[String],
    budget: &str,
) -> Vec<(String, Pick)> {
    let mut prefetches: Vec<&str> = vec![];
    for p in stats {
        if !prefetches.contains(&p.prefetch.as_str()) {
            prefetches.push(&p.prefetch);
        }
    }
    ios.iter()
        .flat_map(|io| prefetches.iter().map(move |pf| (io, *pf)))
        .filter_map(|(io, pf)| {
            ok.iter()
                .filter(|p| &p.io == io && p.prefetch == pf && p.budget_spec == budget)
                .min_by(|a, b| a.s_per_token.unwrap().total_cmp(&b.s_per_token.unwrap()))
                .and_then(|p| pick(p, names_layout(stats)))
                .map(|p| (io.clone(), p))
        })
        .collect()
}

/// The points run within their budget whose every measured run was noisy.
fn no_quiet(stats: &[PointStats]) -> Vec<NoQuiet> {
    stats
        .iter()
        .filter(|p| p.noisy_only && !p.below_floor && p.over_budget == 0)
        .map(|p| NoQuiet {
            io: p.io.clone(),
            budget_spec: p.budget_spec.clone(),
            point_index: p.point_index,
            noisy: p.noisy,
        })
        .collect()
}

/// The smallest budget whose winner is within [`KNEE_WITHIN`] of `best`, with its mode.
fn knee_of(by_budget: &[Winner], best: &Pick) -> Option<(String, Pick)> {
    let limit = best.s_per_token * (1.0 + KNEE_WITHIN);
    by_budget
        .iter()
        .filter(|w| w.winner.s_per_token <= limit)
        .min_by_key(|w| w.winner.budget_bytes)
        .map(|w| (w.io.clone(), w.winner.clone()))
}

/// [`recommend`] over the sweep's steady state: its `warm` points when it has any
/// (with the recommended point's cold start beside it), else every point; with
/// several values of the `depth` axis, of the deepest only (every depth runs at the
/// same budgets, and the deepest context is the one a budget must carry).
pub fn recommend_steady(
    stats: &[PointStats],
    runs: &crate::sweep::analysis::stats::PointRuns,
) -> Recommendation {
    let deepest = stats.iter().map(|p| p.depth).max().unwrap_or(0);
    let at_depth: Vec<PointStats>;
    let stats = if stats.iter().any(|p| p.depth != deepest) {
        at_depth = stats
            .iter()
            .filter(|p| p.depth == deepest)
            .cloned()
            .collect();
        &at_depth[..]
    } else {
        stats
    };
    if !stats.iter().any(|p| p.start == "warm") {
        return recommend(stats, runs);
    }
    let (warm, cold): (Vec<PointStats>, Vec<PointStats>) =
        stats.iter().cloned().partition(|p| p.start == "warm");
    // `noisy_runs` and `finished_runs` both count the warm runs recommended from;
    // verdict.json's top-level `noisy_runs` / `measured_runs` count every run.
    let mut r = recommend(&warm, runs);
    r.cold_beside = r.overall_knee.as_ref().and_then(|(_, k)| {
        let w = warm.iter().find(|p| p.point_index == k.point_index)?;
        let c = cold.iter().find(|c| {
            (
                &c.budget_spec,
                &c.io,
                &c.prefetch,
                &c.cache,
                c.threads,
                c.prompt_index,
                &c.engine,
                &c.layout,
            ) == (
                &w.budget_spec,
                &w.io,
                &w.prefetch,
                &w.cache,
                w.threads,
                w.prompt_index,
                &w.engine,
                &w.layout,
            )
        })?;
        Some(ColdBeside {
            point_index: c.point_index,
            ttft_s: c.ttft_s,
            warm_ttft_s: w.ttft_s,
            pick: pick(c, names_layout(stats)),
        })
    });
    r
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use memdial::util::stats::bootstrap::Run;
    use std::collections::BTreeMap;

    pub(crate) fn p(i: usize, io: &str, budget: &str, bytes: u64, spt: f64) -> PointStats {
        PointStats {
            point_index: i,
            point_key: format!("k{i}"),
            budget_spec: budget.into(),
            budget_bytes: bytes,
            io: io.into(),
            prefetch: "none".into(),
            cache: "lru".into(),
            threads: 1,
            prompt_index: 0,
            floor_bytes: 0,
            n: 3,
            failed: 0,
            cold_verified: true,
            s_per_token: Some(spt),
            s_per_token_min: None,
            s_per_token_max: None,
            tokens_per_s: None,
            ttft_s: None,
            bytes_read_per_token: None,
            io_wait_fraction: None,
            trunk_hit_rate: None,
            expert_hit_rate: None,
            peak_rss_bytes: None,
            peak_rss_anon_bytes: None,
            peak_accounted_bytes: None,
            below_floor: false,
            unenforced: 0,
            over_budget: 0,
            s_per_token_lo: None,
            s_per_token_hi: None,
            high_variance: false,
            insufficient_repeats: false,
            engine: String::new(),
            not_applicable: None,
            start: "cold".into(),
            noisy: 0,
            noisy_only: false,
            layout: "safetensors".into(),
            depth: 0,
        }
    }

    #[test]
    fn frontier_knee_and_winners_by_hand() {
        // direct: 1.0 @100, 0.5 @200, 0.46 @400, 0.45 @800 → best 0.45, knee = 200
        // (0.5 ≤ 0.495? no → 400: 0.46 ≤ 0.495 yes). mmap: 2.0, 0.6, 0.7 (not on
        // the frontier), 0.40; its 800 point went over budget and is left out.
        let mut s = vec![
            p(0, "direct", "a", 100, 1.0),
            p(1, "mmap", "a", 100, 2.0),
            p(2, "direct", "b", 200, 0.5),
            p(3, "mmap", "b", 200, 0.6),
            p(4, "direct", "c", 400, 0.46),
            p(5, "mmap", "c", 400, 0.7),
            p(6, "direct", "d", 800, 0.45),
            p(7, "mmap", "d", 800, 0.40),
        ];
        s[7].over_budget = 1;
        // Every run decodes at its point's median: the intervals are points.
        let runs = constant_runs(&mut s);
        let r = recommend(&s, &runs.clone().into());
        let d = &r.modes[0];
        assert_eq!(d.io, "direct");
        let fr: Vec<usize> = d.frontier.iter().map(|x| x.point_index).collect();
        assert_eq!(fr, [0, 2, 4, 6]);
        assert_eq!(d.knee.as_ref().unwrap().point_index, 4);
        let m = &r.modes[1];
        let fr: Vec<usize> = m.frontier.iter().map(|x| x.point_index).collect();
        assert_eq!(fr, [1, 3]);
        assert_eq!(m.best.as_ref().unwrap().point_index, 3);
        let w: Vec<&str> = r.by_budget.iter().map(|w| w.io.as_str()).collect();
        assert_eq!(w, ["direct", "direct", "direct", "direct"]);
        assert_eq!(r.excluded_over_budget, [7]);
        // Overall: best 0.45 (direct @ d); within 10 % (≤ 0.495) the smallest budget
        // is c, where direct (0.46) is the fastest mode.
        let (bio, b) = r.overall_best.as_ref().unwrap();
        assert_eq!((bio.as_str(), b.point_index), ("direct", 6));
        let (kio, k) = r.overall_knee.as_ref().unwrap();
        assert_eq!((kio.as_str(), k.point_index), ("direct", 4));
        let md = r.markdown(&|s, _| s.to_string());
        assert!(md.starts_with("## Recommendation"));
        assert!(md.contains("Left out: 1 point(s)"));
        assert!(md.contains("**Bottom line:** the smallest budget that decodes within 10 % of the fastest point is **c** with **direct**"), "{md}");
    }

    /// A sweep whose runs all generated one token (`max_tokens = 1`) has no s/token:
    /// the report says why, and gives the fastest first token instead of "no
    /// finished runs"; one with no run yet still says that.
    #[test]
    fn first_token_only_sweep_says_why_there_is_no_answer() {
        let mut s = vec![p(0, "direct", "a", 100, 1.0), p(1, "mmap", "b", 200, 1.0)];
        for (x, t) in s.iter_mut().zip([0.30, 0.25]) {
            x.s_per_token = None;
            x.ttft_s = Some(t);
        }
        let md = recommend(&s, &Default::default()).markdown(&|s, _| s.to_string());
        assert!(
            md.contains("none of the 6 finished run(s) timed a decode step")
                && md.contains("Fastest time to first token: **0.2500 s** at b (mmap, none)")
                && !md.contains("No finished runs"),
            "{md}"
        );
        for x in &mut s {
            x.n = 0;
        }
        let md = recommend(&s, &Default::default()).markdown(&|s, _| s.to_string());
        assert!(
            md.contains("No finished runs to recommend from yet."),
            "{md}"
        );
    }

    /// A sweep with a `layout` axis: at one budget, direct reads safetensors at 0.5
    /// s/token and lossless at 0.25 (next-layer): the bottom line and the tables name
    /// the layout picked; without the axis they name only the prefetch policy.
    #[test]
    fn the_layout_picked_is_named() {
        let mut s = vec![
            p(0, "direct", "a", 100, 0.5),
            PointStats {
                layout: "lossless".into(),
                prefetch: "next-layer".into(),
                ..p(1, "direct", "a", 100, 0.25)
            },
        ];
        let runs = constant_runs(&mut s);
        let r = recommend(&s, &runs.clone().into());
        let (_, k) = r.overall_knee.as_ref().unwrap();
        assert_eq!((k.point_index, k.layout.as_deref()), (1, Some("lossless")));
        let md = r.markdown(&|s, _| s.to_string());
        assert!(
            md.contains("**a** with **direct** (lossless, next-layer, 0.2500"),
            "{md}"
        );
        assert!(
            md.contains("| a | **direct** (lossless, next-layer) |"),
            "{md}"
        );
        let mut plain = vec![p(0, "direct", "a", 100, 0.5)];
        let runs = constant_runs(&mut plain);
        let r = recommend(&plain, &runs.into());
        assert_eq!(r.overall_knee.as_ref().unwrap().1.layout, None);
        let md = r.markdown(&|s, _| s.to_string());
        assert!(md.contains("**a** with **direct** (none, 0.5000"), "{md}");
    }

    /// Three runs of three decode times, all the point's median, for every point of
    /// `s`, whose intervals are set to that value: every bootstrap replicate is it.
    pub(crate) fn constant_runs(s: &mut [PointStats]) -> BTreeMap<usize, Vec<Run>> {
        s.iter_mut()
            .map(|p| {
                let x = p.s_per_token.unwrap();
                (p.s_per_token_lo, p.s_per_token_hi) = (Some(x), Some(x));
                (p.point_index, vec![vec![x; 3]; 3])
            })
            .collect()
    }
}
