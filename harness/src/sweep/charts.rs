//! Charts (plotters, SVG + PNG): the memory/speed curve and the IO chart.
//!
//! Text is drawn with the DejaVu Sans font embedded in the binary and registered
//! as `sans-serif` (plotters' `ab_glyph` backend never reads system fonts), so the
//! charts render on headless machines without fontconfig.

use std::path::Path;
use std::sync::Once;

use anyhow::{anyhow, Result};
use memdial::store::plan::fmt_bytes;
use plotters::coord::Shift;
use plotters::prelude::*;

use super::stats::PointStats;

static FONT: &[u8] = include_bytes!("../../assets/DejaVuSans.ttf");

/// Registers the embedded font as `sans-serif` (idempotent). Must run before any
/// chart is drawn, for SVG too (plotters needs the metrics to lay text out).
pub fn register_font() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        plotters::style::register_font("sans-serif", FontStyle::Normal, FONT)
            .map_err(|_| ())
            .expect("embedded DejaVuSans.ttf is a valid font");
    });
}

/// Tableau-10 colours.
const COLORS: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

fn pe<E: std::fmt::Debug>(e: E) -> anyhow::Error {
    anyhow!("chart: {e:?}")
}

/// One line of a chart: points of equal io × prefetch (and of the other varying axes).
#[derive(Debug, Clone)]
struct Series {
    label: String,
    floor: f64,
    /// (budget bytes × dodge factor, stats)
    pts: Vec<(f64, PointStats)>,
}

fn series(stats: &[PointStats]) -> Vec<Series> {
    let distinct = |f: &dyn Fn(&PointStats) -> String| {
        let mut v: Vec<String> = stats.iter().map(f).collect();
        v.sort();
        v.dedup();
        v.len() > 1
    };
    let (vc, vt, vp) = (
        distinct(&|s| s.cache.clone()),
        distinct(&|s| s.threads.to_string()),
        distinct(&|s| s.prompt_index.to_string()),
    );
    let mut out: Vec<Series> = vec![];
    for s in stats.iter().filter(|s| !s.below_floor && s.n > 0) {
        let mut label = format!("{} / {}", s.io, s.prefetch);
        if vc {
            label += &format!(" / {}", s.cache);
        }
        if vt {
            label += &format!(" / {}t", s.threads);
        }
        if vp {
            label += &format!(" / prompt {}", s.prompt_index);
        }
        match out.iter_mut().find(|x| x.label == label) {
            Some(x) => x.pts.push((s.budget_bytes as f64, s.clone())),
            None => out.push(Series {
                label,
                floor: s.floor_bytes as f64,
                pts: vec![(s.budget_bytes as f64, s.clone())],
            }),
        }
    }
    // Dodge: shift each line's points sideways by up to ±3 % so markers and whiskers
    // of lines measured at the same budget do not hide each other.
    let n = out.len();
    for (i, s) in out.iter_mut().enumerate() {
        let f = if n > 1 {
            1.0 + 0.06 * (i as f64 / (n - 1) as f64 - 0.5)
        } else {
            1.0
        };
        for p in &mut s.pts {
            p.0 *= f;
        }
        s.pts.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    out
}

fn x_range(ser: &[Series], model_bytes: Option<u64>) -> (f64, f64) {
    let mut lo = f64::INFINITY;
    let mut hi = 0f64;
    for s in ser {
        for (x, _) in &s.pts {
            lo = lo.min(*x);
            hi = hi.max(*x);
        }
        if s.floor > 0.0 {
            lo = lo.min(s.floor);
        }
    }
    if let Some(m) = model_bytes.filter(|m| *m > 0) {
        hi = hi.max(m as f64);
        lo = lo.min(m as f64);
    }
    if !lo.is_finite() || lo <= 0.0 {
        lo = 1.0;
    }
    if hi <= lo {
        hi = lo * 2.0;
    }
    (lo / 1.3, hi * 1.3)
}

fn empty<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, title: &str) -> Result<()> {
    root.fill(&WHITE).map_err(pe)?;
    root.titled(title, ("sans-serif", 22)).map_err(pe)?;
    root.draw(&Text::new(
        "no finished runs yet",
        (40, 80),
        ("sans-serif", 18).into_font(),
    ))
    .map_err(pe)?;
    root.present().map_err(pe)
}

/// Draws the curve: s/token (log) against budget (log), one line per series,
/// markers at the medians, min–max whiskers over repeats, floors (dashed, in the
/// series colour) and the model size (solid black) as vertical lines.
fn draw_curve<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    stats: &[PointStats],
    model_bytes: Option<u64>,
    title: &str,
) -> Result<()> {
    let ser: Vec<Series> = series(stats)
        .into_iter()
        .filter(|s| s.pts.iter().any(|p| p.1.s_per_token.is_some()))
        .collect();
    if ser.is_empty() {
        return empty(&root, title);
    }
    root.fill(&WHITE).map_err(pe)?;
    let (x0, x1) = x_range(&ser, model_bytes);
    let mut y0 = f64::INFINITY;
    let mut y1 = 0f64;
    for s in &ser {
        for (_, p) in &s.pts {
            for v in [p.s_per_token, p.s_per_token_min, p.s_per_token_max]
                .into_iter()
                .flatten()
            {
                if v > 0.0 {
                    y0 = y0.min(v);
                    y1 = y1.max(v);
                }
            }
        }
    }
    if !y0.is_finite() {
        y0 = 1e-3;
        y1 = 1.0;
    }
    let (y0, y1) = if y1 / y0 < 4.0 {
        let c = (y0 * y1).sqrt();
        (c / 2.5, c * 2.5)
    } else {
        (y0 / 1.4, y1 * 1.4)
    };
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(52)
        .y_label_area_size(78)
        .build_cartesian_2d((x0..x1).log_scale().base(2.0), (y0..y1).log_scale())
        .map_err(pe)?;
    chart
        .configure_mesh()
        .x_desc("memory budget (bytes, log scale)")
        .y_desc("decode time (s/token, log scale)")
        .x_labels(12)
        .y_labels(12)
        .x_label_formatter(&|v| fmt_bytes(*v as u64))
        .y_label_formatter(&|v| format_secs(*v))
        .label_style(("sans-serif", 13))
        .axis_desc_style(("sans-serif", 15))
        .draw()
        .map_err(pe)?;
    for (i, s) in ser.iter().enumerate() {
        let c = COLORS[i % COLORS.len()];
        if s.floor > 0.0 {
            chart
                .draw_series(DashedLineSeries::new(
                    vec![(s.floor, y0), (s.floor, y1)],
                    6,
                    4,
                    c.stroke_width(1),
                ))
                .map_err(pe)?;
        }
        let line: Vec<(f64, f64)> = s
            .pts
            .iter()
            .filter_map(|(x, p)| p.s_per_token.map(|y| (*x, y)))
            .collect();
        chart
            .draw_series(LineSeries::new(line.clone(), c.stroke_width(2)))
            .map_err(pe)?
            .label(s.label.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 22, y)], c.stroke_width(2)));
        chart
            .draw_series(line.iter().map(|p| Circle::new(*p, 4, c.filled())))
            .map_err(pe)?;
        for (x, p) in &s.pts {
            if let (Some(lo), Some(hi)) = (p.s_per_token_min, p.s_per_token_max) {
                let (a, b) = (x / 1.025, x * 1.025);
                chart
                    .draw_series([
                        PathElement::new(vec![(*x, lo), (*x, hi)], c.stroke_width(1)),
                        PathElement::new(vec![(a, lo), (b, lo)], c.stroke_width(1)),
                        PathElement::new(vec![(a, hi), (b, hi)], c.stroke_width(1)),
                    ])
                    .map_err(pe)?;
            }
        }
    }
    chart
        .draw_series(std::iter::empty::<PathElement<(f64, f64)>>())
        .map_err(pe)?
        .label("floor of each line (dashed)")
        .legend(|(x, y)| {
            PathElement::new(
                vec![(x, y), (x + 6, y), (x + 10, y), (x + 16, y)],
                BLACK.mix(0.5).stroke_width(1),
            )
        });
    if let Some(m) = model_bytes {
        let m = m as f64;
        chart
            .draw_series(LineSeries::new(
                vec![(m, y0), (m, y1)],
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
        .label_font(("sans-serif", 13))
        .draw()
        .map_err(pe)?;
    root.present().map_err(pe)
}

/// Draws the IO chart: bytes read per decoded token (top) and the IO-wait share of
/// decode time (bottom) against the budget (log).
fn draw_io<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    stats: &[PointStats],
    model_bytes: Option<u64>,
    title: &str,
) -> Result<()> {
    let ser = series(stats);
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
        let mut chart = ChartBuilder::on(area)
            .margin(14)
            .x_label_area_size(46)
            .y_label_area_size(78)
            .build_cartesian_2d((x0..x1).log_scale().base(2.0), 0f64..ymax)
            .map_err(pe)?;
        chart
            .configure_mesh()
            .x_desc("memory budget (bytes, log scale)")
            .y_desc(ydesc)
            .x_labels(12)
            .x_label_formatter(&|v| fmt_bytes(*v as u64))
            .y_label_formatter(&|v| format!("{v:.1}"))
            .label_style(("sans-serif", 13))
            .axis_desc_style(("sans-serif", 15))
            .draw()
            .map_err(pe)?;
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
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::UpperRight)
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK.mix(0.4))
                .label_font(("sans-serif", 13))
                .draw()
                .map_err(pe)?;
        }
    }
    root.present().map_err(pe)
}

/// Seconds with a sensible number of digits for a log axis.
fn format_secs(v: f64) -> String {
    if v >= 10.0 {
        format!("{v:.0}")
    } else if v >= 1.0 {
        format!("{v:.1}")
    } else if v >= 0.01 {
        format!("{v:.3}")
    } else {
        format!("{v:.1e}")
    }
}

/// Chart inputs shared by both output formats.
struct Job<'a> {
    dir: &'a Path,
    stem: &'a str,
    size: (u32, u32),
    stats: &'a [PointStats],
    model_bytes: Option<u64>,
    title: String,
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
                $f(root, self.0.stats, self.0.model_bytes, &self.0.title)
            }
        }
        let j: &Job = $j;
        crate::export::write_chart(j.dir, j.stem, j.size, &C(j))?;
    }};
}

/// Writes `curve.svg`, `curve.png`, `io.svg` and `io.png` into `dir`.
pub fn write_charts(
    dir: &Path,
    stats: &[PointStats],
    model_bytes: Option<u64>,
    title: &str,
) -> Result<()> {
    let job = |stem, size, t: &str| Job {
        dir,
        stem,
        size,
        stats,
        model_bytes,
        title: format!("{title}: {t}"),
    };
    render!(
        &job("curve", (1100, 680), "decode time vs memory budget"),
        draw_curve
    );
    render!(
        &job("io", (1100, 860), "reads and IO wait vs memory budget"),
        draw_io
    );
    Ok(())
}
