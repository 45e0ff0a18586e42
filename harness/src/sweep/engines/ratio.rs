//! Speed of each engine against the reference engine at the same point (budget, IO
//! mode, prefetch, cache, threads, prompt): the ratio of median s/token with its
//! 95 % interval, by the two-level bootstrap of [`memdial::util::stats::bootstrap`].

use std::fmt::Write as _;

use serde::Serialize;

use crate::sweep::analysis::stats::PointStats;
use crate::sweep::spec::engines::def::engine_or_default;
use memdial::util::stats::bootstrap::Ratio;

/// One engine point against the reference engine's point.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct EngineRatio {
    /// Engine compared.
    pub engine: String,
    /// Its point.
    pub point_index: usize,
    /// The reference engine's point at the same axes.
    pub reference_point: usize,
    /// Budget as written.
    pub budget_spec: String,
    /// Budget, bytes.
    pub budget_bytes: u64,
    /// IO mode.
    pub io: String,
    /// Engine's median s/token.
    pub s_per_token: f64,
    /// Reference's median s/token.
    pub reference_s_per_token: f64,
    /// s/token of the engine over the reference's (above 1: the engine is slower).
    pub ratio: Ratio,
}

/// Every engine point with a finished reference point at the same axes.
pub fn against_reference(
    stats: &[PointStats],
    runs: &crate::sweep::analysis::stats::PointRuns,
    reference: &str,
) -> Vec<EngineRatio> {
    let ok = |p: &&PointStats| !p.below_floor && p.n > 0 && p.s_per_token.is_some();
    let mut out = vec![];
    for a in stats.iter().filter(ok) {
        if engine_or_default(&a.engine) == reference {
            continue;
        }
        let Some(b) = stats.iter().filter(ok).find(|b| {
            engine_or_default(&b.engine) == reference
                && b.budget_spec == a.budget_spec
                && b.io == a.io
                && b.prefetch == a.prefetch
                && b.cache == a.cache
                && b.threads == a.threads
                && b.prompt_index == a.prompt_index
                && b.start == a.start
                && b.layout == a.layout
        }) else {
            continue;
        };
        if let Some(r) = runs.ratio(a.point_index, b.point_index) {
            out.push(EngineRatio {
                engine: a.engine.clone(),
                point_index: a.point_index,
                reference_point: b.point_index,
                budget_spec: a.budget_spec.clone(),
                budget_bytes: a.budget_bytes,
                io: a.io.clone(),
                s_per_token: a.s_per_token.unwrap_or(f64::NAN),
                reference_s_per_token: b.s_per_token.unwrap_or(f64::NAN),
                ratio: r,
            });
        }
    }
    out
}

/// The Markdown table of [`against_reference`].
pub fn markdown(v: &[EngineRatio], reference: &str) -> String {
    let mut s = String::new();
    if v.is_empty() {
        return s;
    }
    let _ = writeln!(
        s,
        "## Engines against {reference}\n\nAt each point both engines ran: the ratio of median s/token (engine / {reference}) with its 95 % interval \
         (same bootstrap as the intervals above); above 1 the engine is slower.\n"
    );
    let _ = writeln!(
        s,
        "| engine | budget | io | engine s/token | {reference} s/token | ratio [95% CI] |\n|---|---|---|---|---|---|"
    );
    for r in v {
        let _ = writeln!(
            s,
            "| {} (p{}) | {} | {} | {:.4} | {:.4} (p{}) | {} |",
            r.engine,
            r.point_index,
            crate::sweep::spec::budget_label(&r.budget_spec, r.budget_bytes),
            r.io,
            r.s_per_token,
            r.reference_s_per_token,
            r.reference_point,
            r.ratio.describe()
        );
    }
    s.push('\n');
    s
}
