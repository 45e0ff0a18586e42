//! One drawer for the charts of a per-point figure against the memory budget: the
//! decode curve (`curve.svg`, s/token) and the time-to-first-token chart
//! (`ttft.svg`). A [`Metric`] says which figure, its whiskers, its axis title and
//! how the series are laid out; the set-up, the y range, the floors, markers, the
//! model-size line and the legend are drawn once here.

use anyhow::Result;
use memdial::util::units::fmt_bytes;
use plotters::coord::Shift;
use plotters::prelude::*;

use super::chart_parts::{
    budget_panel, empty, format_secs, legend, marker, pe, series, whisker, x_range, BudgetFrame,
    Series, CAP, COLORS,
};
use crate::sweep::analysis::anomaly::Anomaly;
use crate::sweep::analysis::stats::PointStats;

/// A figure drawn against the budget and how its chart is laid out.
pub(super) struct Metric {
    /// The point's figure (seconds); points without one (or ≤ 0) are not drawn.
    pub(super) value: fn(&PointStats) -> Option<f64>,
    /// The point's whisker `(lo, hi)`, if the chart draws whiskers.
    pub(super) whisker: fn(&PointStats) -> Option<(f64, f64)>,
    /// The y axis title.
    pub(super) y_desc: &'static str,
    /// The y range when no point has a figure.
    pub(super) fallback: (f64, f64),
    /// One panel per IO mode, colours by the rest of the label, the floor and
    /// cgroup keys in the legend (the decode curve); else one panel, a colour per
    /// line.
    pub(super) per_io: bool,
}

/// Decode time (s/token, median), whiskers the 95 % interval (else min–max), one
/// panel per IO mode.
pub(super) const DECODE: Metric = Metric {
    value: |p| p.s_per_token,
    whisker,
    y_desc: "decode time (s/token, log scale)",
    fallback: (1e-3, 1.0),
    per_io: true,
};

/// Time to first token (s, median), no whiskers, one panel.
pub(super) const TTFT: Metric = Metric {
    value: |p| p.ttft_s,
    whisker: |_| None,
    y_desc: "time to first token (s, log scale)",
    fallback: (1e-2, 1.0),
    per_io: false,
};

/// Draws `m` (log) against budget (log): one line per series, markers at the medians
/// (filled when every run was held to its budget by a memory cgroup, hollow
/// otherwise), whiskers where `m` has them, floors dashed vertical lines in the
/// line's colour, the model size a solid black line. Lines at the same budget are
/// shifted sideways by up to 5 % (`charts::series`), whiskers with their markers,
/// never onto or past the model-size line. The y axis is drawn as log10 on a linear
/// scale so tick labels span the range. A point of `marks` (slower than a smaller
/// budget of its line, [`crate::sweep::analysis::anomaly`]) is ringed in red and
/// labelled `pN`; the panel's legend names the causes.
pub(super) fn draw<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    stats: &[PointStats],
    model_bytes: Option<u64>,
    title: &str,
    m: &Metric,
    marks: &[Anomaly],
    own_floors: bool,
) -> Result<()> {
    let value = |p: &PointStats| (m.value)(p).filter(|v| *v > 0.0);
    let ser: Vec<Series> = series(stats, model_bytes, own_floors)
        .into_iter()
        .filter(|s| s.pts.iter().any(|p| (m.value)(&p.1).is_some()))
        .collect();
    if ser.is_empty() {
        return empty(&root, title);
    }
    root.fill(&WHITE).map_err(pe)?;
    let root = root.titled(title, ("sans-serif", 22)).map_err(pe)?;
    let (x0, x1) = x_range(&ser, model_bytes);
    let (y0, y1) = y_range(&ser, m);
    let (ly0, ly1) = (y0.log10(), y1.log10());
    let (ios, keys) = panels_and_keys(&ser, m);
    let panels = root.split_evenly((1, ios.len()));
    for (pi, (area, io)) in panels.iter().zip(&ios).enumerate() {
        let y_fmt = |v: &f64| format_secs(10f64.powf(*v));
        let frame = BudgetFrame {
            caption: m.per_io.then(|| format!("io = {io}")),
            margin: if m.per_io { 10 } else { 12 },
            label_areas: (52, if pi == 0 { 78 } else { 52 }),
            y_desc: if pi == 0 { m.y_desc } else { "" },
            ticks: (if m.per_io { 6 } else { 8 }, Some(12)),
            y_fmt: Some(&y_fmt),
            fonts: (12, 14),
        };
        let mut chart = budget_panel(area, (x0, x1), ly0..ly1, &frame)?;
        for s in ser.iter().filter(|s| !m.per_io || &s.io == io) {
            let key = if m.per_io { &s.rest } else { &s.label };
            let k = keys.iter().position(|r| r == key).unwrap_or(0);
            let c = COLORS[k % COLORS.len()];
            // A median of noisy runs only is drawn apart, off the line.
            let line: Vec<(f64, f64)> = s
                .pts
                .iter()
                .filter(|(_, p)| !p.noisy_only)
                .filter_map(|(x, p)| value(p).map(|y| (*x, y.log10())))
                .collect();
            chart
                .draw_series(LineSeries::new(line, c.stroke_width(2)))
                .map_err(pe)?
                .label(s.label.clone())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 22, y)], c.stroke_width(2))
                });
            for (x, p) in &s.pts {
                let Some(y) = value(p) else { continue };
                let c = if p.noisy_only { NOISY } else { c };
                if let Some((lo, hi)) = (m.whisker)(p) {
                    let b = match model_bytes.map(|m| m as f64) {
                        Some(m) if *x < m => (x * CAP).min(m),
                        _ => x * CAP,
                    };
                    let a = x / CAP;
                    let (lo, hi) = (lo.log10(), hi.log10());
                    chart
                        .draw_series([
                            PathElement::new(vec![(*x, lo), (*x, hi)], c.stroke_width(1)),
                            PathElement::new(vec![(a, lo), (b, lo)], c.stroke_width(1)),
                            PathElement::new(vec![(a, hi), (b, hi)], c.stroke_width(1)),
                        ])
                        .map_err(pe)?;
                }
                let filled = p.unenforced == 0 && p.over_budget == 0 && !p.noisy_only;
                marker(&mut chart, (*x, y.log10()), k, c, filled)?;
                ring(&mut chart, (*x, y.log10()), p.point_index, marks)?;
            }
        }
        let panel: Vec<&Series> = ser.iter().filter(|s| !m.per_io || &s.io == io).collect();
        floor_lines(&mut chart, &panel, &keys, m.per_io, (ly0, ly1))?;
        legend_marks(
            &mut chart,
            &panel_marks(marks, &ser, m.per_io.then_some(io)),
        )?;
        if let Some(mb) = model_bytes {
            let mb = mb as f64;
            chart
                .draw_series(LineSeries::new(
                    vec![(mb, ly0), (mb, ly1)],
                    BLACK.stroke_width(1),
                ))
                .map_err(pe)?
                .label(format!("model size ({})", fmt_bytes(mb as u64)))
                .legend(|(x, y)| {
                    PathElement::new(vec![(x, y), (x + 22, y)], BLACK.stroke_width(1))
                });
        }
        if m.per_io {
            legend_keys(&mut chart, stats)?;
        }
        legend(&mut chart, 12)?;
    }
    root.present().map_err(pe)
}

/// The y range of the chart: every drawn value and whisker end, widened so a flat
/// figure still spans a readable range (`m.fallback` when nothing is drawn).
fn y_range(ser: &[Series], m: &Metric) -> (f64, f64) {
    let value = |p: &PointStats| (m.value)(p).filter(|v| *v > 0.0);
    let (mut y0, mut y1) = (f64::INFINITY, 0f64);
    for (_, p) in ser.iter().flat_map(|s| &s.pts) {
        let w = (m.whisker)(p);
        for v in [value(p), w.map(|w| w.0), w.map(|w| w.1)]
            .into_iter()
            .flatten()
            .filter(|v| *v > 0.0)
        {
            y0 = y0.min(v);
            y1 = y1.max(v);
        }
    }
    if !y0.is_finite() {
        (y0, y1) = m.fallback;
    }
    if y1 / y0 < 4.0 {
        let c = (y0 * y1).sqrt();
        (c / 2.5, c * 2.5)
    } else {
        (y0 / 1.3, y1 * 1.3)
    }
}

/// The floors of a panel's lines: dashed vertical lines in each line's colour, each
/// distinct one labelled at its top, `memdial floor 39.00 MiB`, `llama.cpp floor
/// 50.00 MiB` (several engines at one floor share one label; labels of nearby floors
/// step down so they do not overlap).
fn floor_lines<DB: DrawingBackend>(
    chart: &mut Chart<'_, DB>,
    panel: &[&Series],
    keys: &[String],
    per_io: bool,
    (ly0, ly1): (f64, f64),
) -> Result<()> {
    let mut floors: Vec<(f64, Vec<String>, RGBColor)> = vec![];
    for s in panel.iter().filter(|s| s.floor > 0.0) {
        let key = if per_io { &s.rest } else { &s.label };
        let c = COLORS[keys.iter().position(|r| r == key).unwrap_or(0) % COLORS.len()];
        chart
            .draw_series(DashedLineSeries::new(
                vec![(s.floor, ly0), (s.floor, ly1)],
                6,
                4,
                c.stroke_width(2),
            ))
            .map_err(pe)?;
        match floors.iter_mut().find(|f| f.0 == s.floor) {
            Some(f) if f.1.contains(&s.engine) => {}
            Some(f) => f.1.push(s.engine.clone()),
            None => floors.push((s.floor, vec![s.engine.clone()], c)),
        }
    }
    floors.sort_by(|a, b| a.0.total_cmp(&b.0));
    let step = (ly1 - ly0) * 0.045;
    let mut row = 0usize;
    let mut prev: Option<f64> = None;
    for (x, engines, c) in floors {
        // Within a factor 2 of the previous floor: one row lower.
        row = match prev {
            Some(p) if x / p < 2.0 => row + 1,
            _ => 0,
        };
        prev = Some(x);
        let label = format!("{} floor {}", engines.join(", "), fmt_bytes(x as u64));
        chart
            .draw_series([EmptyElement::at((x, ly1 - step * (row as f64 + 0.4)))
                + Text::new(label, (4, 0), ("sans-serif", 12).into_font().color(&c))])
            .map_err(pe)?;
    }
    Ok(())
}

/// The panels (IO modes when `m.per_io`, else one) and the keys that pick a line's
/// colour and shape, in first-seen order.
fn panels_and_keys(ser: &[Series], m: &Metric) -> (Vec<String>, Vec<String>) {
    let mut ios: Vec<String> = vec![];
    let mut keys: Vec<String> = vec![];
    for s in ser {
        let io = if m.per_io {
            s.io.clone()
        } else {
            String::new()
        };
        if !ios.contains(&io) {
            ios.push(io);
        }
        let key = if m.per_io { &s.rest } else { &s.label };
        if !keys.contains(key) {
            keys.push(key.clone());
        }
    }
    (ios, keys)
}

/// The chart's coordinates: budget (log) × log10 of the figure.
type Chart<'a, DB> =
    ChartContext<'a, DB, Cartesian2d<LogCoord<f64>, plotters::coord::types::RangedCoordf64>>;

/// A red ring around the marker at `at` of point `point` and its name beside it,
/// when `marks` has the point.
fn ring<DB: DrawingBackend>(
    chart: &mut Chart<'_, DB>,
    at: (f64, f64),
    point: usize,
    marks: &[Anomaly],
) -> Result<()> {
    if !marks.iter().any(|a| a.point_index == point) {
        return Ok(());
    }
    chart
        .draw_series([EmptyElement::at(at)
            + Circle::new((0, 0), 10, RED.stroke_width(2))
            + Text::new(
                format!("p{point}"),
                (11, -16),
                ("sans-serif", 12).into_font().color(&RED),
            )])
        .map_err(pe)?;
    Ok(())
}

/// The anomalies `marks` drawn in the panel of IO mode `io` (every one when the chart
/// has a single panel).
fn panel_marks<'a>(marks: &'a [Anomaly], ser: &[Series], io: Option<&String>) -> Vec<&'a Anomaly> {
    marks
        .iter()
        .filter(|a| {
            ser.iter()
                .filter(|s| io.is_none_or(|io| &s.io == io))
                .any(|s| s.pts.iter().any(|(_, p)| p.point_index == a.point_index))
        })
        .collect()
}

/// The legend entries of the ringed points of a panel: `ringed: slower than a
/// smaller budget`, then one short line per cause (its words up to the first colon)
/// with the points it explains, `cold cache: p19`, `noisy runs: p6, p18` (at most
/// four named each; report.md's medians table has every cause in full).
fn legend_marks<DB: DrawingBackend>(chart: &mut Chart<'_, DB>, marks: &[&Anomaly]) -> Result<()> {
    if marks.is_empty() {
        return Ok(());
    }
    chart
        .draw_series(std::iter::empty::<PathElement<(f64, f64)>>())
        .map_err(pe)?
        .label("ringed: slower than a smaller budget")
        .legend(|(x, y)| Circle::new((x + 8, y), 6, RED.stroke_width(2)));
    let mut by_cause: Vec<(String, Vec<usize>)> = vec![];
    for a in marks {
        for c in &a.causes {
            let why = c.split(':').next().unwrap_or(c).to_string();
            match by_cause.iter_mut().find(|(w, _)| *w == why) {
                Some((_, v)) => v.push(a.point_index),
                None => by_cause.push((why, vec![a.point_index])),
            }
        }
    }
    for (why, points) in by_cause {
        let mut named: Vec<String> = points.iter().take(4).map(|p| format!("p{p}")).collect();
        if points.len() > 4 {
            named.push("…".into());
        }
        chart
            .draw_series(std::iter::empty::<PathElement<(f64, f64)>>())
            .map_err(pe)?
            .label(match why.as_str() {
                // Only the ringed points are named: say so, so it does not read as
                // the list of every noisy run.
                "noisy runs" => format!("  ringed, some runs noisy: {}", named.join(", ")),
                _ => format!("  {why}: {}", named.join(", ")),
            })
            .legend(|(x, y)| PathElement::new(vec![(x, y)], WHITE.mix(0.0)));
    }
    Ok(())
}

/// The colour of a point whose figures come from noisy runs only.
const NOISY: RGBColor = RGBColor(150, 150, 150);

/// Legend entries without a series: the dashed floor, hollow markers when a run was
/// not held by a cgroup, grey hollow markers off the lines for points measured by
/// noisy runs only (named), and how many runs the noise sentinel left out of the
/// medians.
fn legend_keys<DB: DrawingBackend>(
    chart: &mut ChartContext<
        '_,
        DB,
        Cartesian2d<LogCoord<f64>, plotters::coord::types::RangedCoordf64>,
    >,
    stats: &[PointStats],
) -> Result<()> {
    chart
        .draw_series(std::iter::empty::<PathElement<(f64, f64)>>())
        .map_err(pe)?
        .label("floor (dashed)")
        .legend(|(x, y)| {
            PathElement::new(
                vec![(x, y), (x + 6, y), (x + 10, y), (x + 16, y)],
                BLACK.mix(0.5).stroke_width(1),
            )
        });
    if stats.iter().any(|p| p.unenforced > 0 || p.over_budget > 0) {
        chart
            .draw_series(std::iter::empty::<PathElement<(f64, f64)>>())
            .map_err(pe)?
            .label("hollow: not held by a cgroup")
            .legend(|(x, y)| Circle::new((x + 8, y), 4, BLACK.stroke_width(2)));
    }
    let only: Vec<String> = stats
        .iter()
        .filter(|p| p.noisy_only)
        .map(|p| format!("p{}", p.point_index))
        .collect();
    if !only.is_empty() {
        let mut named: Vec<String> = only.iter().take(4).cloned().collect();
        if only.len() > 4 {
            named.push(format!("… ({} points)", only.len()));
        }
        chart
            .draw_series(std::iter::empty::<PathElement<(f64, f64)>>())
            .map_err(pe)?
            .label(format!(
                "grey, off the line: noisy runs only: {}",
                named.join(", ")
            ))
            .legend(|(x, y)| Circle::new((x + 8, y), 4, NOISY.stroke_width(2)));
    }
    let noisy: usize = stats.iter().map(|p| p.noisy).sum();
    if noisy > 0 {
        let runs: usize = stats
            .iter()
            .map(|p| if p.noisy_only { p.n } else { p.n + p.noisy })
            .sum();
        let left_out: usize = stats
            .iter()
            .filter(|p| !p.noisy_only)
            .map(|p| p.noisy)
            .sum();
        chart
            .draw_series(std::iter::empty::<PathElement<(f64, f64)>>())
            .map_err(pe)?
            .label(format!(
                "noisy runs: {noisy} of {runs} ({left_out} left out of quiet medians)"
            ))
            .legend(|(x, y)| PathElement::new(vec![(x, y)], WHITE.mix(0.0)));
    }
    Ok(())
}
