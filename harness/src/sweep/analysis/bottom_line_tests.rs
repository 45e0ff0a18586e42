//! The bottom line's wordings, from hand-derived rows ([`super::bottom_line`] through
//! [`super::recommend`]; a leaf, so neither module depends on the other's tests).
use std::collections::BTreeMap;

use super::bottom_line::markdown;
use super::recommend::tests::{constant_runs, p};
use super::recommend::{recommend, recommend_steady, Recommendation};

fn label(s: &str, _: u64) -> String {
    s.to_string()
}

fn bottom(r: &Recommendation) -> String {
    markdown(
        r.overall_knee.as_ref().zip(r.overall_best.as_ref()),
        r.bottom_line.as_ref(),
        &r.start,
        r.cold_beside.as_ref(),
        &label,
    )
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
    assert!(
        md.starts_with(
            "**Bottom line: no clear answer at this noise level** — about 2 more repeats per point"
        ),
        "{md}"
    );
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
