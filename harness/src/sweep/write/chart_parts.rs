//! The drawing parts every budget chart shares: colours, the series of points by
//! IO mode and the rest of their label, axis ranges and ticks, floor markers, the
//! empty-chart notice and the legend box. [`super::charts`] and
//! [`super::metric_chart`] draw with them.

use anyhow::{anyhow, Result};
use plotters::coord::Shift;
use plotters::prelude::*;

use crate::sweep::analysis::stats::PointStats;

/// Tableau-10 colours.
pub(crate) const COLORS: [RGBColor; 10] = [
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

pub(crate) fn pe<E: std::fmt::Debug>(e: E) -> anyhow::Error {
    anyhow!("chart: {e:?}")
}

/// One line of a chart: points of equal io × prefetch (and of the other varying axes).
#[derive(Debug, Clone)]
pub(super) struct Series {
    pub(super) label: String,
    /// IO mode (the curve's panel).
    pub(super) io: String,
    /// The label without the IO mode (colour and marker within a panel).
    pub(super) rest: String,
    /// The engine (memdial when empty).
    pub(super) engine: String,
    /// The engine's floor at this IO mode, bytes (0: none of its own to draw).
    pub(super) floor: f64,
    /// (budget bytes × dodge factor, stats)
    pub(super) pts: Vec<(f64, PointStats)>,
}

/// The lines of a chart. `own_floors`: the points' `floor_bytes` of engines other
/// than memdial are their own (declared, from a command, or searched: a model
/// memdial's engine does not read); otherwise they are memdial's plan's and those
/// engines' lines get no floor.
pub(super) fn series(
    stats: &[PointStats],
    model_bytes: Option<u64>,
    own_floors: bool,
) -> Vec<Series> {
    let distinct = |f: &dyn Fn(&PointStats) -> String| {
        let mut v: Vec<String> = stats.iter().map(f).collect();
        v.sort();
        v.dedup();
        v.len() > 1
    };
    let vl = distinct(&|s| s.layout.clone());
    let vd = distinct(&|s| s.depth.to_string());
    let (vc, vt, vp, ve, vs) = (
        distinct(&|s| s.cache.clone()),
        distinct(&|s| s.threads.to_string()),
        distinct(&|s| s.prompt_index.to_string()),
        distinct(&|s| s.engine.clone()),
        distinct(&|s| s.start.clone()),
    );
    let mut out: Vec<Series> = vec![];
    let stats: Vec<PointStats> = stats.iter().map(drawable).collect();
    for s in stats.iter().filter(|s| !s.below_floor && s.n > 0) {
        // Several engines: the engine leads the label (one colour and marker each).
        let mut rest = if ve {
            format!("{} / {}", s.engine, s.prefetch)
        } else {
            s.prefetch.clone()
        };
        if vc {
            rest += &format!(" / {}", s.cache);
        }
        if vt {
            rest += &format!(" / {}t", s.threads);
        }
        if vp {
            rest += &format!(" / prompt {}", s.prompt_index);
        }
        if vs {
            rest += &format!(" / {}", s.start);
        }
        if vl {
            rest += &format!(" / {}", s.layout);
        }
        if vd {
            rest += &format!(" / depth {}", s.depth);
        }
        let label = format!("{} / {rest}", s.io);
        match out.iter_mut().find(|x| x.label == label) {
            Some(x) => x.pts.push((s.budget_bytes as f64, s.clone())),
            None => out.push(Series {
                label,
                io: s.io.clone(),
                rest,
                engine: crate::sweep::spec::engines::def::engine_or_default(&s.engine).to_string(),
                floor: if own_floors
                    || crate::sweep::spec::engines::def::engine_or_default(&s.engine)
                        == crate::sweep::spec::engines::def::DEFAULT_ENGINE
                {
                    s.floor_bytes as f64
                } else {
                    0.0
                },
                pts: vec![(s.budget_bytes as f64, s.clone())],
            }),
        }
    }
    // Dodge: within one IO mode, shift each line's points to the right by up to
    // 5 % so markers and whiskers of lines measured at the same budget do not hide
    // each other (to the right, so no marker sits left of its floor). A point at or
    // just under the model size is shifted to the left instead, far enough that its
    // whisker caps stay clear of the model-size line ([`dodge`]).
    let ios: Vec<String> = out.iter().map(|s| s.io.clone()).collect();
    for (i, s) in out.iter_mut().enumerate() {
        let same: Vec<usize> = (0..ios.len()).filter(|&j| ios[j] == s.io).collect();
        let n = same.len();
        let k = same.iter().position(|&j| j == i).unwrap_or(0);
        let f = if n > 1 {
            1.0 + 0.05 * k as f64 / (n - 1) as f64
        } else {
            1.0
        };
        for p in &mut s.pts {
            p.0 = dodge(p.0, f, model_bytes.map(|m| m as f64));
        }
        s.pts.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    out
}

/// `p` with every figure a chart cannot draw left out (`None`): non-finite, or
/// non-zero beyond 10^±30 (plotters' tick search does not end on such ranges). The
/// runs' own self-check refuses timings far inside these bounds; this keeps drawing
/// finite for any rows, e.g. a hand-edited directory given to `report merge`.
pub(super) fn drawable(p: &PointStats) -> PointStats {
    let ok = |v: &mut Option<f64>| {
        if v.is_some_and(|x| !x.is_finite() || (x != 0.0 && !(1e-30..=1e30).contains(&x.abs()))) {
            *v = None;
        }
    };
    let mut p = p.clone();
    for v in [
        &mut p.s_per_token,
        &mut p.s_per_token_min,
        &mut p.s_per_token_max,
        &mut p.s_per_token_lo,
        &mut p.s_per_token_hi,
        &mut p.tokens_per_s,
        &mut p.ttft_s,
        &mut p.bytes_read_per_token,
        &mut p.io_wait_fraction,
        &mut p.trunk_hit_rate,
        &mut p.expert_hit_rate,
        &mut p.peak_rss_bytes,
        &mut p.peak_rss_anon_bytes,
        &mut p.peak_accounted_bytes,
    ] {
        ok(v);
    }
    p
}

/// Half-width of a whisker's end caps, as a factor on the (log) x axis.
pub(super) const CAP: f64 = 1.02;

/// Where a point of budget `b` (bytes) is drawn for dodge factor `f` (≥ 1): `b × f`,
/// except a point at or under the model size `m` whose dodged marker or whisker cap
/// would reach the line: it goes to `b / (f × CAP × 1.005)`, left of the line by
/// more than its cap, so marker and whisker move together and neither touches it.
pub(super) fn dodge(b: f64, f: f64, m: Option<f64>) -> f64 {
    match m {
        Some(m) if b <= m && b * f * CAP >= m => b / (f * CAP * 1.005),
        _ => b * f,
    }
}

/// Axis tick text of a byte count: binary units, at most three significant digits
/// and no trailing zeros ("256 MiB", "1.5 GiB", "177 MiB").
pub(crate) fn fmt_tick_bytes(v: f64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let (mut x, mut i) = (v.max(0.0), 0);
    while x >= 1024.0 && i < UNITS.len() - 1 {
        x /= 1024.0;
        i += 1;
    }
    let t = if x >= 99.95 {
        format!("{x:.0}")
    } else if x >= 9.995 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    };
    let t = if t.contains('.') {
        t.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        t
    };
    format!("{t} {}", UNITS[i])
}

pub(super) fn x_range(ser: &[Series], model_bytes: Option<u64>) -> (f64, f64) {
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

pub(super) fn empty<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, title: &str) -> Result<()> {
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

/// A point's whisker: its 95 % interval, else the min–max over repeats.
pub(super) fn whisker(p: &PointStats) -> Option<(f64, f64)> {
    p.s_per_token_lo
        .zip(p.s_per_token_hi)
        .or(p.s_per_token_min.zip(p.s_per_token_max))
}

/// Draws one marker of shape `shape` (0 circle, 1 triangle, 2 square, 3 diamond-ish
/// cross), filled or hollow.
pub(super) fn marker<DB: DrawingBackend>(
    chart: &mut ChartContext<
        '_,
        DB,
        Cartesian2d<LogCoord<f64>, plotters::coord::types::RangedCoordf64>,
    >,
    at: (f64, f64),
    shape: usize,
    c: RGBColor,
    filled: bool,
) -> Result<()> {
    let st = if filled {
        c.filled()
    } else {
        c.stroke_width(2)
    };
    match shape % 4 {
        0 => chart.draw_series([Circle::new(at, 5, st)]).map(|_| ()),
        1 => chart
            .draw_series([TriangleMarker::new(at, 7, st)])
            .map(|_| ()),
        2 => chart
            .draw_series([EmptyElement::at(at) + Rectangle::new([(-5, -5), (5, 5)], st)])
            .map(|_| ()),
        _ => chart
            .draw_series([Cross::new(at, 6, c.stroke_width(2))])
            .map(|_| ()),
    }
    .map_err(pe)
}

/// The legend box of every chart: upper right, on a translucent white ground,
/// labels in `font_size` px.
pub(crate) fn legend<'a, DB: DrawingBackend + 'a, CT: plotters::coord::CoordTranslate>(
    chart: &mut ChartContext<'a, DB, CT>,
    font_size: u32,
) -> Result<()> {
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.4))
        .label_font(("sans-serif", font_size))
        .draw()
        .map_err(pe)
}

/// Seconds to two significant digits (ticks of a log axis: 0.0063, 0.079, 1.3, 16).
pub(crate) fn format_secs(v: f64) -> String {
    if v.is_nan() || v <= 0.0 || !v.is_finite() {
        return format!("{v}");
    }
    let digits = (1 - v.log10().floor() as i32).max(0) as usize;
    format!("{v:.digits$}")
}

/// A panel whose x axis is the memory budget in bytes (log₂ scale, byte-unit ticks).
pub(crate) type BudgetChart<'a, DB> =
    ChartContext<'a, DB, Cartesian2d<LogCoord<f64>, plotters::coord::types::RangedCoordf64>>;

/// The frame of a budget-axis panel: what differs between the charts that draw one.
pub(crate) struct BudgetFrame<'a> {
    /// Caption above the panel (a panel of several: `io = direct`, `cold start`).
    pub caption: Option<String>,
    /// Margin around the panel, pixels.
    pub margin: u32,
    /// Height of the x label area and width of the y label area, pixels.
    pub label_areas: (u32, u32),
    /// The y axis's description.
    pub y_desc: &'a str,
    /// Tick counts on x and (None: plotters' default) y.
    pub ticks: (usize, Option<usize>),
    /// The y tick formatter (None: plotters' default).
    pub y_fmt: Option<&'a dyn Fn(&f64) -> String>,
    /// Font sizes of the tick labels and the axis descriptions, points.
    pub fonts: (u32, u32),
}

impl BudgetFrame<'static> {
    /// A small panel of several (predicted and simulated curves): 8 budget ticks,
    /// plotters' y ticks.
    pub const SMALL: BudgetFrame<'static> = BudgetFrame {
        caption: None,
        margin: 12,
        label_areas: (48, 64),
        y_desc: "",
        ticks: (8, None),
        y_fmt: None,
        fonts: (12, 14),
    };
}

/// One budget-axis panel on `area` over budgets `x` (bytes, both > 0) and `y`, its
/// mesh drawn: the one place the budget charts (`curve`, the metric charts, the
/// predicted curve, simulate's chart) build their axes.
///
/// Errors: plotters cannot draw on the backend.
pub(crate) fn budget_panel<'a, DB: DrawingBackend>(
    area: &'a DrawingArea<DB, Shift>,
    x: (f64, f64),
    y: std::ops::Range<f64>,
    f: &BudgetFrame<'_>,
) -> Result<BudgetChart<'a, DB>> {
    let mut b = ChartBuilder::on(area);
    if let Some(c) = &f.caption {
        b.caption(c, ("sans-serif", 18));
    }
    let mut chart = b
        .margin(f.margin)
        .x_label_area_size(f.label_areas.0)
        .y_label_area_size(f.label_areas.1)
        .build_cartesian_2d((x.0..x.1).log_scale().base(2.0), y)
        .map_err(pe)?;
    let mut mesh = chart.configure_mesh();
    mesh.x_desc("memory budget (bytes, log scale)")
        .y_desc(f.y_desc)
        .x_labels(f.ticks.0)
        .x_label_formatter(&|v| fmt_tick_bytes(*v))
        .label_style(("sans-serif", f.fonts.0))
        .axis_desc_style(("sans-serif", f.fonts.1));
    if let Some(n) = f.ticks.1 {
        mesh.y_labels(n);
    }
    if let Some(g) = f.y_fmt {
        mesh.y_label_formatter(g);
    }
    mesh.draw().map_err(pe)?;
    Ok(chart)
}
