//! The streaming store's IO side: read groups into buffers (or fault in mapped
//! ranges), check them against the manifest, and the worker threads that serve the
//! queue. Nothing here decides *what* to read; that is [`super::caches`].

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Instant;

use anyhow::{bail, Context, Result};

use super::caches::{Entry, Inner, Key};
use crate::io::{AlignedBuf, IoMode, ShardFile};
use crate::store::plan::{Plan, ReadGroup};
use crate::util::digest::sha256_hex;

/// Bytes that were read for one group: one buffer, ranges at known positions.
pub(super) struct Loaded {
    pub(super) data: LoadedData,
    /// Position of each range's first byte inside `data`.
    pub(super) range_pos: Vec<usize>,
}

pub(super) enum LoadedData {
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
    pub(super) fn locate(
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
pub(super) struct MapView(Arc<memmap2::Mmap>, #[allow(dead_code)] Arc<Loaded>);

impl AsRef<[u8]> for MapView {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

/// A queued read: the group of `key`, into `buf` (none in mmap mode or at load).
pub(super) struct Job {
    pub(super) key: Key,
    pub(super) buf: Option<AlignedBuf>,
}

/// A lossless pack the store reads through ([`crate::format::lossless`]): its shard's reads
/// decode coded blocks, staged in `pool`; decode counters for the metrics.
pub(super) struct PackRead {
    pub(super) packed: Arc<crate::format::lossless::Packed>,
    pub(super) pool: crate::format::lossless::read::StagingPool,
    pub(super) decoded_bytes: AtomicU64,
    pub(super) decode_ns: AtomicU64,
}

/// State shared by the store and its IO threads.
pub(super) struct Shared {
    pub(super) inner: Mutex<Inner>,
    pub(super) cv: Condvar,
    pub(super) files: Vec<ShardFile>,
    pub(super) plan: Plan,
    pub(super) io: IoMode,
    pub(super) manifest: Option<HashMap<String, String>>,
    /// mmap mode: bytes per `WILLNEED` call for each shard ([`super::mapped::willneed_chunk`]).
    pub(super) willneed_chunk: Vec<u64>,
    /// Largest page-cache folio, bytes ([`super::mapped::folio_max`]).
    pub(super) folio: u64,
    /// The checkpoint's lossless pack, if it has one.
    pub(super) lossless: Option<PackRead>,
}

/// Locks the shared state (a panicked holder does not poison it for the others).
pub(super) fn lock(s: &Shared) -> MutexGuard<'_, Inner> {
    s.inner.lock().unwrap_or_else(|p| p.into_inner())
}

/// Reads group `g` into `buf` (allocated when `None`); mmap mode faults the pages
/// in instead (a `trunk` group's long ranges through 2 MiB folios, see
/// [`super::mapped`]). Returns the bytes and how many were read.
pub(super) fn read_group(
    shared: &Shared,
    g: &ReadGroup,
    buf: Option<AlignedBuf>,
    trunk: bool,
) -> Result<(Loaded, u64)> {
    let mut read = 0u64;
    if shared.io == IoMode::Mmap {
        // Views borrow the mappings; "reading" faults the record's pages in here, on
        // the IO thread (super::mapped).
        let mut range_pos = Vec::new();
        let mut maps = Vec::new();
        for r in &g.ranges {
            let f = &shared.files[r.shard];
            let map = f.map().context("internal: no mapping")?.clone();
            f.check_unchanged()?;
            let huge =
                (trunk && r.end - r.start >= super::mapped::HUGE_MIN).then_some(shared.folio);
            super::mapped::fault_in(f, r.start, r.end, shared.willneed_chunk[r.shard], huge)?;
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
        let (delta, n) = shared.read_window(r.shard, r.start, r.end - r.start, window)?;
        range_pos.push(pos + delta);
        pos += need;
        read += n;
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
    /// Reads `[offset, offset + len)` of shard `shard` into `window` (exactly
    /// `files[shard].buffer_len_for(offset, len)` bytes, aligned for direct IO), decoding
    /// when the shard is a lossless pack. Returns the position of `offset` in `window`
    /// and the bytes read from disk (a pack's coded bytes).
    ///
    /// Errors as [`crate::io::reader::read_range`]; a pack's block errors.
    pub(super) fn read_window(
        &self,
        shard: usize,
        offset: u64,
        len: u64,
        window: &mut [u8],
    ) -> Result<(usize, u64)> {
        let f = &self.files[shard];
        match &self.lossless {
            Some(p) if p.packed.shard == shard => {
                let delta = match self.io {
                    IoMode::Direct => (offset - f.aligned_span(offset, len).0) as usize,
                    _ => 0,
                };
                if window.len() < delta + len as usize {
                    bail!(
                        "internal: read window of {} bytes, need {}",
                        window.len(),
                        delta + len as usize
                    );
                }
                f.check_unchanged()?;
                let (head, rest) = window.split_at_mut(delta);
                head.fill(0);
                let (body, tail) = rest.split_at_mut(len as usize);
                tail.fill(0);
                let cost = crate::format::lossless::read::read_logical(
                    &p.packed.index,
                    f,
                    &p.pool,
                    offset,
                    body,
                )?;
                p.decoded_bytes
                    .fetch_add(cost.decoded_bytes, Ordering::Relaxed);
                p.decode_ns
                    .fetch_add((cost.decode_s * 1e9) as u64, Ordering::Relaxed);
                Ok((delta, cost.bytes_read))
            }
            _ => {
                let d = crate::io::reader::read_range(f, offset, len, window)?;
                Ok((d, window.len() as u64))
            }
        }
    }

    /// [`Shared::read_window`] into `buf` (its logical length set to the window).
    pub(super) fn read_buf(
        &self,
        shard: usize,
        offset: u64,
        len: u64,
        buf: &mut AlignedBuf,
    ) -> Result<(usize, u64)> {
        let want = self.files[shard].buffer_len_for(offset, len);
        if buf.capacity() < want {
            bail!(
                "internal: IO buffer of {} bytes too small for {want}",
                buf.capacity()
            );
        }
        let r = self.read_window(shard, offset, len, &mut buf.full_mut()[..want])?;
        buf.set_len(want);
        Ok(r)
    }

    /// The read group of `key` (a streamed trunk group or one routed expert).
    pub(super) fn group(&self, key: Key) -> &ReadGroup {
        match key {
            Key::Group(g) => &self.plan.groups[g].read,
            Key::Expert(l, e) => &self.plan.expert_groups[&(l, e)],
        }
    }

    /// Checks the tensors of `loaded` against the manifest (when verifying reads);
    /// returns how many were checked.
    pub(super) fn verify(&self, key: Key, loaded: &Loaded) -> Result<u64> {
        let Some(man) = &self.manifest else {
            return Ok(0);
        };
        let g = self.group(key);
        let mut n = 0;
        for m in &g.members {
            let full = m.key.as_str();
            if m.partial {
                continue; // a part (rows, an expert's slice): its tensor was hashed whole at open (`verify_parts`)
            }
            let Some(want) = man.get(full) else { continue };
            let p = loaded.range_pos[m.range] + m.offset as usize;
            let bytes: &[u8] = match &loaded.data {
                LoadedData::Buf(b) => b.as_ref(),
                LoadedData::Maps(maps) => &maps[m.range][..],
            };
            let got = sha256_hex(&bytes[p..p + m.len as usize]);
            let r = &g.ranges[m.range];
            check_sha(
                &m.key,
                &self.files[r.shard].path,
                r.start + m.offset,
                &got,
                Some(want),
            )?;
            n += 1;
        }
        Ok(n)
    }

    /// Refuses E8M0 NaN scales (0xFF) in a routed expert just read
    /// ([`crate::format::integrity::check_e8m0`]; its scales are in memory now).
    pub(super) fn check_scales(&self, key: Key, loaded: &Loaded) -> Result<()> {
        if !matches!(key, Key::Expert(..)) {
            return Ok(());
        }
        let g = self.group(key);
        for m in g
            .members
            .iter()
            .filter(|m| m.key.ends_with(".weight_scale") || m.key.ends_with("_proj_scales"))
        {
            let p = loaded.range_pos[m.range] + m.offset as usize;
            let bytes: &[u8] = match &loaded.data {
                LoadedData::Buf(b) => b.as_ref(),
                LoadedData::Maps(maps) => &maps[m.range][..],
            };
            crate::format::integrity::check_e8m0(&m.key, &bytes[p..p + m.len as usize])?;
        }
        Ok(())
    }

    /// The page ranges `(shard, lo, hi)` to drop for evicted mmap records `keys`:
    /// each range widened to whole folios, minus the ranges of every entry still in
    /// the store (ready or loading) and of the pinned tensors ([`super::mapped`]).
    pub(super) fn drop_ranges(&self, g: &Inner, keys: &[Key]) -> Vec<(usize, u64, u64)> {
        let ps = crate::io::pagecache::page_size() as u64;
        let mut out = Vec::new();
        for &k in keys {
            for r in &self.group(k).ranges {
                let size = self.files[r.shard].size.div_ceil(ps) * ps;
                let lo = r.start / self.folio * self.folio;
                let hi = (r.end.div_ceil(self.folio) * self.folio).min(size);
                let mut keep: Vec<(u64, u64)> = g
                    .pinned_ranges
                    .iter()
                    .filter(|p| p.0 == r.shard && p.2 > lo && p.1 < hi)
                    .map(|p| (p.1, p.2))
                    .collect();
                for live in g.entries.keys() {
                    for lr in &self.group(*live).ranges {
                        if lr.shard == r.shard && lr.end > lo && lr.start < hi {
                            keep.push((lr.start, lr.end));
                        }
                    }
                }
                for (a, b) in super::mapped::subtract(lo, hi, &mut keep, ps) {
                    out.push((r.shard, a, b));
                }
            }
        }
        out
    }
}

/// An IO thread: pops jobs, does the queued mmap drops first (in a batch), reads
/// and verifies, publishes the entry. Counts the time at least one read was in
/// flight (`read_busy_s`).
pub(super) fn worker(shared: Arc<Shared>) {
    loop {
        let (job, drops) = {
            let mut g = lock(&shared);
            loop {
                if g.shutdown {
                    return;
                }
                if !g.releases.is_empty() {
                    // Drop first: the pages of evicted records leave before new ones come.
                    let keys = std::mem::take(&mut g.releases);
                    let drops = shared.drop_ranges(&g, &keys);
                    g.releasing.extend(drops.iter().copied());
                    break (None, drops);
                }
                // A record overlapping a range being dropped waits until the drop is done.
                let ready = g.queue.iter().position(|j| {
                    shared.group(j.key).ranges.iter().all(|r| {
                        !g.releasing
                            .iter()
                            .any(|d| d.0 == r.shard && d.2 > r.start && d.1 < r.end)
                    })
                });
                if let Some(i) = ready {
                    let j = g.queue.remove(i).expect("index in range");
                    if g.in_flight == 0 {
                        g.busy_since = Some(Instant::now());
                    }
                    g.in_flight += 1;
                    break (Some(j), vec![]);
                }
                g = shared.cv.wait(g).unwrap_or_else(|p| p.into_inner());
            }
        };
        let Some(job) = job else {
            for &(shard, lo, hi) in &drops {
                super::mapped::release(&shared.files[shard], lo, hi);
            }
            let mut g = lock(&shared);
            g.releasing.retain(|d| !drops.contains(d));
            drop(g);
            shared.cv.notify_all();
            continue;
        };
        let group = shared.group(job.key);
        let trunk = matches!(job.key, Key::Group(_));
        let res = read_group(&shared, group, job.buf, trunk).and_then(|(l, n)| {
            let v = shared.verify(job.key, &l)?;
            shared.check_scales(job.key, &l)?;
            Ok((l, n, v))
        });
        let mut g = lock(&shared);
        g.in_flight -= 1;
        if g.in_flight == 0 {
            if let Some(t) = g.busy_since.take() {
                g.metrics.read_busy_s += t.elapsed().as_secs_f64();
            }
        }
        match res {
            Ok((loaded, n, v)) => {
                g.metrics.bytes_read += n;
                g.metrics.reads += 1;
                g.metrics.verified_tensors += v;
                match job.key {
                    Key::Group(_) => g.metrics.trunk_bytes_read += n,
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

/// `--verify-reads`: tensor `name`, read from `path` at `offset` (bytes), hashed to
/// sha256 `got` (hex) must match the manifest's `want` (`None`: no entry).
///
/// Errors: a mismatch, naming tensor, file, offset and both hashes.
pub(super) fn check_sha(
    name: &str,
    path: &std::path::Path,
    offset: u64,
    got: &str,
    want: Option<&str>,
) -> Result<()> {
    if want != Some(got) {
        bail!(
            "verifying reads: tensor {name} read from {} at offset {offset} has sha256 {got}, manifest says {}",
            path.display(),
            want.unwrap_or("nothing")
        );
    }
    Ok(())
}
