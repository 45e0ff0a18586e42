//! The IO benchmark's run directory: its metadata (`iobench.json`), result table
//! and Markdown report (the chart is [`super::charts`]).

use std::fmt::Write as _;
use std::path::Path;

use anyhow::{anyhow, Result};
use memdial::tools::iobench::{
    fio_job, fio_replay, CellSpec, CellStatus, Matrix, Row, Workload, KNEE_TOLERANCE,
};
use memdial::util::units::fmt_bytes;
use serde::Serialize;

use crate::export;
use crate::sweep::record::host::Host;

/// Environment and settings of a run (`iobench.json`).
#[derive(Debug, Serialize)]
pub struct Meta {
    pub created_utc: String,
    pub memdial_version: String,
    pub command: String,
    pub model_dir: String,
    pub model_files: usize,
    pub model_bytes: u64,
    pub host: Host,
    pub fio: Option<String>,
    pub seconds_per_cell: f64,
    pub seed: u64,
    pub patterns: Vec<PatternInfo>,
    pub wall_s: f64,
}

#[derive(Debug, Serialize)]
pub struct PatternInfo {
    pub name: String,
    pub distinct_requests: usize,
    pub sequence_requests: usize,
    pub median_request_bytes: u64,
    pub pass_bytes: u64,
    /// Files the fio jobs read.
    pub fio_files: Vec<String>,
}

/// Writes `results.csv` and `results.json` (one row per cell and tool).
pub fn save_rows(dir: &Path, rows: &[Row]) -> Result<()> {
    let mut w = csv::Writer::from_writer(vec![]);
    for r in rows {
        w.serialize(r)?;
    }
    let bytes = w.into_inner().map_err(|e| anyhow!("csv: {e}"))?;
    export::write_table(dir, rows, &bytes)
}

/// The fio row measured for the same cell as `r`, if any.
pub fn twin<'a>(rows: &'a [Row], r: &Row) -> Option<&'a Row> {
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
        Some(r) if r.status == CellStatus::Ok => format!("{:.3}", r.gb_per_s),
        Some(r) if r.status == CellStatus::Skipped => "n/a".into(),
        Some(_) => "error".into(),
        None => "–".into(),
    }
}

/// Trust checks on one memdial row: the reasons its figure may not be what it says.
fn warnings(r: &Row) -> Vec<String> {
    let mut v = Vec::new();
    if r.status != CellStatus::Ok {
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

/// The Markdown report: the introduction, one section per access pattern, the chart.
pub fn markdown(
    meta: &Meta,
    workloads: &[Workload],
    rows: &[Row],
    matrix: &Matrix,
    chart_err: Option<&anyhow::Error>,
) -> String {
    let mut s = String::new();
    intro(&mut s, meta);
    for w in workloads {
        pattern(&mut s, w, rows, matrix);
    }
    chart_and_files(&mut s, chart_err);
    s
}

/// The title, the environment and how to read the tables.
fn intro(s: &mut String, meta: &Meta) {
    let _ = writeln!(s, "# memdial iobench\n");
    let _ = writeln!(
        s,
        "Model `{}` ({} files, {}), {}s per cell (a cold cell repeats evict + one pass until 2 s or 2 GB), seed {}. Started {}, took {:.0} s.\n",
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
         - **GB/s** is requested bytes (10⁹) per wall second over `qd` threads; **fio GB/s** is fio on the same cell: for direct and buffered a replay of the cell's own reads (`read_iolog`: same files, offsets, lengths, order and amount; `psync` at qd 1, one `io_uring` job with `iodepth` = qd above; buffers in hugetlb 2 MiB pages like ours when enough are free), for mmap a synthetic job at our median request size (qd 1 only; fio's mmap engine cannot replay a log); **ours/fio** near 1 means the engine's reads get what the device gives.\n\
         - **knee** (the depth table): the smallest queue depth whose GB/s is within 5 % of the series' best; more engine IO threads than that (`memdial run --io-depth`, alias of `--io-threads`) buy nothing on this disk.\n\
         - **cold** rows start with the model's files evicted and **cold ✓** = `yes` only if mincore found 0 bytes cached just before the timed reads; a cold cell reads each distinct request once. **warm** rows read the data once first and then replay for the whole cell: warm buffered/mmap is the page cache's speed, warm direct should equal cold direct (O_DIRECT ignores the cache).\n\
         - **device** is what the kernel fetched from storage for these reads: for cold rows and every direct row it should be ≈ the bytes read. A figure far above the drive's speed with little device traffic was served from memory.\n\
         - **resident** = page-cache bytes of the model before → after the timed reads: direct reads must not change it.\n\
         - **p50/p99** are per-request latencies (one request = one trunk layer or one expert record, several ranges when the tensors are not adjacent); **CPU s/GB** is user + system CPU per GB read.\n"
    );
}

/// One access pattern: its table of our cells, their warnings, the depth table and
/// the fio notes.
fn pattern(s: &mut String, w: &Workload, rows: &[Row], matrix: &Matrix) {
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
        memdial_row(s, rows, r, &mut notes);
    }
    if !notes.is_empty() {
        let _ = writeln!(s, "\n**Warnings**\n");
        for n in notes {
            let _ = writeln!(s, "- {n}");
        }
    }
    knee_table(s, rows, &w.name);
    if matrix.fio {
        fio_notes(s, w, rows, matrix);
    }
    let _ = writeln!(s);
}

/// One row of memdial's table (`notes` collects its error or warnings).
fn memdial_row(s: &mut String, rows: &[Row], r: &Row, notes: &mut Vec<String>) {
    let f = twin(rows, r);
    if r.status != CellStatus::Ok {
        let _ = writeln!(
            s,
            "| {} | {} | {} | – | error | {} | – | | | | | | | | |",
            r.io,
            r.qd,
            r.cache,
            gbps(f)
        );
        notes.push(format!("{} qd{} {}: {}", r.io, r.qd, r.cache, r.note));
        return;
    }
    let ratio = match f {
        Some(f) if f.status == CellStatus::Ok && f.gb_per_s > 0.0 => {
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

/// The fio job of the pattern and what to know about fio's rows.
fn fio_notes(s: &mut String, w: &Workload, rows: &[Row], matrix: &Matrix) {
    let fio_rows: Vec<&Row> = rows
        .iter()
        .filter(|r| r.tool == "fio" && r.pattern == w.name)
        .collect();
    if let Some(r) = fio_rows.iter().find(|r| r.status == CellStatus::Ok) {
        let _ = writeln!(
            s,
            "\nfio jobs ({}): e.g. `{}`",
            r.note,
            matrix
                .cells()
                .iter()
                .find(|c| c.mode.as_str() == r.io && c.qd == r.qd && c.cache.as_str() == r.cache)
                .and_then(|c| fio_command(w, c))
                .unwrap_or_default()
        );
    }
    if fio_rows.iter().any(|r| r.note.contains("4 KiB pages")) {
        let _ = writeln!(
            s,
            "- **fio's IO buffers were 4 KiB pages** (not enough free hugetlb pages; `sysctl vm.nr_hugepages=N` as root gives them): its direct reads were cut into more, smaller device requests than ours, so ours/fio is too high (docs/io.md §2)"
        );
    }
    if fio_rows.iter().any(|r| r.status == CellStatus::Skipped) {
        let _ = writeln!(
            s,
            "- fio mmap at qd > 1 is n/a: fio's mmap engine ignores `offset_increment`, so its jobs would share one slice"
        );
    }
    for r in fio_rows.iter().filter(|r| r.status == CellStatus::Error) {
        let _ = writeln!(s, "- fio {} qd{} {}: {}", r.io, r.qd, r.cache, r.note);
    }
    let fio_unverified = fio_rows
        .iter()
        .filter(|r| r.status == CellStatus::Ok && r.cache == "cold" && !r.cold_verified)
        .count();
    if fio_unverified > 0 {
        let _ = writeln!(
            s,
            "- {fio_unverified} cold fio row(s) did not start from an empty page cache"
        );
    }
}

/// The chart and the files of the directory.
fn chart_and_files(s: &mut String, chart_err: Option<&anyhow::Error>) {
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
}

/// The fio command for cell `c` of `w` (a replay names its iolog `<iolog>`).
fn fio_command(w: &Workload, c: &CellSpec) -> Option<String> {
    if c.mode == memdial::io::IoMode::Mmap {
        return fio_job(w, c)
            .ok()
            .map(|j| j.command_line(c.seconds, c.cache));
    }
    fio_replay(w, c, 1)
        .ok()
        .map(|j| j.command_line("<iolog of the cell's reads>", c.cache))
}

/// The io-depth table of pattern `pattern`: one row per tool × io mode × cache state,
/// GB/s per queue depth, the knee (smallest depth within 5 % of the row's best) in bold.
fn knee_table(s: &mut String, rows: &[Row], pattern: &str) {
    let mut qds: Vec<usize> = rows
        .iter()
        .filter(|r| r.pattern == pattern)
        .map(|r| r.qd)
        .collect();
    qds.sort_unstable();
    qds.dedup();
    if qds.len() < 2 {
        return;
    }
    let _ = writeln!(
        s,
        "\n**GB/s by queue depth** (the knee, the smallest depth within {:.0} % of the row's best, in bold)\n",
        KNEE_TOLERANCE * 100.0
    );
    let _ = writeln!(
        s,
        "| tool | io | cache | {} | knee |\n|---|---|---|{}---:|",
        qds.iter()
            .map(|q| format!("qd {q}"))
            .collect::<Vec<_>>()
            .join(" | "),
        "---:|".repeat(qds.len())
    );
    let mut keys: Vec<(&str, &str, &str)> = Vec::new();
    for r in rows.iter().filter(|r| r.pattern == pattern) {
        let k = (r.tool.as_str(), r.io.as_str(), r.cache.as_str());
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    for (tool, io, cache) in keys {
        let series: Vec<&Row> = rows
            .iter()
            .filter(|r| r.pattern == pattern && r.tool == tool && r.io == io && r.cache == cache)
            .collect();
        let cells: Vec<String> = qds
            .iter()
            .map(|q| match series.iter().find(|r| r.qd == *q) {
                Some(r) if r.status == CellStatus::Ok && r.knee => format!("**{:.3}**", r.gb_per_s),
                Some(r) if r.status == CellStatus::Ok => format!("{:.3}", r.gb_per_s),
                Some(r) if r.status == CellStatus::Skipped => "n/a".into(),
                Some(_) => "error".into(),
                None => "–".into(),
            })
            .collect();
        let knee = series
            .iter()
            .find(|r| r.knee)
            .map_or("–".to_string(), |r| format!("qd {}", r.qd));
        let _ = writeln!(
            s,
            "| {tool} | {io} | {cache} | {} | {knee} |",
            cells.join(" | ")
        );
    }
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
            status: CellStatus::Ok,
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
