//! fio replaying a direct or buffered cell's own reads (`read_iolog`); see the
//! [`super::fio`] module doc for why each setting is what it is.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};

use super::cells::{evict_all, per_second, resident_bytes, rusage, CellSpec, CellStatus, Row};
use super::workload::{CacheState, Workload};
use crate::io::IoMode;

/// A fio job replaying a cell's own reads (see the module doc).
#[derive(Debug, Clone, PartialEq)]
pub struct FioReplay {
    /// The workload's files (the iolog names each read's file).
    pub files: Vec<PathBuf>,
    /// The reads `(file index, offset, length)` in issue order, bytes: one per range of
    /// each request; in direct mode the aligned superset our cell reads, clipped at the
    /// file's last whole page (fio refuses a read past the end of the file).
    pub reads: Vec<(usize, u64, u64)>,
    /// `psync` (qd 1) or `io_uring` (qd > 1).
    pub ioengine: &'static str,
    /// `iodepth` (= the cell's queue depth).
    pub iodepth: usize,
    /// `direct=1` in direct mode.
    pub direct: bool,
    /// `--mem`: `shmhuge` (hugetlb 2 MiB pages, [`hugetlb_pages_free`]) or `malloc`.
    pub mem: &'static str,
}

/// Free hugetlb pages of the default size and that size in bytes
/// (`HugePages_Free`, `Hugepagesize` in `/proc/meminfo`); `(0, 2 MiB)` when unknown.
pub fn hugetlb_pages_free() -> (u64, u64) {
    let text = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let field = |k: &str| {
        text.lines()
            .find(|l| l.starts_with(k))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
    };
    (
        field("HugePages_Free:").unwrap_or(0),
        field("Hugepagesize:").map_or(2 << 20, |kb| kb * 1024),
    )
}

impl FioReplay {
    /// Bytes fio reads.
    pub fn bytes(&self) -> u64 {
        self.reads.iter().map(|r| r.2).sum()
    }
    /// Median read length, bytes.
    pub fn median_read_bytes(&self) -> u64 {
        let v: Vec<u64> = self.reads.iter().map(|r| r.2).collect();
        crate::util::stats::median_u64(&v)
    }
    /// The iolog (version 2: `add`/`open` each file, one `read` per entry, `close`).
    ///
    /// Errors: a file name with whitespace (the iolog format splits on it).
    pub fn iolog(&self) -> Result<String> {
        let mut names = Vec::new();
        for f in &self.files {
            let n = f.display().to_string();
            if n.chars().any(char::is_whitespace) {
                bail!("fio's iolog cannot name {n:?} (whitespace in the path)");
            }
            names.push(n);
        }
        let mut s = String::from("fio version 2 iolog\n");
        for act in ["add", "open"] {
            for n in &names {
                s.push_str(&format!("{n} {act}\n"));
            }
        }
        for &(f, o, n) in &self.reads {
            s.push_str(&format!("{} read {o} {n}\n", names[f]));
        }
        for n in &names {
            s.push_str(&format!("{n} close\n"));
        }
        Ok(s)
    }
    /// The command-line arguments (without `fio`) replaying `iolog`.
    pub fn args(&self, iolog: &str, cache: CacheState) -> Vec<String> {
        vec![
            "--name=memdial-iobench".to_string(),
            format!("--read_iolog={iolog}"),
            "--replay_no_stall=1".into(),
            "--readonly".into(),
            "--thread".into(),
            format!("--ioengine={}", self.ioengine),
            format!("--iodepth={}", self.iodepth),
            format!("--direct={}", u8::from(self.direct)),
            format!("--mem={}", self.mem),
            format!("--invalidate={}", u8::from(cache == CacheState::Cold)),
            "--output-format=json".into(),
        ]
    }
    /// The job as one shell line (for the report).
    pub fn command_line(&self, iolog: &str, cache: CacheState) -> String {
        super::fio::command_line(self.args(iolog, cache))
    }
    /// Short description for the row's note.
    pub fn describe(&self) -> String {
        format!(
            "replay of the cell's {} reads per run (read_iolog; median {} B), ioengine={} iodepth={} direct={} mem={}",
            self.reads.len(),
            self.median_read_bytes(),
            self.ioengine,
            self.iodepth,
            u8::from(self.direct),
            self.mem
        )
    }
}

/// The fio replay of `requests` requests of `w`'s sequence for `spec` (a cold pass:
/// the distinct requests once; warm: the sequence cyclically).
///
/// Errors: a file cannot be opened or stat'ed.
pub fn fio_replay(w: &Workload, spec: &CellSpec, requests: usize) -> Result<FioReplay> {
    let seq = match spec.cache {
        CacheState::Cold => w.cold_sequence(),
        CacheState::Warm => w.sequence.clone(),
    };
    if seq.is_empty() {
        bail!("workload {} has no requests", w.name);
    }
    let direct = spec.mode == IoMode::Direct;
    let mut files = Vec::new();
    for p in &w.files {
        let size = std::fs::metadata(p)
            .with_context(|| format!("cannot stat {}", p.display()))?
            .len();
        let sf = if direct {
            Some(crate::io::ShardFile::open(p, IoMode::Direct)?)
        } else {
            None
        };
        files.push((size, sf));
    }
    let ps = crate::io::pagecache::page_size() as u64;
    let mut reads = Vec::new();
    for k in 0..requests {
        for s in &w.requests[seq[k % seq.len()]] {
            let (size, sf) = &files[s.file];
            let (o, end) = match sf {
                Some(f) => {
                    let (a, b) = f.aligned_span(s.offset, s.len);
                    (a, b.min(*size / ps * ps))
                }
                None => (s.offset, s.offset + s.len),
            };
            if end > o {
                reads.push((s.file, o, end - o));
            }
        }
    }
    let max_read = reads.iter().map(|r| r.2).max().unwrap_or(0);
    let (free, page) = hugetlb_pages_free();
    // fio allocates iodepth × the largest read, rounded up to whole pages (+1 for alignment).
    let need = (spec.qd.max(1) as u64 * max_read).div_ceil(page) + 1;
    Ok(FioReplay {
        files: w.files.clone(),
        reads,
        ioengine: if spec.qd > 1 { "io_uring" } else { "psync" },
        iodepth: spec.qd.max(1),
        direct,
        mem: if free >= need { "shmhuge" } else { "malloc" },
    })
}

/// What one fio run reported (its first job's reads): bytes, requests, runtime and CPU
/// seconds, completion latency percentiles in microseconds, fio's version string.
pub(super) struct FioRun {
    pub bytes: u64,
    pub requests: u64,
    pub elapsed_s: f64,
    pub cpu_s: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub max_us: f64,
    pub version: String,
}

/// Runs fio with `args` (which must include `--output-format=json`) and parses its JSON
/// output.
///
/// Errors: fio missing, exiting nonzero (its stderr quoted) or reporting a job error;
/// unparsable output.
pub(super) fn run_fio(args: &[String]) -> Result<FioRun> {
    let out = std::process::Command::new("fio")
        .args(args)
        .output()
        .context("cannot run fio (is it installed?)")?;
    if !out.status.success() {
        bail!(
            "fio failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let json = text.find('{').map(|i| &text[i..]).unwrap_or(&text);
    let v: serde_json::Value =
        serde_json::from_str(json).context("cannot parse fio's JSON output")?;
    let j = &v["jobs"][0];
    if j["error"].as_i64().unwrap_or(0) != 0 {
        bail!("fio reported error {}", j["error"]);
    }
    let r = &j["read"];
    let f = |x: &serde_json::Value| x.as_f64().unwrap_or(0.0);
    let pct = |q: &str| f(&r["clat_ns"]["percentile"][q]) / 1e3;
    Ok(FioRun {
        bytes: r["io_bytes"].as_u64().unwrap_or(0),
        requests: r["total_ios"].as_u64().unwrap_or(0),
        elapsed_s: f(&r["runtime"]) / 1e3,
        cpu_s: (f(&j["usr_cpu"]) + f(&j["sys_cpu"])) / 100.0 * f(&j["job_runtime"]) / 1e3,
        p50_us: pct("50.000000"),
        p99_us: pct("99.000000"),
        max_us: f(&r["clat_ns"]["max"]) / 1e3,
        version: v["fio version"].as_str().unwrap_or("fio").to_string(),
    })
}

/// A scratch file name for an iolog, unique in this process.
fn iolog_path() -> PathBuf {
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    std::env::temp_dir().join(format!("memdial-iobench-{}-{n}.iolog", std::process::id()))
}

/// Runs the fio replay of a direct or buffered cell (see the module doc): cold, as many
/// passes as our row made (each from an evicted, verified-cold cache); warm, our row's
/// request count after the same preload. Sums bytes, time and CPU over the passes; the
/// latencies are the median (`util::stats`) of the passes' p50s and the largest p99 and maximum.
///
/// Errors: fio missing or failing, the iolog cannot be written.
pub fn run_fio_replay(w: &Workload, spec: &CellSpec, ours: Option<&Row>) -> Result<Row> {
    let cold = spec.cache == CacheState::Cold;
    let distinct = w.cold_sequence().len();
    let (passes, requests) = match (cold, ours.filter(|r| r.status == CellStatus::Ok)) {
        (true, Some(r)) => ((r.passes.round() as usize).max(1), distinct),
        (true, None) => (1, distinct),
        (false, Some(r)) => (1, (r.requests as usize).max(1)),
        (false, None) => (1, w.sequence.len()),
    };
    let job = fio_replay(w, spec, requests)?;
    let path = iolog_path();
    std::fs::write(&path, job.iolog()?)
        .with_context(|| format!("cannot write {}", path.display()))?;
    let args = job.args(&path.display().to_string(), spec.cache);
    let res = (|| -> Result<_> {
        let mut runs = Vec::new();
        let (mut cold_ok, mut before_max, mut after) = (true, 0u64, 0u64);
        let (_, dev0) = rusage(libc::RUSAGE_CHILDREN);
        for _ in 0..passes {
            if cold {
                evict_all(&w.files)?;
            } else {
                super::cells::preload(w)?;
            }
            let before = resident_bytes(&w.files)?;
            cold_ok &= before == 0;
            before_max = before_max.max(before);
            runs.push(run_fio(&args)?);
            after = resident_bytes(&w.files)?;
        }
        let (_, dev1) = rusage(libc::RUSAGE_CHILDREN);
        Ok((runs, cold_ok, before_max, after, dev1.saturating_sub(dev0)))
    })();
    let _ = std::fs::remove_file(&path);
    let (runs, cold_ok, before, after, device) = res?;
    let bytes: u64 = runs.iter().map(|r| r.bytes).sum();
    let elapsed: f64 = runs.iter().map(|r| r.elapsed_s).sum();
    let cpu: f64 = runs.iter().map(|r| r.cpu_s).sum();
    let n: u64 = runs.iter().map(|r| r.requests).sum();
    let p50: Vec<f64> = runs.iter().map(|r| r.p50_us).collect();
    let gb = bytes as f64 / 1e9;
    let mut note = format!(
        "{}: {}{}",
        runs[0].version,
        job.describe(),
        if cold {
            format!(", {passes} cold pass(es)")
        } else {
            String::new()
        }
    );
    if job.mem != "shmhuge" {
        note.push_str(
            "; fio's buffers are 4 KiB pages (not enough free hugetlb pages, vm.nr_hugepages): its direct reads become more, smaller device requests than ours (docs/io.md §2)",
        );
    }
    Ok(Row {
        tool: "fio".into(),
        pattern: w.name.clone(),
        io: spec.mode.as_str().into(),
        qd: spec.qd,
        cache: spec.cache.as_str().into(),
        cold_verified: cold && cold_ok,
        resident_before_bytes: before,
        resident_after_bytes: after,
        working_set_bytes: if cold { job.bytes() } else { w.pass_bytes() },
        request_bytes: job.median_read_bytes(),
        requests: n,
        bytes,
        elapsed_s: elapsed,
        gb_per_s: per_second(gb, elapsed),
        requests_per_s: per_second(n as f64, elapsed),
        latency_p50_us: crate::util::stats::median(&p50).unwrap_or(0.0),
        latency_p99_us: runs.iter().map(|r| r.p99_us).fold(0.0, f64::max),
        latency_max_us: runs.iter().map(|r| r.max_us).fold(0.0, f64::max),
        cpu_s: cpu,
        cpu_s_per_gb: if gb > 0.0 { cpu / gb } else { 0.0 },
        device_read_bytes: device,
        passes: if cold {
            passes as f64
        } else {
            requests as f64 / distinct.max(1) as f64
        },
        status: CellStatus::Ok,
        note,
        knee: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Hand-written: two files, three reads; the iolog adds and opens every file,
    /// reads in the given order, closes; the args replay it at the job's depth.
    #[test]
    fn iolog_and_args() {
        let j = FioReplay {
            files: vec!["/m/a.safetensors".into(), "/m/b.safetensors".into()],
            reads: vec![(1, 4096, 8192), (0, 0, 4096), (1, 0, 4096)],
            ioengine: "io_uring",
            iodepth: 4,
            direct: true,
            mem: "shmhuge",
        };
        assert_eq!(
            j.iolog().unwrap(),
            "fio version 2 iolog\n\
             /m/a.safetensors add\n/m/b.safetensors add\n\
             /m/a.safetensors open\n/m/b.safetensors open\n\
             /m/b.safetensors read 4096 8192\n/m/a.safetensors read 0 4096\n/m/b.safetensors read 0 4096\n\
             /m/a.safetensors close\n/m/b.safetensors close\n"
        );
        assert_eq!((j.bytes(), j.median_read_bytes()), (16384, 4096));
        let a = j.args("/t/x.iolog", CacheState::Cold);
        for want in [
            "--read_iolog=/t/x.iolog",
            "--replay_no_stall=1",
            "--ioengine=io_uring",
            "--iodepth=4",
            "--direct=1",
            "--mem=shmhuge",
            "--invalidate=1",
        ] {
            assert!(a.iter().any(|x| x == want), "{want} missing from {a:?}");
        }
        let bad = FioReplay {
            files: vec!["/m/a b".into()],
            ..j
        };
        assert!(bad.iolog().is_err(), "whitespace in a path is refused");
    }
}
