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
    let r = recommend(&s, &runs.clone().into());
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

/// The grid with direct and mmap at c alike: each has runs decoding at 0.44, 0.45
/// and 0.46 every token (medians 0.45; direct is K, first on the tie). A replicate's
/// median is 0.44 when two of its three draws are (3·(1/3)²·(2/3) + (1/3)³ = 7/27),
/// 0.46 likewise, else 0.45: mmap / direct falls below 1 with probability
/// 7/27 · 20/27 + 13/27 · 7/27 = 231/729 ≈ 32 % and above it as often, so its
/// interval contains 1 (not significant). Pooled, the six run medians are 0.44,
/// 0.44, 0.45, 0.45, 0.46, 0.46: median 0.45; a replicate's median is 0.44 when at
/// least four of its six draws are (p = 1/3: (15·4 + 6·2 + 1) / 729 = 73/729 ≈ 10 %,
/// over 2.5 %), so the pooled interval is [0.44, 0.46], ±2.2 %. d (0.45 every run)
/// is within noise of direct at c too; a, b are over 1.30× (above 1.10).
fn alike_at_c() -> (
    Vec<crate::sweep::analysis::stats::PointStats>,
    BTreeMap<usize, Vec<memdial::util::stats::bootstrap::Run>>,
) {
    let mut s = grid();
    s.push(p(5, "mmap", "c", 400, 0.45));
    let mut runs = constant_runs(&mut s);
    for (i, order) in [(3, [0.44, 0.45, 0.46]), (5, [0.46, 0.44, 0.45])] {
        let x = s.iter_mut().find(|x| x.point_index == i).unwrap();
        x.s_per_token = Some(0.45);
        (x.s_per_token_lo, x.s_per_token_hi) = (Some(0.44), Some(0.46));
        runs.insert(i, order.iter().map(|v| vec![*v; 4]).collect());
    }
    (s, runs)
}

#[test]
fn a_budget_with_modes_within_noise_of_each_other_is_one_answer() {
    let (s, runs) = alike_at_c();
    let r = recommend(&s, &runs.clone().into());
    let bl = r.bottom_line.as_ref().unwrap();
    assert!(bl.clear(), "{bl:?}");
    let members: Vec<usize> = bl.group.iter().map(|(_, p)| p.point_index).collect();
    assert_eq!(members, [3, 5]);
    let pooled = bl.pooled.as_ref().unwrap();
    assert_eq!(
        (pooled.s_per_token, pooled.lo, pooled.hi, pooled.n),
        (0.45, Some(0.44), Some(0.46), 6)
    );
    assert_eq!(
        bottom(&r),
        "**Bottom line:** the smallest budget that decodes within 10 % of the fastest point is \
         **c**, with direct and mmap within noise of each other: pick any (none, together 0.4500 \
         [0.4400–0.4600] s/token over 6 runs); the fastest median is direct's (0.4500 [0.4400–0.4600] \
         s/token); also within noise of direct (not significantly different): direct at d.\n\n"
    );
}

#[test]
fn a_group_whose_budget_is_not_decided_is_no_answer() {
    // The group at c, and direct at b at 0.5 every run: 0.5 / 0.45 = 1.111 > 1.10
    // (b is not the knee), but when B's replicate median is 0.46 (7/27 ≈ 26 %) the
    // ratio is 0.5 / 0.46 = 1.087 ≤ 1.10: its 2.5th percentile is 1.087. Clearing 1.10
    // needs the lower half-width 1.1111 − 1.0870 = 0.0242 below 1.1111 − 1.10 =
    // 0.0111: 3 · (0.0242 / 0.0111)² = 14.18 → 15 runs, 12 more.
    let (mut s, mut runs) = alike_at_c();
    s[2].s_per_token = Some(0.5);
    runs.insert(2, vec![vec![0.5; 3]; 3]);
    let mut r = recommend(&s, &runs.clone().into());
    let bl = r.bottom_line.as_ref().unwrap();
    assert!(!bl.clear());
    assert_eq!((bl.more_repeats, bl.runs_to_decide), (Some(12), Some(15)));
    assert_eq!(
        bottom(&r),
        "**Bottom line: no clear answer at this noise level** — about 12 more repeats per point or a \
         quieter machine would decide it. Best guess: **c**, with direct and mmap within noise of each \
         other (none, together 0.4500 [0.4400–0.4600] s/token over 6 runs); the fastest median is \
         direct's (0.4500 [0.4400–0.4600] s/token). Not decided because direct at b (1.11× the fastest \
         [1.09–…]) may be within 10 % of the fastest point too.\n\n"
    );
    // Under `repeats = "auto"` more repeats means a higher limit; when the points
    // stopped before it (precision reached), a tighter precision.
    let auto = |max_repeats| crate::sweep::spec::AutoRepeats {
        precision: 0.05,
        min_repeats: 3,
        max_repeats,
    };
    r.bottom_line.as_mut().unwrap().auto = Some(auto(5));
    assert!(bottom(&r).contains(
        "— raising `max_repeats` (now 5) to about 15 (about 12 more repeats per point), or a quieter machine, would decide it."
    ));
    r.bottom_line.as_mut().unwrap().auto = Some(auto(20));
    assert!(bottom(&r).contains(
        "— about 12 more repeats per point (a `precision` tighter than ±5 %: the points stopped there) or a quieter machine would decide it."
    ));
}

#[test]
fn an_interval_wider_than_a_quarter_of_its_median_is_no_answer() {
    // c's interval [0.2, 0.8] is ±0.3/0.46 = ±65.2 % of its median. From 3 runs,
    // ±25 % needs 3 · (0.6522 / 0.25)² = 20.4 → 21 runs: 18 more.
    let mut s = grid();
    let runs = constant_runs(&mut s);
    (s[3].s_per_token_lo, s[3].s_per_token_hi) = (Some(0.2), Some(0.8));
    let r = recommend(&s, &runs.clone().into());
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
    let r = recommend(&s, &runs.clone().into());
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
    let r = recommend(&s, &Default::default());
    assert_eq!(r.noisy_runs, 15);
    assert!(r.markdown(&label).contains(
        "**Bottom line: no answer** — no quiet runs to recommend from: 15 finished run(s) were marked noisy"
    ));
    // Some noisy runs: the answer from the quiet ones, and the count said.
    let mut s = grid();
    let runs = constant_runs(&mut s);
    s[0].noisy = 1;
    let md = bottom(&recommend(&s, &runs.clone().into()));
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
    let r = recommend_steady(&s, &runs.clone().into());
    assert_eq!(r.start, "warm");
    assert_eq!(r.overall_knee.as_ref().unwrap().1.point_index, 3);
    let c = r.cold_beside.as_ref().unwrap();
    assert_eq!(c.point_index, 8);
    let md = bottom(&r);
    assert!(md.contains("fastest point (warm start: expert cache and trunk slots filled before the first token, the steady state) is **c**"), "{md}");
    assert!(md.contains("Cold start at the same point (p8: empty caches, as a fresh process sees its first tokens): TTFT 3.000 s (warm 0.500 s), decode 0.9200 [0.9200–0.9200] s/token."), "{md}");
}

/// The busy-machine half of the promise: runs the noise sentinel marked noisy
/// (`memdial::tools::noise`'s fake-`/proc` tests: two busy loops are 2.00 cores of others')
/// are left out, and the answer is then the quiet sweep's or "cannot decide" —
/// never a different confident one. The quiet grid answers c with direct.
#[test]
fn noisy_runs_give_the_same_answer_or_none_never_another() {
    let quiet = {
        let mut s = grid();
        let runs = constant_runs(&mut s);
        recommend(&s, &runs.clone().into())
    };
    assert!(quiet.bottom_line.as_ref().unwrap().clear());
    let answer = |r: &Recommendation| {
        r.overall_knee
            .as_ref()
            .map(|(io, k)| (io.clone(), k.budget_spec.clone()))
    };
    // Every run of `points` noisy (the figures become the noisy runs', used for
    // nothing), or one run of each (two quiet runs left).
    let busy = |points: &[usize], all: bool| {
        let mut s = grid();
        let mut runs = constant_runs(&mut s);
        for x in s.iter_mut().filter(|x| points.contains(&x.point_index)) {
            if all {
                (x.noisy, x.noisy_only) = (3, true);
                runs.remove(&x.point_index);
            } else {
                (x.n, x.noisy) = (2, 1);
                runs.get_mut(&x.point_index).unwrap().pop();
            }
        }
        recommend(&s, &runs.clone().into())
    };
    let cases = [
        // The answer's own runs: d would be next, but c is unmeasured.
        (busy(&[3], true), false),
        // The fastest point's: c would be fastest, but d could be faster.
        (busy(&[4], true), false),
        // A smaller budget's: it could be the answer.
        (busy(&[2], true), false),
        // One run of every point: two quiet runs each still decide it.
        (busy(&[0, 1, 2, 3, 4], false), true),
    ];
    for (i, (r, clear)) in cases.iter().enumerate() {
        let bl = r.bottom_line.as_ref().unwrap();
        assert_eq!(bl.clear(), *clear, "case {i}: {bl:?}");
        if bl.clear() {
            assert_eq!(answer(r), answer(&quiet), "case {i}");
        } else {
            let md = bottom(r);
            assert!(
                md.starts_with(
                    "**Bottom line: no clear answer at this noise level** — a quieter machine would decide it (more runs on a busy one would be noisy too)."
                ),
                "case {i}: {md}"
            );
        }
    }
    let md = bottom(&cases[0].0);
    assert!(
        md.contains("Not decided because direct at c (p3) has no quiet run (all 3 marked noisy): it could be the answer or the fastest point."),
        "{md}"
    );
    assert!(md.contains("Best guess: **d** with **direct**"), "{md}");
}
