//! IO benchmark: replays the engine's real read requests in each IO mode, cold and
//! warm, at several queue depths, and (optionally) runs the equivalent `fio` job.
//!
//! This is the one implementation of read-bandwidth measurement in memdial:
//! `memdial iobench` drives the whole matrix, and [`cold_read_gbps`] /
//! [`sequential_cold_read`] are the small probes other reports quote.
//!
//! # What is replayed
//! A [`Workload`] is a list of distinct requests and an order to issue them in.
//! A request is what the streaming store reads as one unit — a
//! [`ReadGroup`](crate::store::plan::ReadGroup) of coalesced byte ranges:
//! - [`Pattern::Trunk`]: every streamed layer's trunk, in layer order (what one
//!   token reads when no trunk is pinned);
//! - [`Pattern::Experts`]: every routed expert record, in a uniformly random order
//!   (a Fisher–Yates permutation from a fixed seed);
//! - [`Pattern::Trace`]: the experts of a routing trace recorded by
//!   `memdial run --record-trace`, in the order the engine needed them.
//!
//! Each range is read exactly as the engine reads it: [`read_range`] (one
//! `pread`, aligned over-read in direct mode) into a 4096-aligned buffer, or in
//! mmap mode `madvise(WILLNEED)` and then a load of every byte of the mapping (a
//! checksum; the engine's kernels read every byte too, and touching one byte per
//! page would time page-table walks, not reads).
//!
//! # Cold and warm
//! - **cold**: every file of the workload is evicted (fsync + `fadvise(DONTNEED)`,
//!   no live mappings), the residency is measured with `mincore` just before the
//!   timed reads and recorded; `cold_verified` is true only if it is 0. A cold cell
//!   reads each distinct request at most once (re-reading would hit the page cache
//!   in buffered and mmap modes), so it ends after one pass or `seconds`,
//!   whichever comes first.
//! - **warm**: the requests' ranges are first read once through the page cache
//!   (untimed); the sequence is then replayed cyclically for `seconds`.
//!
//! # Queue depth
//! `qd` threads issue synchronous requests from one shared sequence (a thread takes
//! the next request when its previous one finishes), so up to `qd` requests are in
//! flight — the streaming store's `--io-threads` model.
//!
//! # Figures
//! GB/s = requested bytes (the ranges' lengths, not the direct-IO over-read) / wall
//! seconds; latency per request from an HDR histogram; CPU seconds (user + system,
//! `getrusage`) per GB; device bytes from `getrusage`'s `ru_inblock` (bytes the
//! kernel fetched from storage for this process — 0 when a "read" was served by the
//! page cache, which is how a too-good number is caught).

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use super::pagecache;
use super::reader::read_range;
use super::{AlignedBuf, IoMode, ShardFile};
use crate::checkpoint::Checkpoint;
use crate::config::load_config;
use crate::store::plan::{plan_unchecked, Prefetch, ReadGroup};

/// Default seed of the random expert order.
pub const DEFAULT_SEED: u64 = 0x6d65_6d64_6961_6c31;

/// Request size of [`sequential_cold_read`], bytes.
pub const SEQUENTIAL_REQUEST_BYTES: u64 = 4 << 20;

/// Which of the engine's requests to replay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pattern {
    /// Whole streamed trunk layers, in layer order.
    Trunk,
    /// Every routed expert record once, in a seeded random order.
    Experts,
    /// The routed experts of a recorded trace (`memdial run --record-trace F`), in order.
    Trace(PathBuf),
}

impl Pattern {
    /// Parses `trunk`, `experts` or `trace:FILE`.
    pub fn parse(s: &str) -> Result<Self> {
        Ok(match s {
            "trunk" => Pattern::Trunk,
            "experts" => Pattern::Experts,
            _ => match s.strip_prefix("trace:") {
                Some(f) if !f.is_empty() => Pattern::Trace(PathBuf::from(f)),
                _ => bail!("unknown pattern {s:?} (trunk, experts, trace:FILE)"),
            },
        })
    }
    /// Name used in reports: `trunk`, `experts`, `trace:<file name>`.
    pub fn name(&self) -> String {
        match self {
            Pattern::Trunk => "trunk".into(),
            Pattern::Experts => "experts".into(),
            Pattern::Trace(p) => format!(
                "trace:{}",
                p.file_name()
                    .map(|s| s.to_string_lossy().into_owned())
                    .unwrap_or_else(|| p.display().to_string())
            ),
        }
    }
}

/// Page-cache state a cell starts from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CacheState {
    /// Files evicted from the page cache (verified with mincore) before the timed reads.
    Cold,
    /// The requests' ranges read through the page cache once before the timed reads.
    Warm,
}

impl CacheState {
    /// Parses `cold|warm`.
    pub fn parse(s: &str) -> Result<Self> {
        Ok(match s {
            "cold" => CacheState::Cold,
            "warm" => CacheState::Warm,
            _ => bail!("unknown cache state {s:?} (cold, warm)"),
        })
    }
    /// `cold` or `warm`.
    pub fn as_str(self) -> &'static str {
        match self {
            CacheState::Cold => "cold",
            CacheState::Warm => "warm",
        }
    }
}

/// One contiguous byte range of one file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    /// Index into [`Workload::files`].
    pub file: usize,
    /// Byte offset in the file.
    pub offset: u64,
    /// Length in bytes.
    pub len: u64,
}

/// Requests to replay and the order to issue them in.
#[derive(Debug, Clone)]
pub struct Workload {
    /// Pattern name for reports (`trunk`, `experts`, `trace:…`, `file`).
    pub name: String,
    /// Files the spans refer to (every shard of the model).
    pub files: Vec<PathBuf>,
    /// Distinct requests; each is read as one unit (its spans one after another).
    pub requests: Vec<Vec<Span>>,
    /// Issue order (indices into `requests`; may repeat, e.g. a trace).
    pub sequence: Vec<usize>,
    /// True when consecutive requests are at increasing offsets (fio `rw=read`),
    /// false for random order (fio `rw=randread`).
    pub sequential: bool,
}

fn spans_of(g: &ReadGroup) -> Vec<Span> {
    g.ranges
        .iter()
        .map(|r| Span {
            file: r.shard,
            offset: r.start,
            len: r.end - r.start,
        })
        .collect()
}

/// (layer, expert) pairs of a trace file (`{"token":t,"layer":l,"experts":[…]}` per
/// line), in file order.
pub fn read_trace(path: &Path) -> Result<Vec<(usize, usize)>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read trace {}", path.display()))?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let v: serde_json::Value = serde_json::from_str(line)
            .with_context(|| format!("{}:{}: not JSON", path.display(), i + 1))?;
        let layer = v.get("layer").and_then(|x| x.as_u64());
        let experts = v.get("experts").and_then(|x| x.as_array());
        let (Some(layer), Some(experts)) = (layer, experts) else {
            bail!(
                "{}:{}: expected {{\"token\", \"layer\", \"experts\"}}",
                path.display(),
                i + 1
            );
        };
        for e in experts {
            let e = e.as_u64().with_context(|| {
                format!("{}:{}: expert ids must be integers", path.display(), i + 1)
            })?;
            out.push((layer as usize, e as usize));
        }
    }
    if out.is_empty() {
        bail!("trace {} holds no expert ids", path.display());
    }
    Ok(out)
}

impl Workload {
    /// The engine's requests for `pattern` on the checkpoint in `model_dir`
    /// (the streaming store's read groups from the budget plan). `seed` fixes the
    /// random expert order.
    ///
    /// Errors: unreadable config or checkpoint; `experts`/`trace` on a model without
    /// routed experts; a trace naming an expert the model does not have.
    pub fn from_model(model_dir: &Path, pattern: &Pattern, seed: u64) -> Result<Self> {
        let cfg = load_config(model_dir)?;
        let ck = Checkpoint::open(model_dir)?;
        let plan = plan_unchecked(&cfg, &ck, u64::MAX / 4, IoMode::Buffered, Prefetch::None, 1)?;
        let files: Vec<PathBuf> = ck.shards.iter().map(|s| s.path.clone()).collect();
        let (requests, sequence, sequential) = match pattern {
            Pattern::Trunk => {
                let reqs: Vec<Vec<Span>> =
                    plan.layer_groups.iter().flatten().map(spans_of).collect();
                if reqs.is_empty() {
                    bail!("{}: the model has no streamed trunk", model_dir.display());
                }
                let seq = (0..reqs.len()).collect();
                (reqs, seq, true)
            }
            Pattern::Experts | Pattern::Trace(_) => {
                if plan.expert_groups.is_empty() {
                    bail!("{}: the model has no routed experts", model_dir.display());
                }
                let keys: Vec<(usize, usize)> = plan.expert_groups.keys().copied().collect();
                let reqs: Vec<Vec<Span>> = plan.expert_groups.values().map(spans_of).collect();
                let seq = match pattern {
                    Pattern::Trace(p) => read_trace(p)?
                        .into_iter()
                        .map(|k| {
                            keys.binary_search(&k).map_err(|_| {
                                anyhow::anyhow!(
                                    "trace {}: layer {} expert {} is not a routed expert of {}",
                                    p.display(),
                                    k.0,
                                    k.1,
                                    model_dir.display()
                                )
                            })
                        })
                        .collect::<Result<Vec<_>>>()?,
                    _ => {
                        let mut seq: Vec<usize> = (0..reqs.len()).collect();
                        let mut rng = crate::rng::SplitMix64::new(seed);
                        for i in (1..seq.len()).rev() {
                            let j = (rng.next_u64() % (i as u64 + 1)) as usize;
                            seq.swap(i, j);
                        }
                        seq
                    }
                };
                (reqs, seq, false)
            }
        };
        Ok(Workload {
            name: pattern.name(),
            files,
            requests,
            sequence,
            sequential,
        })
    }

    /// Sequential requests of `request_bytes` over the first `max_bytes` of `path`.
    pub fn sequential_file(path: &Path, request_bytes: u64, max_bytes: u64) -> Result<Self> {
        let size = std::fs::metadata(path)
            .with_context(|| format!("cannot stat {}", path.display()))?
            .len();
        let len = size.min(max_bytes);
        let rb = request_bytes.max(1);
        let requests: Vec<Vec<Span>> = (0..len.div_ceil(rb))
            .map(|i| {
                vec![Span {
                    file: 0,
                    offset: i * rb,
                    len: rb.min(len - i * rb),
                }]
            })
            .collect();
        if requests.is_empty() {
            bail!("{} is empty", path.display());
        }
        Ok(Workload {
            name: "file".into(),
            files: vec![path.to_path_buf()],
            sequence: (0..requests.len()).collect(),
            requests,
            sequential: true,
        })
    }

    /// Bytes of request `i` (sum of its spans).
    pub fn request_bytes(&self, i: usize) -> u64 {
        self.requests[i].iter().map(|s| s.len).sum()
    }

    /// The issue order of a cold cell: `sequence` with repeats removed (first
    /// occurrences, in order), so no byte is read twice.
    pub fn cold_sequence(&self) -> Vec<usize> {
        let mut seen = vec![false; self.requests.len()];
        self.sequence
            .iter()
            .copied()
            .filter(|&i| !std::mem::replace(&mut seen[i], true))
            .collect()
    }

    /// Bytes of one pass over the distinct requests of the sequence.
    pub fn pass_bytes(&self) -> u64 {
        self.cold_sequence()
            .iter()
            .map(|&i| self.request_bytes(i))
            .sum()
    }

    /// Median size of the distinct requests in the sequence, bytes.
    pub fn median_request_bytes(&self) -> u64 {
        let mut v: Vec<u64> = self
            .cold_sequence()
            .iter()
            .map(|&i| self.request_bytes(i))
            .collect();
        v.sort_unstable();
        v.get(v.len() / 2).copied().unwrap_or(0)
    }

    /// Median number of contiguous ranges per distinct request (a request with
    /// several ranges is read with one `pread` per range, one after another).
    pub fn median_spans_per_request(&self) -> usize {
        let mut v: Vec<usize> = self
            .cold_sequence()
            .iter()
            .map(|&i| self.requests[i].len())
            .collect();
        v.sort_unstable();
        v.get(v.len() / 2).copied().unwrap_or(0)
    }

    /// Bytes of one pass that fall in each file.
    pub fn pass_bytes_per_file(&self) -> Vec<u64> {
        let mut v = vec![0u64; self.files.len()];
        for i in self.cold_sequence() {
            for s in &self.requests[i] {
                v[s.file] += s.len;
            }
        }
        v
    }
}

/// One cell of the matrix: IO mode × queue depth × cache state.
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
fn rusage(who: libc::c_int) -> (f64, u64) {
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
fn page_map(path: &Path) -> Result<Vec<u8>> {
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
fn preload_range(
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

/// Runs one cell of our replay and returns its row.
///
/// Errors: a file cannot be opened in `spec.mode` (e.g. direct IO on tmpfs), or a
/// read fails. A cold cell whose files could not be evicted is not an error: its
/// row says `cold_verified = false`.
pub fn run_cell(w: &Workload, spec: &CellSpec) -> Result<Row> {
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
    let buf_len = if spec.mode == IoMode::Mmap {
        0
    } else {
        w.requests
            .iter()
            .map(|r| {
                r.iter()
                    .map(|s| files[s.file].buffer_len_for(s.offset, s.len))
                    .sum::<usize>()
            })
            .max()
            .unwrap_or(0)
    };
    let resident_before = resident_bytes(&w.files)?;
    let dur = spec
        .seconds
        .is_finite()
        .then(|| Duration::from_secs_f64(spec.seconds.max(0.0)));

    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let barrier = Barrier::new(spec.qd + 1);
    let (cpu0, dev0, t0, results) = std::thread::scope(|sc| {
        let handles: Vec<_> = (0..spec.qd)
            .map(|_| {
                let mut buf = AlignedBuf::new(buf_len);
                let (files, seq, next, stop, barrier) = (&files, &seq, &next, &stop, &barrier);
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
                        let req = &w.requests[seq[i % seq.len()]];
                        let t = Instant::now();
                        match read_request(files, req, &mut buf) {
                            Ok(b) => bytes += b,
                            Err(e) => {
                                stop.store(true, Ordering::Relaxed);
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
    let gb = bytes as f64 / 1e9;
    let cpu = cpu1 - cpu0;
    let distinct = w.cold_sequence().len();
    Ok(Row {
        tool: "memdial".into(),
        pattern: w.name.clone(),
        io: spec.mode.as_str().into(),
        qd: spec.qd,
        cache: spec.cache.as_str().into(),
        cold_verified: cold && resident_before == 0,
        resident_before_bytes: resident_before,
        resident_after_bytes: resident_after,
        working_set_bytes: w.pass_bytes(),
        request_bytes: w.median_request_bytes(),
        requests: n,
        bytes,
        elapsed_s: elapsed,
        gb_per_s: if elapsed > 0.0 { gb / elapsed } else { 0.0 },
        requests_per_s: if elapsed > 0.0 {
            n as f64 / elapsed
        } else {
            0.0
        },
        latency_p50_us: hist.value_at_quantile(0.5) as f64 / 1e3,
        latency_p99_us: hist.value_at_quantile(0.99) as f64 / 1e3,
        latency_max_us: hist.max() as f64 / 1e3,
        cpu_s: cpu,
        cpu_s_per_gb: if gb > 0.0 { cpu / gb } else { 0.0 },
        device_read_bytes: dev1.saturating_sub(dev0),
        passes: n as f64 / distinct as f64,
        status: "ok".into(),
        note: String::new(),
    })
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

/// `fio --version` (e.g. `fio-3.33`), or None when fio is not installed.
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
        std::iter::once("fio".to_string())
            .chain(self.args(seconds, cache))
            .collect::<Vec<_>>()
            .join(" ")
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

/// Runs the fio job equivalent to `spec` (cold: files evicted and verified first;
/// warm: fio's region read through the page cache first) and returns its row.
///
/// Errors: fio missing or failing (its stderr is quoted), unparsable output.
pub fn run_fio_cell(w: &Workload, spec: &CellSpec) -> Result<Row> {
    let job = fio_job(w, spec)?;
    if spec.mode == IoMode::Mmap && spec.qd > 1 {
        // fio 3.33's mmap engine maps every job's file from offset 0, ignoring
        // `offset`/`offset_increment` (checked with mincore), so parallel jobs would
        // re-read one shared slice from the page cache and the figure would be too good.
        return Ok(Row {
            status: "skipped".into(),
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
    let out = std::process::Command::new("fio")
        .args(job.args(spec.seconds, spec.cache))
        .output()
        .context("cannot run fio (is it installed?)")?;
    let (_, dev1) = rusage(libc::RUSAGE_CHILDREN);
    let resident_after = resident_bytes(&w.files)?;
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
    let r = &j["read"];
    let f = |x: &serde_json::Value| x.as_f64().unwrap_or(0.0);
    let io_bytes = r["io_bytes"].as_u64().unwrap_or(0);
    let elapsed = f(&r["runtime"]) / 1e3;
    let cpu = (f(&j["usr_cpu"]) + f(&j["sys_cpu"])) / 100.0 * f(&j["job_runtime"]) / 1e3;
    let pct = |q: &str| f(&r["clat_ns"]["percentile"][q]) / 1e3;
    let gb = io_bytes as f64 / 1e9;
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
        requests: r["total_ios"].as_u64().unwrap_or(0),
        bytes: io_bytes,
        elapsed_s: elapsed,
        gb_per_s: f(&r["bw_bytes"]) / 1e9,
        requests_per_s: f(&r["iops"]),
        latency_p50_us: pct("50.000000"),
        latency_p99_us: pct("99.000000"),
        latency_max_us: f(&r["clat_ns"]["max"]) / 1e3,
        cpu_s: cpu,
        cpu_s_per_gb: if gb > 0.0 { cpu / gb } else { 0.0 },
        device_read_bytes: dev1.saturating_sub(dev0),
        passes: if job.region() > 0 {
            io_bytes as f64 / job.region() as f64
        } else {
            0.0
        },
        status: "ok".into(),
        note: format!(
            "{}: {}",
            v["fio version"].as_str().unwrap_or("fio"),
            job.describe()
        ),
    })
}

// ---------------------------------------------------------------- matrix

/// The cells to run: every cache state × mode × queue depth.
#[derive(Debug, Clone, PartialEq)]
pub struct Matrix {
    /// IO modes.
    pub modes: Vec<IoMode>,
    /// Queue depths (threads).
    pub qds: Vec<usize>,
    /// Cache states (cold cells run first).
    pub caches: Vec<CacheState>,
    /// Wall-time limit per cell, seconds.
    pub seconds: f64,
    /// Also run the equivalent fio job after each cell.
    pub fio: bool,
}

impl Matrix {
    /// The cells in run order: cold before warm, then mode, then queue depth.
    pub fn cells(&self) -> Vec<CellSpec> {
        let mut caches = self.caches.clone();
        caches.sort();
        caches.dedup();
        let mut v = Vec::new();
        for &cache in &caches {
            for &mode in &self.modes {
                for &qd in &self.qds {
                    v.push(CellSpec {
                        mode,
                        qd,
                        cache,
                        seconds: self.seconds,
                    });
                }
            }
        }
        v
    }
}

/// Runs every cell of `m` on `w` (and its fio twin when `m.fio`), calling `on_row`
/// as each row finishes. A cell that fails becomes an error row; the rest still run.
pub fn run_matrix(w: &Workload, m: &Matrix, on_row: &mut dyn FnMut(&Row)) -> Vec<Row> {
    let mut rows = Vec::new();
    for spec in m.cells() {
        let row = run_cell(w, &spec).unwrap_or_else(|e| Row::error("memdial", &w.name, &spec, &e));
        on_row(&row);
        rows.push(row);
        if m.fio {
            let row =
                run_fio_cell(w, &spec).unwrap_or_else(|e| Row::error("fio", &w.name, &spec, &e));
            on_row(&row);
            rows.push(row);
        }
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_parse() {
        assert_eq!(Pattern::parse("trunk").unwrap(), Pattern::Trunk);
        assert_eq!(Pattern::parse("experts").unwrap(), Pattern::Experts);
        assert_eq!(
            Pattern::parse("trace:/a/t.jsonl").unwrap(),
            Pattern::Trace("/a/t.jsonl".into())
        );
        assert_eq!(
            Pattern::parse("trace:/a/t.jsonl").unwrap().name(),
            "trace:t.jsonl"
        );
        assert!(Pattern::parse("trace:").is_err());
        assert!(Pattern::parse("random").is_err());
    }

    #[test]
    fn cold_sequence_drops_repeats() {
        let w = Workload {
            name: "t".into(),
            files: vec![],
            requests: vec![
                vec![Span {
                    file: 0,
                    offset: 0,
                    len: 10
                }];
                3
            ],
            sequence: vec![2, 0, 2, 1, 0],
            sequential: false,
        };
        assert_eq!(w.cold_sequence(), vec![2, 0, 1]);
        assert_eq!(w.pass_bytes(), 30);
        assert_eq!(w.median_request_bytes(), 10);
    }

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
