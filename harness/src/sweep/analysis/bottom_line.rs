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
use super::recommend::{Pick, KNEE_WITHIN};

/// Largest half-width of the recommended point's 95 % interval, as a fraction of its
/// median, for a confident answer.
pub const CONFIDENT_HALF_WIDTH: f64 = 0.25;

/// Above this many more repeats per point the estimate is not worth quoting.
pub const MAX_QUOTED_REPEATS: u32 = 100;

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
    r: &super::recommend::Recommendation,
    label: &dyn Fn(&str, u64) -> String,
) -> String {
    use super::recommend::ci;
    let (Some((kio, k)), Some((bio, b)), Some(bl)) =
        (&r.overall_knee, &r.overall_best, &r.bottom_line)
    else {
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
    let start = if r.start == "warm" {
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
    if let Some(c) = &r.cold_beside {
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

#[cfg(test)]
mod tests {
    use super::super::recommend::tests::{constant_runs, p};
    use super::super::recommend::{recommend, recommend_steady};
    use super::*;

    fn label(s: &str, _: u64) -> String {
        s.to_string()
    }

    fn bottom(r: &super::super::recommend::Recommendation) -> String {
        markdown(r, &label)
    }

    /// direct: 1.0 @a, 0.6 @b, 0.46 @c, 0.45 @d; mmap 2.0 @a. Best 0.45 (d), limit
    /// 0.495: the knee is c. Smaller budgets: 1.0/0.45 = 2.22, 0.6/0.45 = 1.33,
    /// 2.0/0.45 = 4.44, all above 1.10; c/d = 1.022 ≤ 1.10.
    fn grid() -> Vec<crate::sweep::analysis::stats::PointStats> {
        vec![
            p(0, "direct", "a", 100, 1.0),
            p(1, "mmap", "a", 100, 2.0),
            p(2, "direct", "b", 200, 0.6),
            p(3, "direct", "c", 400, 0.46),
            p(4, "direct", "d", 800, 0.45),
        ]
    }

    #[test]
    fn a_clear_answer_with_nothing_within_noise() {
        let mut s = grid();
        let runs = constant_runs(&mut s);
        let r = recommend(&s, &runs);
        let bl = r.bottom_line.as_ref().unwrap();
        assert!(bl.clear(), "{bl:?}");
        assert!(bl.within_noise.is_empty());
        assert_eq!(
            bottom(&r),
            "**Bottom line:** the smallest budget that decodes within 10 % of the fastest point is \
             **c** with **direct** (none, 0.4600 [0.4600–0.4600] s/token); the fastest point is direct at d \
             (0.4500 [0.4500–0.4500] s/token); no other point measured is within noise of it.\n\n"
        );
    }

    #[test]
    fn a_clear_answer_names_the_points_within_noise() {
        // c, d and mmap at c decode alike (each run 0.45, 0.46, 0.45, 0.46): their
        // ratios' intervals contain 1. Medians 0.455 each; the first smallest is c.
        let mut s = grid();
        s.push(p(5, "mmap", "c", 400, 0.455));
        let mut runs = constant_runs(&mut s);
        for i in [3, 4, 5] {
            s.iter_mut()
                .find(|x| x.point_index == i)
                .unwrap()
                .s_per_token = Some(0.455);
            let x = s.iter_mut().find(|x| x.point_index == i).unwrap();
            (x.s_per_token_lo, x.s_per_token_hi) = (Some(0.45), Some(0.46));
            runs.insert(i, vec![vec![0.45, 0.46, 0.45, 0.46]; 3]);
        }
        let r = recommend(&s, &runs);
        let bl = r.bottom_line.as_ref().unwrap();
        assert!(bl.clear(), "{bl:?}");
        let md = bottom(&r);
        assert!(
            md.contains("is **c** with **direct** (none, 0.4550 [0.4500–0.4600] s/token); it is also the fastest point measured; within noise of it (not significantly different): mmap at c; direct at d."),
            "{md}"
        );
    }

    #[test]
    fn an_interval_wider_than_a_quarter_of_its_median_is_no_answer() {
        // c's interval [0.2, 0.8] is ±0.3/0.46 = ±65.2 % of its median. From 3 runs,
        // ±25 % needs 3 · (0.6522 / 0.25)² = 20.4 → 21 runs: 18 more.
        let mut s = grid();
        let runs = constant_runs(&mut s);
        (s[3].s_per_token_lo, s[3].s_per_token_hi) = (Some(0.2), Some(0.8));
        let r = recommend(&s, &runs);
        let bl = r.bottom_line.as_ref().unwrap();
        assert!(!bl.clear());
        assert_eq!(bl.more_repeats, Some(18));
        assert_eq!(
            bottom(&r),
            "**Bottom line: no clear answer at this noise level** — about 18 more repeats per point or a \
             quieter machine would decide it. Best guess: **c** with **direct** (none, 0.4600 [0.2000–0.8000] s/token); \
             the fastest point is direct at d (0.4500 [0.4500–0.4500] s/token). Not decided because its 95 % interval \
             is ±65 % of its median (a confident answer needs ±25 % or less).\n\n"
        );
    }

    #[test]
    fn a_smaller_budget_that_may_be_within_ten_percent_is_no_answer() {
        // b's runs: one at 0.48, two at 0.56 (median 0.56, 0.56/0.45 = 1.244). A
        // replicate's median is 0.48 when at least two of its three draws are the first
        // run: 3·(1/3)²·(2/3) + (1/3)³ = 7/27 ≈ 26 % of replicates, so the 2.5th
        // percentile of the ratio is 0.48/0.45 = 1.067 ≤ 1.10. To clear 1.10 its lower
        // half-width 1.244 − 1.067 = 0.178 must shrink below 1.244 − 1.10 = 0.144:
        // 3 · (0.178/0.144)² = 4.54 → 5 runs: 2 more.
        let mut s = grid();
        let mut runs = constant_runs(&mut s);
        s[2].s_per_token = Some(0.56);
        runs.insert(2, vec![vec![0.48; 3], vec![0.56; 3], vec![0.56; 3]]);
        let r = recommend(&s, &runs);
        let bl = r.bottom_line.as_ref().unwrap();
        assert_eq!(bl.more_repeats, Some(2), "{bl:?}");
        let md = bottom(&r);
        assert!(md.starts_with("**Bottom line: no clear answer at this noise level** — about 2 more repeats per point"), "{md}");
        assert!(
            md.contains("Not decided because direct at b (1.24× the fastest [1.07–…]) may be within 10 % of the fastest point too."),
            "{md}"
        );
    }

    #[test]
    fn noisy_runs_are_left_out_and_said() {
        // Every run of every point noisy: nothing to answer from.
        let mut s = grid();
        for x in &mut s {
            (x.n, x.noisy, x.s_per_token) = (0, 3, None);
        }
        let r = recommend(&s, &BTreeMap::new());
        assert_eq!(r.noisy_runs, 15);
        assert!(r.markdown(&label).contains(
            "**Bottom line: no answer** — no quiet runs to recommend from: 15 finished run(s) were marked noisy"
        ));
        // Some noisy runs: the answer from the quiet ones, and the count said.
        let mut s = grid();
        let runs = constant_runs(&mut s);
        s[0].noisy = 1;
        let md = bottom(&recommend(&s, &runs));
        assert!(
            md.starts_with("**Bottom line:** the smallest budget"),
            "{md}"
        );
        assert!(md.ends_with("1 run(s) the noise sentinel marked noisy were left out of these figures (see Noise below).\n\n"), "{md}");
    }

    #[test]
    fn warm_points_decide_and_the_cold_start_is_shown_beside() {
        // Warm: the grid. Cold: the same points 5 apart, slower, with their TTFT.
        let mut s = grid();
        let mut cold = grid();
        for x in &mut s {
            x.start = "warm".into();
            x.ttft_s = Some(0.5);
        }
        for x in &mut cold {
            x.point_index += 5;
            x.s_per_token = x.s_per_token.map(|v| v * 2.0);
            x.ttft_s = Some(3.0);
        }
        s.extend(cold);
        let runs = constant_runs(&mut s);
        let r = recommend_steady(&s, &runs);
        assert_eq!(r.start, "warm");
        assert_eq!(r.overall_knee.as_ref().unwrap().1.point_index, 3);
        let c = r.cold_beside.as_ref().unwrap();
        assert_eq!(c.point_index, 8);
        let md = bottom(&r);
        assert!(md.contains("fastest point (warm start: expert cache and trunk slots filled before the first token, the steady state) is **c**"), "{md}");
        assert!(md.contains("Cold start at the same point (p8: empty caches, as a fresh process sees its first tokens): TTFT 3.000 s (warm 0.500 s), decode 0.9200 [0.9200–0.9200] s/token."), "{md}");
    }
}
