//! The sections of `report.md` that set points against something: the baseline, the
//! same budget's other IO modes and prefetch policies, the layouts, served runs, speculation,
//! and the charts.

use std::fmt::Write as _;

use super::contents::*;
use super::{concurrency, depth, speculation};

/// The comparison with the baseline, when one was given.
pub(super) fn baseline_md(s: &mut String, c: &Sections) {
    let Sections { baseline, .. } = *c;
    if let Some(b) = baseline {
        let _ = writeln!(
            s,
            "## Baseline\n\nAgainst `{}`, tolerance {:.0}%: {} points compared, {} regressed, {} without a baseline.\n",
            b.path.display(),
            b.tolerance * 100.0,
            b.compared.len(),
            b.regressions().len(),
            b.missing.len()
        );
        if let Some(why) = b.undecided_reason() {
            let _ = writeln!(s, "**The gate cannot decide:** {why}.\n");
            for (k, why) in &b.undecided {
                let _ = writeln!(s, "- undecided `{k}`: {why}");
            }
            if !b.undecided.is_empty() {
                s.push('\n');
            }
        }
        if !b.compared.is_empty() {
            let _ = writeln!(
                s,
                "| point | baseline s/token | now s/token | change | now / baseline [95% CI] | |\n|---|---|---|---|---|---|"
            );
            for c in &b.compared {
                let _ = writeln!(
                    s,
                    "| p{} `{}` | {:.4} | {:.4} | {:+.1}% | {} | {} |",
                    c.point_index,
                    c.point_key,
                    c.old_s_per_token,
                    c.new_s_per_token,
                    c.change * 100.0,
                    c.ratio.describe(),
                    if c.regressed {
                        "**regressed**"
                    } else if c.change > b.tolerance {
                        "slower, not significant"
                    } else {
                        "ok"
                    }
                );
            }
            s.push('\n');
        }
    }
}

/// IO modes and prefetch policies compared at the same budget.
pub(super) fn same_budget_md(s: &mut String, c: &Sections) {
    let Sections { rows, stats, .. } = *c;
    let runs = crate::sweep::analysis::stats::point_runs(rows);
    let cmps = crate::sweep::analysis::compare::same_budget(stats, &runs);
    if !cmps.is_empty() {
        let _ = writeln!(
            s,
            "## Same-budget comparisons\n\nAt each budget, each IO mode against `direct` (same prefetch policy) and each prefetch policy against `none` (same IO mode): \
             the ratio of s/token with its 95 % interval; significant when the interval excludes 1 (same bootstrap as the intervals above). \
             Points with over-budget runs are left out.\n"
        );
        let _ = writeln!(
            s,
            "| budget | compared | s/token ratio [95% CI] | verdict |\n|---|---|---|---|"
        );
        for c in &cmps {
            let _ = writeln!(
                s,
                "| {} | p{} {} / p{} {} ({} {}) | {} | {} |",
                c.budget_spec,
                c.a_point,
                c.a,
                c.b_point,
                c.b,
                if c.axis == "io" { "prefetch" } else { "io" },
                c.fixed,
                c.ratio.describe(),
                c.verdict()
            );
        }
        s.push('\n');
    }
}

/// The lossless layout against safetensors (sweeps with both layouts).
pub(super) fn layouts_md(s: &mut String, c: &Sections) {
    s.push_str(&crate::sweep::analysis::layouts::markdown(&c.v.layouts));
    s.push_str(&crate::sweep::analysis::layouts::raw_markdown(
        &c.v.layout_pairs,
    ));
    let lossless = c.stats.iter().any(|p| p.layout == "lossless" && p.n > 0);
    if c.v.layouts.is_empty() && lossless {
        s.push_str(
            "## Layouts: lossless against safetensors\n\nNo comparison yet: no `lossless` point has a \
             `safetensors` point at the same axes with quiet measured runs and no over-budget run \
             (noisy runs decide nothing: see Noise).\n\n",
        );
    }
}

/// The lossy layouts' agreement and what they buy (sweeps with an `rvqN` layout).
pub(super) fn lossy_md(s: &mut String, c: &Sections) {
    s.push_str(&crate::sweep::analysis::lossy::markdown(
        &c.v.lossy,
        &c.v.lossy_pairs,
    ));
}

/// Served runs against ordinary ones (sweeps with the `concurrency` axis).
pub(super) fn concurrency_md(s: &mut String, c: &Sections) {
    s.push_str(&concurrency::markdown(c.rows));
}

pub(super) fn speculation_md(s: &mut String, c: &Sections) {
    s.push_str(&speculation::markdown(c.rows));
}

/// Decode against the context depth (sweeps with several values of the `depth` axis).
pub(super) fn depth_md(s: &mut String, c: &Sections) {
    s.push_str(&depth::markdown(c.stats, c.rows));
}

/// The charts and how to read them, and the files of the directory.
pub(super) fn charts_md(s: &mut String, c: &Sections) {
    let Sections {
        rows,
        stats,
        chart_err,
        ..
    } = *c;
    let _ = writeln!(s, "## Charts\n");
    if let Some(e) = chart_err {
        let _ = writeln!(s, "Charts could not be drawn: {e:#}\n");
    }
    let _ = writeln!(
        s,
        "![decode time vs budget](curve.svg)\n\n\
         How to read it: one panel per IO mode (same axes), one line per prefetch policy (colour and marker shape); a marker is the median s/token of a point, \
         the whisker its 95 % interval (min–max over repeats when there are too few for one); a hollow marker was not held to its budget by a memory cgroup. \
         Lines measured at the same budget are shifted right by up to 5 % so they do not hide each other (never past the model size). Both axes are logarithmic. The dashed vertical line in a line's colour is \
         its floor (the smallest budget that runs); the black line is the model size. Moving right trades memory for \
         speed; a flat stretch means extra memory buys nothing, a steep one means the budget is the bottleneck.\n"
    );
    let _ = writeln!(
        s,
        "![bytes read and IO wait vs budget](io.svg)\n\n\
         Top: bytes read from disk per decoded token (falls as more of the model stays resident). \
         Bottom: share of generation time (prefill + decode) spent waiting for IO (what prefetch tries to hide).\n"
    );
    if c.meta.predictions.is_some() {
        let _ = writeln!(
            s,
            "![predicted vs measured decode time](predicted.svg)\n\n\
             The spec's trace replayed at every point: one panel per start, one colour per IO mode and prefetch policy; \
             the dashed line is the predicted s/token, a marker the measured median with its 95 % interval (section \
             \"Predicted vs measured\").\n"
        );
    }
    let long = !super::super::ttft_chart::long_prompt_points(stats, rows).is_empty();
    if long {
        let _ = writeln!(
            s,
            "![time to first token vs budget](ttft.svg)\n\n\
             Time to first token (prefill of the prompt, then the first token chosen) of the points whose prompt has at least {} tokens, \
             against the budget: one line per IO mode and prefetch policy, the median of the repeats, same markers, floors and model-size line as the decode curve. \
             Within a prefill chunk each routed expert is read once, so below the model size this is dominated by the distinct experts each chunk needs.\n",
            super::super::ttft_chart::LONG_PROMPT_TOKENS
        );
    }
    let deep = super::super::depth_chart::several_depths(stats);
    if deep {
        let _ = writeln!(
            s,
            "![decode time vs context depth](depth.svg)\n\n\
             Decode s/token against the context tokens prefilled before the prompt (the `depth` axis, `memdial run --depth`): \
             one line per budget (and IO mode / prefetch policy), a marker per point (median) with its 95 % interval. \
             Every depth of a budget runs at the same bytes (the deepest point's floor), so a rising line is the cost of the \
             longer context: the MLA latent cache grows with it, a KDA state does not.\n"
        );
    }
    let served = rows.iter().any(|r| r.concurrency() > 1);
    if served {
        let _ = writeln!(
            s,
            "![aggregate tokens/s and goodput vs concurrency](concurrency.svg)\n\n\
             Aggregate tokens/s (top) and, with the spec's `slo`, goodput — requests meeting both its targets per second — \
             (bottom) against concurrent clients: one line per budget, IO mode / prefetch and threads, the median over each \
             point's quiet runs (section \"Concurrency\").\n"
        );
    }
    let _ = writeln!(
        s,
        "Files: `results.csv` / `results.json` (one row per run, schema in docs/results.md), `verdict.json`, \
         `curve.svg`/`curve.png`, `io.svg`/`io.png`{}{}{}{}, `runs/<point>-<repeat>/` (metrics.json, stdout, stderr of each run).",
        if long { ", `ttft.svg`/`ttft.png`" } else { "" },
        if deep { ", `depth.svg`/`depth.png`" } else { "" },
        if c.meta.predictions.is_some() { ", `predicted.svg`/`predicted.png`" } else { "" },
        if served { ", `concurrency.svg`/`concurrency.png`" } else { "" }
    );
}
