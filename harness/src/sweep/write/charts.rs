//! Charts (plotters, SVG + PNG): the memory/speed curve and the IO chart, written
//! through [`crate::export::write_chart`] (which registers the embedded font).

use std::path::Path;

use anyhow::Result;
use memdial::util::units::fmt_bytes;
use plotters::coord::Shift;
use plotters::prelude::*;

use crate::sweep::analysis::anomaly::Anomaly;
use crate::sweep::analysis::stats::PointStats;

use super::chart_parts::{budget_panel, empty, legend, pe, series, x_range, BudgetFrame, COLORS};

/// The decode curve: s/token against the budget, one panel per IO mode
/// ([`super::metric_chart::DECODE`]), anomalies `marks` ringed.
fn draw_curve<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    stats: &[PointStats],
    model_bytes: Option<u64>,
    title: &str,
    marks: &[Anomaly],
    own_floors: bool,
) -> Result<()> {
    use super::metric_chart::{draw, DECODE};
    draw(root, stats, model_bytes, title, &DECODE, marks, own_floors)
}

/// Draws the IO chart: bytes read per decoded token (top) and the IO-wait share of
/// decode time (bottom) against the budget (log).
fn draw_io<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    stats: &[PointStats],
    model_bytes: Option<u64>,
    title: &str,
    _marks: &[Anomaly],
    own_floors: bool,
) -> Result<()> {
    let ser = series(stats, model_bytes, own_floors);
    if ser.is_empty() {
        return empty(&root, title);
    }
    root.fill(&WHITE).map_err(pe)?;
    let root = root.titled(title, ("sans-serif", 22)).map_err(pe)?;
    let (top, bottom) = root.split_vertically(root.dim_in_pixel().1 / 2);
    let (x0, x1) = x_range(&ser, model_bytes);
    type Get = fn(&PointStats) -> Option<f64>;
    let panels: [(&DrawingArea<DB, Shift>, &str, Get, f64); 2] = [
        (
            &top,
            "bytes read per token (MiB)",
            |p| p.bytes_read_per_token.map(|b| b / 1048576.0),
            1.0,
        ),
        (
            &bottom,
            "IO wait (% of prefill + decode time)",
            |p| p.io_wait_fraction.map(|f| f * 100.0),
            100.0,
        ),
    ];
    for (pi, (area, ydesc, get, min_top)) in panels.into_iter().enumerate() {
        let mut ymax = 0f64;
        for s in &ser {
            for (_, p) in &s.pts {
                if let Some(v) = get(p) {
                    ymax = ymax.max(v);
                }
            }
        }
        let ymax = if pi == 1 {
            100.0
        } else if ymax > 0.0 {
            ymax * 1.15
        } else {
            min_top
        };
        let y_fmt = |v: &f64| format!("{v:.1}");
        let frame = BudgetFrame {
            caption: None,
            margin: 14,
            label_areas: (46, 78),
            y_desc: ydesc,
            ticks: (12, None),
            y_fmt: Some(&y_fmt),
            fonts: (13, 15),
        };
        let mut chart = budget_panel(area, (x0, x1), 0f64..ymax, &frame)?;
        for (i, s) in ser.iter().enumerate() {
            let c = COLORS[i % COLORS.len()];
            let line: Vec<(f64, f64)> = s
                .pts
                .iter()
                .filter_map(|(x, p)| get(p).map(|y| (*x, y)))
                .collect();
            if line.is_empty() {
                continue;
            }
            let anno = chart
                .draw_series(LineSeries::new(line.clone(), c.stroke_width(2)))
                .map_err(pe)?;
            if pi == 0 {
                anno.label(s.label.clone()).legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 22, y)], c.stroke_width(2))
                });
            }
            chart
                .draw_series(line.iter().map(|p| Circle::new(*p, 4, c.filled())))
                .map_err(pe)?;
        }
        if let Some(m) = model_bytes {
            let m = m as f64;
            let a = chart
                .draw_series(LineSeries::new(
                    vec![(m, 0.0), (m, ymax)],
                    BLACK.stroke_width(1),
                ))
                .map_err(pe)?;
            if pi == 0 {
                a.label(format!("model size ({})", fmt_bytes(m as u64)))
                    .legend(|(x, y)| {
                        PathElement::new(vec![(x, y), (x + 22, y)], BLACK.stroke_width(1))
                    });
            }
        }
        if pi == 0 {
            legend(&mut chart, 13)?;
        }
    }
    root.present().map_err(pe)
}

/// Chart inputs shared by both output formats.
struct Job<'a> {
    dir: &'a Path,
    stem: &'a str,
    size: (u32, u32),
    stats: &'a [PointStats],
    model_bytes: Option<u64>,
    title: String,
    marks: &'a [Anomaly],
    own_floors: bool,
}

/// Renders one chart as `<stem>.svg` and `<stem>.png` with drawing function `$f`
/// through [`crate::export::write_chart`]. (A macro because the drawing functions
/// are generic over the backend.)
macro_rules! render {
    ($j:expr, $f:ident) => {{
        struct C<'a>(&'a Job<'a>);
        impl crate::export::Chart for C<'_> {
            fn draw<DB: DrawingBackend>(
                &self,
                root: DrawingArea<DB, plotters::coord::Shift>,
            ) -> Result<()>
            where
                DB::ErrorType: 'static,
            {
                $f(
                    root,
                    self.0.stats,
                    self.0.model_bytes,
                    &self.0.title,
                    self.0.marks,
                    self.0.own_floors,
                )
            }
        }
        let j: &Job = $j;
        crate::export::write_chart(j.dir, j.stem, j.size, &C(j))?;
    }};
}

/// Writes `curve.svg`, `curve.png`, `io.svg` and `io.png` into `dir`; the curve
/// rings the points of `marks` (slower than a smaller budget of their line) and its
/// legend names their causes. Each engine's floor is a labelled dashed line:
/// memdial's plan floor, and with `own_floors` (a model memdial's engine does not
/// read) every engine's own.
pub fn write_charts(
    dir: &Path,
    stats: &[PointStats],
    model_bytes: Option<u64>,
    title: &str,
    marks: &[Anomaly],
    own_floors: bool,
) -> Result<()> {
    let job = |stem, size, t: &str| Job {
        dir,
        stem,
        size,
        stats,
        model_bytes,
        title: format!("{title}: {t}"),
        marks,
        own_floors,
    };
    render!(
        &job("curve", (1500, 620), "decode time vs memory budget"),
        draw_curve
    );
    render!(
        &job("io", (1100, 860), "reads and IO wait vs memory budget"),
        draw_io
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::chart_parts::{dodge, fmt_tick_bytes, CAP};
    use super::*;

    /// A point slower than a smaller budget of its line is ringed on the curve, and
    /// the legend says why with the cause's first words: hand-made stats (direct:
    /// 0.05 s/token at 100, 0.08 at 200 bytes), one anomaly at the 200-byte point.
    #[test]
    fn anomalies_are_ringed_on_the_curve_with_their_cause() {
        use crate::sweep::analysis::recommend::tests::p;
        let dir = std::env::temp_dir().join(format!("memdial-curve-marks-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let stats = vec![
            p(0, "direct", "a", 100, 0.05),
            p(1, "direct", "b", 200, 0.08),
        ];
        let mark = Anomaly {
            point_index: 1,
            faster_point: 0,
            faster_budget_spec: "a".into(),
            ratio: 1.6,
            significant: Some(true),
            causes: vec!["cold cache: expert hit rate 51 %, 27.15 MiB read per token".into()],
        };
        write_charts(&dir, &stats, None, "t", std::slice::from_ref(&mark), false).unwrap();
        let svg = std::fs::read_to_string(dir.join("curve.svg")).unwrap();
        assert!(
            svg.contains("ringed: slower than a smaller budget") && svg.contains("cold cache: p1"),
            "{svg}"
        );
        let labelled = svg.split("<text").any(|t| {
            t.split_once('>').is_some_and(|(_, rest)| {
                rest.trim_start().starts_with("p1\n") || rest.trim_start().starts_with("p1<")
            })
        });
        assert!(labelled, "the ringed point is labelled: {svg}");
        write_charts(&dir, &stats, None, "t", &[], false).unwrap();
        let svg = std::fs::read_to_string(dir.join("curve.svg")).unwrap();
        assert!(!svg.contains("ringed"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A point measured by noisy runs only is drawn apart (grey, off its line) and named
    /// in the legend, with the count of noisy runs: here p1 has 3 noisy runs only and p0
    /// 3 quiet runs and 1 noisy, so 4 of 7 runs are noisy and 1 is left out of a quiet
    /// median.
    #[test]
    fn noisy_points_are_drawn_apart_and_counted() {
        use crate::sweep::analysis::recommend::tests::p;
        let dir = std::env::temp_dir().join(format!("memdial-curve-noisy-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut a = p(0, "direct", "100", 100, 0.05);
        (a.n, a.noisy) = (3, 1);
        let mut b = p(1, "direct", "200", 200, 0.08);
        (b.n, b.noisy, b.noisy_only) = (3, 3, true);
        write_charts(&dir, &[a.clone(), b], None, "t", &[], true).unwrap();
        let svg = std::fs::read_to_string(dir.join("curve.svg")).unwrap();
        assert!(
            svg.contains("grey, off the line: noisy runs only: p1"),
            "{svg}"
        );
        assert!(
            svg.contains("noisy runs: 4 of 7 (1 left out of quiet medians)"),
            "{svg}"
        );
        // The grey marker is there, in the noisy colour.
        assert!(svg.contains("#969696"), "{svg}");
        write_charts(&dir, &[a], None, "t", &[], true).unwrap();
        let svg = std::fs::read_to_string(dir.join("curve.svg")).unwrap();
        assert!(!svg.contains("grey, off the line"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Each engine's floor is a labelled line on the curve: memdial's plan floor
    /// always; another engine's only when its floor is its own (`own_floors`: a model
    /// memdial's engine does not read), else its points carry memdial's floor.
    #[test]
    fn engines_floors_are_labelled_lines_on_the_curve() {
        use crate::sweep::analysis::recommend::tests::p;
        let dir = std::env::temp_dir().join(format!("memdial-curve-floors-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mib = 1u64 << 20;
        let mut me = p(0, "mmap", "floor", 39 * mib, 0.2);
        me.floor_bytes = 39 * mib;
        me.engine = "memdial".into();
        let mut ll = p(1, "mmap", "floor", 50 * mib, 2.0);
        ll.floor_bytes = 50 * mib;
        ll.engine = "llama.cpp".into();
        let mut ll2 = p(2, "mmap", "2GiB", 2048 * mib, 0.05);
        ll2.floor_bytes = 50 * mib;
        ll2.engine = "llama.cpp".into();
        let stats = vec![me, ll, ll2];
        let texts = |svg: &str| -> Vec<String> {
            svg.split("<text")
                .skip(1)
                .filter_map(|t| t.split_once('>'))
                .map(|(_, rest)| rest.split('<').next().unwrap_or("").trim().to_string())
                .collect()
        };
        write_charts(&dir, &stats, None, "t", &[], true).unwrap();
        let svg = std::fs::read_to_string(dir.join("curve.svg")).unwrap();
        let t = texts(&svg);
        assert!(t.iter().any(|x| x == "memdial floor 39.00 MiB"), "{t:?}");
        // One label per engine and floor, not one per point.
        assert_eq!(
            t.iter()
                .filter(|x| *x == "llama.cpp floor 50.00 MiB")
                .count(),
            1,
            "{t:?}"
        );
        write_charts(&dir, &stats, None, "t", &[], false).unwrap();
        let svg = std::fs::read_to_string(dir.join("curve.svg")).unwrap();
        let t = texts(&svg);
        assert!(t.iter().any(|x| x == "memdial floor 39.00 MiB"), "{t:?}");
        assert!(!t.iter().any(|x| x.starts_with("llama.cpp floor")), "{t:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn tick_labels_have_no_trailing_zeros() {
        assert_eq!(fmt_tick_bytes(256.0 * 1048576.0), "256 MiB");
        assert_eq!(fmt_tick_bytes(1.5 * 1073741824.0), "1.5 GiB");
        assert_eq!(fmt_tick_bytes(1073741824.0), "1 GiB");
        assert_eq!(fmt_tick_bytes(512.0), "512 B");
        // 177.4 MiB: three significant digits.
        assert_eq!(fmt_tick_bytes(177.4 * 1048576.0), "177 MiB");
        assert_eq!(fmt_tick_bytes(12.34 * 1048576.0), "12.3 MiB");
    }

    /// The 100 % point (budget = model size) of every dodged line, marker and whisker
    /// caps, stays left of the model-size line; points far from it move right.
    #[test]
    fn dodge_keeps_the_model_size_point_and_its_whisker_left_of_the_line() {
        let m = 1000.0;
        for f in [1.0, 1.025, 1.05] {
            let x = dodge(m, f, Some(m));
            assert!(x * CAP < m, "f {f}: cap at {} reaches the line", x * CAP);
            assert_eq!(dodge(100.0, f, Some(m)), 100.0 * f);
            // Above the model size: to the right as usual.
            assert_eq!(dodge(2000.0, f, Some(m)), 2000.0 * f);
        }
        // Distinct lines stay apart at the model size.
        assert!(dodge(m, 1.05, Some(m)) < dodge(m, 1.0, Some(m)));
    }
}
