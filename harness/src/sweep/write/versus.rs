//! `memdial compare`'s tables: Markdown (stdout and `compare.md`), CSV and JSON.

use memdial::util::units::fmt_bytes;

use crate::export::md_cell;
use crate::sweep::analysis::versus::{PointVersus, Versus};

/// The CSV columns, in order.
pub const COLUMNS: &[&str] = &[
    "point_key",
    "budget_bytes",
    "prompt_tokens",
    "max_tokens",
    "a_runs",
    "b_runs",
    "a_noisy",
    "b_noisy",
    "a_s_per_token",
    "b_s_per_token",
    "ratio",
    "ratio_lo",
    "ratio_hi",
    "significant",
    "p_welch",
    "regressed",
];

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map(|x| x.to_string()).unwrap_or_default()
}

fn record(p: &PointVersus) -> Vec<String> {
    vec![
        p.point_key.clone(),
        p.budget_bytes.to_string(),
        opt(p.prompt_tokens),
        p.max_tokens.to_string(),
        p.a_runs.to_string(),
        p.b_runs.to_string(),
        p.a_noisy.to_string(),
        p.b_noisy.to_string(),
        p.a_s_per_token.to_string(),
        p.b_s_per_token.to_string(),
        p.ratio.ratio.to_string(),
        opt(p.ratio.lo),
        opt(p.ratio.hi),
        opt(p.ratio.significant),
        opt(p.p_welch),
        p.regressed.to_string(),
    ]
}

/// The comparison as CSV (header [`COLUMNS`], one row per matched point).
pub fn csv(v: &Versus) -> anyhow::Result<Vec<u8>> {
    let mut w = csv::Writer::from_writer(vec![]);
    w.write_record(COLUMNS)?;
    for p in &v.points {
        w.write_record(record(p))?;
    }
    Ok(w.into_inner()?)
}

/// The comparison as Markdown: the `--check` line, one table row per matched point
/// (B relative to A), then the points only one side has.
pub fn markdown(v: &Versus, a: &str, b: &str) -> String {
    let mut o = format!(
        "# memdial compare\n\nA: `{}`  \nB: `{}`\n\n{}\n\n",
        md_cell(a),
        md_cell(b),
        v.line()
    );
    o += "| point | budget | A s/token (runs) | B s/token (runs) | B/A [95 %] | p (Welch) | verdict |\n";
    o += "|---|---|---|---|---|---|---|\n";
    for p in &v.points {
        let ci = match (p.ratio.lo, p.ratio.hi) {
            (Some(l), Some(h)) => format!("{:.3} [{l:.3}–{h:.3}]", p.ratio.ratio),
            _ => format!("{:.3}", p.ratio.ratio),
        };
        let noisy = |n: usize| {
            if n > 0 {
                format!(", {n} noisy left out")
            } else {
                String::new()
            }
        };
        o += &format!(
            "| {} | {} | {:.4} ({}{}) | {:.4} ({}{}) | {ci} | {} | {}{} |\n",
            md_cell(&p.point_key),
            fmt_bytes(p.budget_bytes),
            p.a_s_per_token,
            p.a_runs,
            noisy(p.a_noisy),
            p.b_s_per_token,
            p.b_runs,
            noisy(p.b_noisy),
            p.p_welch.map(|x| format!("{x:.3}")).unwrap_or("–".into()),
            p.verdict(),
            if p.regressed { " **regression**" } else { "" }
        );
    }
    for (side, list) in [("A", &v.only_a), ("B", &v.only_b)] {
        if !list.is_empty() {
            o += &format!("\nOnly in {side} ({}):\n", list.len());
            for (k, bytes) in list {
                o += &format!("- {} ({})\n", md_cell(k), fmt_bytes(*bytes));
            }
        }
    }
    o += "\nB/A is the ratio of the medians over runs of each run's median s/token (above 1: B is \
          slower); its interval and significance are the two-level bootstrap's, p is Welch's t-test \
          on log run medians (docs/statistics.md).\n";
    o
}
