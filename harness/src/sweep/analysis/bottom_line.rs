//! How sure the recommendation is: the points it cannot tell apart from the
//! recommended one, and whether the intervals decide it at all.
//!
//! The recommended point K is the smallest budget within [`KNEE_WITHIN`] of the
//! fastest point B ([`super::recommend`]). That answer is stated with confidence only
//! when every one of these holds (otherwise: "no clear answer at this noise level"):
//!
//! 1. K has a 95 % interval, no wider than ±[`CONFIDENT_HALF_WIDTH`] of its median;
//! 2. every point at a smaller budget (any IO mode) is significantly more than 10 %
//!    slower than B: the 95 % interval of its s/token ratio to B lies above 1.10, so
//!    none of them could be the answer instead;
//! 3. when K is not B, K is within 10 % of B beyond noise: the interval of K / B lies
//!    at or below 1.10.
//!
//! The ±10 % "high variance" flag of a point ([`super::bootstrap::HIGH_VARIANCE`]) only
//! says its interval is wide; the bottom line asks whether the intervals decide the
//! question, and refuses an answer past ±25 % whatever the medians say. Runs the noise
//! sentinel marked `noisy` are not in any interval (see [`super::stats`]).
//!
//! **Within noise of it**: the fastest point of each IO mode at each budget whose
//! ratio to K is not significant (its interval contains 1).
//!
//! **More repeats**: a half-width shrinks about as 1/√n, so a gap g that an interval of
//! half-width h (from n runs) does not clear needs about n·(h/g)² runs; the bottom line
//! quotes the largest such count over the conditions that failed, less the runs made.

use std::collections::BTreeMap;

use serde::Serialize;

use super::bootstrap::{ratio, Ratio, Run, MIN_RUNS};
use super::pick::{ci, Named, Pick, KNEE_WITHIN};

/// Largest half-width of the recommended point's 95 % interval, as a fraction of its
/// median, for a confident answer.
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

/// How sure the recommendation is.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct BottomLine {
    /// Points (IO mode, fastest prefetch policy at a budget) not significantly
    /// different from the recommended one, by increasing budget.
    pub within_noise: Vec<(String, Pick)>,
    /// Why no single answer is given (empty: the answer is clear).
    pub undecided: Vec<String>,
    /// About how many more repeats per point would decide it (`None`: clear, or the
    /// gap is too small to estimate — more than [`MAX_QUOTED_REPEATS`]).
    pub more_repeats: Option<u32>,
    /// Measured runs of the recommendation's points marked `noisy` and left out.
    pub noisy_runs: usize,
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

/// Decides how sure the recommendation `(kio, k)` is, against the fastest point
/// `(bio, b)`, among `cands` (the fastest point of each IO mode at each budget) with
/// their `runs`; `noisy_runs` counted apart.
pub fn decide(
    k: &(String, Pick),
    b: &(String, Pick),
    cands: &[(String, Pick)],
    runs: &BTreeMap<usize, Vec<Run>>,
    noisy_runs: usize,
) -> BottomLine {
    let (k, b) = (&k.1, &b.1);
    let limit = 1.0 + KNEE_WITHIN;
    let ratio_of = |a: &Pick, c: &Pick| -> Option<Ratio> {
        ratio(
            runs.get(&a.point_index)?,
            runs.get(&c.point_index)?,
            ((a.point_index as u64) << 32) | c.point_index as u64,
        )
    };
    let mut undecided = vec![];
    // Runs each failed condition needs (`None` inside: cannot be estimated).
    let mut need: Vec<(usize, Option<f64>)> = vec![];
    match (k.lo, k.hi) {
        (Some(lo), Some(hi)) => {
            let hw = (hi - lo) / 2.0 / k.s_per_token;
            if hw > CONFIDENT_HALF_WIDTH {
                undecided.push(format!(
                    "its 95 % interval is ±{:.0} % of its median (a confident answer needs ±{:.0} % or less)",
                    hw * 100.0,
                    CONFIDENT_HALF_WIDTH * 100.0
                ));
                need.push((k.n, runs_needed(k.n, hw, CONFIDENT_HALF_WIDTH)));
            }
        }
        _ if k.n < MIN_RUNS => {
            undecided.push(format!(
                "it has too few quiet runs for an interval ({} of at least {MIN_RUNS})",
                k.n
            ));
            need.push((k.n, Some(MIN_RUNS as f64)));
        }
        _ => {
            undecided.push("it has no interval (too few decode tokens per run)".into());
            need.push((k.n, None));
        }
    }
    for (io, c) in cands
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
    let more_repeats = if undecided.is_empty() {
        None
    } else {
        need.iter()
            .map(|(n, want)| want.map(|w| (w.ceil() as i64 - *n as i64).max(1)))
            .try_fold(1i64, |acc, x| x.map(|x| acc.max(x)))
            .filter(|&m| m <= MAX_QUOTED_REPEATS as i64)
            .map(|m| m as u32)
    };
    let mut within_noise: Vec<(String, Pick)> = cands
        .iter()
        .filter(|(_, c)| c.point_index != k.point_index)
        .filter(|(_, c)| ratio_of(c, k).is_some_and(|r| r.significant == Some(false)))
        .cloned()
        .collect();
    within_noise.sort_by_key(|(_, c)| c.budget_bytes);
    BottomLine {
        within_noise,
        undecided,
        more_repeats,
        noisy_runs,
    }
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

/// The `**Bottom line:**` paragraph of the recommendation (empty when nothing was
/// recommended): the answer and how sure it is, the cold start beside a warm one, and
/// the noisy runs left out.
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
    let answer = format!(
        "**{}** with **{kio}** ({}, {} s/token)",
        label(&k.budget_spec, k.budget_bytes),
        k.prefetch,
        ci(k)
    );
    let fastest = if k.point_index == b.point_index {
        "it is also the fastest point measured".to_string()
    } else {
        format!(
            "the fastest point is {bio} at {} ({} s/token)",
            label(&b.budget_spec, b.budget_bytes),
            ci(b)
        )
    };
    let start = if start == "warm" {
        " (warm start: expert cache and trunk slots filled before the first token, the steady state)"
    } else {
        ""
    };
    let mut s = if bl.clear() {
        let within = if bl.within_noise.is_empty() {
            "no other point measured is within noise of it".to_string()
        } else {
            format!(
                "within noise of it (not significantly different): {}",
                within_noise_text(&bl.within_noise, label)
            )
        };
        format!(
            "**Bottom line:** the smallest budget that decodes within 10 % of the fastest point{start} is {answer}; {fastest}; {within}.\n\n"
        )
    } else {
        let more = match bl.more_repeats {
            Some(n) => format!(
                "about {n} more repeat{} per point or a quieter machine would decide it",
                if n == 1 { "" } else { "s" }
            ),
            None => format!(
                "more than {MAX_QUOTED_REPEATS} more repeats per point, or a quieter machine, would be needed to decide it"
            ),
        };
        format!(
            "**Bottom line: no clear answer at this noise level** — {more}. Best guess{start}: {answer}; {fastest}. Not decided because {}.\n\n",
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
