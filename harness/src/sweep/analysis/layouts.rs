//! The packed layouts against safetensors at the same point (budget, IO mode,
//! prefetch, cache, threads, prompt, engine, start): s/token and bytes read per
//! token as ratios with their 95 % intervals ([`memdial::util::stats::bootstrap`]), and what the
//! lossless runs decoded. Both layouts of a point run at the same budget (a budget
//! relative to the floor resolves against the larger floor), so the ratio is the
//! layout's effect alone. Points with over-budget runs, or only noisy runs, are
//! left out. With the `raw` control in the sweep, [`against_raw`] splits the
//! comparison: raw / safetensors (what the layout buys) and lossless / raw (what
//! coding buys).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use super::stats::PointStats;
use crate::sweep::record::row::Row;
use memdial::util::stats::bootstrap::{ratio_of_run_values, Ratio};
use memdial::util::stats::median;

/// One `lossless` point against the `safetensors` point at the same axes.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct LayoutRatio {
    /// Budget as written.
    pub budget_spec: String,
    /// Budget, bytes (the same for both points).
    pub budget_bytes: u64,
    /// IO mode.
    pub io: String,
    /// Prefetch policy.
    pub prefetch: String,
    /// The `lossless` point.
    pub lossless_point: usize,
    /// The `safetensors` point.
    pub safetensors_point: usize,
    /// Floor of the lossless layout, bytes (its staging buffers included).
    pub lossless_floor_bytes: u64,
    /// Floor of the safetensors layout, bytes.
    pub safetensors_floor_bytes: u64,
    /// Median s/token of the lossless point.
    pub lossless_s_per_token: f64,
    /// Median s/token of the safetensors point.
    pub safetensors_s_per_token: f64,
    /// s/token lossless / safetensors (below 1: the lossless layout is faster).
    pub s_per_token_ratio: Ratio,
    /// Median bytes read per decoded token (`bytes_read_per_token`), lossless.
    pub lossless_bytes_read_per_token: Option<f64>,
    /// The same, safetensors.
    pub safetensors_bytes_read_per_token: Option<f64>,
    /// Bytes read per token lossless / safetensors, over runs (one value each).
    pub bytes_read_per_token_ratio: Option<Ratio>,
    /// Median device bytes per decoded token (`device_read_bytes_per_token`), lossless.
    pub lossless_device_read_bytes_per_token: Option<f64>,
    /// The same, safetensors.
    pub safetensors_device_read_bytes_per_token: Option<f64>,
    /// Median bytes the lossless runs decoded per token.
    pub decoded_bytes_per_token: Option<f64>,
    /// Median IO-thread CPU seconds the lossless runs spent checking and decoding
    /// blocks, per token.
    pub decode_cpu_s_per_token: Option<f64>,
}

fn usable(p: &PointStats) -> bool {
    !p.below_floor && !p.noisy_only && p.n > 0 && p.over_budget == 0 && p.s_per_token.is_some()
}

/// Per-run values of `f` over the runs the statistics use, per point.
fn per_run(rows: &[Row], f: impl Fn(&Row) -> Option<f64>) -> BTreeMap<usize, Vec<f64>> {
    let mut by: BTreeMap<usize, Vec<f64>> = BTreeMap::new();
    for r in rows.iter().filter(|r| r.is_measured_quiet()) {
        if let Some(x) = f(r).filter(|x| x.is_finite()) {
            by.entry(r.point_index).or_default().push(x);
        }
    }
    by
}

/// Every `lossless` point with a usable `safetensors` point at the same axes.
pub fn against_safetensors(
    stats: &[PointStats],
    runs: &crate::sweep::analysis::stats::PointRuns,
    rows: &[Row],
) -> Vec<LayoutRatio> {
    let bytes = per_run(rows, |r| r.metrics.bytes_read_per_token);
    let device = per_run(rows, |r| r.metrics.device_read_bytes_per_token);
    let decoded = per_run(rows, |r| r.metrics.lossless_decoded_bytes_per_token);
    let cpu = per_run(rows, |r| r.metrics.lossless_decode_s_per_token);
    let med = |m: &BTreeMap<usize, Vec<f64>>, i: usize| m.get(&i).and_then(|v| median(v));
    let mut out = vec![];
    for a in stats.iter().filter(|p| usable(p) && p.layout == "lossless") {
        let Some(b) = partner(stats, a, "safetensors") else {
            continue;
        };
        let seed = ((a.point_index as u64) << 32) | b.point_index as u64;
        let Some(s_ratio) = runs.ratio(a.point_index, b.point_index) else {
            continue;
        };
        let (i, j) = (a.point_index, b.point_index);
        out.push(LayoutRatio {
            budget_spec: a.budget_spec.clone(),
            budget_bytes: a.budget_bytes,
            io: a.io.clone(),
            prefetch: a.prefetch.clone(),
            lossless_point: i,
            safetensors_point: j,
            lossless_floor_bytes: a.floor_bytes,
            safetensors_floor_bytes: b.floor_bytes,
            lossless_s_per_token: a.s_per_token.unwrap_or(f64::NAN),
            safetensors_s_per_token: b.s_per_token.unwrap_or(f64::NAN),
            s_per_token_ratio: s_ratio,
            lossless_bytes_read_per_token: med(&bytes, i),
            safetensors_bytes_read_per_token: med(&bytes, j),
            bytes_read_per_token_ratio: match (bytes.get(&i), bytes.get(&j)) {
                (Some(x), Some(y)) => ratio_of_run_values(x, y, seed ^ 0xb7e5),
                _ => None,
            },
            lossless_device_read_bytes_per_token: med(&device, i),
            safetensors_device_read_bytes_per_token: med(&device, j),
            decoded_bytes_per_token: med(&decoded, i),
            decode_cpu_s_per_token: med(&cpu, i),
        });
    }
    out
}

/// The usable point of layout `layout` at the same axes as `a` (budget, IO mode,
/// prefetch, cache, threads, prompt, engine, start).
fn partner<'a>(stats: &'a [PointStats], a: &PointStats, layout: &str) -> Option<&'a PointStats> {
    let axes = |p: &PointStats| {
        (
            p.budget_spec.clone(),
            p.io.clone(),
            p.prefetch.clone(),
            p.cache.clone(),
            p.threads,
            p.prompt_index,
            p.engine.clone(),
            p.start.clone(),
        )
    };
    stats
        .iter()
        .filter(|p| usable(p))
        .find(|b| b.layout == layout && axes(b) == axes(a))
}

/// One layout against another at the same point: the raw control against safetensors
/// (what the layout's grouping and placement buy) or lossless against raw (what
/// coding buys).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct LayoutPair {
    /// The layout compared (`raw`, `lossless` or a lossy `rvqN`).
    pub layout: String,
    /// The layout it is compared with (`safetensors` or `raw`).
    pub reference: String,
    /// `layout` (raw / safetensors), `compression` (lossless / raw) or `lossy`
    /// (rvqN / safetensors).
    pub buys: String,
    /// Budget as written.
    pub budget_spec: String,
    /// Budget, bytes (the same for both points).
    pub budget_bytes: u64,
    /// IO mode.
    pub io: String,
    /// Prefetch policy.
    pub prefetch: String,
    /// The point of `layout`.
    pub point: usize,
    /// The point of `reference`.
    pub reference_point: usize,
    /// Median s/token of `point`.
    pub s_per_token: f64,
    /// Median s/token of `reference_point`.
    pub reference_s_per_token: f64,
    /// s/token layout / reference with its 95 % interval (below 1: `layout` is faster).
    pub s_per_token_ratio: Ratio,
    /// Median bytes read per token of `point`.
    pub bytes_read_per_token: Option<f64>,
    /// Median bytes read per token of `reference_point`.
    pub reference_bytes_read_per_token: Option<f64>,
    /// Bytes read per token layout / reference, over runs (one value each).
    pub bytes_read_per_token_ratio: Option<Ratio>,
}

/// With a `raw` layout in the sweep: every raw point against safetensors and every
/// lossless point against raw, at the same axes (empty without raw points).
pub fn against_raw(
    stats: &[PointStats],
    runs: &crate::sweep::analysis::stats::PointRuns,
    rows: &[Row],
) -> Vec<LayoutPair> {
    if !stats.iter().any(|p| p.layout == "raw") {
        return vec![];
    }
    pairs(
        stats,
        runs,
        rows,
        &[
            ("raw", "safetensors", "layout"),
            ("lossless", "raw", "compression"),
        ],
    )
}

/// Every lossy layout's point (`rvqN`) against safetensors at the same axes: what the
/// lossy trade buys in time and bytes (`buys` = `lossy`).
pub fn lossy_against_safetensors(
    stats: &[PointStats],
    runs: &crate::sweep::analysis::stats::PointRuns,
    rows: &[Row],
) -> Vec<LayoutPair> {
    let mut lossy: Vec<&str> = stats
        .iter()
        .map(|p| p.layout.as_str())
        .filter(|l| crate::sweep::layout::LayoutKind::parse(l).is_some_and(|k| k.is_lossy()))
        .collect();
    lossy.sort();
    lossy.dedup();
    let which: Vec<(&str, &str, &str)> = lossy
        .into_iter()
        .map(|l| (l, "safetensors", "lossy"))
        .collect();
    pairs(stats, runs, rows, &which)
}

/// Each usable point of a layout against the point of its reference layout at the
/// same axes, for each (layout, reference, buys) of `which`.
fn pairs(
    stats: &[PointStats],
    runs: &crate::sweep::analysis::stats::PointRuns,
    rows: &[Row],
    which: &[(&str, &str, &str)],
) -> Vec<LayoutPair> {
    let bytes = per_run(rows, |r| r.metrics.bytes_read_per_token);
    let med = |i: usize| bytes.get(&i).and_then(|v| median(v));
    let mut out = vec![];
    for &(layout, reference, buys) in which {
        for a in stats.iter().filter(|p| usable(p) && p.layout == layout) {
            let Some(b) = partner(stats, a, reference) else {
                continue;
            };
            let (i, j) = (a.point_index, b.point_index);
            let seed = ((i as u64) << 32) | j as u64;
            let Some(s_ratio) = runs.ratio(i, j) else {
                continue;
            };
            out.push(LayoutPair {
                layout: layout.into(),
                reference: reference.into(),
                buys: buys.into(),
                budget_spec: a.budget_spec.clone(),
                budget_bytes: a.budget_bytes,
                io: a.io.clone(),
                prefetch: a.prefetch.clone(),
                point: i,
                reference_point: j,
                s_per_token: a.s_per_token.unwrap_or(f64::NAN),
                reference_s_per_token: b.s_per_token.unwrap_or(f64::NAN),
                s_per_token_ratio: s_ratio,
                bytes_read_per_token: med(i),
                reference_bytes_read_per_token: med(j),
                bytes_read_per_token_ratio: match (bytes.get(&i), bytes.get(&j)) {
                    (Some(x), Some(y)) => ratio_of_run_values(x, y, seed ^ 0xb7e5),
                    _ => None,
                },
            });
        }
    }
    out
}

/// The raw-control table of the `## Layouts` section (empty without raw points).
pub fn raw_markdown(v: &[LayoutPair]) -> String {
    let mut s = String::new();
    if v.is_empty() {
        return s;
    }
    let _ = writeln!(
        s,
        "### The raw control: what the layout buys, what coding buys\n\n\
         `raw` is the lossless layout's blocks, grouping and file placement with every block stored uncoded (`memdial pack --raw`). \
         raw / safetensors is what the layout buys; lossless / raw is what coding buys. Ratios with their 95 % intervals as above; below 1 the first layout is faster or reads less.\n"
    );
    let _ = writeln!(
        s,
        "| buys | budget | io / prefetch | layouts | s/token | s/token ratio [95% CI] | read/token | read/token ratio [95% CI] |\n\
         |---|---|---|---|---|---|---|---|"
    );
    for r in v {
        let _ = writeln!(
            s,
            "| {} | {} | {} / {} | {} / {} | {:.4} / {:.4} (p{} / p{}) | {} | {} / {} | {} |",
            r.buys,
            crate::sweep::spec::budget_label(&r.budget_spec, r.budget_bytes),
            r.io,
            r.prefetch,
            r.layout,
            r.reference,
            r.s_per_token,
            r.reference_s_per_token,
            r.point,
            r.reference_point,
            fmt_ratio(&r.s_per_token_ratio),
            bytes(r.bytes_read_per_token),
            bytes(r.reference_bytes_read_per_token),
            r.bytes_read_per_token_ratio
                .as_ref()
                .map(fmt_ratio)
                .unwrap_or_else(|| "–".into()),
        );
    }
    s.push('\n');
    s
}

/// `0.776× [0.741–0.812], significant`: three decimals, the targets' precision.
fn fmt_ratio(r: &Ratio) -> String {
    match (r.lo, r.hi, r.significant) {
        (Some(l), Some(h), Some(s)) => format!(
            "{:.3}× [{l:.3}–{h:.3}], {}",
            r.ratio,
            if s { "significant" } else { "not significant" }
        ),
        _ => format!("{:.3}×, insufficient repeats", r.ratio),
    }
}

fn bytes(v: Option<f64>) -> String {
    v.map(|x| memdial::util::units::fmt_bytes(x.max(0.0).round() as u64))
        .unwrap_or_else(|| "–".into())
}

/// The `## Layouts` section of `report.md` (empty without a layout comparison).
pub fn markdown(v: &[LayoutRatio]) -> String {
    let mut s = String::new();
    if v.is_empty() {
        return s;
    }
    let _ = writeln!(
        s,
        "## Layouts: lossless against safetensors\n\n\
         At each point both layouts ran at the same budget (a budget relative to the floor resolves against the larger of the two floors). \
         Ratios are lossless / safetensors with their 95 % intervals (s/token: the two-level bootstrap above; bytes read per token: the runs resampled, one value each); \
         below 1 the lossless layout is faster or reads less. Read/token is bytes read from the model files per decoded token (coded bytes for the lossless layout); \
         decoded/token and decode CPU/token are what the lossless runs' IO threads decoded and the CPU time they spent on it (columns \
         `lossless_decoded_bytes_per_token`, `lossless_decode_s_per_token`). The ids are compared by the verdict above.\n"
    );
    let _ = writeln!(
        s,
        "| budget | io / prefetch | floors safetensors / lossless | s/token safetensors | s/token lossless | s/token ratio [95% CI] | read/token safetensors | read/token lossless | read/token ratio [95% CI] | decoded/token | decode CPU/token |\n\
         |---|---|---|---|---|---|---|---|---|---|---|"
    );
    for r in v {
        let _ = writeln!(
            s,
            "| {} | {} / {} | {} / {} | {:.4} (p{}) | {:.4} (p{}) | {} | {} | {} | {} | {} | {} |",
            crate::sweep::spec::budget_label(&r.budget_spec, r.budget_bytes),
            r.io,
            r.prefetch,
            memdial::util::units::fmt_bytes(r.safetensors_floor_bytes),
            memdial::util::units::fmt_bytes(r.lossless_floor_bytes),
            r.safetensors_s_per_token,
            r.safetensors_point,
            r.lossless_s_per_token,
            r.lossless_point,
            fmt_ratio(&r.s_per_token_ratio),
            bytes(r.safetensors_bytes_read_per_token),
            bytes(r.lossless_bytes_read_per_token),
            r.bytes_read_per_token_ratio
                .as_ref()
                .map(fmt_ratio)
                .unwrap_or_else(|| "–".into()),
            bytes(r.decoded_bytes_per_token),
            r.decode_cpu_s_per_token
                .map(|x| format!("{x:.4} s"))
                .unwrap_or_else(|| "–".into()),
        );
    }
    s.push('\n');
    s
}
