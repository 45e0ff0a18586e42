//! Speed of each engine against the reference engine at the same point (budget, IO
//! mode, prefetch, cache, threads, prompt): the ratio of median s/token with its
//! 95 % interval, by the two-level bootstrap of [`memdial::util::stats::bootstrap`].
//!
//! An engine at its best ([`at_best`]): when a sweep runs several settings of one
//! adapter as engines of their own (`[engine.llama-fast] adapter = "llama.cpp"`, other
//! `env` / `io`), the rule is: the **speed** figure at a point is that adapter's fastest
//! engine there; the **agreement** figure is the engine named after the adapter (the
//! built-in settings, chosen to keep its ids comparable across IO modes); both are shown
//! when they differ.

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

/// One adapter at one (budget, IO mode): its fastest engine and the one whose ids
/// are compared.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct AtBest {
    /// The adapter (`llama.cpp`).
    pub adapter: String,
    /// Budget as written.
    pub budget_spec: String,
    /// Budget, bytes.
    pub budget_bytes: u64,
    /// IO mode.
    pub io: String,
    /// Its fastest engine here (lowest median s/token) and that figure against the
    /// reference.
    pub fastest: EngineRatio,
    /// The engine named after the adapter (its ids are the compared ones), when it ran
    /// here.
    pub comparable: Option<EngineRatio>,
}

/// Per adapter with more than one engine in `engines` (name, adapter), per (budget,
/// IO mode): [`AtBest`] from `ratios`. Empty when no adapter has several engines.
pub fn at_best(ratios: &[EngineRatio], engines: &[(String, String)]) -> Vec<AtBest> {
    let adapter_of = |e: &str| engines.iter().find(|(n, _)| n == e).map(|(_, a)| a.clone());
    let mut out: Vec<AtBest> = vec![];
    for r in ratios {
        let Some(adapter) = adapter_of(&r.engine) else {
            continue;
        };
        if engines.iter().filter(|(_, a)| *a == adapter).count() < 2 {
            continue;
        }
        let here =
            |b: &AtBest| b.adapter == adapter && b.budget_spec == r.budget_spec && b.io == r.io;
        let i = match out.iter().position(here) {
            Some(i) => i,
            None => {
                out.push(AtBest {
                    adapter: adapter.clone(),
                    budget_spec: r.budget_spec.clone(),
                    budget_bytes: r.budget_bytes,
                    io: r.io.clone(),
                    fastest: r.clone(),
                    comparable: None,
                });
                out.len() - 1
            }
        };
        let b = &mut out[i];
        if r.s_per_token < b.fastest.s_per_token {
            b.fastest = r.clone();
        }
        if r.engine == adapter {
            b.comparable = Some(r.clone());
        }
    }
    out
}

/// The Markdown table of [`at_best`] (empty without several engines of one adapter).
pub fn at_best_markdown(v: &[AtBest], reference: &str) -> String {
    let mut s = String::new();
    if v.is_empty() {
        return s;
    }
    let _ = writeln!(
        s,
        "### Other engines at their best

Several settings of one engine ran as engines of their own: the speed figure is its fastest \
         engine at each point, the agreement figure the engine named after the adapter (its built-in settings, which keep its ids \
         comparable); both are shown when they differ. Ratios are engine / {reference} s/token.\n\n\
         | adapter | budget | io | fastest | ratio [95% CI] | ids compared | ratio [95% CI] |\n|---|---|---|---|---|---|---|"
    );
    for b in v {
        let cmp = match &b.comparable {
            Some(c) if c.engine == b.fastest.engine => ("the same".to_string(), String::new()),
            Some(c) => (
                format!("{} {:.4} s/token", c.engine, c.s_per_token),
                c.ratio.describe(),
            ),
            None => ("– (not run here)".to_string(), String::new()),
        };
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} {:.4} s/token | {} | {} | {} |",
            b.adapter,
            crate::sweep::spec::budget_label(&b.budget_spec, b.budget_bytes),
            b.io,
            b.fastest.engine,
            b.fastest.s_per_token,
            b.fastest.ratio.describe(),
            cmp.0,
            cmp.1
        );
    }
    s.push('\n');
    s
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

#[cfg(test)]
mod tests {
    use super::*;

    fn r(engine: &str, budget: &str, io: &str, s: f64) -> EngineRatio {
        EngineRatio {
            engine: engine.into(),
            point_index: 0,
            reference_point: 0,
            budget_spec: budget.into(),
            budget_bytes: 1,
            io: io.into(),
            s_per_token: s,
            reference_s_per_token: 0.1,
            ratio: Ratio {
                ratio: s / 0.1,
                lo: None,
                hi: None,
                significant: None,
            },
        }
    }

    #[test]
    fn the_fastest_settings_give_speed_and_the_adapters_own_the_agreement() {
        let engines = [
            ("memdial".to_string(), "memdial".to_string()),
            ("llama.cpp".to_string(), "llama.cpp".to_string()),
            ("llama.cpp-fast".to_string(), "llama.cpp".to_string()),
            ("kimi-k3-in-c".to_string(), "kimi-k3-in-c".to_string()),
        ];
        let ratios = [
            r("llama.cpp", "100%", "mmap", 0.30),
            r("llama.cpp-fast", "100%", "mmap", 0.12),
            r("llama.cpp", "floor", "mmap", 0.90),
            r("llama.cpp-fast", "floor", "mmap", 0.95),
            // One engine of its adapter: no "at its best" row.
            r("kimi-k3-in-c", "100%", "mmap", 0.5),
        ];
        let b = at_best(&ratios, &engines);
        assert_eq!(b.len(), 2);
        assert_eq!(
            (b[0].budget_spec.as_str(), b[0].fastest.engine.as_str()),
            ("100%", "llama.cpp-fast")
        );
        assert_eq!(b[0].comparable.as_ref().unwrap().engine, "llama.cpp");
        // Under load the built-in settings can be the fastest: then one figure.
        assert_eq!(b[1].fastest.engine, "llama.cpp");
        let md = at_best_markdown(&b, "memdial");
        assert!(md.contains("| llama.cpp | 100%"), "{md}");
        assert!(md.contains("the same"), "{md}");
        assert!(at_best(&ratios[4..], &engines).is_empty());
    }
}
