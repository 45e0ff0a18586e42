//! One measured cell: a workload read in one IO mode, cache state and queue depth.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use super::workload::{
    CacheState, Pattern, Span, Workload, DEFAULT_SEED, SEQUENTIAL_REQUEST_BYTES,
};
use crate::io::pagecache;
use crate::io::reader::read_range;
use crate::io::{AlignedBuf, IoMode, ShardFile};

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CellSpec {
    /// IO mode.
    pub mode: IoMode,
    /// Queue depth = reader threads (≥ 1).
    pub qd: usize,
    /// Cold or warm page cache.
    pub cache: CacheState,
    /// Wall-time limit of the timed reads, seconds (a cold cell may end earlier,
    /// after one pass; `f64::INFINITY` = no limit).
    pub seconds: f64,
}

/// One result row (memdial or fio), flat for CSV. Units are in the names.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Row {
    /// `memdial` (our replay) or `fio` (the equivalent fio job).
    pub tool: String,
    /// Pattern name (`trunk`, `experts`, `trace:…`, `file`).
    pub pattern: String,
    /// IO mode: `direct`, `buffered`, `mmap`.
    pub io: String,
    /// Queue depth (threads; fio `numjobs`).
    pub qd: usize,
    /// `cold` or `warm`.
    pub cache: String,
    /// True only for a cold row whose files had 0 bytes in the page cache (mincore)
    /// just before the timed reads. Always false for warm rows.
    pub cold_verified: bool,
    /// Page-cache-resident bytes of the workload's files just before the timed reads.
    pub resident_before_bytes: u64,
    /// Page-cache-resident bytes of the workload's files just after the timed reads.
    pub resident_after_bytes: u64,
    /// Distinct bytes one pass reads (memdial) / the region fio reads (fio).
    pub working_set_bytes: u64,
    /// Median request size (memdial) / block size `bs` (fio), bytes.
    pub request_bytes: u64,
    /// Requests completed.
    pub requests: u64,
    /// Bytes requested and read (range lengths; direct-IO alignment over-read excluded).
    pub bytes: u64,
    /// Wall time of the timed reads, seconds.
    pub elapsed_s: f64,
    /// Throughput, GB/s (10^9 bytes per second).
    pub gb_per_s: f64,
    /// Requests per second (IOPS at this request size).
    pub requests_per_s: f64,
    /// Median request latency, microseconds.
    pub latency_p50_us: f64,
    /// 99th-percentile request latency, microseconds.
    pub latency_p99_us: f64,
    /// Largest request latency, microseconds.
    pub latency_max_us: f64,
    /// CPU time (user + system) during the timed reads, seconds.
    pub cpu_s: f64,
    /// CPU seconds per GB read.
    pub cpu_s_per_gb: f64,
    /// Bytes the kernel fetched from storage for these reads (`ru_inblock` × 512).
    pub device_read_bytes: u64,
    /// Passes over the working set (requests / distinct requests; fio: bytes / region).
    pub passes: f64,
    /// `ok`, `error`, or `skipped` (fio cells that would not be comparable).
    pub status: String,
    /// Error message, or what the fio job was.
    pub note: String,
    /// True on the row at the io-depth knee of its series (same tool, pattern, io
    /// mode and cache state over ≥ 2 queue depths): the smallest depth whose GB/s is
    /// within 5 % of the series' best ([`super::mark_knees`]).
    #[serde(default)]
    pub knee: bool,
}

impl Row {
    /// An error row for a cell that could not run.
    pub fn error(tool: &str, pattern: &str, spec: &CellSpec, e: &anyhow::Error) -> Row {
        Row {
            tool: tool.into(),
            pattern: pattern.into(),
            io: spec.mode.as_str().into(),
            qd: spec.qd,
            cache: spec.cache.as_str().into(),
            status: "error".into(),
            note: format!("{e:#}"),
            ..Default::default()
        }
    }
}

/// (CPU seconds user + system, bytes read from storage) of `who` (`RUSAGE_SELF` or
/// `RUSAGE_CHILDREN`) so far.
pub(super) fn rusage(who: libc::c_int) -> (f64, u64) {
    // SAFETY: getrusage writes one `rusage` struct into the zeroed value we pass.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(who, &mut ru) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    (
        tv(ru.ru_utime) + tv(ru.ru_stime),
        ru.ru_inblock.max(0) as u64 * 512,
    )
}

/// Page-cache-resident bytes of `files` (mincore).
pub fn resident_bytes(files: &[PathBuf]) -> Result<u64> {
    files.iter().map(|f| pagecache::resident_bytes(f)).sum()
}

/// Evicts `files` from the page cache and returns the bytes still resident
/// (0 on a disk filesystem; tmpfs keeps everything). Tries twice.
pub fn evict_all(files: &[PathBuf]) -> Result<u64> {
    let mut left = 0;
    for _ in 0..2 {
        for f in files {
            pagecache::evict(f)?;
        }
        left = resident_bytes(files)?;
        if left == 0 {
            break;
        }
    }
    Ok(left)
}

/// One byte per page of `path` (bit 0 set = in the page cache), from `mincore` on a
/// fresh read-only mapping (mapping faults nothing in). Like
/// [`pagecache::residency`], but keeps the per-page map.
pub(super) fn page_map(path: &Path) -> Result<Vec<u8>> {
    let f = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let len = f.metadata()?.len() as usize;
    if len == 0 {
        return Ok(vec![]);
    }
    let pages = len.div_ceil(pagecache::page_size());
    // SAFETY: read-only shared mapping of a file we opened; we never read through it.
    let map =
        unsafe { memmap2::Mmap::map(&f) }.with_context(|| format!("mmap {}", path.display()))?;
    let mut vec = vec![0u8; pages];
    // SAFETY: `vec` has one byte per page of the mapping.
    let rc = unsafe { libc::mincore(map.as_ptr() as *mut libc::c_void, len, vec.as_mut_ptr()) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error())
            .with_context(|| format!("mincore {}", path.display()));
    }
    Ok(vec)
}

/// Reads `[offset, offset+len)` of `f` through the page cache in 8 MiB preads,
/// skipping the chunks whose pages `resident` (from [`page_map`]) says are cached
/// already. Untimed.
pub(super) fn preload_range(
    f: &File,
    path: &Path,
    resident: &[u8],
    (offset, len): (u64, u64),
    scratch: &mut [u8],
) -> Result<()> {
    let ps = pagecache::page_size() as u64;
    let mut done = 0u64;
    while done < len {
        let n = ((len - done) as usize).min(scratch.len());
        let at = offset + done;
        let (p0, p1) = ((at / ps) as usize, (at + n as u64).div_ceil(ps) as usize);
        let cached = resident
            .get(p0..p1)
            .is_some_and(|v| v.iter().all(|b| b & 1 != 0));
        if cached {
            done += n as u64;
            continue;
        }
        let got = f
            .read_at(&mut scratch[..n], at)
            .with_context(|| format!("{}: read at {at}", path.display()))?;
        if got == 0 {
            break;
        }
        done += got as u64;
    }
    Ok(())
}

/// Reads every distinct request of `w` once through the page cache (the warm-up of a
/// warm cell); ranges already cached are not read again.
pub fn preload(w: &Workload) -> Result<()> {
    let files: Vec<File> = w
        .files
        .iter()
        .map(|p| File::open(p).with_context(|| format!("cannot open {}", p.display())))
        .collect::<Result<_>>()?;
    let maps: Vec<Vec<u8>> = w.files.iter().map(|p| page_map(p)).collect::<Result<_>>()?;
    let mut scratch = vec![0u8; 8 << 20];
    for i in w.cold_sequence() {
        for s in &w.requests[i] {
            preload_range(
                &files[s.file],
                &w.files[s.file],
                &maps[s.file],
                (s.offset, s.len),
                &mut scratch,
            )?;
        }
    }
    Ok(())
}

/// Loads every byte of `b` (8 independent sums so the loop vectorises).
fn checksum(b: &[u8]) -> u64 {
    let mut acc = [0u64; 8];
    let mut chunks = b.chunks_exact(64);
    for c in &mut chunks {
        for (k, w) in c.chunks_exact(8).enumerate() {
            acc[k] = acc[k].wrapping_add(u64::from_ne_bytes(w.try_into().unwrap_or([0; 8])));
        }
    }
    let tail: u64 = chunks.remainder().iter().map(|&x| x as u64).sum();
    acc.iter().fold(tail, |a, &x| a.wrapping_add(x))
}

/// Reads one request's spans as the engine does. Returns bytes requested.
fn read_request(files: &[ShardFile], spans: &[Span], buf: &mut AlignedBuf) -> Result<u64> {
    let mut bytes = 0;
    match files.first().map(|f| f.mode()) {
        Some(IoMode::Mmap) => {
            let ps = pagecache::page_size();
            let mut acc = 0u64;
            for s in spans {
                let f = &files[s.file];
                let map = f.map().context("internal: no mapping")?;
                f.check_unchanged()?;
                let (a, b) = (s.offset as usize, (s.offset + s.len) as usize);
                if b > map.len() {
                    bail!(
                        "{}: range [{a}, {b}) is past the end of the file ({} bytes)",
                        f.path.display(),
                        map.len()
                    );
                }
                let start = a / ps * ps;
                let _ = map.advise_range(memmap2::Advice::WillNeed, start, b - start);
                acc = acc.wrapping_add(checksum(&map[a..b]));
                bytes += s.len;
            }
            std::hint::black_box(acc);
        }
        _ => {
            let mut pos = 0usize;
            for s in spans {
                let f = &files[s.file];
                let need = f.buffer_len_for(s.offset, s.len);
                let window = buf
                    .full_mut()
                    .get_mut(pos..pos + need)
                    .context("internal: IO buffer too small")?;
                read_range(f, s.offset, s.len, window)?;
                pos += need;
                bytes += s.len;
            }
        }
    }
    Ok(bytes)
}

fn new_hist() -> Histogram<u64> {
    // Nanoseconds from 1 µs to 10 minutes at 3 significant digits.
    Histogram::new_with_bounds(1_000, 600_000_000_000, 3).expect("valid histogram bounds")
}

/// A cold cell repeats evict + verify + one pass until its timed reads add up to
/// this many seconds ([`run_cell_measured`]) ...
pub const COLD_MIN_SECONDS: f64 = 2.0;
/// ... or this many bytes (decimal 2 GB), whichever comes first.
pub const COLD_MIN_BYTES: u64 = 2_000_000_000;

/// What one timed pass (or warm replay) measured.
struct Pass {
    hist: Histogram<u64>,
    bytes: u64,
    requests: u64,
    elapsed_s: f64,
    cpu_s: f64,
    device_read_bytes: u64,
    resident_before: u64,
    resident_after: u64,
}

/// Runs one cell of our replay and returns its row: a cold cell is one pass over
/// the distinct requests (or `spec.seconds`, whichever ends first), a warm one
/// replays for `spec.seconds`. `memdial iobench` uses [`run_cell_measured`].
///
/// Errors: a file cannot be opened in `spec.mode` (e.g. direct IO on tmpfs), or a
/// read fails. A cold cell whose files could not be evicted is not an error: its
/// row says `cold_verified = false`.
pub fn run_cell(w: &Workload, spec: &CellSpec) -> Result<Row> {
    let p = run_pass(w, spec, spec.seconds)?;
    let cold_ok = p.resident_before == 0;
    Ok(row_of(w, spec, &p, cold_ok))
}

/// Like [`run_cell`], but a cold cell long enough to measure: evict, verify cold
/// (mincore) and read one pass, repeated until the timed reads reach
/// [`COLD_MIN_SECONDS`] or [`COLD_MIN_BYTES`] (or `spec.seconds` in all). The row
/// sums the passes (bytes, requests, seconds, CPU, device bytes; latencies over
/// every request); `cold_verified` holds only if every pass started cold, and
/// `resident_before_bytes` is the largest residency seen before a pass.
///
/// Errors: as [`run_cell`].
pub fn run_cell_measured(w: &Workload, spec: &CellSpec) -> Result<Row> {
    if spec.cache != CacheState::Cold {
        return run_cell(w, spec);
    }
    let mut total: Option<Pass> = None;
    let mut cold_ok = true;
    loop {
        let left = spec.seconds - total.as_ref().map_or(0.0, |t| t.elapsed_s);
        let p = run_pass(w, spec, left)?;
        cold_ok &= p.resident_before == 0;
        total = Some(match total {
            None => p,
            Some(mut t) => {
                t.hist.add(&p.hist).ok();
                t.bytes += p.bytes;
                t.requests += p.requests;
                t.elapsed_s += p.elapsed_s;
                t.cpu_s += p.cpu_s;
                t.device_read_bytes += p.device_read_bytes;
                t.resident_before = t.resident_before.max(p.resident_before);
                t.resident_after = p.resident_after;
                t
            }
        });
        let t = total.as_ref().expect("set above");
        if t.elapsed_s >= COLD_MIN_SECONDS.min(spec.seconds)
            || t.bytes >= COLD_MIN_BYTES
            || p_is_empty(t)
        {
            break;
        }
    }
    let t = total.expect("at least one pass");
    Ok(row_of(w, spec, &t, cold_ok))
}

/// A pass that read nothing cannot be repeated into a measurement.
fn p_is_empty(t: &Pass) -> bool {
    t.requests == 0
}

/// Bytes of the largest request's buffer (its spans' aligned lengths in `files`); 0 for
/// mmap, which reads into no buffer.
fn buffer_len(w: &Workload, files: &[ShardFile], mode: IoMode) -> usize {
    if mode == IoMode::Mmap {
        return 0;
    }
    w.requests
        .iter()
        .map(|r| {
            r.iter()
                .map(|s| files[s.file].buffer_len_for(s.offset, s.len))
                .sum::<usize>()
        })
        .max()
        .unwrap_or(0)
}

/// One timed pass of `spec` (cold: evict first, at most one pass over the distinct
/// requests; warm: preload, then replay) for at most `seconds`.
fn run_pass(w: &Workload, spec: &CellSpec, seconds: f64) -> Result<Pass> {
    if spec.qd == 0 {
        bail!("queue depth must be at least 1");
    }
    let cold = spec.cache == CacheState::Cold;
    let seq = if cold {
        w.cold_sequence()
    } else {
        w.sequence.clone()
    };
    if seq.is_empty() {
        bail!("workload {} has no requests", w.name);
    }
    let limit = if cold { Some(seq.len()) } else { None };
    if cold {
        evict_all(&w.files)?;
    } else {
        preload(w)?;
    }
    // Open after eviction: nothing is mapped or read yet (mmap maps lazily).
    let files: Vec<ShardFile> = w
        .files
        .iter()
        .map(|p| ShardFile::open(p, spec.mode))
        .collect::<Result<_>>()?;
    let buf_len = buffer_len(w, &files, spec.mode);
    let resident_before = resident_bytes(&w.files)?;
    let dur = seconds
        .is_finite()
        .then(|| Duration::from_secs_f64(seconds.max(0.0)));

    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    // Batched patterns: requests completed so far, so request i starts only once every
    // request of the batches before its own has completed.
    let done = (std::sync::Mutex::new(0usize), std::sync::Condvar::new());
    let barrier = Barrier::new(spec.qd + 1);
    let (cpu0, dev0, t0, results) = std::thread::scope(|sc| {
        let handles: Vec<_> = (0..spec.qd)
            .map(|_| {
                // One buffer per reader, on 2 MiB pages as the streaming store's
                // (AlignedBuf::carve; docs/io.md §2).
                let mut buf = AlignedBuf::carve(1, buf_len)
                    .pop()
                    .expect("carve(1, _) returns one buffer");
                let (files, seq, next, stop, barrier, done) =
                    (&files, &seq, &next, &stop, &barrier, &done);
                sc.spawn(move || -> Result<(Histogram<u64>, u64, u64)> {
                    let mut hist = new_hist();
                    let (mut bytes, mut n) = (0u64, 0u64);
                    barrier.wait();
                    let deadline = dur.map(|d| Instant::now() + d);
                    loop {
                        if stop.load(Ordering::Relaxed)
                            || deadline.is_some_and(|d| Instant::now() >= d)
                        {
                            break;
                        }
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if limit.is_some_and(|l| i >= l) {
                            break;
                        }
                        if w.batch > 0 && !wait_batch(done, stop, i / w.batch * w.batch) {
                            break;
                        }
                        let req = &w.requests[seq[i % seq.len()]];
                        let t = Instant::now();
                        let r = read_request(files, req, &mut buf);
                        count_done(done, w.batch);
                        match r {
                            Ok(b) => bytes += b,
                            Err(e) => {
                                stop.store(true, Ordering::Relaxed);
                                done.1.notify_all();
                                return Err(e);
                            }
                        }
                        hist.saturating_record(t.elapsed().as_nanos() as u64);
                        n += 1;
                    }
                    Ok((hist, bytes, n))
                })
            })
            .collect();
        let (cpu0, dev0) = rusage(libc::RUSAGE_SELF);
        barrier.wait();
        let t0 = Instant::now();
        let results: Vec<_> = handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("reader thread panicked")))
            })
            .collect();
        (cpu0, dev0, t0, results)
    });
    let elapsed = t0.elapsed().as_secs_f64();
    let (cpu1, dev1) = rusage(libc::RUSAGE_SELF);
    drop(files); // unmap before measuring and before the next cell evicts
    let mut hist = new_hist();
    let (mut bytes, mut n) = (0u64, 0u64);
    for r in results {
        let (h, b, k) = r?;
        hist.add(&h).ok();
        bytes += b;
        n += k;
    }
    let resident_after = resident_bytes(&w.files)?;
    Ok(Pass {
        hist,
        bytes,
        requests: n,
        elapsed_s: elapsed,
        cpu_s: cpu1 - cpu0,
        device_read_bytes: dev1.saturating_sub(dev0),
        resident_before,
        resident_after,
    })
}

/// One more request completed (batched patterns only).
fn count_done(done: &(std::sync::Mutex<usize>, std::sync::Condvar), batch: usize) {
    if batch > 0 {
        *done.0.lock().unwrap_or_else(|p| p.into_inner()) += 1;
        done.1.notify_all();
    }
}

/// Waits until `want` requests have completed (`done`); `false` when a reader failed
/// (`stop`) first.
fn wait_batch(
    done: &(std::sync::Mutex<usize>, std::sync::Condvar),
    stop: &AtomicBool,
    want: usize,
) -> bool {
    let mut n = done.0.lock().unwrap_or_else(|p| p.into_inner());
    while *n < want {
        if stop.load(Ordering::Relaxed) {
            return false;
        }
        n = done
            .1
            .wait_timeout(n, Duration::from_millis(50))
            .unwrap_or_else(|p| p.into_inner())
            .0;
    }
    true
}

/// The row of `p` (one or more cold passes, or one warm replay).
fn row_of(w: &Workload, spec: &CellSpec, p: &Pass, cold_ok: bool) -> Row {
    let cold = spec.cache == CacheState::Cold;
    let (bytes, n, elapsed, cpu) = (p.bytes, p.requests, p.elapsed_s, p.cpu_s);
    let gb = bytes as f64 / 1e9;
    let distinct = w.cold_sequence().len();
    let hist = &p.hist;
    Row {
        tool: "memdial".into(),
        pattern: w.name.clone(),
        io: spec.mode.as_str().into(),
        qd: spec.qd,
        cache: spec.cache.as_str().into(),
        cold_verified: cold && cold_ok,
        resident_before_bytes: p.resident_before,
        resident_after_bytes: p.resident_after,
        working_set_bytes: w.pass_bytes(),
        request_bytes: w.median_request_bytes(),
        requests: n,
        bytes,
        elapsed_s: elapsed,
        gb_per_s: per_second(gb, elapsed),
        requests_per_s: per_second(n as f64, elapsed),
        latency_p50_us: hist.value_at_quantile(0.5) as f64 / 1e3,
        latency_p99_us: hist.value_at_quantile(0.99) as f64 / 1e3,
        latency_max_us: hist.max() as f64 / 1e3,
        cpu_s: cpu,
        cpu_s_per_gb: if gb > 0.0 { cpu / gb } else { 0.0 },
        device_read_bytes: p.device_read_bytes,
        passes: n as f64 / distinct as f64,
        status: "ok".into(),
        note: String::new(),
        knee: false,
    }
}

/// Cold read bandwidth of a model's trunk-layer reads at queue depth 1 in `mode`,
/// GB/s (10^9 bytes/s), reading for at most `seconds` (one pass at most). The files
/// are evicted from the page cache again afterwards, so the caller starts cold.
///
/// Errors: the model cannot be read, `mode` is unsupported on its filesystem, or
/// (buffered, mmap) the page cache could not be emptied first (tmpfs), since the
/// figure would not be a cold one.
pub fn cold_read_gbps(model_dir: &Path, mode: IoMode, seconds: f64) -> Result<f64> {
    let w = Workload::from_model(model_dir, &Pattern::Trunk, DEFAULT_SEED)?;
    Ok(cold_probe(&w, mode, seconds)?.gb_per_s)
}

/// Cold sequential read of up to `max_bytes` of one file in 4 MiB requests at queue
/// depth 1 (the simplest probe: no model needed). Evicts the file again afterwards.
///
/// Errors as [`cold_read_gbps`].
pub fn sequential_cold_read(path: &Path, mode: IoMode, max_bytes: u64) -> Result<Row> {
    let w = Workload::sequential_file(path, SEQUENTIAL_REQUEST_BYTES, max_bytes)?;
    cold_probe(&w, mode, f64::INFINITY)
}

fn cold_probe(w: &Workload, mode: IoMode, seconds: f64) -> Result<Row> {
    let spec = CellSpec {
        mode,
        qd: 1,
        cache: CacheState::Cold,
        seconds,
    };
    let row = run_cell(w, &spec);
    evict_all(&w.files)?;
    let row = row?;
    if !row.cold_verified && mode != IoMode::Direct {
        bail!(
            "{} bytes of {} stayed in the page cache after fadvise(DONTNEED) (tmpfs?); a cold {} read cannot be measured",
            row.resident_before_bytes,
            w.files
                .first()
                .map(|p| p.display().to_string())
                .unwrap_or_default(),
            mode.as_str()
        );
    }
    Ok(row)
}

// ---------------------------------------------------------------- fio

/// `x` per second over `seconds` (GB/s, requests/s); 0 when no time passed.
pub(super) fn per_second(x: f64, seconds: f64) -> f64 {
    if seconds > 0.0 {
        x / seconds
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checksum_reads_every_byte() {
        let b: Vec<u8> = (0..200u32).map(|x| x as u8).collect();
        let mut c = b.clone();
        c[137] ^= 1;
        assert_ne!(checksum(&b), checksum(&c));
        c[137] ^= 1;
        c[199] ^= 1;
        assert_ne!(checksum(&b), checksum(&c));
    }
}
