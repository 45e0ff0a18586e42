//! The depth chart (`depth.svg` / `depth.png`) of a sweep with several values of the
//! `depth` axis ([`crate::sweep::depth`]): median decode s/token against the context
//! tokens before the prompt, one line per budget (and the point's other settings),
//! a marker per point with its 95 % interval (min–max over too few repeats).

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Result;
use plotters::coord::Shift;
use plotters::prelude::*;

use super::chart_parts::{format_secs, legend, pe, whisker, COLORS};
use crate::sweep::analysis::stats::PointStats;

/// One line: its label and (depth, median s/token, whisker) by increasing depth.
type Line = (String, Vec<(f64, f64, Option<(f64, f64)>)>);

/// The lines of `stats`: points of equal key but for `;depth=N`, by budget.
pub fn lines(stats: &[PointStats]) -> Vec<Line> {
    let mut by: BTreeMap<(u64, String), Line> = BTreeMap::new();
    for p in stats.iter().filter(|p| !p.below_floor && p.n > 0) {
        let Some(y) = p.s_per_token.filter(|y| y.is_finite()) else {
            continue;
        };
        let key = p.point_key.replace(&format!(";depth={}", p.depth), "");
        let label = format!(
            "{} · {} / {}",
            crate::sweep::spec::budget_label(&p.budget_spec, p.budget_bytes),
            p.io,
            p.prefetch
        );
        by.entry((p.budget_bytes, key))
            .or_insert_with(|| (label, vec![]))
            .1
            .push((p.depth as f64, y, whisker(p)));
    }
    let mut out: Vec<Line> = by.into_values().collect();
    // Lines whose labels meet (another setting differs) are numbered apart.
    for i in 0..out.len() {
        if out.iter().filter(|l| l.0 == out[i].0).count() > 1 {
            out[i].0 = format!("{} #{}", out[i].0, i + 1);
        }
    }
    for l in &mut out {
        l.1.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    out
}

struct DepthChart {
    lines: Vec<Line>,
    title: String,
}

impl crate::export::Chart for DepthChart {
    fn draw<DB: DrawingBackend>(&self, root: DrawingArea<DB, Shift>) -> Result<()>
    where
        DB::ErrorType: 'static,
    {
        root.fill(&WHITE).map_err(pe)?;
        let pts = self.lines.iter().flat_map(|l| l.1.iter());
        let (x1, y1) = pts.fold((0.0f64, 0.0f64), |(x, y), p| {
            (x.max(p.0), y.max(p.1).max(p.2.map_or(0.0, |w| w.1)))
        });
        let mut chart = ChartBuilder::on(&root)
            .caption(&self.title, ("sans-serif", 20))
            .margin(16)
            .x_label_area_size(48)
            .y_label_area_size(72)
            .build_cartesian_2d(0.0..(x1.max(1.0) * 1.05), 0.0..(y1.max(1e-6) * 1.15))
            .map_err(pe)?;
        chart
            .configure_mesh()
            .x_desc("depth (context tokens before the prompt)")
            .y_desc("decode s/token")
            .x_label_formatter(&|v| format!("{v:.0}"))
            .y_label_formatter(&|v| format_secs(*v))
            .label_style(("sans-serif", 12))
            .axis_desc_style(("sans-serif", 14))
            .draw()
            .map_err(pe)?;
        for (i, (label, pts)) in self.lines.iter().enumerate() {
            let c = COLORS[i % COLORS.len()];
            for &(x, _, w) in pts {
                if let Some((a, b)) = w {
                    chart
                        .draw_series([PathElement::new(vec![(x, a), (x, b)], c)])
                        .map_err(pe)?;
                }
            }
            chart
                .draw_series(LineSeries::new(
                    pts.iter().map(|p| (p.0, p.1)),
                    c.stroke_width(2),
                ))
                .map_err(pe)?
                .label(label.clone())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 22, y)], c.stroke_width(2))
                });
            chart
                .draw_series(pts.iter().map(|p| Circle::new((p.0, p.1), 5, c.filled())))
                .map_err(pe)?;
        }
        legend(&mut chart, 12)?;
        Ok(())
    }
}

/// Writes `depth.svg` and `depth.png` into `dir` when `stats` hold more than one
/// depth; returns whether it wrote them.
///
/// Errors: a chart that cannot be drawn or written.
pub fn write_depth_chart(dir: &Path, stats: &[PointStats], title: &str) -> Result<bool> {
    if !several_depths(stats) {
        return Ok(false);
    }
    let c = DepthChart {
        lines: lines(stats),
        title: format!("{title}: decode time vs context depth, per budget"),
    };
    crate::export::write_chart(dir, "depth", (1100, 620), &c)?;
    Ok(true)
}

/// The points hold more than one value of the `depth` axis.
pub fn several_depths(stats: &[PointStats]) -> bool {
    stats.iter().any(|p| p.depth != stats[0].depth)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two budgets at depths 0 and 16: two lines of two points each, by depth.
    #[test]
    fn one_line_per_budget_by_depth() {
        let p = |i: usize, budget: &str, bytes: u64, depth: usize, spt: f64| PointStats {
            point_key: format!("budget={budget};prompt=0;depth={depth}"),
            depth,
            ..crate::sweep::analysis::recommend::tests::p(i, "direct", budget, bytes, spt)
        };
        let stats = [
            p(0, "floor", 100, 0, 0.5),
            p(1, "floor", 100, 16, 0.75),
            p(2, "2x floor", 200, 0, 0.25),
            p(3, "2x floor", 200, 16, 0.3),
        ];
        assert!(several_depths(&stats));
        assert!(!several_depths(&stats[..1]));
        let l = lines(&stats);
        assert_eq!(l.len(), 2);
        assert_eq!(
            l[0].1.iter().map(|p| (p.0, p.1)).collect::<Vec<_>>(),
            [(0.0, 0.5), (16.0, 0.75)]
        );
        assert_eq!(
            l[1].1.iter().map(|p| (p.0, p.1)).collect::<Vec<_>>(),
            [(0.0, 0.25), (16.0, 0.3)]
        );
        assert!(l[0].0.starts_with("floor (100 B)"), "{}", l[0].0);
    }
}
