//! The `fio` job equivalent to a cell, and running it for comparison.
//!
//! Direct and buffered cells are compared with fio **replaying the cell's own reads**
//! ([`super::replay::FioReplay`]: `read_iolog`, one line per range, in the cell's order): the same files,
//! offsets, lengths (direct: the aligned superset the cell reads), order and amount (a cold
//! cell's passes one by one from an evicted cache, a warm cell's request count). At queue
//! depth 1 fio runs `psync` (one `pread` at a time, as our one reader thread); at depth
//! `qd` > 1 it runs one `io_uring` job with `iodepth=qd`: up to `qd` reads of one ordered
//! queue in flight, as our `qd` threads taking the next request (several independent jobs
//! would drift apart and read other parts of the files at the same moment).
//! fio's IO buffers are hugetlb 2 MiB pages (`--mem=shmhuge`) when enough are free, because
//! ours are transparent huge pages and a direct read into 4 KiB pages is cut into more device
//! requests (`docs/io.md` §2); otherwise the row's note says so.
//! mmap cells keep a synthetic fio job ([`FioJob`]): fio 3.33's mmap engine fails an iolog
//! replay (`EINVAL` from its `mmap` of the file), so it reads the same files at the median
//! request size, qd 1 only.

use std::fs::File;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};

use super::cells::{
    evict_all, page_map, preload_range, resident_bytes, rusage, CellSpec, CellStatus, Row,
};
use super::workload::{CacheState, Workload};
use crate::io::IoMode;

/// `fio` followed by `args`, space-separated: the job as one shell line for the report.
pub(super) fn command_line(args: Vec<String>) -> String {
    std::iter::once("fio".to_string())
        .chain(args)
        .collect::<Vec<_>>()
        .join(" ")
}

pub fn fio_version() -> Option<String> {
    let out = std::process::Command::new("fio")
        .arg("--version")
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// The fio job equivalent to a cell (see [`fio_job`]).
#[derive(Debug, Clone, PartialEq)]
pub struct FioJob {
    /// The files fio reads: the workload's files holding at least 5 % of one pass's
    /// bytes (in the workload's order).
    pub files: Vec<PathBuf>,
    /// `read` (trunk) or `randread` (experts, traces).
    pub rw: &'static str,
    /// Block size, bytes: the median request size rounded up to 4096, capped so that
    /// every job gets at least one block of every file.
    pub bs: u64,
    /// Bytes each job reads from each file (also the `offset_increment`): job j reads
    /// `[j·per_job_per_file, (j+1)·per_job_per_file)` of every file, so jobs never
    /// read the same byte.
    pub per_job_per_file: u64,
    /// `numjobs` (= queue depth; each job is a synchronous `psync`/`mmap` thread).
    pub numjobs: usize,
    /// `ioengine`: `psync` (direct, buffered) or `mmap`.
    pub ioengine: &'static str,
    /// `direct=1` in direct mode.
    pub direct: bool,
}

impl FioJob {
    /// Bytes each job reads (fio `size`, split evenly across the files).
    pub fn per_job(&self) -> u64 {
        self.per_job_per_file * self.files.len() as u64
    }
    /// Bytes of each file that the jobs cover together (`[0, region_per_file)`).
    pub fn region_per_file(&self) -> u64 {
        self.per_job_per_file * self.numjobs as u64
    }
    /// Bytes all jobs cover together.
    pub fn region(&self) -> u64 {
        self.per_job() * self.numjobs as u64
    }
    /// The command-line arguments (without `fio`), for `seconds` and `cache`.
    pub fn args(&self, seconds: f64, cache: CacheState) -> Vec<String> {
        let files: Vec<String> = self
            .files
            .iter()
            .map(|f| {
                f.display()
                    .to_string()
                    .replace('\\', "\\\\")
                    .replace(':', "\\:")
            })
            .collect();
        let mut a = vec![
            "--name=memdial-iobench".to_string(),
            format!("--filename={}", files.join(":")),
            "--readonly".into(),
            "--thread".into(),
            format!("--rw={}", self.rw),
            format!("--bs={}", self.bs),
            format!("--direct={}", u8::from(self.direct)),
            format!("--ioengine={}", self.ioengine),
            "--iodepth=1".into(),
            // The kernel's default read-around, as the engine's mmap faults get; fio's
            // default hint would madvise(MADV_RANDOM) a random pattern (one 4 KiB page
            // per fault, measured 31–50 MB/s on 1 MiB records against 244–288 MB/s).
            "--fadvise_hint=0".into(),
            format!("--numjobs={}", self.numjobs),
            format!("--size={}", self.per_job()),
            format!("--offset_increment={}", self.per_job_per_file),
            format!(
                "--file_service_type={}",
                if self.rw == "read" {
                    "sequential"
                } else {
                    "random"
                }
            ),
            "--group_reporting".into(),
            "--output-format=json".into(),
            format!("--invalidate={}", u8::from(cache == CacheState::Cold)),
        ];
        if seconds.is_finite() {
            a.push(format!(
                "--runtime={}ms",
                (seconds * 1000.0).round().max(1.0) as u64
            ));
        }
        if cache == CacheState::Warm {
            a.push("--time_based".into());
        }
        a
    }
    /// The job as one shell line (for the report).
    pub fn command_line(&self, seconds: f64, cache: CacheState) -> String {
        command_line(self.args(seconds, cache))
    }
    /// Short description for the report, e.g.
    /// `2 file(s) (a, b), rw=randread bs=1044480 numjobs=4 …`.
    pub fn describe(&self) -> String {
        format!(
            "{} file(s) ({}), rw={} bs={} numjobs={} {} B/job/file ioengine={} direct={}",
            self.files.len(),
            self.files
                .iter()
                .map(|f| {
                    f.file_name()
                        .map(|s| s.to_string_lossy().into_owned())
                        .unwrap_or_default()
                })
                .collect::<Vec<_>>()
                .join(", "),
            self.rw,
            self.bs,
            self.numjobs,
            self.per_job_per_file,
            self.ioengine,
            u8::from(self.direct)
        )
    }
}

/// The fio job equivalent to `spec` on `w`: the same files, block size = the median
/// request size, `direct=1` vs `0` (or `ioengine=mmap`), `numjobs` = queue depth,
/// sequential for the trunk and random otherwise. It covers about one pass's bytes,
/// spread evenly over the files that hold the pattern (each file's share capped by
/// the smallest of them), so a warm fio job has about our working-set size and does
/// not run from the CPU caches while ours runs from memory.
pub fn fio_job(w: &Workload, spec: &CellSpec) -> Result<FioJob> {
    let per_file = w.pass_bytes_per_file();
    let pass = w.pass_bytes();
    let idx: Vec<usize> = (0..w.files.len())
        .filter(|&i| per_file[i] > 0 && per_file[i] * 20 >= pass)
        .collect();
    if idx.is_empty() {
        bail!("workload {} reads nothing", w.name);
    }
    let mut min_size = u64::MAX;
    for &i in &idx {
        let size = std::fs::metadata(&w.files[i])
            .with_context(|| format!("cannot stat {}", w.files[i].display()))?
            .len();
        min_size = min_size.min(size);
    }
    let region_per_file = pass.div_ceil(idx.len() as u64).min(min_size) / 4096 * 4096;
    let qd = spec.qd.max(1) as u64;
    let max_bs = (region_per_file / qd) / 4096 * 4096;
    if max_bs == 0 {
        bail!("the pattern's files are too small for {} fio jobs", spec.qd);
    }
    let bs = (w.median_request_bytes().div_ceil(4096).max(1) * 4096).min(max_bs);
    Ok(FioJob {
        files: idx.iter().map(|&i| w.files[i].clone()).collect(),
        rw: if w.sequential { "read" } else { "randread" },
        bs,
        per_job_per_file: (region_per_file / qd) / bs * bs,
        numjobs: spec.qd,
        ioengine: if spec.mode == IoMode::Mmap {
            "mmap"
        } else {
            "psync"
        },
        direct: spec.mode == IoMode::Direct,
    })
}

/// Runs the fio job equivalent to `spec` and returns its row: for direct and buffered
/// cells a replay of the cell's reads ([`run_fio_replay`](super::replay::run_fio_replay), `ours` = our row of the
/// cell, whose passes / request count fio matches), for mmap the synthetic job (cold:
/// files evicted and verified first; warm: fio's region read through the page cache
/// first).
///
/// Errors: fio missing or failing (its stderr is quoted), unparsable output.
pub fn run_fio_cell(w: &Workload, spec: &CellSpec, ours: Option<&Row>) -> Result<Row> {
    if spec.mode != IoMode::Mmap {
        return super::replay::run_fio_replay(w, spec, ours);
    }
    let job = fio_job(w, spec)?;
    if spec.mode == IoMode::Mmap && spec.qd > 1 {
        // fio 3.33's mmap engine maps every job's file from offset 0, ignoring
        // `offset`/`offset_increment` (checked with mincore), so parallel jobs would
        // re-read one shared slice from the page cache and the figure would be too good.
        return Ok(Row {
            status: CellStatus::Skipped,
            note: "fio's mmap engine ignores offset_increment, so parallel jobs would read the same bytes; only qd 1 is comparable".into(),
            ..Row::error("fio", &w.name, spec, &anyhow::anyhow!(""))
        });
    }
    let cold = spec.cache == CacheState::Cold;
    if cold {
        evict_all(&w.files)?;
    } else {
        let mut scratch = vec![0u8; 8 << 20];
        for p in &job.files {
            let f = File::open(p).with_context(|| format!("cannot open {}", p.display()))?;
            let map = page_map(p)?;
            preload_range(&f, p, &map, (0, job.region_per_file()), &mut scratch)?;
        }
    }
    let resident_before = resident_bytes(&w.files)?;
    let (_, dev0) = rusage(libc::RUSAGE_CHILDREN);
    let run = super::replay::run_fio(&job.args(spec.seconds, spec.cache))?;
    let (_, dev1) = rusage(libc::RUSAGE_CHILDREN);
    let resident_after = resident_bytes(&w.files)?;
    let gb = run.bytes as f64 / 1e9;
    let per_s = |x: f64| super::cells::per_second(x, run.elapsed_s);
    Ok(Row {
        tool: "fio".into(),
        pattern: w.name.clone(),
        io: spec.mode.as_str().into(),
        qd: spec.qd,
        cache: spec.cache.as_str().into(),
        cold_verified: cold && resident_before == 0,
        resident_before_bytes: resident_before,
        resident_after_bytes: resident_after,
        working_set_bytes: job.region(),
        request_bytes: job.bs,
        requests: run.requests,
        bytes: run.bytes,
        elapsed_s: run.elapsed_s,
        gb_per_s: per_s(gb),
        requests_per_s: per_s(run.requests as f64),
        latency_p50_us: run.p50_us,
        latency_p99_us: run.p99_us,
        latency_max_us: run.max_us,
        cpu_s: run.cpu_s,
        cpu_s_per_gb: if gb > 0.0 { run.cpu_s / gb } else { 0.0 },
        device_read_bytes: dev1.saturating_sub(dev0),
        passes: if job.region() > 0 {
            run.bytes as f64 / job.region() as f64
        } else {
            0.0
        },
        status: CellStatus::Ok,
        note: format!("{}: {}", run.version, job.describe()),
        knee: false,
    })
}

// ---------------------------------------------------------------- matrix

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fio_args_cold_and_warm() {
        let j = FioJob {
            files: vec!["/m/a:b.safetensors".into(), "/m/c".into()],
            rw: "read",
            bs: 1 << 20,
            per_job_per_file: 4 << 20,
            numjobs: 4,
            ioengine: "psync",
            direct: true,
        };
        let cold = j.args(3.0, CacheState::Cold);
        assert!(cold.contains(&"--filename=/m/a\\:b.safetensors:/m/c".to_string()));
        assert!(cold.contains(&"--size=8388608".to_string()));
        assert!(cold.contains(&"--offset_increment=4194304".to_string()));
        assert!(cold.contains(&"--invalidate=1".to_string()));
        assert!(cold.contains(&"--runtime=3000ms".to_string()));
        assert!(!cold.contains(&"--time_based".to_string()));
        let warm = j.args(3.0, CacheState::Warm);
        assert!(warm.contains(&"--time_based".to_string()));
        assert!(warm.contains(&"--invalidate=0".to_string()));
        assert_eq!(j.region(), 32 << 20);
        assert_eq!(j.region_per_file(), 16 << 20);
    }
}
