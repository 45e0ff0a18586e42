//! The predicted-vs-measured chart (`predicted.svg` / `predicted.png`) of a sweep
//! given a trace: one panel per start (`cold`, `warm`), one colour per IO mode ×
//! prefetch policy; the predicted s/token a dashed line over the budgets, the
//! measured median a marker with its 95 % interval (min–max over too few repeats).

use std::collections::BTreeSet;
use std::path::Path;

use anyhow::Result;
use plotters::coord::Shift;
use plotters::prelude::*;

use super::chart_parts::{budget_panel, legend, pe, whisker, BudgetFrame, COLORS};
use crate::sweep::analysis::stats::PointStats;
use crate::sweep::record::predictions::Predictions;

struct PredictedChart<'a> {
    stats: &'a [PointStats],
    p: &'a Predictions,
    title: String,
}

/// (series label, budget, predicted, measured median, whisker) of one panel's points.
type Pt = (String, f64, Option<f64>, Option<f64>, Option<(f64, f64)>);

impl PredictedChart<'_> {
    fn panel_points(&self, start: &str) -> Vec<Pt> {
        self.p
            .compare(self.stats)
            .into_iter()
            .filter(|c| c.stats.start == start)
            .map(|c| {
                (
                    format!("{} / {}", c.stats.io, c.stats.prefetch),
                    c.stats.budget_bytes as f64,
                    c.predicted.s_per_token,
                    c.stats.s_per_token,
                    whisker(c.stats),
                )
            })
            .collect()
    }
}

impl crate::export::Chart for PredictedChart<'_> {
    fn draw<DB: DrawingBackend>(&self, root: DrawingArea<DB, Shift>) -> Result<()>
    where
        DB::ErrorType: 'static,
    {
        root.fill(&WHITE).map_err(pe)?;
        let root = root.titled(&self.title, ("sans-serif", 20)).map_err(pe)?;
        let starts: Vec<String> = self
            .stats
            .iter()
            .filter(|s| self.p.points.contains_key(&s.point_index))
            .map(|s| s.start.clone())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        if starts.is_empty() {
            return Ok(());
        }
        let all: Vec<Pt> = starts.iter().flat_map(|s| self.panel_points(s)).collect();
        let labels: Vec<String> = all
            .iter()
            .map(|p| p.0.clone())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let xs = all.iter().map(|p| p.1);
        let (lo, hi) = xs.fold((f64::MAX, 0.0f64), |(a, b), x| (a.min(x), b.max(x)));
        let (x0, x1) = if hi > lo {
            (lo / 1.25, hi * 1.25)
        } else {
            (lo / 2.0, lo * 2.0)
        };
        let y1 = all
            .iter()
            .flat_map(|p| [p.2, p.3, p.4.map(|w| w.1)])
            .flatten()
            .fold(0.0, f64::max)
            .max(1e-6)
            * 1.1;
        let panels = root.split_evenly((1, starts.len()));
        for (area, start) in panels.iter().zip(&starts) {
            let pts = self.panel_points(start);
            let frame = BudgetFrame {
                caption: Some(format!("{start} start")),
                y_desc: "decode s/token",
                ..BudgetFrame::SMALL
            };
            let mut chart = budget_panel(area, (x0, x1), 0.0..y1, &frame)?;
            for (i, l) in labels.iter().enumerate() {
                let c = COLORS[i % COLORS.len()];
                let mut line: Vec<(f64, f64)> = pts
                    .iter()
                    .filter(|p| &p.0 == l)
                    .filter_map(|p| p.2.map(|y| (p.1, y)))
                    .collect();
                line.sort_by(|a, b| a.0.total_cmp(&b.0));
                chart
                    .draw_series(DashedLineSeries::new(line, 8, 5, c.stroke_width(2)))
                    .map_err(pe)?
                    .label(format!("{l}: predicted"))
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 22, y)], c.stroke_width(2))
                    });
                let measured: Vec<&Pt> = pts.iter().filter(|p| &p.0 == l).collect();
                for p in &measured {
                    if let Some((a, b)) = p.4 {
                        chart
                            .draw_series([PathElement::new(vec![(p.1, a), (p.1, b)], c)])
                            .map_err(pe)?;
                    }
                }
                chart
                    .draw_series(
                        measured
                            .iter()
                            .filter_map(|p| p.3.map(|y| Circle::new((p.1, y), 5, c.filled()))),
                    )
                    .map_err(pe)?
                    .label(format!("{l}: measured"))
                    .legend(move |(x, y)| Circle::new((x + 11, y), 5, c.filled()));
            }
            legend(&mut chart, 12)?;
        }
        Ok(())
    }
}

/// Writes `predicted.svg` and `predicted.png` into `dir`.
///
/// Errors: a chart that cannot be drawn or written.
pub fn write_predicted_chart(
    dir: &Path,
    stats: &[PointStats],
    p: &Predictions,
    title: &str,
) -> Result<()> {
    let chart = PredictedChart {
        stats,
        p,
        title: format!("{title}: predicted (dashed) vs measured decode time"),
    };
    crate::export::write_chart(dir, "predicted", (1300, 560), &chart)
}
