//! How sure the recommendation is: the budget, the IO modes (and prefetch
//! policies) at that budget it cannot tell apart, the points at other budgets within
//! noise of it, and whether the intervals decide it at all.
//!
//! The recommended point K is the fastest point at the smallest budget within
//! [`KNEE_WITHIN`] of the fastest point B ([`super::recommend`]). The question a
//! user asks is "which budget, and which IO mode", so the answer has two parts:
//!
//! **The group at K's budget.** K and the other points at its budget (the fastest
//! point of each IO mode and prefetch policy there), taken by increasing median,
//! each kept when its s/token ratio to every member already kept is not significant
//! (the interval contains 1): the members are pairwise within noise of each other.
//! With more than one member the answer names the budget and the group ("pick
//! any"), not K alone, whose lead over the others is noise.
//!
//! **Confident** only when every one of these holds (otherwise: "no clear answer at
//! this noise level", with the best guess):
//!
//! 1. *precision*: the interval the answer quotes is no wider than
//!    ±[`CONFIDENT_HALF_WIDTH`] of its median. For a single point, its own 95 %
//!    interval; for a group, the pooled interval: the same hierarchical bootstrap
//!    over the quiet runs of every member together ([`memdial::util::stats::bootstrap::interval`]),
//!    i.e. the speed of a run at this budget with any member, the members'
//!    differences counted as spread. Pooling is honest only because the members
//!    are not told apart, and it is never used to decide the budget itself;
//! 2. *no smaller budget*: every point at a smaller budget (any IO mode) is
//!    significantly more than 10 % slower than B — the 95 % interval of its ratio to
//!    B lies above 1.10 — so none of them could be the answer instead;
//! 3. *within reach*: when B is at a larger budget than K, the interval of K / B lies
//!    at or below 1.10;
//! 4. *nothing unmeasured*: no point was left without a quiet run by the noise
//!    sentinel — such a point (at any budget) could be the answer or the fastest
//!    point, so a busy machine gives "cannot decide", never a different answer.
//!
//! Conditions 2–4 decide the budget; condition 1 how precisely its speed is known.
//! The ±10 % "high variance" flag of a point ([`memdial::util::stats::bootstrap::HIGH_VARIANCE`])
//! only says its interval is wide: a flagged point may still be the answer, as long
//! as the interval the bottom line quotes is within ±25 % and the others separate.
//! Runs the noise sentinel marked `noisy` are in no interval ([`super::stats`]).
//!
//! **Within noise of it, at other budgets**: the fastest point of each IO mode at
//! each other budget whose ratio to K is not significant.
//!
//! **More repeats**: a half-width shrinks about as 1/√n, so a gap g that an interval of
//! half-width h (from n runs) does not clear needs about n·(h/g)² runs (a group's n
//! is its pooled runs, spread over its members); the bottom line quotes the largest
//! such count over the conditions that failed, less the runs made. Under
//! `repeats = "auto"` that count is said as the `max_repeats` it would take.

use serde::Serialize;

use super::pick::{ci, Named, Pick, KNEE_WITHIN};
use crate::sweep::spec::AutoRepeats;
use memdial::util::stats::bootstrap::{interval, Ratio, Run, MIN_RUNS};

/// Largest half-width of the quoted 95 % interval (the recommended point's, or its
/// group's pooled one), as a fraction of its median, for a confident answer.
pub const CONFIDENT_HALF_WIDTH: f64 = 0.25;

/// Above this many more repeats per point the estimate is not worth quoting.
pub const MAX_QUOTED_REPEATS: u32 = 100;

/// The recommended point's cold start, shown beside its steady state.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ColdBeside {
    /// The cold point.
    pub point_index: usize,
    /// Median time to first token from empty caches, seconds.
    pub ttft_s: Option<f64>,
    /// The recommended (warm) point's median time to first token, seconds.
    pub warm_ttft_s: Option<f64>,
    /// Median s/token from empty caches, with its interval.
    pub pick: Option<Pick>,
}

/// The pooled s/token of a group: every member's quiet runs together.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Pooled {
    /// Median over the pooled runs of each run's median, seconds per token.
    pub s_per_token: f64,
    /// 95 % interval (hierarchical bootstrap over the pooled runs).
    pub lo: Option<f64>,
    /// 95 % interval.
    pub hi: Option<f64>,
    /// Quiet runs pooled.
    pub n: usize,
}

/// A point of the sweep's steady state without a single quiet run (every run noisy).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct NoQuiet {
    /// IO mode.
    pub io: String,
    /// Budget as written.
    pub budget_spec: String,
    /// Point index.
    pub point_index: usize,
    /// Its runs, all marked noisy.
    pub noisy: usize,
}

/// What the bottom line decides among: the fastest point of each IO mode at each
/// budget, the points at the recommended budget, and the points with no quiet run.
#[derive(Debug, Clone, Copy)]
pub struct Candidates<'a> {
    /// The fastest point of each IO mode at each budget.
    pub by_mode: &'a [Named],
    /// The fastest point of each IO mode and prefetch policy at the recommended
    /// budget (the recommended point among them).
    pub at_knee: &'a [Named],
    /// Points left without a quiet run by the noise sentinel.
    pub no_quiet: &'a [NoQuiet],
}

/// How sure the recommendation is.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct BottomLine {
    /// The points at the recommended budget within noise of each other, the
    /// recommended one first, then by increasing median; one member: the answer is
    /// that point alone.
    pub group: Vec<Named>,
    /// The group's pooled s/token (groups of two or more).
    pub pooled: Option<Pooled>,
    /// Points at other budgets (IO mode, fastest prefetch policy at a budget) not
    /// significantly different from the recommended one, by increasing budget.
    pub within_noise: Vec<Named>,
    /// Why no confident answer is given (empty: the answer is clear).
    pub undecided: Vec<String>,
    /// About how many more repeats per point would decide it (`None`: clear, noise
    /// decides it, or the gap is too small to estimate — more than
    /// [`MAX_QUOTED_REPEATS`]).
    pub more_repeats: Option<u32>,
    /// About how many runs per point in all would decide it (with `more_repeats`).
    pub runs_to_decide: Option<u32>,
    /// Some point has no quiet run: only a quieter machine decides it.
    pub needs_quiet: bool,
    /// Measured runs of the recommendation's points marked `noisy` and left out.
    pub noisy_runs: usize,
    /// What the answer rests on: the quiet runs' wall times, or — when those do not
    /// decide — every run's uncontended times ([`super::uncontended`]).
    pub decided_on: DecidedOn,
    /// The spec's `repeats = "auto"` settings, when it has them (set by the report:
    /// the hint then names `max_repeats`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auto: Option<AutoRepeats>,
}

/// The measure a bottom line was decided on (`recommendation.bottom_line.decided_on`).
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum DecidedOn {
    /// Decode wall times of the quiet runs.
    #[default]
    Wall,
    /// Uncontended decode times (wall minus the compute threads' run-queue wait) of
    /// every run not disturbed by what they do not correct.
    Uncontended,
}

impl BottomLine {
    /// The answer is stated with confidence.
    pub fn clear(&self) -> bool {
        self.undecided.is_empty()
    }
}

/// Runs needed for a half-width `h` (from `n` runs) to shrink below `gap`; `None` when
/// the gap is not positive (no number of repeats clears it).
fn runs_needed(n: usize, h: f64, gap: f64) -> Option<f64> {
    (gap > 0.0 && h.is_finite()).then(|| n.max(1) as f64 * (h / gap).powi(2))
}

/// The precision check of an interval `(lo, hi)` at `median` from `n` runs; `what`
/// names it ("its", "the group's pooled"). Pushes the reason and the runs needed.
fn check_precision(
    what: &str,
    iv: (Option<f64>, Option<f64>),
    median: f64,
    n: usize,
    undecided: &mut Vec<String>,
) -> Option<(usize, Option<f64>)> {
    match iv {
        (Some(lo), Some(hi)) => {
            let hw = (hi - lo) / 2.0 / median;
            (hw > CONFIDENT_HALF_WIDTH).then(|| {
                undecided.push(format!(
                    "{what} 95 % interval is ±{:.0} % of its median (a confident answer needs ±{:.0} % or less)",
                    hw * 100.0,
                    CONFIDENT_HALF_WIDTH * 100.0
                ));
                (n, runs_needed(n, hw, CONFIDENT_HALF_WIDTH))
            })
        }
        _ if n < MIN_RUNS => {
            undecided.push(format!(
                "it has too few quiet runs for an interval ({n} of at least {MIN_RUNS})"
            ));
            Some((n, Some(MIN_RUNS as f64)))
        }
        _ => {
            undecided.push("it has no interval (too few decode tokens per run)".into());
            Some((n, None))
        }
    }
}

/// Decides how sure the recommendation `(kio, k)` is, against the fastest point
/// `(bio, b)`, among `cands`, with the points' quiet `runs`; `noisy_runs` counted
/// apart.
pub fn decide(
    k: &Named,
    b: &Named,
    cands: Candidates,
    runs: &crate::sweep::analysis::stats::PointRuns,
    noisy_runs: usize,
) -> BottomLine {
    let (kn, k) = (k, &k.1);
    let ratio_of = |a: &Pick, c: &Pick| ratio_between(runs, a, c);
    let alike = |a: &Pick, c: &Pick| ratio_of(a, c).is_some_and(|r| r.significant == Some(false));
    // The group: K, then the others at its budget by median, each within noise of
    // every member kept.
    let mut group: Vec<Named> = vec![kn.clone()];
    let mut others: Vec<&Named> = cands
        .at_knee
        .iter()
        .filter(|(_, p)| p.point_index != k.point_index && p.budget_spec == k.budget_spec)
        .collect();
    others.sort_by(|x, y| x.1.s_per_token.total_cmp(&y.1.s_per_token));
    for o in others {
        if group.iter().all(|(_, g)| alike(&o.1, g)) {
            group.push(o.clone());
        }
    }
    let mut undecided = vec![];
    // Runs per point each failed condition needs (`None` inside: cannot be estimated).
    let mut need: Vec<(usize, Option<f64>)> = vec![];
    let pooled = (group.len() > 1).then(|| pool(&group, runs, k));
    match &pooled {
        None => need.extend(check_precision(
            "its",
            (k.lo, k.hi),
            k.s_per_token,
            k.n,
            &mut undecided,
        )),
        Some(p) => {
            let m = group.len();
            if let Some((n, want)) = check_precision(
                "the group's pooled",
                (p.lo, p.hi),
                p.s_per_token,
                p.n,
                &mut undecided,
            ) {
                need.push((n / m, want.map(|w| w / m as f64)));
            }
        }
    }
    budget_conditions(&kn.1, &b.1, cands.by_mode, runs, &mut undecided, &mut need);
    for q in cands.no_quiet {
        undecided.push(format!(
            "{} at {} (p{}) has no quiet run (all {} marked noisy): it could be the answer or the fastest point",
            q.io, q.budget_spec, q.point_index, q.noisy
        ));
    }
    let needs_quiet = !cands.no_quiet.is_empty();
    let (more_repeats, runs_to_decide) = if undecided.is_empty() || needs_quiet {
        (None, None)
    } else {
        estimate(&need)
    };
    let mut within_noise: Vec<Named> = cands
        .by_mode
        .iter()
        .filter(|(_, c)| !group.iter().any(|(_, g)| g.point_index == c.point_index))
        .filter(|(_, c)| alike(c, k))
        .cloned()
        .collect();
    within_noise.sort_by_key(|(_, c)| c.budget_bytes);
    BottomLine {
        group,
        pooled,
        within_noise,
        undecided,
        more_repeats,
        runs_to_decide,
        needs_quiet,
        noisy_runs,
        decided_on: DecidedOn::Wall,
        auto: None,
    }
}

/// The ratio of two points' s/token from their quiet `runs`, paired by round where the rounds allow.
fn ratio_between(
    runs: &crate::sweep::analysis::stats::PointRuns,
    a: &Pick,
    c: &Pick,
) -> Option<Ratio> {
    runs.ratio(a.point_index, c.point_index)
}

/// The pooled s/token of `group`: every member's quiet runs in one bootstrap.
fn pool(group: &[Named], runs: &crate::sweep::analysis::stats::PointRuns, k: &Pick) -> Pooled {
    let all: Vec<Run> = group
        .iter()
        .filter_map(|(_, p)| runs.get(&p.point_index))
        .flatten()
        .cloned()
        .collect();
    let iv = interval(&all, k.point_index as u64);
    Pooled {
        s_per_token: iv.as_ref().map_or(k.s_per_token, |i| i.median),
        lo: iv.as_ref().and_then(|i| i.lo),
        hi: iv.as_ref().and_then(|i| i.hi),
        n: all.len(),
    }
}

/// Conditions 2 and 3 (the budget): no smaller budget may be within 10 % of the
/// fastest point `b`, and `k` is within 10 % of it beyond noise.
fn budget_conditions(
    k: &Pick,
    b: &Pick,
    by_mode: &[Named],
    runs: &crate::sweep::analysis::stats::PointRuns,
    undecided: &mut Vec<String>,
    need: &mut Vec<(usize, Option<f64>)>,
) {
    let limit = 1.0 + KNEE_WITHIN;
    let ratio_of = |a: &Pick, c: &Pick| ratio_between(runs, a, c);
    for (io, c) in by_mode
        .iter()
        .filter(|(_, c)| c.budget_bytes < k.budget_bytes)
    {
        match ratio_of(c, b) {
            Some(Ratio {
                ratio: r,
                lo: Some(lo),
                ..
            }) if lo <= limit => {
                undecided.push(format!(
                    "{io} at {} ({:.2}× the fastest [{lo:.2}–…]) may be within 10 % of the fastest point too",
                    c.budget_spec, r
                ));
                need.push((c.n.min(b.n), runs_needed(c.n.min(b.n), r - lo, r - limit)));
            }
            Some(Ratio { lo: Some(_), .. }) => {}
            _ => {
                undecided.push(format!(
                    "{io} at {} has too few quiet runs to rule it out",
                    c.budget_spec
                ));
                need.push((c.n, Some(MIN_RUNS as f64)));
            }
        }
    }
    if k.point_index != b.point_index {
        if let Some(Ratio {
            ratio: r,
            hi: Some(hi),
            ..
        }) = ratio_of(k, b)
        {
            if hi > limit {
                undecided.push(format!(
                    "it is {r:.2}× the fastest […–{hi:.2}]: it may be more than 10 % slower"
                ));
                need.push((k.n.min(b.n), runs_needed(k.n.min(b.n), hi - r, limit - r)));
            }
        }
    }
}

/// The most repeats per point (and runs in all) any failed condition needs, `None`
/// when one cannot be estimated or it is over [`MAX_QUOTED_REPEATS`].
fn estimate(need: &[(usize, Option<f64>)]) -> (Option<u32>, Option<u32>) {
    need.iter()
        .map(|(n, want)| {
            want.map(|w| {
                let more = (w.ceil() as i64 - *n as i64).max(1);
                (more, *n as i64 + more)
            })
        })
        .try_fold((1i64, 0i64), |acc, x| {
            x.map(|(m, t)| (acc.0.max(m), acc.1.max(t)))
        })
        .filter(|&(m, _)| m <= MAX_QUOTED_REPEATS as i64)
        .map_or((None, None), |(m, t)| (Some(m as u32), Some(t as u32)))
}

/// `direct at 25%–100%; buffered at 50%`: the points within noise, by IO mode, each
/// mode's budgets as a range (smallest–largest) when there are several.
pub fn within_noise_text(within: &[(String, Pick)], label: &dyn Fn(&str, u64) -> String) -> String {
    let mut ios: Vec<&str> = vec![];
    for (io, _) in within {
        if !ios.contains(&io.as_str()) {
            ios.push(io);
        }
    }
    ios.iter()
        .map(|io| {
            let ps: Vec<&Pick> = within
                .iter()
                .filter(|(i, _)| i == io)
                .map(|(_, p)| p)
                .collect();
            let (first, last) = (ps[0], ps[ps.len() - 1]);
            if ps.len() == 1 {
                format!("{io} at {}", label(&first.budget_spec, first.budget_bytes))
            } else {
                format!(
                    "{io} at {}–{}",
                    label(&first.budget_spec, first.budget_bytes),
                    label(&last.budget_spec, last.budget_bytes)
                )
            }
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// `buffered, direct and mmap`: a group's members by name (IO mode, with the
/// prefetch policy when the members' differ), in alphabetical order.
pub fn group_names(group: &[Named]) -> String {
    let same_prefetch = group.iter().all(|(_, p)| p.prefetch == group[0].1.prefetch);
    let mut names: Vec<String> = group
        .iter()
        .map(|(io, p)| {
            if same_prefetch {
                io.clone()
            } else {
                format!("{io} with {}", p.prefetch)
            }
        })
        .collect();
    names.sort();
    match names.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
        _ => names.concat(),
    }
}

/// `0.0250 [0.0230–0.0280]`: a pooled median and its interval.
fn pooled_ci(p: &Pooled) -> String {
    match (p.lo, p.hi) {
        (Some(l), Some(h)) => format!("{:.4} [{l:.4}–{h:.4}]", p.s_per_token),
        _ => format!("{:.4} (insufficient repeats)", p.s_per_token),
    }
}

/// What would decide an undecided bottom line: a quieter machine, more repeats (under
/// `repeats = "auto"`: a higher `max_repeats`, or a tighter `precision` when the
/// points stopped before it).
fn hint(bl: &BottomLine) -> String {
    let s = |n: u32| if n == 1 { "" } else { "s" };
    match (bl.needs_quiet, bl.more_repeats, bl.runs_to_decide, bl.auto) {
        (true, ..) => "a quieter machine would decide it (more runs on a busy one would be noisy too)".into(),
        (false, Some(n), Some(t), Some(a)) if t > a.max_repeats => format!(
            "raising `max_repeats` (now {}) to about {t} (about {n} more repeat{} per point), or a quieter machine, would decide it",
            a.max_repeats,
            s(n)
        ),
        (false, Some(n), _, Some(a)) => format!(
            "about {n} more repeat{} per point (a `precision` tighter than ±{:.0} %: the points stopped there) or a quieter machine would decide it",
            s(n),
            a.precision * 100.0
        ),
        (false, Some(n), ..) => format!(
            "about {n} more repeat{} per point or a quieter machine would decide it",
            s(n)
        ),
        (false, None, ..) => format!(
            "more than {MAX_QUOTED_REPEATS} more repeats per point, or a quieter machine, would be needed to decide it"
        ),
    }
}

/// The `**Bottom line:**` paragraph of the recommendation (empty when nothing was
/// recommended): the answer (one point, or the budget with the group of modes within
/// noise of each other there) and how sure it is, the cold start beside a warm one,
/// and the noisy runs left out.
pub fn markdown(
    knee_and_best: Option<(&Named, &Named)>,
    bl: Option<&BottomLine>,
    start: &str,
    cold_beside: Option<&ColdBeside>,
    label: &dyn Fn(&str, u64) -> String,
) -> String {
    let (Some(((kio, k), (bio, b))), Some(bl)) = (knee_and_best, bl) else {
        return String::new();
    };
    let budget = label(&k.budget_spec, k.budget_bytes);
    let in_group = bl.group.iter().any(|(_, g)| g.point_index == b.point_index);
    let (answer, fastest) = match &bl.pooled {
        Some(p) if bl.group.len() > 1 => {
            let prefetch = if bl.group.iter().all(|(_, g)| g.settings() == k.settings()) {
                format!("{}, ", k.settings())
            } else {
                String::new()
            };
            (
                format!(
                    "**{budget}**, with {} within noise of each other{} ({prefetch}together {} s/token over {} runs)",
                    group_names(&bl.group),
                    if bl.clear() { ": pick any" } else { "" },
                    pooled_ci(p),
                    p.n
                ),
                if in_group {
                    format!("the fastest median is {kio}'s ({} s/token)", ci(k))
                } else {
                    format!(
                        "the fastest point is {bio} at {} ({} s/token)",
                        label(&b.budget_spec, b.budget_bytes),
                        ci(b)
                    )
                },
            )
        }
        _ => (
            format!(
                "**{budget}** with **{kio}** ({}, {} s/token)",
                k.settings(),
                ci(k)
            ),
            if k.point_index == b.point_index {
                "it is also the fastest point measured".to_string()
            } else {
                format!(
                    "the fastest point is {bio} at {} ({} s/token)",
                    label(&b.budget_spec, b.budget_bytes),
                    ci(b)
                )
            },
        ),
    };
    let start = if start == "warm" {
        " (warm start: expert cache and trunk slots filled before the first token, the steady state)"
    } else {
        ""
    };
    let mut s = if bl.clear() {
        let within = match (bl.within_noise.is_empty(), bl.group.len() > 1) {
            (true, false) => "no other point measured is within noise of it".to_string(),
            (true, true) => "no point at another budget is within noise of them".to_string(),
            (false, false) => format!(
                "within noise of it (not significantly different): {}",
                within_noise_text(&bl.within_noise, label)
            ),
            (false, true) => format!(
                "also within noise of {kio} (not significantly different): {}",
                within_noise_text(&bl.within_noise, label)
            ),
        };
        let basis = match bl.decided_on {
            DecidedOn::Wall => "",
            DecidedOn::Uncontended => {
                " — decided on **uncontended** times (each step's wall time minus its compute threads' wait for a CPU), \
                 since the quiet runs' wall times did not decide; the s/token quoted are uncontended"
            }
        };
        format!(
            "**Bottom line:** the smallest budget that decodes within 10 % of the fastest point{start} is {answer}; {fastest}; {within}{basis}.\n\n"
        )
    } else {
        format!(
            "**Bottom line: no clear answer at this noise level** — {}. Best guess{start}: {answer}; {fastest}. Not decided because {}.\n\n",
            hint(bl),
            bl.undecided.join("; ")
        )
    };
    if let Some(c) = cold_beside {
        let f = |v: Option<f64>| v.map(|x| format!("{x:.3} s")).unwrap_or_else(|| "–".into());
        s += &format!(
            "Cold start at the same point (p{}: empty caches, as a fresh process sees its first tokens): TTFT {} (warm {}), decode {} s/token.\n\n",
            c.point_index,
            f(c.ttft_s),
            f(c.warm_ttft_s),
            c.pick.as_ref().map(ci).unwrap_or_else(|| "–".into())
        );
    }
    if bl.noisy_runs > 0 {
        s += &format!(
            "{} run(s) the noise sentinel marked noisy were left out of these figures (see Noise below).\n\n",
            bl.noisy_runs
        );
    }
    s
}
