//! Same-budget comparisons: at each budget, every IO mode against `direct` (same
//! prefetch policy) and every prefetch policy against `none` (same IO mode), as a
//! ratio of s/token with its 95 % interval and significance under the method of
//! [`memdial::util::stats::bootstrap`]. Points with `over_budget` runs are left out: their speed is
//! not comparable.

use serde::Serialize;

use super::stats::PointStats;
use memdial::util::stats::bootstrap::Ratio;

/// One comparison A/B at the same budget.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct SameBudget {
    /// Budget as written in the spec.
    pub budget_spec: String,
    /// `io` (A and B differ in IO mode) or `prefetch`.
    pub axis: String,
    /// The other axis' shared value (prefetch policy for `io`, IO mode for `prefetch`).
    pub fixed: String,
    /// Point A (the one compared).
    pub a_point: usize,
    /// A's value on `axis`.
    pub a: String,
    /// Point B (the reference: `direct` or `none`).
    pub b_point: usize,
    /// B's value on `axis`.
    pub b: String,
    /// s/token of A over B (above 1: A is slower).
    pub ratio: Ratio,
}

impl SameBudget {
    /// `mmap is 1.32× slower [1.20–1.45], significant` and the like.
    pub fn verdict(&self) -> String {
        let r = &self.ratio;
        let (word, f) = r.in_words();
        match r.significant {
            None => format!("{} {f:.2}× {word}: insufficient repeats", self.a),
            Some(true) => format!("{} {f:.2}× {word} (significant)", self.a),
            Some(false) => format!("{} vs {}: no significant difference", self.a, self.b),
        }
    }
}

/// Comparisons of every comparable pair, in point order.
pub fn same_budget(
    stats: &[PointStats],
    runs: &crate::sweep::analysis::stats::PointRuns,
) -> Vec<SameBudget> {
    let usable: Vec<&PointStats> = stats
        .iter()
        .filter(|p| {
            !p.below_floor
                && !p.noisy_only
                && p.n > 0
                && p.over_budget == 0
                && p.s_per_token.is_some()
        })
        .collect();
    let mut out = vec![];
    for a in &usable {
        for (axis, reference) in [("io", "direct"), ("prefetch", "none")] {
            let (mine, fixed) = match axis {
                "io" => (&a.io, &a.prefetch),
                _ => (&a.prefetch, &a.io),
            };
            if mine == reference {
                continue;
            }
            let b = usable.iter().find(|b| {
                b.budget_spec == a.budget_spec
                    && b.engine == a.engine
                    && b.start == a.start
                    && b.layout == a.layout
                    && b.cache == a.cache
                    && b.threads == a.threads
                    && b.prompt_index == a.prompt_index
                    && match axis {
                        "io" => b.io == reference && b.prefetch == a.prefetch,
                        _ => b.prefetch == reference && b.io == a.io,
                    }
            });
            let Some(b) = b else { continue };
            if let Some(r) = runs.ratio(a.point_index, b.point_index) {
                out.push(SameBudget {
                    budget_spec: a.budget_spec.clone(),
                    axis: axis.into(),
                    fixed: fixed.clone(),
                    a_point: a.point_index,
                    a: mine.clone(),
                    b_point: b.point_index,
                    b: reference.into(),
                    ratio: r,
                });
            }
        }
    }
    out
}
