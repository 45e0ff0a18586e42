//! The streaming store: resident memory stays under `--budget`; everything else is
//! read from disk when needed (or ahead of time, by the prefetch policy).
//!
//! Layout of memory (see [`super::plan`]): pinned globals and small per-layer
//! tensors, the trunk of a prefix of layers, rotating trunk slots for the other
//! layers, and an expert cache with `lru` or `lfru` replacement. Reads run on
//! background IO threads; the compute thread blocks only when the bytes it needs
//! are not there yet (that time is `io_wait_s`).
//!
//! Determinism: the bytes handed to the model are the bytes on disk, whatever was
//! cached or prefetched; the model accumulates experts in router order.

use std::collections::{HashMap, HashSet, VecDeque};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use sha2::{Digest, Sha256};

use super::cache::CachePolicy;
use super::metrics::StoreMetrics;
use super::plan::{plan, Plan, Prefetch, ReadGroup};
use super::{Bytes, ExpertMat, ExpertWeights, WeightStore};
use crate::checkpoint::Checkpoint;
use crate::config::{ExpertFormat, ModelConfig};
use crate::fixture::hex;
use crate::io::{AlignedBuf, IoMode, ShardFile};
use crate::schema::layer_name;

/// Settings of a streaming store.
#[derive(Debug, Clone)]
pub struct StreamOptions {
    pub budget: u64,
    pub io: IoMode,
    pub prefetch: Prefetch,
    pub cache: CachePolicy,
    pub max_context: usize,
    /// Background IO threads (queue depth).
    pub io_threads: usize,
    /// Write the router's expert choices per (token, layer) to this file (JSON lines).
    pub record_trace: Option<PathBuf>,
    /// Expert trace of an earlier run, for `--prefetch oracle`.
    pub trace: Option<PathBuf>,
    /// Check every read against `tensors.sha256`.
    pub verify_reads: bool,
}

/// Bytes that were read for one group: one buffer, ranges at known positions.
struct Loaded {
    data: LoadedData,
    /// Position of each range's first byte inside `data`.
    range_pos: Vec<usize>,
}

enum LoadedData {
    Buf(AlignedBuf),
    /// mmap mode: the mapping of each range's shard (views borrow it).
    Maps(Vec<Arc<memmap2::Mmap>>),
}

impl AsRef<[u8]> for Loaded {
    fn as_ref(&self) -> &[u8] {
        match &self.data {
            LoadedData::Buf(b) => b.as_ref(),
            LoadedData::Maps(_) => &[],
        }
    }
}

impl Loaded {
    /// The owner and position of byte `offset` of range `range`.
    fn locate(
        self: &Arc<Self>,
        range: usize,
        offset: u64,
    ) -> (Arc<dyn AsRef<[u8]> + Send + Sync>, usize) {
        match &self.data {
            LoadedData::Buf(_) => (self.clone(), self.range_pos[range] + offset as usize),
            LoadedData::Maps(m) => (
                Arc::new(MapView(m[range].clone(), self.clone())),
                self.range_pos[range] + offset as usize,
            ),
        }
    }
}

/// A mapping kept alive together with the entry that accounts for it.
struct MapView(Arc<memmap2::Mmap>, #[allow(dead_code)] Arc<Loaded>);

impl AsRef<[u8]> for MapView {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

/// Outcome of [`StreamingStore::request`].
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Req {
    Queued,
    Skipped,
    Wait,
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum Key {
    Layer(usize),
    Expert(usize, usize),
}

enum Entry {
    Loading,
    Ready(Arc<Loaded>),
    Failed(String),
}

struct ExpertMeta {
    freq: u64,
    last: u64,
}

struct Job {
    key: Key,
    buf: Option<AlignedBuf>,
}

#[derive(Default)]
struct Inner {
    entries: HashMap<Key, Entry>,
    /// Layers currently occupying trunk slots (loading or ready), oldest first.
    slot_layers: VecDeque<usize>,
    /// Experts currently occupying cache buffers.
    cached_experts: HashSet<(usize, usize)>,
    meta: HashMap<(usize, usize), ExpertMeta>,
    /// Experts that must not be evicted now (selected for the current layer, or guessed).
    protected: HashSet<(usize, usize)>,
    free_slot_bufs: Vec<AlignedBuf>,
    free_expert_bufs: Vec<AlignedBuf>,
    allocated_slot_bufs: usize,
    allocated_expert_bufs: usize,
    queue: VecDeque<Job>,
    shutdown: bool,
    tick: u64,
    token: usize,
    /// Router calls per layer in the current forward (a prefill forward routes several tokens).
    layer_calls: HashMap<usize, usize>,
    /// Guesses per layer for the current token (lookahead / oracle).
    guesses: HashMap<usize, Vec<usize>>,
    metrics: StoreMetrics,
    trace_out: Vec<(usize, usize, Vec<usize>)>,
}

struct Shared {
    inner: Mutex<Inner>,
    cv: Condvar,
    files: Vec<ShardFile>,
    plan: Plan,
    io: IoMode,
    manifest: Option<HashMap<String, String>>,
}

/// A [`WeightStore`] that keeps resident memory under a budget.
pub struct StreamingStore {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    pinned: HashMap<String, Bytes>,
    prefix: String,
    expert_format: Option<ExpertFormat>,
    opts: StreamOptions,
    /// First layer index that is not pinned (== number of layers when all are).
    first_streamed: usize,
    num_layers: usize,
    moe_layers: Vec<usize>,
    trace_in: HashMap<(usize, usize), Vec<usize>>,
    /// Bytes pinned at open.
    pub pinned_bytes: u64,
    /// Seconds spent opening (reading the pinned set).
    pub load_s: f64,
}

fn lock(s: &Shared) -> MutexGuard<'_, Inner> {
    s.inner.lock().unwrap_or_else(|p| p.into_inner())
}

fn read_group(shared: &Shared, g: &ReadGroup, buf: Option<AlignedBuf>) -> Result<(Loaded, u64)> {
    let mut read = 0u64;
    if shared.io == IoMode::Mmap {
        // Views borrow the mappings; "reading" faults the pages in.
        let ps = crate::io::pagecache::page_size();
        let mut range_pos = Vec::new();
        let mut maps = Vec::new();
        for r in &g.ranges {
            let f = &shared.files[r.shard];
            let map = f.map().context("internal: no mapping")?.clone();
            f.check_unchanged()?;
            // Fault the pages in now (this is the "read").
            let start = r.start as usize / ps * ps;
            let _ = map.advise_range(
                memmap2::Advice::WillNeed,
                start,
                (r.end as usize - start).min(map.len() - start),
            );
            let mut acc = 0u8;
            let mut p = r.start as usize;
            while p < r.end as usize {
                acc = acc.wrapping_add(map[p]);
                p = (p / ps + 1) * ps;
            }
            std::hint::black_box(acc);
            read += r.end - r.start;
            range_pos.push(r.start as usize);
            maps.push(map);
        }
        return Ok((
            Loaded {
                data: LoadedData::Maps(maps),
                range_pos,
            },
            read,
        ));
    }
    let mut buf = buf.unwrap_or_else(|| AlignedBuf::new(g.buffer_bytes as usize));
    let mut pos = 0usize;
    let mut range_pos = Vec::new();
    for r in &g.ranges {
        let f = &shared.files[r.shard];
        // In direct mode `need` is a multiple of the DIO alignment, so every window
        // starts aligned; in buffered mode windows are packed.
        let need = f.buffer_len_for(r.start, r.end - r.start);
        if buf.capacity() < pos + need {
            bail!(
                "internal: IO buffer of {} bytes too small for {} more at {}",
                buf.capacity(),
                need,
                pos
            );
        }
        let window = &mut buf.full_mut()[pos..pos + need];
        let delta = crate::io::reader::read_range(f, r.start, r.end - r.start, window)?;
        range_pos.push(pos + delta);
        pos += need;
        read += need as u64;
    }
    buf.set_len(pos);
    Ok((
        Loaded {
            data: LoadedData::Buf(buf),
            range_pos,
        },
        read,
    ))
}

impl Shared {
    fn group(&self, key: Key) -> &ReadGroup {
        match key {
            Key::Layer(l) => self.plan.layer_groups[l]
                .as_ref()
                .expect("streamed layer has a group"),
            Key::Expert(l, e) => &self.plan.expert_groups[&(l, e)],
        }
    }

    fn verify(&self, key: Key, loaded: &Loaded) -> Result<u64> {
        let Some(man) = &self.manifest else {
            return Ok(0);
        };
        let g = self.group(key);
        let mut n = 0;
        for m in &g.members {
            let full = m.key.as_str();
            let Some(want) = man.get(full) else { continue };
            let p = loaded.range_pos[m.range] + m.offset as usize;
            let bytes: &[u8] = match &loaded.data {
                LoadedData::Buf(b) => b.as_ref(),
                LoadedData::Maps(maps) => &maps[m.range][..],
            };
            let got = hex(&Sha256::digest(&bytes[p..p + m.len as usize]));
            if &got != want {
                let r = &g.ranges[m.range];
                bail!(
                    "--verify-reads: tensor {} read from {} at offset {} has sha256 {got}, manifest says {want}",
                    m.key,
                    self.files[r.shard].path.display(),
                    r.start + m.offset
                );
            }
            n += 1;
        }
        Ok(n)
    }
}

fn worker(shared: Arc<Shared>) {
    loop {
        let job = {
            let mut g = lock(&shared);
            loop {
                if g.shutdown {
                    return;
                }
                if let Some(j) = g.queue.pop_front() {
                    break j;
                }
                g = shared.cv.wait(g).unwrap_or_else(|p| p.into_inner());
            }
        };
        let group = shared.group(job.key);
        let res = read_group(&shared, group, job.buf).and_then(|(l, n)| {
            let v = shared.verify(job.key, &l)?;
            Ok((l, n, v))
        });
        let mut g = lock(&shared);
        match res {
            Ok((loaded, n, v)) => {
                g.metrics.bytes_read += n;
                g.metrics.reads += 1;
                g.metrics.verified_tensors += v;
                match job.key {
                    Key::Layer(_) => g.metrics.trunk_bytes_read += n,
                    Key::Expert(..) => g.metrics.expert_bytes_read += n,
                }
                g.entries.insert(job.key, Entry::Ready(Arc::new(loaded)));
            }
            Err(e) => {
                g.entries.insert(job.key, Entry::Failed(format!("{e:#}")));
            }
        }
        drop(g);
        shared.cv.notify_all();
    }
}

fn load_manifest(dir: &Path, prefix: &str) -> Result<HashMap<String, String>> {
    let p = dir.join("tensors.sha256");
    let text = std::fs::read_to_string(&p).with_context(|| {
        format!(
            "--verify-reads needs {} (write it with `memdial checksum --model {}`)",
            p.display(),
            dir.display()
        )
    })?;
    let mut m = HashMap::new();
    for (i, line) in text.lines().enumerate() {
        let (sum, name) = line.split_once("  ").with_context(|| {
            format!(
                "{}:{}: expected `<sha256>  <tensor name>`",
                p.display(),
                i + 1
            )
        })?;
        m.insert(
            name.strip_prefix(prefix).unwrap_or(name).to_string(),
            sum.to_string(),
        );
    }
    Ok(m)
}

/// Writes `tensors.sha256` (per-tensor SHA-256 manifest) for any checkpoint.
pub fn write_checksum_manifest(dir: &Path) -> Result<usize> {
    let ck = Checkpoint::open(dir)?;
    let mut names: Vec<&String> = ck.tensors.keys().collect();
    names.sort_by_key(|n| {
        let t = &ck.tensors[*n];
        (t.shard, t.offset)
    });
    let mut out = String::new();
    let mut files: Vec<Option<std::fs::File>> = (0..ck.shards.len()).map(|_| None).collect();
    for n in &names {
        let t = &ck.tensors[*n];
        let f = match &mut files[t.shard] {
            Some(f) => f,
            slot => {
                *slot = Some(std::fs::File::open(&ck.shards[t.shard].path)?);
                slot.as_mut().unwrap()
            }
        };
        let mut buf = vec![0u8; t.len as usize];
        std::os::unix::fs::FileExt::read_exact_at(f, &mut buf, t.offset)
            .with_context(|| format!("reading {n} from {}", ck.shards[t.shard].path.display()))?;
        out.push_str(&format!("{}  {n}\n", hex(&Sha256::digest(&buf))));
    }
    let tmp = dir.join(".tensors.sha256.tmp");
    std::fs::write(&tmp, out)?;
    std::fs::rename(&tmp, dir.join("tensors.sha256"))?;
    Ok(names.len())
}

fn load_trace(path: &Path) -> Result<HashMap<(usize, usize), Vec<usize>>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read trace {}", path.display()))?;
    let mut m = HashMap::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let v: serde_json::Value = serde_json::from_str(line)
            .with_context(|| format!("{}:{}: not JSON", path.display(), i + 1))?;
        let get = |k: &str| v.get(k).and_then(|x| x.as_u64()).map(|x| x as usize);
        let (Some(t), Some(l)) = (get("token"), get("layer")) else {
            bail!(
                "{}:{}: expected {{\"token\", \"layer\", \"experts\"}}",
                path.display(),
                i + 1
            );
        };
        let ex: Vec<usize> = v
            .get("experts")
            .and_then(|x| x.as_array())
            .map(|a| {
                a.iter()
                    .filter_map(|x| x.as_u64().map(|y| y as usize))
                    .collect()
            })
            .unwrap_or_default();
        m.insert((t, l), ex);
    }
    Ok(m)
}

impl StreamingStore {
    /// Plans the budget (refusing one under the floor), opens the shards in the
    /// chosen IO mode, reads the pinned set and starts the IO threads.
    pub fn open(cfg: &ModelConfig, ck: &Checkpoint, opts: StreamOptions) -> Result<Self> {
        let t0 = Instant::now();
        let plan = plan(
            cfg,
            ck,
            opts.budget,
            opts.io,
            opts.prefetch,
            opts.max_context,
        )?;
        if opts.prefetch == Prefetch::Oracle && opts.trace.is_none() {
            bail!("--prefetch oracle needs --trace FILE (record one with --record-trace)");
        }
        let trace_in = match &opts.trace {
            Some(p) => load_trace(p)?,
            None => HashMap::new(),
        };
        let files = ck
            .shards
            .iter()
            .map(|s| ShardFile::open(&s.path, opts.io))
            .collect::<Result<Vec<_>>>()?;
        let manifest = if opts.verify_reads {
            Some(load_manifest(&ck.dir, &cfg.weight_prefix)?)
        } else {
            None
        };
        let first_streamed = plan.pinned_layers;
        let shared = Arc::new(Shared {
            inner: Mutex::new(Inner::default()),
            cv: Condvar::new(),
            files,
            plan,
            io: opts.io,
            manifest,
        });
        // Pinned small tensors and globals: read each tensor.
        let mut pinned = HashMap::new();
        let mut pinned_bytes = 0u64;
        let mut load_read = 0u64;
        for key in &shared.plan.pinned_keys {
            let full = format!("{}{}", cfg.weight_prefix, key);
            let loc = ck
                .get(&full)
                .or_else(|| {
                    crate::schema::expected_tensors(cfg)
                        .into_iter()
                        .find(|s| s.name == full)
                        .and_then(|s| s.aliases.iter().find_map(|a| ck.get(a)))
                })
                .with_context(|| format!("tensor {full} is missing from {}", ck.dir.display()))?;
            let f = &shared.files[loc.shard];
            let bytes = if opts.io == IoMode::Mmap {
                let map = f.map().unwrap().clone();
                Bytes::new(map, loc.offset as usize, loc.len as usize)
            } else {
                let mut b = AlignedBuf::new(f.buffer_len_for(loc.offset, loc.len));
                let d = f.read_into(loc.offset, loc.len, &mut b)?;
                load_read += b.len() as u64;
                let owner: Arc<dyn AsRef<[u8]> + Send + Sync> = Arc::new(b);
                Bytes::new(owner, d, loc.len as usize)
            };
            pinned_bytes += loc.len;
            pinned.insert(key.clone(), bytes);
        }
        // Pinned trunk prefix: read each layer group into its own buffer.
        for l in 0..first_streamed {
            if let Some(g) = shared.plan.layer_groups[l].as_ref() {
                let (loaded, n) = read_group(&shared, g, None)?;
                shared.verify(Key::Layer(l), &loaded)?;
                load_read += n;
                pinned_bytes += g.buffer_bytes;
                let loaded = Arc::new(loaded);
                for m in &g.members {
                    let (owner, p) = loaded.locate(m.range, m.offset);
                    pinned.insert(m.key.clone(), Bytes::new(owner, p, m.len as usize));
                }
            }
        }
        {
            let mut g = lock(&shared);
            g.metrics.load_bytes_read = load_read;
            g.metrics.expert_layer = vec![(0, 0); cfg.num_hidden_layers];
        }
        let workers = (0..opts.io_threads.max(1))
            .map(|i| {
                let s = shared.clone();
                std::thread::Builder::new()
                    .name(format!("memdial-io-{i}"))
                    .spawn(move || worker(s))
                    .expect("spawn IO thread")
            })
            .collect();
        let moe_layers = cfg
            .mlp_kinds
            .iter()
            .enumerate()
            .filter(|(_, k)| **k == crate::config::MlpKind::Moe)
            .map(|(i, _)| i)
            .collect();
        let store = StreamingStore {
            shared,
            workers,
            pinned,
            prefix: cfg.weight_prefix.clone(),
            expert_format: cfg.moe.as_ref().map(|m| m.expert_format),
            opts,
            first_streamed,
            num_layers: cfg.num_hidden_layers,
            moe_layers,
            trace_in,
            pinned_bytes,
            load_s: t0.elapsed().as_secs_f64(),
        };
        store.update_peak(&mut lock(&store.shared));
        Ok(store)
    }

    /// The plan in force.
    pub fn plan(&self) -> &Plan {
        &self.shared.plan
    }

    /// A snapshot of the counters.
    pub fn metrics(&self) -> StoreMetrics {
        lock(&self.shared).metrics.clone()
    }

    /// Self-accounted resident bytes right now: pinned + allocated slot and expert
    /// buffers + state + activation estimate.
    fn accounted(&self, g: &Inner) -> u64 {
        let p = &self.shared.plan;
        self.pinned_bytes
            + g.allocated_slot_bufs as u64 * p.slot_bytes
            + g.allocated_expert_bufs as u64 * p.expert_buffer_bytes
            + p.state_bytes
            + p.activation_bytes
    }

    fn update_peak(&self, g: &mut Inner) {
        let a = self.accounted(g);
        if a > g.metrics.peak_accounted_bytes {
            g.metrics.peak_accounted_bytes = a;
        }
    }

    /// Writes the recorded expert trace (if `record_trace` was set). Call after generation.
    pub fn finish(&self) -> Result<()> {
        if let Some(p) = &self.opts.record_trace {
            let g = lock(&self.shared);
            let mut f = std::io::BufWriter::new(
                std::fs::File::create(p)
                    .with_context(|| format!("cannot create trace {}", p.display()))?,
            );
            for (t, l, ex) in &g.trace_out {
                writeln!(
                    f,
                    "{}",
                    serde_json::json!({"token": t, "layer": l, "experts": ex})
                )?;
            }
            f.flush()?;
        }
        Ok(())
    }

    /// Page-cache-resident bytes of the model's shard files (mincore).
    pub fn page_cache_resident_bytes(&self) -> u64 {
        self.shared
            .files
            .iter()
            .map(|f| crate::io::pagecache::resident_bytes(&f.path).unwrap_or(0))
            .sum()
    }

    /// Drops an mmap range from memory (mapping and page cache) so mapped-resident
    /// bytes stay within the plan.
    fn mmap_release(&self, key: Key) {
        if self.shared.io != IoMode::Mmap {
            return;
        }
        let g = self.shared.group(key);
        let ps = crate::io::pagecache::page_size() as u64;
        for r in &g.ranges {
            let f = &self.shared.files[r.shard];
            // Only whole pages inside the range (neighbours may be pinned).
            let start = r.start.div_ceil(ps) * ps;
            let end = r.end / ps * ps;
            if end > start {
                if let Some(map) = f.map() {
                    // SAFETY: DONTNEED on a read-only shared file mapping only drops page
                    // table entries; later accesses re-read the file. No live `&mut` exists.
                    let _ = unsafe {
                        map.unchecked_advise_range(
                            memmap2::UncheckedAdvice::DontNeed,
                            start as usize,
                            (end - start) as usize,
                        )
                    };
                }
                crate::io::pagecache::evict_range(f.file(), start, end - start);
            }
        }
    }

    /// Queues a load of `key` unless present. Returns `Skipped` if no buffer can be
    /// had without evicting something protected (only for optional prefetches), and
    /// `Wait` when a required load must wait for an in-flight read to finish before
    /// its buffer can be reused (the caller waits on the condvar and retries).
    fn request(&self, g: &mut Inner, key: Key, optional: bool) -> Req {
        if g.entries.contains_key(&key) {
            return Req::Queued;
        }
        let plan = &self.shared.plan;
        let buf = match key {
            Key::Layer(l) => {
                if g.slot_layers.len() >= plan.trunk_slots.max(1) {
                    // Evict the oldest slot layer that nobody else references.
                    let pos =
                        g.slot_layers
                            .iter()
                            .position(|&ol| match g.entries.get(&Key::Layer(ol)) {
                                Some(Entry::Ready(a)) => Arc::strong_count(a) == 1,
                                Some(Entry::Failed(_)) => true,
                                _ => false,
                            });
                    match pos {
                        Some(p) => {
                            let ol = g.slot_layers.remove(p).unwrap();
                            if let Some(Entry::Ready(a)) = g.entries.remove(&Key::Layer(ol)) {
                                self.mmap_release(Key::Layer(ol));
                                if let Ok(loaded) = Arc::try_unwrap(a) {
                                    if let LoadedData::Buf(b) = loaded.data {
                                        g.free_slot_bufs.push(b);
                                    }
                                }
                            }
                        }
                        None if optional => return Req::Skipped,
                        None => {
                            let in_flight = g.slot_layers.iter().any(|ol| {
                                matches!(g.entries.get(&Key::Layer(*ol)), Some(Entry::Loading))
                            });
                            if in_flight {
                                return Req::Wait;
                            }
                            g.metrics.budget_overflows += 1
                        }
                    }
                }
                g.slot_layers.push_back(l);
                self.take_buf(g, true)
            }
            Key::Expert(l, e) => {
                if g.cached_experts.len() >= plan.expert_cache_experts.max(1) {
                    let policy = self.opts.cache;
                    let victim = g
                        .cached_experts
                        .iter()
                        .filter(|id| !g.protected.contains(id))
                        .filter(|id| match g.entries.get(&Key::Expert(id.0, id.1)) {
                            Some(Entry::Ready(a)) => Arc::strong_count(a) == 1,
                            Some(Entry::Failed(_)) => true,
                            _ => false,
                        })
                        .min_by_key(|id| {
                            let m = g.meta.get(id).map(|m| (m.freq, m.last)).unwrap_or((0, 0));
                            policy.key(m.0, m.1, **id)
                        })
                        .copied();
                    match victim {
                        Some(v) => {
                            g.cached_experts.remove(&v);
                            if let Some(Entry::Ready(a)) = g.entries.remove(&Key::Expert(v.0, v.1))
                            {
                                self.mmap_release(Key::Expert(v.0, v.1));
                                if let Ok(loaded) = Arc::try_unwrap(a) {
                                    if let LoadedData::Buf(b) = loaded.data {
                                        g.free_expert_bufs.push(b);
                                    }
                                }
                            }
                        }
                        None if optional => return Req::Skipped,
                        None => {
                            let in_flight = g.cached_experts.iter().any(|id| {
                                !g.protected.contains(id)
                                    && matches!(
                                        g.entries.get(&Key::Expert(id.0, id.1)),
                                        Some(Entry::Loading)
                                    )
                            });
                            if in_flight {
                                return Req::Wait;
                            }
                            g.metrics.budget_overflows += 1
                        }
                    }
                }
                g.cached_experts.insert((l, e));
                self.take_buf(g, false)
            }
        };
        g.entries.insert(key, Entry::Loading);
        g.queue.push_back(Job { key, buf });
        self.update_peak(g);
        self.shared.cv.notify_all();
        Req::Queued
    }

    fn take_buf(&self, g: &mut Inner, slot: bool) -> Option<AlignedBuf> {
        if self.shared.io == IoMode::Mmap {
            // mmap: the "buffer" is the mapping; account the resident range instead.
            if slot {
                g.allocated_slot_bufs = g.allocated_slot_bufs.max(g.slot_layers.len());
            } else {
                g.allocated_expert_bufs = g.allocated_expert_bufs.max(g.cached_experts.len());
            }
            return None;
        }
        let plan = &self.shared.plan;
        if slot {
            if let Some(b) = g.free_slot_bufs.pop() {
                return Some(b);
            }
            g.allocated_slot_bufs += 1;
            Some(AlignedBuf::new(plan.slot_bytes as usize))
        } else {
            if let Some(b) = g.free_expert_bufs.pop() {
                return Some(b);
            }
            g.allocated_expert_bufs += 1;
            Some(AlignedBuf::new(plan.expert_buffer_bytes as usize))
        }
    }

    /// Blocks until `key` is loaded (counting the wait as IO wait).
    fn wait(&self, mut g: MutexGuard<'_, Inner>, key: Key) -> Result<Arc<Loaded>> {
        let t0 = Instant::now();
        let mut waited = false;
        loop {
            match g.entries.get(&key) {
                Some(Entry::Ready(a)) => {
                    let a = a.clone();
                    if waited {
                        g.metrics.io_wait_s += t0.elapsed().as_secs_f64();
                    }
                    return Ok(a);
                }
                Some(Entry::Failed(e)) => bail!("{e}"),
                Some(Entry::Loading) => {
                    waited = true;
                    g = self.shared.cv.wait(g).unwrap_or_else(|p| p.into_inner());
                }
                None => {
                    if self.request(&mut g, key, false) == Req::Wait {
                        waited = true;
                        g = self.shared.cv.wait(g).unwrap_or_else(|p| p.into_inner());
                    }
                }
            }
        }
    }

    fn view(&self, key: Key, loaded: &Arc<Loaded>, member_key: &str) -> Result<Bytes> {
        let g = self.shared.group(key);
        let m = g
            .members
            .iter()
            .find(|m| m.key == member_key)
            .with_context(|| {
                format!(
                    "tensor {}{member_key} is not in this read group",
                    self.prefix
                )
            })?;
        let (owner, p) = loaded.locate(m.range, m.offset);
        Ok(Bytes::new(owner, p, m.len as usize))
    }

    /// The streamed layer read after layer `l`: the next one in this token, else the
    /// first streamed layer of the next token; `num_layers` when nothing streams.
    fn next_streamed_layer(&self, l: usize) -> usize {
        let n = self.num_layers;
        let streamed =
            |c: &usize| *c >= self.first_streamed && self.shared.plan.layer_groups[*c].is_some();
        (l + 1..n)
            .chain(self.first_streamed..=l.min(n - 1))
            .find(streamed)
            .unwrap_or(n)
    }
}

impl std::fmt::Debug for StreamingStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamingStore")
            .field("io", &self.opts.io)
            .field("prefetch", &self.opts.prefetch)
            .field("budget", &self.opts.budget)
            .finish()
    }
}

impl Drop for StreamingStore {
    fn drop(&mut self) {
        {
            let mut g = lock(&self.shared);
            g.shutdown = true;
        }
        self.shared.cv.notify_all();
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

impl WeightStore for StreamingStore {
    fn tensor(&self, layer: Option<usize>, name: &str) -> Result<Bytes> {
        let key = match layer {
            Some(l) => layer_name(l, name),
            None => name.to_string(),
        };
        if let Some(b) = self.pinned.get(&key) {
            return Ok(b.clone());
        }
        let Some(l) = layer else {
            bail!("tensor {}{key} is not in the checkpoint", self.prefix);
        };
        if l >= self.num_layers || self.shared.plan.layer_groups[l].is_none() {
            bail!("tensor {}{key} is not in the checkpoint", self.prefix);
        }
        let g = lock(&self.shared);
        let loaded = self.wait(g, Key::Layer(l))?;
        self.view(Key::Layer(l), &loaded, &key)
    }

    fn expert(&self, layer: usize, expert: usize) -> Result<ExpertWeights> {
        let fmt = self.expert_format.context("model has no routed experts")?;
        let key = Key::Expert(layer, expert);
        if !self
            .shared
            .plan
            .expert_groups
            .contains_key(&(layer, expert))
        {
            bail!("expert {expert} of layer {layer} is not in the checkpoint");
        }
        let loaded = {
            let mut g = lock(&self.shared);
            g.tick += 1;
            let t = g.tick;
            let m = g
                .meta
                .entry((layer, expert))
                .or_insert(ExpertMeta { freq: 0, last: 0 });
            m.freq += 1;
            m.last = t;
            self.wait(g, key)?
        };
        let mat = |m: &str| -> Result<ExpertMat> {
            let base = layer_name(layer, &format!("block_sparse_moe.experts.{expert}.{m}"));
            Ok(match fmt {
                ExpertFormat::Bf16 => {
                    ExpertMat::Bf16(self.view(key, &loaded, &format!("{base}.weight"))?)
                }
                ExpertFormat::Mxfp4 => ExpertMat::Mxfp4 {
                    packed: self.view(key, &loaded, &format!("{base}.weight_packed"))?,
                    scale: self.view(key, &loaded, &format!("{base}.weight_scale"))?,
                },
            })
        };
        Ok(ExpertWeights {
            w1: mat("w1")?,
            w2: mat("w2")?,
            w3: mat("w3")?,
        })
    }

    fn begin_token(&self, pos: usize) {
        let mut g = lock(&self.shared);
        g.token = pos;
        g.guesses.clear();
        g.protected.clear();
        g.layer_calls.clear();
    }

    fn wants_lookahead(&self) -> bool {
        self.opts.prefetch == Prefetch::Lookahead
    }

    fn prefetch_experts(&self, layer: usize, guesses: &[usize]) {
        let mut g = lock(&self.shared);
        self.issue_guesses(&mut g, layer, guesses);
    }

    fn begin_layer(&self, layer: usize) {
        let mut g = lock(&self.shared);
        if layer >= self.first_streamed {
            // A streamed layer is a miss even when prefetched: its bytes were read again.
            g.metrics.trunk_request_bytes += self.shared.plan.layer_groups[layer]
                .as_ref()
                .map_or(0, |x| x.tensor_bytes);
            let t0 = Instant::now();
            let mut waited = false;
            while self.request(&mut g, Key::Layer(layer), false) == Req::Wait {
                waited = true;
                g = self.shared.cv.wait(g).unwrap_or_else(|p| p.into_inner());
            }
            if waited {
                g.metrics.io_wait_s += t0.elapsed().as_secs_f64();
            }
        } else if let Some(grp) = self.shared.plan.layer_groups[layer].as_ref() {
            g.metrics.trunk_request_bytes += grp.tensor_bytes;
            g.metrics.trunk_hit_bytes += grp.tensor_bytes;
        }
        if self.opts.prefetch.trunk_ahead() {
            let nl = self.next_streamed_layer(layer);
            if nl < self.num_layers && nl != layer {
                self.request(&mut g, Key::Layer(nl), true);
            }
        }
        if self.opts.prefetch == Prefetch::Oracle {
            // Replay the trace: experts of the next MoE layer of this token (or the first of the next token).
            let next = self.moe_layers.iter().copied().find(|&m| m > layer);
            let (t, nl) = match next {
                Some(m) => (g.token, m),
                None => (g.token + 1, self.moe_layers.first().copied().unwrap_or(0)),
            };
            if let Some(ex) = self.trace_in.get(&(t, nl)).cloned() {
                if t == g.token {
                    self.issue_guesses(&mut g, nl, &ex);
                }
            }
            // Also the current layer if it was not guessed yet (first layer of a token).
            if !g.guesses.contains_key(&layer) {
                if let Some(ex) = self.trace_in.get(&(g.token, layer)).cloned() {
                    self.issue_guesses(&mut g, layer, &ex);
                }
            }
        }
    }

    fn experts_selected(&self, layer: usize, experts: &[usize]) {
        let mut g = lock(&self.shared);
        let sub = {
            let c = g.layer_calls.entry(layer).or_insert(0);
            *c += 1;
            *c - 1
        };
        let token = g.token + sub;
        if self.opts.record_trace.is_some() {
            g.trace_out.push((token, layer, experts.to_vec()));
        }
        if let Some(gs) = g.guesses.get(&layer).cloned().filter(|_| sub == 0) {
            g.metrics.lookahead_actual += experts.len() as u64;
            g.metrics.lookahead_correct += experts.iter().filter(|e| gs.contains(e)).count() as u64;
        }
        g.protected.retain(|(l, _)| *l > layer);
        for &e in experts {
            g.protected.insert((layer, e));
        }
        for &e in experts {
            let key = Key::Expert(layer, e);
            g.metrics.expert_requests += 1;
            if layer < g.metrics.expert_layer.len() {
                g.metrics.expert_layer[layer].0 += 1;
            }
            let present = g.entries.contains_key(&key);
            if present {
                g.metrics.expert_hits += 1;
                if matches!(g.entries.get(&key), Some(Entry::Loading)) {
                    g.metrics.expert_prefetch_hits += 1;
                }
                if layer < g.metrics.expert_layer.len() {
                    g.metrics.expert_layer[layer].1 += 1;
                }
            }
            let t0 = Instant::now();
            let mut waited = false;
            while self.request(&mut g, key, false) == Req::Wait {
                waited = true;
                g = self.shared.cv.wait(g).unwrap_or_else(|p| p.into_inner());
            }
            if waited {
                g.metrics.io_wait_s += t0.elapsed().as_secs_f64();
            }
        }
    }

    fn groups_chunk_experts(&self) -> bool {
        true
    }

    fn chunk_experts_selected(&self, layer: usize, per_token: &[Vec<usize>], order: &[usize]) {
        // Same trace rows and per-token request counts as one `experts_selected` per
        // token; the loads happen in `expert` (each distinct expert once, in `order`).
        let mut g = lock(&self.shared);
        for experts in per_token {
            let sub = {
                let c = g.layer_calls.entry(layer).or_insert(0);
                *c += 1;
                *c - 1
            };
            let token = g.token + sub;
            if self.opts.record_trace.is_some() {
                g.trace_out.push((token, layer, experts.clone()));
            }
            g.metrics.expert_requests += experts.len() as u64;
            if layer < g.metrics.expert_layer.len() {
                g.metrics.expert_layer[layer].0 += experts.len() as u64;
            }
        }
        // A request is a hit unless it is the one fetch of an expert not resident now.
        let total: u64 = per_token.iter().map(|e| e.len() as u64).sum();
        let misses = order
            .iter()
            .filter(|&&e| !g.entries.contains_key(&Key::Expert(layer, e)))
            .count() as u64;
        g.metrics.expert_hits += total - misses.min(total);
        if layer < g.metrics.expert_layer.len() {
            g.metrics.expert_layer[layer].1 += total - misses.min(total);
        }
        g.protected.retain(|(l, _)| *l > layer);
        g.metrics.prefill_expert_fetches += order.len() as u64;
    }

    fn end_layer(&self, _layer: usize) {}
}

impl StreamingStore {
    fn issue_guesses(&self, g: &mut Inner, layer: usize, guesses: &[usize]) {
        if g.guesses.contains_key(&layer) {
            return;
        }
        g.guesses.insert(layer, guesses.to_vec());
        g.metrics.lookahead_guesses += guesses.len() as u64;
        for &e in guesses {
            if !self.shared.plan.expert_groups.contains_key(&(layer, e)) {
                continue;
            }
            if self.request(g, Key::Expert(layer, e), true) == Req::Queued {
                g.protected.insert((layer, e));
            }
        }
    }
}
