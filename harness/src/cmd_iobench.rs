//! `memdial iobench`: direct vs buffered vs mmap on the model's own read requests,
//! cold and warm, at several queue depths, with the equivalent fio job beside.
//!
//! The measuring is [`memdial::io::iobench`]; this module parses the command line,
//! runs the matrix and writes the run directory:
//! `results.csv`, `results.json` (one row per cell and tool), `iobench.json`
//! (environment and settings), `report.md`, `chart.svg` and `chart.png`, under
//! `reports/iobench-<UTC time>/` with `reports/iobench-latest` pointing at it.
//!
//! Exit codes: 0 every memdial cell ran, 1 a cell failed, 2 usage error.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{anyhow, bail, Context, Result};
use memdial::io::iobench::{
    fio_job, fio_version, run_matrix, CacheState, Matrix, Pattern, Row, Workload, DEFAULT_SEED,
};
use memdial::io::IoMode;
use memdial::store::plan::fmt_bytes;
use plotters::prelude::*;
use serde::Serialize;

use crate::sweep::charts::register_font;
use crate::sweep::host::Host;
use crate::sweep::util::{utc_now_dirname, utc_now_rfc3339, write_atomic};

/// Default parent of run directories.
pub const DEFAULT_REPORTS: &str = "reports";

/// Arguments of `memdial iobench`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Model directory (safetensors checkpoint with config.json).
    #[arg(long)]
    pub model: PathBuf,
    /// Request patterns, comma-separated: `trunk` (whole trunk layers in layer order),
    /// `experts` (every routed expert once, seeded random order), `trace:FILE` (the
    /// experts of a `memdial run --record-trace` file, in order).
    #[arg(long, default_value = "trunk,experts")]
    pub pattern: String,
    /// IO modes, comma-separated: direct, buffered, mmap.
    #[arg(long, default_value = "direct,buffered,mmap")]
    pub modes: String,
    /// Queue depths (reader threads), comma-separated.
    #[arg(long, default_value = "1,4,16")]
    pub qd: String,
    /// Page-cache states, comma-separated: cold (evicted and verified empty with
    /// mincore) and warm (read once first).
    #[arg(long, default_value = "cold,warm")]
    pub cache: String,
    /// Time limit per cell, seconds (a cold cell stops after one pass over the
    /// pattern's distinct requests if that comes first).
    #[arg(long, default_value_t = 2.0)]
    pub seconds: f64,
    /// Seed of the random expert order.
    #[arg(long, default_value_t = DEFAULT_SEED)]
    pub seed: u64,
    /// Do not run the equivalent fio jobs even when fio is installed.
    #[arg(long)]
    pub no_fio: bool,
    /// Run directory [default: reports/iobench-<UTC time>/, and reports/iobench-latest
    /// points to it].
    #[arg(long)]
    pub out: Option<PathBuf>,
}

fn list<T>(s: &str, what: &str, f: impl Fn(&str) -> Result<T>) -> Result<Vec<T>> {
    let v: Vec<T> = s
        .split(',')
        .map(str::trim)
        .filter(|x| !x.is_empty())
        .map(|x| f(x).with_context(|| format!("--{what}")))
        .collect::<Result<_>>()?;
    if v.is_empty() {
        bail!("--{what} is empty");
    }
    Ok(v)
}

/// Parsed settings.
struct Settings {
    patterns: Vec<Pattern>,
    matrix: Matrix,
}

fn parse(a: &Args) -> Result<Settings> {
    let patterns = list(&a.pattern, "pattern", Pattern::parse)?;
    let modes = list(&a.modes, "modes", |x| Ok(IoMode::parse(x)?))?;
    let qds = list(&a.qd, "qd", |x| match x.parse::<usize>() {
        Ok(q) if (1..=1024).contains(&q) => Ok(q),
        _ => bail!("queue depth {x:?} is not an integer in 1..=1024"),
    })?;
    let caches = list(&a.cache, "cache", CacheState::parse)?;
    if !(a.seconds > 0.0 && a.seconds.is_finite()) {
        bail!("--seconds must be a positive number");
    }
    Ok(Settings {
        patterns,
        matrix: Matrix {
            modes,
            qds,
            caches,
            seconds: a.seconds,
            fio: false,
        },
    })
}

/// Environment and settings of a run (`iobench.json`).
#[derive(Debug, Serialize)]
struct Meta {
    created_utc: String,
    memdial_version: String,
    command: String,
    model_dir: String,
    model_files: usize,
    model_bytes: u64,
    host: Host,
    fio: Option<String>,
    seconds_per_cell: f64,
    seed: u64,
    patterns: Vec<PatternInfo>,
    wall_s: f64,
}

#[derive(Debug, Serialize)]
struct PatternInfo {
    name: String,
    distinct_requests: usize,
    sequence_requests: usize,
    median_request_bytes: u64,
    pass_bytes: u64,
    /// Files the fio jobs read.
    fio_files: Vec<String>,
}

/// Points `parent/iobench-latest` at `target` (a sibling directory), atomically.
fn update_latest(parent: &Path, target: &Path) {
    let link = parent.join("iobench-latest");
    if link.exists() && !link.is_symlink() {
        eprintln!(
            "warning: {} exists and is not a symlink; not updated",
            link.display()
        );
        return;
    }
    let Some(name) = target.file_name() else {
        return;
    };
    let tmp = parent.join(format!(".iobench-latest.tmp{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    if std::os::unix::fs::symlink(name, &tmp).is_ok() && std::fs::rename(&tmp, &link).is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
}

fn save_rows(dir: &Path, rows: &[Row]) -> Result<()> {
    let mut w = csv::Writer::from_writer(vec![]);
    for r in rows {
        w.serialize(r)?;
    }
    let bytes = w.into_inner().map_err(|e| anyhow!("csv: {e}"))?;
    write_atomic(&dir.join("results.csv"), &bytes)?;
    write_atomic(
        &dir.join("results.json"),
        serde_json::to_string_pretty(rows)?.as_bytes(),
    )
}

/// Runs `memdial iobench`.
pub fn run(a: &Args) -> Result<ExitCode> {
    let s = parse(a).map_err(crate::args::as_usage)?;
    let t_start = Instant::now();
    let fio = if a.no_fio { None } else { fio_version() };
    let mut matrix = s.matrix.clone();
    matrix.fio = fio.is_some();
    if fio.is_none() && !a.no_fio {
        eprintln!("note: fio is not installed; running without the fio comparison");
    }
    let workloads: Vec<Workload> = s
        .patterns
        .iter()
        .map(|p| Workload::from_model(&a.model, p, a.seed))
        .collect::<Result<_>>()?;

    let (created, stamp) = (utc_now_rfc3339(), utc_now_dirname());
    let (out, is_default) = match &a.out {
        Some(o) => (o.clone(), false),
        None => (
            Path::new(DEFAULT_REPORTS).join(format!("iobench-{stamp}")),
            true,
        ),
    };
    std::fs::create_dir_all(&out).with_context(|| format!("cannot create {}", out.display()))?;
    if is_default {
        update_latest(Path::new(DEFAULT_REPORTS), &out);
    }

    let files = &workloads[0].files;
    let model_bytes: u64 = files
        .iter()
        .map(|f| std::fs::metadata(f).map(|m| m.len()).unwrap_or(0))
        .sum();
    let mut meta = Meta {
        created_utc: created,
        memdial_version: env!("CARGO_PKG_VERSION").into(),
        command: std::env::args().collect::<Vec<_>>().join(" "),
        model_dir: std::fs::canonicalize(&a.model)
            .unwrap_or_else(|_| a.model.clone())
            .display()
            .to_string(),
        model_files: files.len(),
        model_bytes,
        host: Host::collect(&a.model),
        fio: fio.clone(),
        seconds_per_cell: a.seconds,
        seed: a.seed,
        patterns: workloads
            .iter()
            .map(|w| {
                let cell = matrix.cells().first().copied();
                PatternInfo {
                    name: w.name.clone(),
                    distinct_requests: w.cold_sequence().len(),
                    sequence_requests: w.sequence.len(),
                    median_request_bytes: w.median_request_bytes(),
                    pass_bytes: w.pass_bytes(),
                    fio_files: cell
                        .and_then(|c| fio_job(w, &c).ok())
                        .map(|j| j.files.iter().map(|f| f.display().to_string()).collect())
                        .unwrap_or_default(),
                }
            })
            .collect(),
        wall_s: 0.0,
    };

    let total = workloads.len() * matrix.cells().len() * if matrix.fio { 2 } else { 1 };
    eprintln!(
        "memdial iobench: {} ({}), {} cells × {} s max, results in {}",
        meta.model_dir,
        fmt_bytes(model_bytes),
        total,
        a.seconds,
        out.display()
    );
    println!(
        "{:<8} {:<10} {:<8} {:>3} {:<5} {:>6} {:>8} {:>9} {:>10} {:>10} {:>8}",
        "tool",
        "pattern",
        "io",
        "qd",
        "cache",
        "cold✓",
        "GB/s",
        "req/s",
        "p50 ms",
        "p99 ms",
        "CPU s/GB"
    );
    let mut rows: Vec<Row> = Vec::new();
    for w in &workloads {
        let mut on_row = |r: &Row| {
            if r.status == "ok" {
                println!(
                    "{:<8} {:<10} {:<8} {:>3} {:<5} {:>6} {:>8.3} {:>9.1} {:>10.3} {:>10.3} {:>8.3}",
                    r.tool,
                    r.pattern,
                    r.io,
                    r.qd,
                    r.cache,
                    if r.cache == "cold" {
                        if r.cold_verified {
                            "yes"
                        } else {
                            "NO"
                        }
                    } else {
                        "-"
                    },
                    r.gb_per_s,
                    r.requests_per_s,
                    r.latency_p50_us / 1e3,
                    r.latency_p99_us / 1e3,
                    r.cpu_s_per_gb
                );
            } else {
                println!(
                    "{:<8} {:<10} {:<8} {:>3} {:<5} {}: {}",
                    r.tool, r.pattern, r.io, r.qd, r.cache, r.status, r.note
                );
            }
            rows.push(r.clone());
            if let Err(e) = save_rows(&out, &rows) {
                eprintln!("warning: cannot save results: {e:#}");
            }
        };
        run_matrix(w, &matrix, &mut on_row);
    }
    meta.wall_s = t_start.elapsed().as_secs_f64();
    write_atomic(
        &out.join("iobench.json"),
        serde_json::to_string_pretty(&meta)?.as_bytes(),
    )?;
    let chart_err = write_chart(&out, &rows, &meta.model_dir).err();
    let md = markdown(&meta, &workloads, &rows, &matrix, chart_err.as_ref());
    write_atomic(&out.join("report.md"), md.as_bytes())?;
    eprintln!(
        "wrote {}/{{results.csv,results.json,iobench.json,report.md,chart.svg,chart.png}} in {:.0} s",
        out.display(),
        meta.wall_s
    );
    let failed = rows
        .iter()
        .filter(|r| r.tool == "memdial" && r.status != "ok")
        .count();
    if failed > 0 {
        eprintln!("error: {failed} cell(s) failed (see report.md)");
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}

fn twin<'a>(rows: &'a [Row], r: &Row) -> Option<&'a Row> {
    rows.iter().find(|f| {
        f.tool == "fio"
            && f.pattern == r.pattern
            && f.io == r.io
            && f.qd == r.qd
            && f.cache == r.cache
    })
}

fn gbps(r: Option<&Row>) -> String {
    match r {
        Some(r) if r.status == "ok" => format!("{:.3}", r.gb_per_s),
        Some(r) if r.status == "skipped" => "n/a".into(),
        Some(_) => "error".into(),
        None => "–".into(),
    }
}

/// Trust checks on one memdial row: the reasons its figure may not be what it says.
fn warnings(r: &Row) -> Vec<String> {
    let mut v = Vec::new();
    if r.status != "ok" {
        return v;
    }
    if r.cache == "cold" && !r.cold_verified {
        v.push(format!(
            "not cold: {} of the files were in the page cache before the timed reads",
            fmt_bytes(r.resident_before_bytes)
        ));
    }
    if r.io == "direct" && r.resident_after_bytes > r.resident_before_bytes {
        v.push(format!(
            "direct reads left {} in the page cache: this is not direct IO",
            fmt_bytes(r.resident_after_bytes - r.resident_before_bytes)
        ));
    }
    if (r.cache == "cold" || r.io == "direct")
        && r.bytes > 0
        && (r.device_read_bytes as f64) < 0.9 * r.bytes as f64
    {
        v.push(format!(
            "only {} of {} came from the device (the rest from a cache)",
            fmt_bytes(r.device_read_bytes),
            fmt_bytes(r.bytes)
        ));
    }
    v
}

/// The Markdown report.
fn markdown(
    meta: &Meta,
    workloads: &[Workload],
    rows: &[Row],
    matrix: &Matrix,
    chart_err: Option<&anyhow::Error>,
) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "# memdial iobench\n");
    let _ = writeln!(
        s,
        "Model `{}` ({} files, {}), {}s per cell (a cold cell stops after one pass), seed {}. Started {}, took {:.0} s.\n",
        meta.model_dir,
        meta.model_files,
        fmt_bytes(meta.model_bytes),
        meta.seconds_per_cell,
        meta.seed,
        meta.created_utc,
        meta.wall_s
    );
    let _ = writeln!(s, "## Environment\n");
    let _ = writeln!(s, "| | |\n|---|---|");
    let _ = writeln!(
        s,
        "| CPU | {} ({} logical CPUs) |",
        meta.host.cpu_model, meta.host.cpu_cores
    );
    let _ = writeln!(s, "| RAM | {} |", fmt_bytes(meta.host.ram_bytes));
    let _ = writeln!(s, "| kernel | {} |", meta.host.kernel);
    let _ = writeln!(
        s,
        "| storage | {} on `{}` mounted at `{}` |",
        meta.host.model_fs, meta.host.model_device, meta.host.model_mount
    );
    let _ = writeln!(
        s,
        "| fio | {} |\n",
        meta.fio.as_deref().unwrap_or("not installed (no fio rows)")
    );
    let _ = writeln!(
        s,
        "## How to read this\n\n\
         - **GB/s** is requested bytes (10⁹) per wall second over `qd` threads; **fio GB/s** is the equivalent fio job on the same file (block size = our median request, `direct=1` for direct, `ioengine=mmap` for mmap, `numjobs` = qd, each job its own slice); **ours/fio** near 1 means the engine's reads get what the device gives.\n\
         - **cold** rows start with the model's files evicted and **cold ✓** = `yes` only if mincore found 0 bytes cached just before the timed reads; a cold cell reads each distinct request once. **warm** rows read the data once first and then replay for the whole cell: warm buffered/mmap is the page cache's speed, warm direct should equal cold direct (O_DIRECT ignores the cache).\n\
         - **device** is what the kernel fetched from storage for these reads: for cold rows and every direct row it should be ≈ the bytes read. A figure far above the drive's speed with little device traffic was served from memory.\n\
         - **resident** = page-cache bytes of the model before → after the timed reads: direct reads must not change it.\n\
         - **p50/p99** are per-request latencies (one request = one trunk layer or one expert record, several ranges when the tensors are not adjacent); **CPU s/GB** is user + system CPU per GB read.\n"
    );
    for w in workloads {
        let ours: Vec<&Row> = rows
            .iter()
            .filter(|r| r.tool == "memdial" && r.pattern == w.name)
            .collect();
        let _ = writeln!(
            s,
            "## Pattern `{}`\n\n{} distinct requests (sequence of {}), median request {} in {} contiguous range(s), one pass {}.\n",
            w.name,
            w.cold_sequence().len(),
            w.sequence.len(),
            fmt_bytes(w.median_request_bytes()),
            w.median_spans_per_request(),
            fmt_bytes(w.pass_bytes())
        );
        let _ = writeln!(
            s,
            "| io | qd | cache | cold ✓ | GB/s | fio GB/s | ours/fio | req/s | p50 µs | p99 µs | CPU s/GB | read | device | resident before → after | s |\n\
             |---|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|"
        );
        let mut notes = Vec::new();
        for r in &ours {
            let f = twin(rows, r);
            if r.status != "ok" {
                let _ = writeln!(
                    s,
                    "| {} | {} | {} | – | error | {} | – | | | | | | | | |",
                    r.io,
                    r.qd,
                    r.cache,
                    gbps(f)
                );
                notes.push(format!("{} qd{} {}: {}", r.io, r.qd, r.cache, r.note));
                continue;
            }
            let ratio = match f {
                Some(f) if f.status == "ok" && f.gb_per_s > 0.0 => {
                    format!("{:.2}", r.gb_per_s / f.gb_per_s)
                }
                _ => "–".into(),
            };
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | **{:.3}** | {} | {} | {:.0} | {:.0} | {:.0} | {:.3} | {} | {} | {} → {} | {:.2} |",
                r.io,
                r.qd,
                r.cache,
                if r.cache == "cold" {
                    if r.cold_verified {
                        "yes"
                    } else {
                        "**NO**"
                    }
                } else {
                    "–"
                },
                r.gb_per_s,
                gbps(f),
                ratio,
                r.requests_per_s,
                r.latency_p50_us,
                r.latency_p99_us,
                r.cpu_s_per_gb,
                fmt_bytes(r.bytes),
                fmt_bytes(r.device_read_bytes),
                fmt_bytes(r.resident_before_bytes),
                fmt_bytes(r.resident_after_bytes),
                r.elapsed_s
            );
            for wn in warnings(r) {
                notes.push(format!("{} qd{} {}: {wn}", r.io, r.qd, r.cache));
            }
        }
        if !notes.is_empty() {
            let _ = writeln!(s, "\n**Warnings**\n");
            for n in notes {
                let _ = writeln!(s, "- {n}");
            }
        }
        if matrix.fio {
            let fio_rows: Vec<&Row> = rows
                .iter()
                .filter(|r| r.tool == "fio" && r.pattern == w.name)
                .collect();
            if let Some(r) = fio_rows.iter().find(|r| r.status == "ok") {
                let _ = writeln!(
                    s,
                    "\nfio jobs ({}): e.g. `{}`",
                    r.note,
                    matrix
                        .cells()
                        .iter()
                        .find(|c| c.mode.as_str() == r.io
                            && c.qd == r.qd
                            && c.cache.as_str() == r.cache)
                        .and_then(|c| fio_job(w, c)
                            .ok()
                            .map(|j| j.command_line(c.seconds, c.cache)))
                        .unwrap_or_default()
                );
            }
            if fio_rows.iter().any(|r| r.status == "skipped") {
                let _ = writeln!(
                    s,
                    "- fio mmap at qd > 1 is n/a: fio's mmap engine ignores `offset_increment`, so its jobs would share one slice"
                );
            }
            for r in fio_rows.iter().filter(|r| r.status == "error") {
                let _ = writeln!(s, "- fio {} qd{} {}: {}", r.io, r.qd, r.cache, r.note);
            }
            let fio_unverified = fio_rows
                .iter()
                .filter(|r| r.status == "ok" && r.cache == "cold" && !r.cold_verified)
                .count();
            if fio_unverified > 0 {
                let _ = writeln!(
                    s,
                    "- {fio_unverified} cold fio row(s) did not start from an empty page cache"
                );
            }
        }
        let _ = writeln!(s);
    }
    match chart_err {
        None => {
            let _ = writeln!(s, "## Chart\n\n![GB/s per cell](chart.svg)\n");
        }
        Some(e) => {
            let _ = writeln!(s, "## Chart\n\nThe chart could not be drawn: {e:#}\n");
        }
    }
    let _ = writeln!(
        s,
        "Files: `results.csv` / `results.json` (one row per cell and tool, units in the column names), `iobench.json` (environment and settings)."
    );
    s
}

// ---------------------------------------------------------------- chart

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

fn write_chart(dir: &Path, rows: &[Row], title: &str) -> Result<()> {
    register_font();
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
    {
        let svg = dir.join("chart.svg");
        let root = SVGBackend::new(&svg, size).into_drawing_area();
        draw(&root, &panels, &heights, rows, &name)?;
        root.present().map_err(pe)?;
    }
    {
        let png = dir.join("chart.png");
        let root = BitMapBackend::new(&png, size).into_drawing_area();
        draw(&root, &panels, &heights, rows, &name)?;
        root.present().map_err(pe)?;
    }
    Ok(())
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
        let xmax = cells
            .iter()
            .flat_map(|r| [Some(*r), twin(rows, r)])
            .flatten()
            .filter(|r| r.status == "ok")
            .map(|r| r.gb_per_s)
            .fold(0.0f64, f64::max)
            .max(0.1)
            * 1.35;
        let labels: Vec<String> = cells
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
            .collect();
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
                let Some(row) = row.filter(|x| x.status == "ok") else {
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
                    format!("{:.2}", row.gb_per_s),
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
        if rows.iter().any(|r| r.tool == "fio" && r.status == "ok") {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warns_about_fake_direct_and_warm_cold() {
        let r = Row {
            tool: "memdial".into(),
            io: "direct".into(),
            cache: "cold".into(),
            status: "ok".into(),
            resident_before_bytes: 4096,
            resident_after_bytes: 1 << 20,
            bytes: 1 << 20,
            device_read_bytes: 0,
            ..Default::default()
        };
        let w = warnings(&r);
        assert_eq!(w.len(), 3, "{w:?}");
    }
}
