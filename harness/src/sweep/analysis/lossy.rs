//! A lossy layout (`rvqN`) against the exact one: its own verdict class, never
//! "identical".
//!
//! Per (lossy layout, prompt, max_tokens), from the exact layouts' ids `E` (the
//! verdict's group majority), the lossy runs' ids `L`, and two teacher-forced logits
//! runs on the same input — the prompt followed by `E` without its last id, so row
//! `P − 1 + k` of each predicts generated token `k` — over the `n = |E|` generated
//! positions:
//!
//! - **top-1 agreement**: the share of positions where the lossy row's argmax is the
//!   exact row's (ties: the lowest id);
//! - **logit deviation** of a position: `max_v |l_v − e_v| / max_v |e_v|` (0 when the
//!   exact row is all zeros and the rows are equal, infinite when only it is), and its
//!   **max** and **median** over the positions (the median of an even count is the
//!   mean of the middle two);
//! - **first differing generated token**: the first position where `L` and `E`
//!   differ (`None`: identical ids, which says nothing of the logits).
//!
//! A spec's `[lossy.NAME] min_top1` is what `--check` fails on; without one the
//! figures are reported and never fail the sweep. A lossy layout whose agreement could
//! not be measured says so, and fails only when it has a limit to meet.

use std::path::Path;

use serde::{Deserialize, Serialize};

/// Where the lossy step writes its figures, in the run directory.
pub const AGREEMENT_FILE: &str = "lossy/agreement.json";

/// One lossy layout on one (prompt, max_tokens).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct LossyAgreement {
    /// The lossy layout (`rvq3`).
    pub layout: String,
    /// Prompt index.
    pub prompt_index: usize,
    /// Generated tokens requested.
    pub max_tokens: usize,
    /// Teacher-forced positions compared (the exact ids' count; 0 when not measured).
    pub positions: usize,
    /// Share (0…1) of positions whose top-1 token agrees.
    pub top1_agreement: Option<f64>,
    /// Largest relative logit deviation over the positions.
    pub logit_max_rel_dev: Option<f64>,
    /// Median relative logit deviation over the positions.
    pub logit_median_rel_dev: Option<f64>,
    /// First generated position (0-based) where the lossy ids differ from the exact
    /// ones; `None` when they are identical.
    pub first_diff_token: Option<usize>,
    /// The spec's `min_top1` for this layout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_top1: Option<f64>,
    /// Why the figures are missing (no exact or no lossy run, the logits run failed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_measured: Option<String>,
}

impl LossyAgreement {
    /// The entry fails its limit: a `min_top1` not met, or not measured at all.
    pub fn fails(&self) -> bool {
        match (self.min_top1, self.top1_agreement) {
            (None, _) => false,
            (Some(t), Some(a)) => a < t,
            (Some(_), None) => true,
        }
    }
}

/// The figures of `n` teacher-forced positions: (top-1 agreement, max and median
/// relative logit deviation). `exact` and `lossy` are `n · vocab` row-major.
/// Errors: the slices are not `n · vocab` long, `n` or `vocab` is 0.
pub fn figures(
    exact: &[f32],
    lossy: &[f32],
    n: usize,
    vocab: usize,
) -> anyhow::Result<(f64, f64, f64)> {
    if n == 0 || vocab == 0 || exact.len() != n * vocab || lossy.len() != n * vocab {
        anyhow::bail!(
            "logits of {} and {} values for {n} positions of {vocab}",
            exact.len(),
            lossy.len()
        );
    }
    let mut agree = 0usize;
    let mut devs = Vec::with_capacity(n);
    for (e, l) in exact.chunks_exact(vocab).zip(lossy.chunks_exact(vocab)) {
        agree += usize::from(argmax(e) == argmax(l));
        devs.push(rel_dev(e, l));
    }
    devs.sort_by(f64::total_cmp);
    let median = if n % 2 == 1 {
        devs[n / 2]
    } else {
        (devs[n / 2 - 1] + devs[n / 2]) / 2.0
    };
    Ok((agree as f64 / n as f64, devs[n - 1], median))
}

/// Index of the largest value (the lowest index among equals).
pub fn argmax(row: &[f32]) -> usize {
    let mut best = 0;
    for (i, &x) in row.iter().enumerate() {
        if x > row[best] {
            best = i;
        }
    }
    best
}

/// `max_v |l_v − e_v| / max_v |e_v|` in f64.
fn rel_dev(e: &[f32], l: &[f32]) -> f64 {
    let (mut num, mut den) = (0f64, 0f64);
    for (&a, &b) in e.iter().zip(l) {
        num = num.max((b as f64 - a as f64).abs());
        den = den.max((a as f64).abs());
    }
    if num == 0.0 {
        0.0
    } else if den == 0.0 {
        f64::INFINITY
    } else {
        num / den
    }
}

/// `measured` completed against the verdict's lossy `groups` (depth 0): every lossy
/// (layout, prompt, max_tokens) with finished runs gets an entry — a missing one is
/// `not measured` (its exact and lossy runs finished in different shards, or the sweep
/// stopped before the agreement step) — and each carries its layout's `min_top1` from
/// `limits`, so a limit is never dropped with the figures.
pub fn complete(
    mut measured: Vec<LossyAgreement>,
    groups: &[super::verdict::Group],
    limits: &std::collections::BTreeMap<String, crate::sweep::layout::LossyLimits>,
) -> Vec<LossyAgreement> {
    for g in groups
        .iter()
        .filter(|g| !g.lossy_layout.is_empty() && g.depth == 0)
    {
        let key = |a: &LossyAgreement| {
            a.layout == g.lossy_layout
                && a.prompt_index == g.prompt_index
                && a.max_tokens == g.max_tokens
        };
        if !measured.iter().any(key) {
            measured.push(LossyAgreement {
                layout: g.lossy_layout.clone(),
                prompt_index: g.prompt_index,
                max_tokens: g.max_tokens,
                positions: 0,
                top1_agreement: None,
                logit_max_rel_dev: None,
                logit_median_rel_dev: None,
                first_diff_token: None,
                min_top1: None,
                not_measured: Some(
                    "no agreement measured here (its exact and lossy runs finished in different \
                     shards, or the sweep stopped before the agreement step): run the sweep \
                     unsharded, or resume it"
                        .into(),
                ),
            });
        }
    }
    for a in &mut measured {
        if let Some(t) = limits.get(&a.layout).and_then(|l| l.min_top1) {
            a.min_top1 = Some(t);
        }
    }
    measured
}

/// The verdict line's part for the lossy layouts (empty without them): `; rvq3
/// (lossy): top-1 agreement 0.333 over 6 positions, first differing token 1 (meets
/// min_top1 0.3)` per layout and prompt, the first two named.
pub fn line_part(all: &[LossyAgreement]) -> String {
    let mut parts: Vec<String> = all
        .iter()
        .take(2)
        .map(|a| {
            let at = match a.first_diff_token {
                Some(k) => format!("first differing token {k}"),
                None => "identical ids".into(),
            };
            let figures = match (a.top1_agreement, &a.not_measured) {
                (Some(t), _) => format!(
                    "top-1 agreement {t:.3} over {} position(s), {at}",
                    a.positions
                ),
                (None, why) => format!("agreement not measured ({})", why.as_deref().unwrap_or("")),
            };
            let limit = match a.min_top1 {
                None => String::new(),
                Some(m) if a.fails() => format!(" — BELOW min_top1 {m}"),
                Some(m) => format!(" (meets min_top1 {m})"),
            };
            format!(
                "{} (lossy), prompt {}: {figures}{limit}",
                a.layout, a.prompt_index
            )
        })
        .collect();
    if all.len() > 2 {
        let failing = all.iter().filter(|a| a.fails()).count();
        parts.push(format!(
            "{} more (failing limits in all: {failing})",
            all.len() - 2
        ));
    }
    parts.iter().map(|p| format!("; {p}")).collect()
}

/// The report's section for the lossy layouts (empty without them): the agreement
/// table, then each lossy point against safetensors (`pairs`).
pub fn markdown(all: &[LossyAgreement], pairs: &[super::layouts::LayoutPair]) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    if all.is_empty() && pairs.is_empty() {
        return s;
    }
    let _ = writeln!(
        s,
        "## Lossy layouts: agreement with the exact layout\n\n\
         A lossy layout's ids are never counted as identical: its runs must agree among \
         themselves (the verdict's own groups), and are compared here with the exact layout. \
         Teacher-forced on the prompt and the exact ids: top-1 agreement is the share of \
         positions whose argmax matches the exact model's; a position's logit deviation is \
         max |lossy − exact| ÷ max |exact|. Only a `[lossy.NAME] min_top1` fails the sweep. \
         The budget recommendation leaves lossy points out.\n"
    );
    if !all.is_empty() {
        let _ = writeln!(
            s,
            "| layout | prompt | max_tokens | positions | top-1 agreement | logit dev. max | logit dev. median | first differing token | min_top1 |\n\
             |---|---|---|---|---|---|---|---|---|"
        );
        let f = |x: Option<f64>| x.map_or("–".to_string(), |v| format!("{v:.4}"));
        for a in all {
            let limit = match a.min_top1 {
                None => "–".to_string(),
                Some(m) if a.fails() => format!("{m} **not met**"),
                Some(m) => format!("{m} met"),
            };
            let first = match (&a.not_measured, a.first_diff_token) {
                (Some(why), _) => format!("not measured: {why}"),
                (None, Some(k)) => k.to_string(),
                (None, None) => "none (identical ids)".into(),
            };
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {} | {} | {first} | {limit} |",
                a.layout,
                a.prompt_index,
                a.max_tokens,
                a.positions,
                f(a.top1_agreement),
                f(a.logit_max_rel_dev),
                f(a.logit_median_rel_dev),
            );
        }
        s.push('\n');
    }
    if !pairs.is_empty() {
        let _ = writeln!(
            s,
            "What it buys, at the same point (medians of quiet runs; ratio below 1: the lossy layout is faster or reads less):\n\n\
             | layout | budget | io / prefetch | s/token (lossy / exact) | s/token ratio [95% CI] | read/token (lossy / exact) |\n\
             |---|---|---|---|---|---|"
        );
        let b =
            |x: Option<f64>| x.map_or("–".to_string(), |v| format!("{:.2} MiB", v / 1048576.0));
        for r in pairs {
            let _ = writeln!(
                s,
                "| {} | {} | {} / {} | {:.4} / {:.4} (p{} / p{}) | {} | {} / {} |",
                r.layout,
                crate::sweep::spec::budget_label(&r.budget_spec, r.budget_bytes),
                r.io,
                r.prefetch,
                r.s_per_token,
                r.reference_s_per_token,
                r.point,
                r.reference_point,
                r.s_per_token_ratio.describe(),
                b(r.bytes_read_per_token),
                b(r.reference_bytes_read_per_token),
            );
        }
        s.push('\n');
    }
    s
}

/// The lossy figures of run directory `dir` (`None`: the sweep has no lossy layout,
/// or its step wrote nothing).
pub fn load(dir: &Path) -> Option<Vec<LossyAgreement>> {
    let t = std::fs::read_to_string(dir.join(AGREEMENT_FILE)).ok()?;
    serde_json::from_str(&t).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Three positions of a 4-token vocabulary, worked by hand:
    /// - p0: exact [1, 4, 2, 0] (argmax 1), lossy [1, 3, 2.5, 0] (argmax 1): agree;
    ///   deviation max(0, 1, 0.5, 0) / 4 = 0.25;
    /// - p1: exact [0, -2, 1, 0] (argmax 2), lossy [0, -2, 0.5, 1] (argmax 3): differ;
    ///   deviation max(0, 0, 0.5, 1) / 2 = 0.5;
    /// - p2: exact [3, 3, 0, 0] (argmax 0, the tie to the lowest), lossy the same: agree;
    ///   deviation 0.
    ///
    /// top-1 2/3; max 0.5; median of [0, 0.25, 0.5] = 0.25.
    #[test]
    fn figures_of_hand_worked_positions() {
        let exact = [1.0, 4.0, 2.0, 0.0, 0.0, -2.0, 1.0, 0.0, 3.0, 3.0, 0.0, 0.0];
        let lossy = [1.0, 3.0, 2.5, 0.0, 0.0, -2.0, 0.5, 1.0, 3.0, 3.0, 0.0, 0.0];
        let (top1, max, median) = figures(&exact, &lossy, 3, 4).unwrap();
        assert_eq!(top1, 2.0 / 3.0);
        assert_eq!(max, 0.5);
        assert_eq!(median, 0.25);
        // Even count: the median is the mean of the middle two ([0.25, 0.5] → 0.375).
        let (t, m, md) = figures(&exact[..8], &lossy[..8], 2, 4).unwrap();
        assert_eq!((t, m, md), (0.5, 0.5, 0.375));
        assert!(figures(&exact, &lossy, 2, 4).is_err());
        assert!(figures(&[], &[], 0, 4).is_err());
    }

    #[test]
    fn a_lossy_group_without_figures_is_not_measured_and_keeps_its_limit() {
        let g = |lossy: &str| crate::sweep::analysis::verdict::Group {
            engine: String::new(),
            lossy_layout: lossy.into(),
            prompt_index: 0,
            depth: 0,
            max_tokens: 6,
            hash: "h".into(),
            reference_run: "p1-r0".into(),
            runs: 2,
            mismatches: vec![],
            text_only: false,
        };
        let limits: std::collections::BTreeMap<String, crate::sweep::layout::LossyLimits> = [(
            "rvq3".to_string(),
            crate::sweep::layout::LossyLimits {
                min_top1: Some(0.5),
            },
        )]
        .into();
        // A merge of shards: no figures, the exact and the lossy group apart.
        let all = complete(vec![], &[g(""), g("rvq3")], &limits);
        assert_eq!(all.len(), 1, "one entry per lossy group");
        assert!(all[0]
            .not_measured
            .as_deref()
            .unwrap()
            .contains("different shards"));
        assert_eq!(all[0].min_top1, Some(0.5));
        assert!(all[0].fails(), "a limit that could not be checked fails");
        assert!(!complete(vec![], &[g("rvq3")], &Default::default())[0].fails());
    }

    #[test]
    fn a_limit_fails_only_when_unmet_or_unmeasured() {
        let mut a = LossyAgreement {
            layout: "rvq3".into(),
            prompt_index: 0,
            max_tokens: 4,
            positions: 4,
            top1_agreement: Some(0.75),
            logit_max_rel_dev: Some(0.3),
            logit_median_rel_dev: Some(0.1),
            first_diff_token: Some(2),
            min_top1: None,
            not_measured: None,
        };
        assert!(!a.fails(), "no limit: reported, never failed");
        a.min_top1 = Some(0.75);
        assert!(!a.fails());
        a.min_top1 = Some(0.8);
        assert!(a.fails());
        a.top1_agreement = None;
        a.min_top1 = None;
        assert!(!a.fails());
        a.min_top1 = Some(0.0);
        assert!(a.fails(), "a limit that could not be checked fails");
    }
}
