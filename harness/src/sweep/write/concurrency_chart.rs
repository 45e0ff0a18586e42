//! The concurrency chart (`concurrency.svg` / `concurrency.png`) of a sweep with a
//! point above concurrency 1 ([`crate::sweep::concurrency`]): aggregate tokens/s
//! against concurrent clients, one line per budget (and IO mode / prefetch, threads),
//! and below it goodput (requests meeting the spec's `slo` per second) when the rows
//! have it. Each marker is the median over a point's quiet measured runs (its noisy
//! ones when it has no quiet one), as in the report's concurrency section.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Result;
use plotters::coord::Shift;
use plotters::prelude::*;

use super::chart_parts::{legend, pe, COLORS};
use crate::sweep::record::row::Row;

/// One line: its label and (concurrency, median aggregate tokens/s, median goodput
/// requests/s) by increasing concurrency.
pub type Line = (String, Vec<(f64, Option<f64>, Option<f64>)>);

fn median(rs: &[&Row], f: impl Fn(&Row) -> Option<f64>) -> Option<f64> {
    let v: Vec<f64> = rs.iter().filter_map(|r| f(r)).collect();
    memdial::util::stats::median(&v)
}

/// The lines of `rows`: per budget, IO mode / prefetch and threads, the medians at
/// each concurrency over every prompt's points.
pub fn lines(rows: &[Row]) -> Vec<Line> {
    let mut by_point: BTreeMap<usize, Vec<&Row>> = BTreeMap::new();
    for r in rows.iter().filter(|r| r.is_measured_ok()) {
        by_point.entry(r.point_index).or_default().push(r);
    }
    type Key = (u64, String, usize);
    let mut by: BTreeMap<Key, (String, BTreeMap<usize, Vec<&Row>>)> = BTreeMap::new();
    for rs in by_point.values_mut() {
        if rs.iter().any(|r| r.is_measured_quiet()) {
            rs.retain(|r| r.is_measured_quiet());
        }
        let r = rs[0];
        let io = format!("{} / {}", r.io.as_str(), r.prefetch.as_str());
        let label = format!(
            "{} · {io} · {} threads",
            crate::sweep::spec::budget_label(&r.budget_spec, r.budget_bytes),
            r.threads
        );
        by.entry((r.budget_bytes, io, r.threads))
            .or_insert_with(|| (label, BTreeMap::new()))
            .1
            .entry(r.concurrency())
            .or_default()
            .extend(rs.iter().copied());
    }
    by.into_values()
        .map(|(label, at)| {
            let pts = at
                .iter()
                .map(|(c, rs)| {
                    (
                        *c as f64,
                        median(rs, |r| r.aggregate_tokens_per_s),
                        median(rs, |r| r.goodput_requests_per_s),
                    )
                })
                .collect();
            (label, pts)
        })
        .collect()
}

struct ConcurrencyChart {
    lines: Vec<Line>,
    title: String,
}

/// One panel: `y` of each line's points against concurrency.
fn panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    lines: &[Line],
    y_desc: &str,
    y: impl Fn(&(f64, Option<f64>, Option<f64>)) -> Option<f64>,
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let pts = lines.iter().flat_map(|l| l.1.iter());
    let (x1, y1) = pts.fold((1.0f64, 0.0f64), |(x, m), p| {
        (x.max(p.0), m.max(y(p).unwrap_or(0.0)))
    });
    let mut chart = ChartBuilder::on(area)
        .margin(14)
        .x_label_area_size(44)
        .y_label_area_size(72)
        .build_cartesian_2d(0.0..(x1 * 1.05 + 0.5), 0.0..(y1.max(1e-6) * 1.15))
        .map_err(pe)?;
    chart
        .configure_mesh()
        .x_desc("concurrent clients")
        .y_desc(y_desc)
        .x_label_formatter(&|v| format!("{v:.0}"))
        .label_style(("sans-serif", 12))
        .axis_desc_style(("sans-serif", 14))
        .draw()
        .map_err(pe)?;
    for (i, (label, pts)) in lines.iter().enumerate() {
        let c = COLORS[i % COLORS.len()];
        let xy: Vec<(f64, f64)> = pts.iter().filter_map(|p| Some((p.0, y(p)?))).collect();
        chart
            .draw_series(LineSeries::new(xy.iter().copied(), c.stroke_width(2)))
            .map_err(pe)?
            .label(label.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 22, y)], c.stroke_width(2)));
        chart
            .draw_series(xy.iter().map(|&p| Circle::new(p, 5, c.filled())))
            .map_err(pe)?;
    }
    legend(&mut chart, 12)?;
    Ok(())
}

impl crate::export::Chart for ConcurrencyChart {
    fn draw<DB: DrawingBackend>(&self, root: DrawingArea<DB, Shift>) -> Result<()>
    where
        DB::ErrorType: 'static,
    {
        root.fill(&WHITE).map_err(pe)?;
        let root = root.titled(&self.title, ("sans-serif", 20)).map_err(pe)?;
        let goodput = self.lines.iter().flat_map(|l| &l.1).any(|p| p.2.is_some());
        if goodput {
            let (top, bottom) = root.split_vertically(root.dim_in_pixel().1 / 2);
            panel(&top, &self.lines, "aggregate tokens/s", |p| p.1)?;
            panel(&bottom, &self.lines, "goodput (requests/s in SLO)", |p| p.2)?;
        } else {
            panel(&root, &self.lines, "aggregate tokens/s", |p| p.1)?;
        }
        Ok(())
    }
}

/// Writes `concurrency.svg` and `concurrency.png` into `dir` when `rows` have a
/// point above concurrency 1; returns whether it wrote them.
///
/// Errors: a chart that cannot be drawn or written.
pub fn write_concurrency_chart(dir: &Path, rows: &[Row], title: &str) -> Result<bool> {
    if !rows.iter().any(|r| r.concurrency() > 1) {
        return Ok(false);
    }
    let c = ConcurrencyChart {
        lines: lines(rows),
        title: format!("{title}: aggregate throughput and goodput vs concurrency, per budget"),
    };
    crate::export::write_chart(dir, "concurrency", (1100, 820), &c)?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sweep::record::status::RunStatus;

    fn row(point: usize, bytes: u64, c: usize, agg: f64, good: Option<f64>) -> Row {
        let mut r = Row {
            point_index: point,
            budget_spec: format!("{bytes}"),
            budget_bytes: bytes,
            status: RunStatus::Ok,
            aggregate_tokens_per_s: Some(agg),
            goodput_requests_per_s: good,
            ..Row::default()
        };
        r.axes.insert("concurrency".into(), c.to_string().into());
        r
    }

    /// Two budgets at concurrency 1 and 4: one line each, by concurrency; two runs of
    /// one point give their median (2 and 4 tokens/s: 3).
    #[test]
    fn one_line_per_budget_by_concurrency() {
        let rows = [
            row(1, 100, 4, 2.0, Some(0.5)),
            row(1, 100, 4, 4.0, Some(0.5)),
            row(0, 100, 1, 1.0, Some(1.0)),
            row(2, 200, 1, 1.5, None),
            row(3, 200, 4, 5.0, None),
        ];
        let l = lines(&rows);
        assert_eq!(l.len(), 2);
        assert_eq!(
            l[0].1,
            [(1.0, Some(1.0), Some(1.0)), (4.0, Some(3.0), Some(0.5))]
        );
        assert_eq!(l[1].1, [(1.0, Some(1.5), None), (4.0, Some(5.0), None)]);
        // Without a point above concurrency 1 nothing is written (nor a directory
        // needed); harness/tests/sweep.rs checks the files of a concurrency sweep.
        let nowhere = Path::new("/nonexistent/concurrency-chart");
        assert!(!write_concurrency_chart(nowhere, &rows[2..3], "t").unwrap());
    }
}
