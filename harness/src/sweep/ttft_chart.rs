//! The time-to-first-token chart (`ttft.svg` / `ttft.png`), drawn beside the decode
//! curve whenever a sweep has long prompts ([`LONG_PROMPT_TOKENS`] or more): the
//! median time from the start of prefill to the first chosen token against the
//! memory budget, one line per IO mode × prefetch policy, with the same series,
//! axes, floors and markers as the decode curve (`charts.rs` helpers).

use std::path::Path;

use anyhow::Result;
use memdial::store::plan::fmt_bytes;
use plotters::coord::Shift;
use plotters::prelude::*;

use super::charts::{
    empty, fmt_tick_bytes, format_secs, marker, pe, series, x_range, Series, COLORS,
};
use super::row::Row;
use super::stats::PointStats;

/// Prompts of at least this many tokens count as long (a prefill of several
/// hundred tokens, where time to first token is a figure of its own).
pub const LONG_PROMPT_TOKENS: u64 = 128;

/// The points whose prompt is long: a run of the point reported at least
/// [`LONG_PROMPT_TOKENS`] prompt tokens.
pub fn long_prompt_points(stats: &[PointStats], rows: &[Row]) -> Vec<PointStats> {
    stats
        .iter()
        .filter(|p| {
            rows.iter().any(|r| {
                r.point_index == p.point_index
                    && r.metrics.prompt_tokens.unwrap_or(0) >= LONG_PROMPT_TOKENS
            })
        })
        .cloned()
        .collect()
}

/// Draws time to first token (s, log) against budget (log): one line per series,
/// markers at the medians (filled when every run was held by a cgroup), floors
/// dashed in the line's colour, the model size solid black.
fn draw_ttft<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    stats: &[PointStats],
    model_bytes: Option<u64>,
    title: &str,
) -> Result<()> {
    let ser: Vec<Series> = series(stats, model_bytes)
        .into_iter()
        .filter(|s| s.pts.iter().any(|p| p.1.ttft_s.is_some()))
        .collect();
    if ser.is_empty() {
        return empty(&root, title);
    }
    root.fill(&WHITE).map_err(pe)?;
    let root = root.titled(title, ("sans-serif", 22)).map_err(pe)?;
    let (x0, x1) = x_range(&ser, model_bytes);
    let ys: Vec<f64> = ser
        .iter()
        .flat_map(|s| s.pts.iter().filter_map(|p| p.1.ttft_s))
        .filter(|v| *v > 0.0)
        .collect();
    let (mut y0, mut y1) = ys
        .iter()
        .fold((f64::INFINITY, 0f64), |(a, b), v| (a.min(*v), b.max(*v)));
    if !y0.is_finite() {
        (y0, y1) = (1e-2, 1.0);
    }
    let (y0, y1) = if y1 / y0 < 4.0 {
        let c = (y0 * y1).sqrt();
        (c / 2.5, c * 2.5)
    } else {
        (y0 / 1.3, y1 * 1.3)
    };
    let (ly0, ly1) = (y0.log10(), y1.log10());
    let mut chart = ChartBuilder::on(&root)
        .margin(12)
        .x_label_area_size(52)
        .y_label_area_size(78)
        .build_cartesian_2d((x0..x1).log_scale().base(2.0), ly0..ly1)
        .map_err(pe)?;
    chart
        .configure_mesh()
        .x_desc("memory budget (bytes, log scale)")
        .y_desc("time to first token (s, log scale)")
        .x_labels(8)
        .y_labels(12)
        .x_label_formatter(&|v| fmt_tick_bytes(*v))
        .y_label_formatter(&|v| format_secs(10f64.powf(*v)))
        .label_style(("sans-serif", 12))
        .axis_desc_style(("sans-serif", 14))
        .draw()
        .map_err(pe)?;
    for (k, s) in ser.iter().enumerate() {
        let c = COLORS[k % COLORS.len()];
        if s.floor > 0.0 {
            chart
                .draw_series(DashedLineSeries::new(
                    vec![(s.floor, ly0), (s.floor, ly1)],
                    6,
                    4,
                    c.stroke_width(2),
                ))
                .map_err(pe)?;
        }
        let line: Vec<(f64, f64)> = s
            .pts
            .iter()
            .filter_map(|(x, p)| p.ttft_s.filter(|v| *v > 0.0).map(|y| (*x, y.log10())))
            .collect();
        chart
            .draw_series(LineSeries::new(line.clone(), c.stroke_width(2)))
            .map_err(pe)?
            .label(s.label.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 22, y)], c.stroke_width(2)));
        for (x, p) in &s.pts {
            let Some(y) = p.ttft_s.filter(|v| *v > 0.0) else {
                continue;
            };
            let filled = p.unenforced == 0 && p.over_budget == 0;
            marker(&mut chart, (*x, y.log10()), k, c, filled)?;
        }
    }
    if let Some(m) = model_bytes {
        let m = m as f64;
        chart
            .draw_series(LineSeries::new(
                vec![(m, ly0), (m, ly1)],
                BLACK.stroke_width(1),
            ))
            .map_err(pe)?
            .label(format!("model size ({})", fmt_bytes(m as u64)))
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 22, y)], BLACK.stroke_width(1)));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.4))
        .label_font(("sans-serif", 12))
        .draw()
        .map_err(pe)?;
    root.present().map_err(pe)
}

struct Ttft<'a> {
    stats: &'a [PointStats],
    model_bytes: Option<u64>,
    title: String,
}

impl crate::export::Chart for Ttft<'_> {
    fn draw<DB: DrawingBackend>(&self, root: DrawingArea<DB, Shift>) -> Result<()>
    where
        DB::ErrorType: 'static,
    {
        draw_ttft(root, self.stats, self.model_bytes, &self.title)
    }
}

/// Writes `ttft.svg` and `ttft.png` into `dir` when `rows` include long prompts
/// (over those points only); returns whether it wrote them.
///
/// Errors: a chart that cannot be drawn or written.
pub fn write_ttft_chart(
    dir: &Path,
    stats: &[PointStats],
    rows: &[Row],
    model_bytes: Option<u64>,
    title: &str,
) -> Result<bool> {
    let long = long_prompt_points(stats, rows);
    if long.is_empty() {
        return Ok(false);
    }
    let c = Ttft {
        stats: &long,
        model_bytes,
        title: format!("{title}: time to first token vs memory budget"),
    };
    crate::export::write_chart(dir, "ttft", (1100, 620), &c)?;
    Ok(true)
}
