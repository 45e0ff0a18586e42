//! The report's depth section: per point of the `depth` axis
//! ([`crate::sweep::depth`]), decode seconds and bytes read per token against the
//! same point at depth 0, and the time the context's prefill took.

use std::fmt::Write as _;

use crate::sweep::analysis::stats::PointStats;
use crate::sweep::record::row::Row;

fn cell(v: Option<f64>, f: impl Fn(f64) -> String) -> String {
    v.map_or("–".into(), f)
}

/// The section: per point (budget, settings, prompt, depth), its median decode
/// s/token and bytes read per token (the per-point medians of the table of medians),
/// their ratios to the same point at depth 0, and the median `depth_prefill_s` of its
/// measured runs. Empty unless the points hold more than one depth.
pub fn markdown(stats: &[PointStats], rows: &[Row]) -> String {
    if !crate::sweep::write::depth_chart::several_depths(stats) {
        return String::new();
    }
    let mut s = String::from(
        "## Depth: decode after a context\n\n\
         `memdial run --depth N` (docs/run.md#depth): N deterministic context tokens are \
         prefilled before the prompt (timed apart, `depth_prefill_s`), then the prompt, then \
         decode is timed. Every depth of a budget runs at the same bytes (the floor of the \
         deepest point); the verdict compares ids within a depth. Medians per point, against \
         the same point at depth 0.\n\n\
         | budget | io / prefetch | threads | prompt | depth | runs | s / token | × depth 0 | bytes / token | × depth 0 | depth prefill s |\n\
         | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n",
    );
    let mut ordered: Vec<&PointStats> = stats.iter().filter(|p| p.n > 0).collect();
    ordered.sort_by_key(|p| (p.budget_bytes, p.point_index));
    for p in ordered {
        let shallow_key = p
            .point_key
            .replace(&format!(";depth={}", p.depth), ";depth=0");
        let shallow = stats.iter().find(|o| o.point_key == shallow_key && o.n > 0);
        let ratio = |f: fn(&PointStats) -> Option<f64>| {
            (p.depth > 0)
                .then(|| f(p).zip(shallow.and_then(f)).map(|(a, b)| a / b))
                .flatten()
        };
        let prefill: Vec<f64> = rows
            .iter()
            .filter(|r| r.point_index == p.point_index && r.is_measured_ok())
            .filter_map(|r| r.metrics.depth_prefill_s)
            .collect();
        let _ = writeln!(
            s,
            "| {} | {} / {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            crate::sweep::spec::budget_label(&p.budget_spec, p.budget_bytes),
            p.io,
            p.prefetch,
            p.threads,
            p.prompt_index,
            p.depth,
            p.n,
            cell(p.s_per_token, |x| format!("{x:.4}")),
            cell(ratio(|p| p.s_per_token), |x| format!("{x:.3}")),
            cell(p.bytes_read_per_token, |x| memdial::util::units::fmt_bytes(
                x as u64
            )),
            cell(ratio(|p| p.bytes_read_per_token), |x| format!("{x:.3}")),
            cell(memdial::util::stats::median(&prefill), |x| format!(
                "{x:.4}"
            )),
        );
    }
    s.push('\n');
    s
}
