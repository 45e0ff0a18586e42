//! `memdial iobench`: direct vs buffered vs mmap on the model's own read requests,
//! cold and warm, at several queue depths, with the equivalent fio job beside.
//!
//! The measuring is [`memdial::tools::iobench`]; this module parses the command line and
//! runs the matrix; [`crate::iobench`] writes the run directory (through
//! [`crate::export`]): `results.csv`, `results.json` (one row per cell and tool),
//! `iobench.json` (environment and settings), `report.md`, `chart.svg` and
//! `chart.png`, under `reports/iobench-<UTC time>/` with `reports/iobench-latest`
//! pointing at it.
//!
//! Exit codes: 0 every memdial cell ran, 1 a cell failed, 2 usage error.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use memdial::io::IoMode;
use memdial::tools::iobench::{
    fio_job, fio_version, run_matrix, CacheState, CellStatus, Matrix, Pattern, Row, Workload,
    DEFAULT_SEED,
};
use memdial::util::units::fmt_bytes;

use crate::export;
use crate::iobench::charts::write_chart;
use crate::iobench::report::{markdown, save_rows, Meta, PatternInfo};
use crate::sweep::record::host::Host;
use crate::sweep::util::{utc_now_dirname, utc_now_rfc3339};

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
    /// Queue depths (reader threads), comma-separated. The report marks each series'
    /// knee: the smallest depth within 5 % of its best GB/s.
    #[arg(long, default_value = "1,2,4,8,16")]
    pub qd: String,
    /// Page-cache states, comma-separated: cold (evicted and verified empty with
    /// mincore) and warm (read once first).
    #[arg(long, default_value = "cold,warm")]
    pub cache: String,
    /// Time limit per cell, seconds. A cold cell repeats evict + one pass over the
    /// pattern's distinct requests until its reads reach 2 s or 2 GB, within this limit.
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

/// `iobench.json` before the run (`wall_s` is set at the end).
fn new_meta(
    a: &Args,
    workloads: &[Workload],
    matrix: &Matrix,
    fio: Option<String>,
    created: String,
) -> Meta {
    let files = &workloads[0].files;
    let model_bytes: u64 = files
        .iter()
        .map(|f| std::fs::metadata(f).map(|m| m.len()).unwrap_or(0))
        .sum();
    Meta {
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
        fio,
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
    }
}

/// One line of the live table on stdout.
fn print_row(r: &Row) {
    if r.status == CellStatus::Ok {
        println!(
            "{:<8} {:<10} {:<8} {:>3} {:<5} {:>6} {:>8.3} {:>9.1} {:>10.0} {:>10.0} {:>8.3}",
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
            r.latency_p50_us,
            r.latency_p99_us,
            r.cpu_s_per_gb
        );
    } else {
        println!(
            "{:<8} {:<10} {:<8} {:>3} {:<5} {}: {}",
            r.tool, r.pattern, r.io, r.qd, r.cache, r.status, r.note
        );
    }
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
        export::update_latest(Path::new(DEFAULT_REPORTS), "iobench-latest", &out);
    }

    let mut meta = new_meta(a, &workloads, &matrix, fio.clone(), created);
    let model_bytes = meta.model_bytes;
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
        "p50 µs",
        "p99 µs",
        "CPU s/GB"
    );
    let mut rows: Vec<Row> = Vec::new();
    for w in &workloads {
        let mut on_row = |r: &Row| {
            print_row(r);
            rows.push(r.clone());
            if let Err(e) = save_rows(&out, &rows) {
                eprintln!("warning: cannot save results: {e:#}");
            }
        };
        run_matrix(w, &matrix, &mut on_row);
    }
    memdial::tools::iobench::mark_knees(&mut rows);
    save_rows(&out, &rows)?;
    meta.wall_s = t_start.elapsed().as_secs_f64();
    export::write_json(&out.join("iobench.json"), &meta)?;
    let chart_err = write_chart(&out, &rows, &meta.model_dir).err();
    let md = markdown(&meta, &workloads, &rows, &matrix, chart_err.as_ref());
    export::write_text(&out.join("report.md"), &md)?;
    eprintln!(
        "wrote {}/{{results.csv,results.json,iobench.json,report.md,chart.svg,chart.png}} in {:.0} s",
        out.display(),
        meta.wall_s
    );
    let failed = rows
        .iter()
        .filter(|r| r.tool == "memdial" && r.status != CellStatus::Ok)
        .count();
    if failed > 0 {
        eprintln!("error: {failed} cell(s) failed (see report.md)");
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}
