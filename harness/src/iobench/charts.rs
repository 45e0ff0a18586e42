//! The IO benchmark's chart: GB/s of each cell, memdial's bar beside fio's.

use std::path::Path;

use anyhow::{anyhow, Result};
use memdial::tools::iobench::{CellStatus, Row};
use plotters::prelude::*;

use super::report::twin;
use crate::export::{self, Chart};

const OURS: RGBColor = RGBColor(31, 119, 180);
const FIO: RGBColor = RGBColor(255, 127, 14);

/// Pixel height of one category row of the chart.
const ROW_PX: u32 = 26;

/// A y axis of `n` categories: values in `[0, n]`, one key point (label) at the
/// centre `i + 0.5` of each.
struct Categories(usize);

impl plotters::coord::ranged1d::Ranged for Categories {
    type FormatOption = plotters::coord::ranged1d::DefaultFormatting;
    type ValueType = f64;
    fn map(&self, v: &f64, limit: (i32, i32)) -> i32 {
        let f = *v / self.0.max(1) as f64;
        limit.0 + (f * (limit.1 - limit.0) as f64).round() as i32
    }
    fn key_points<H: plotters::coord::ranged1d::KeyPointHint>(&self, _hint: H) -> Vec<f64> {
        (0..self.0).map(|i| i as f64 + 0.5).collect()
    }
    fn range(&self) -> std::ops::Range<f64> {
        0.0..self.0 as f64
    }
}

fn pe<E: std::fmt::Debug>(e: E) -> anyhow::Error {
    anyhow!("chart: {e:?}")
}

/// Writes `chart.svg` and `chart.png`: GB/s per cell, memdial beside fio, one panel
/// per pattern × cache state.
pub fn write_chart(dir: &Path, rows: &[Row], title: &str) -> Result<()> {
    // One panel per pattern × cache state (cold and warm differ by 10× or more, so
    // each gets its own scale).
    let mut panels: Vec<(String, Vec<&Row>)> = Vec::new();
    for r in rows.iter().filter(|r| r.tool == "memdial") {
        let key = format!("pattern {}, {}", r.pattern, r.cache);
        match panels.iter_mut().find(|p| p.0 == key) {
            Some(p) => p.1.push(r),
            None => panels.push((key, vec![r])),
        }
    }
    let heights: Vec<u32> = panels
        .iter()
        .map(|p| 80 + ROW_PX * p.1.len() as u32)
        .collect();
    let size = (1000u32, heights.iter().sum::<u32>() + 40);
    let name = Path::new(title)
        .file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    export::write_chart(
        dir,
        "chart",
        size,
        &Bars {
            panels: &panels,
            heights: &heights,
            rows,
            model: &name,
        },
    )
}

/// The chart's inputs, drawn by [`draw`] on any backend.
struct Bars<'a> {
    panels: &'a [(String, Vec<&'a Row>)],
    heights: &'a [u32],
    rows: &'a [Row],
    model: &'a str,
}

impl Chart for Bars<'_> {
    fn draw<DB: DrawingBackend>(&self, root: DrawingArea<DB, plotters::coord::Shift>) -> Result<()>
    where
        DB::ErrorType: 'static,
    {
        draw(&root, self.panels, self.heights, self.rows, self.model)
    }
}

/// The x axis end of a panel: its largest GB/s (ours or fio's) with room for labels.
fn x_max(cells: &[&Row], rows: &[Row]) -> f64 {
    cells
        .iter()
        .flat_map(|r| [Some(*r), twin(rows, r)])
        .flatten()
        .filter(|r| r.status == CellStatus::Ok)
        .map(|r| r.gb_per_s)
        .fold(0.0f64, f64::max)
        .max(0.1)
        * 1.35
}

/// The y labels of a panel's cells: `io qdN`, marked when a cold cell was not cold.
fn cell_labels(cells: &[&Row]) -> Vec<String> {
    cells
        .iter()
        .map(|r| {
            format!(
                "{} qd{}{}",
                r.io,
                r.qd,
                if r.cache == "cold" && !r.cold_verified {
                    " (NOT cold)"
                } else {
                    ""
                }
            )
        })
        .collect()
}

fn draw<DB: DrawingBackend>(
    root: &DrawingArea<DB, plotters::coord::Shift>,
    panels: &[(String, Vec<&Row>)],
    heights: &[u32],
    rows: &[Row],
    model: &str,
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE).map_err(pe)?;
    let root = root
        .titled(
            &format!("memdial iobench: {model}, GB/s per cell (memdial vs fio)"),
            ("sans-serif", 20),
        )
        .map_err(pe)?;
    let mut area = root;
    for ((caption, cells), h) in panels.iter().zip(heights) {
        let (top, rest) = area.split_vertically(*h);
        area = rest;
        let n = cells.len();
        let xmax = x_max(cells, rows);
        let labels = cell_labels(cells);
        let mut chart = ChartBuilder::on(&top)
            .caption(caption, ("sans-serif", 16))
            .margin(8)
            .x_label_area_size(28)
            .y_label_area_size(170)
            .build_cartesian_2d(0f64..xmax, Categories(n))
            .map_err(pe)?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .x_desc("GB/s")
            .y_label_formatter(&|y| {
                let i = (y - 0.5).round();
                if i >= 0.0 && (i as usize) < labels.len() {
                    labels[labels.len() - 1 - i as usize].clone()
                } else {
                    String::new()
                }
            })
            .label_style(("sans-serif", 12))
            .draw()
            .map_err(pe)?;
        // Category i (top to bottom) sits at y in [n-1-i, n-i].
        let mut bars = Vec::new();
        let mut texts = Vec::new();
        for (i, r) in cells.iter().enumerate() {
            let y = (n - 1 - i) as f64;
            for (k, row, color) in [(0, Some(*r), OURS), (1, twin(rows, r), FIO)] {
                let Some(row) = row.filter(|x| x.status == CellStatus::Ok) else {
                    continue;
                };
                let (y0, y1) = if k == 0 {
                    (y + 0.52, y + 0.88)
                } else {
                    (y + 0.12, y + 0.48)
                };
                bars.push(Rectangle::new(
                    [(0.0, y0), (row.gb_per_s, y1)],
                    color.filled(),
                ));
                texts.push(Text::new(
                    format!(
                        "{:.2}{}",
                        row.gb_per_s,
                        if row.knee { "  (knee)" } else { "" }
                    ),
                    (row.gb_per_s + xmax * 0.005, y1),
                    ("sans-serif", 11).into_font().color(&BLACK),
                ));
            }
        }
        chart.draw_series(bars).map_err(pe)?;
        chart.draw_series(texts).map_err(pe)?;
        chart
            .draw_series(std::iter::once(Rectangle::new(
                [(0.0, 0.0), (0.0, 0.0)],
                OURS.filled(),
            )))
            .map_err(pe)?
            .label("memdial")
            .legend(|(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], OURS.filled()));
        if rows
            .iter()
            .any(|r| r.tool == "fio" && r.status == CellStatus::Ok)
        {
            chart
                .draw_series(std::iter::once(Rectangle::new(
                    [(0.0, 0.0), (0.0, 0.0)],
                    FIO.filled(),
                )))
                .map_err(pe)?
                .label("fio")
                .legend(|(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], FIO.filled()));
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font(("sans-serif", 12))
            .draw()
            .map_err(pe)?;
    }
    Ok(())
}
