//! The streaming store's IO side: read groups into buffers (or fault in mapped
//! ranges), check them against the manifest, and the worker threads that serve the
//! queue. Nothing here decides *what* to read; that is [`super::caches`].

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use anyhow::{bail, Context, Result};
use sha2::{Digest, Sha256};

use super::caches::{Entry, Inner, Key};
use crate::fixture::hex;
use crate::io::{AlignedBuf, IoMode, ShardFile};
use crate::store::plan::{Plan, ReadGroup};

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

/// State shared by the store and its IO threads.
pub(super) struct Shared {
    pub(super) inner: Mutex<Inner>,
    pub(super) cv: Condvar,
    pub(super) files: Vec<ShardFile>,
    pub(super) plan: Plan,
    pub(super) io: IoMode,
    pub(super) manifest: Option<HashMap<String, String>>,
}

/// Locks the shared state (a panicked holder does not poison it for the others).
pub(super) fn lock(s: &Shared) -> MutexGuard<'_, Inner> {
    s.inner.lock().unwrap_or_else(|p| p.into_inner())
}

/// Reads group `g` into `buf` (allocated when `None`); mmap mode faults the pages
/// in instead. Returns the bytes and how many were read.
pub(super) fn read_group(
    shared: &Shared,
    g: &ReadGroup,
    buf: Option<AlignedBuf>,
) -> Result<(Loaded, u64)> {
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
                continue; // a block of rows: the manifest hashes whole tensors
            }
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
                    "verifying reads: tensor {} read from {} at offset {} has sha256 {got}, manifest says {want}",
                    m.key,
                    self.files[r.shard].path.display(),
                    r.start + m.offset
                );
            }
            n += 1;
        }
        Ok(n)
    }

    /// Refuses E8M0 NaN scales (0xFF) in a routed expert just read
    /// ([`crate::integrity::check_e8m0`]; its scales are in memory now).
    pub(super) fn check_scales(&self, key: Key, loaded: &Loaded) -> Result<()> {
        if !matches!(key, Key::Expert(..)) {
            return Ok(());
        }
        let g = self.group(key);
        for m in g
            .members
            .iter()
            .filter(|m| m.key.ends_with(".weight_scale"))
        {
            let p = loaded.range_pos[m.range] + m.offset as usize;
            let bytes: &[u8] = match &loaded.data {
                LoadedData::Buf(b) => b.as_ref(),
                LoadedData::Maps(maps) => &maps[m.range][..],
            };
            crate::integrity::check_e8m0(&m.key, &bytes[p..p + m.len as usize])?;
        }
        Ok(())
    }

    /// Drops an mmap range from memory (mapping and page cache) so mapped-resident
    /// bytes stay within the plan.
    pub(super) fn mmap_release(&self, key: Key) {
        if self.io != IoMode::Mmap {
            return;
        }
        let g = self.group(key);
        let ps = crate::io::pagecache::page_size() as u64;
        for r in &g.ranges {
            let f = &self.files[r.shard];
            // Only whole pages inside the range (neighbours may be pinned).
            let start = r.start.div_ceil(ps) * ps;
            let end = r.end / ps * ps;
            if end > start {
                if let Some(map) = f.map() {
                    // Unmap the 2 MiB-aligned window around the range too: faults map
                    // whole page-cache folios, which reach past the range. Dropping page
                    // table entries of a read-only file mapping never changes the bytes
                    // seen through it (the next access faults them in again).
                    let w = 2u64 << 20;
                    let (ws, we) = (
                        r.start / w * w,
                        (r.end.div_ceil(w) * w).min(map.len() as u64),
                    );
                    if we > ws {
                        // SAFETY: as below.
                        let _ = unsafe {
                            map.unchecked_advise_range(
                                memmap2::UncheckedAdvice::DontNeed,
                                ws as usize,
                                (we - ws) as usize,
                            )
                        };
                    }
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
}

/// An IO thread: pops jobs, reads and verifies them, publishes the entry.
pub(super) fn worker(shared: Arc<Shared>) {
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
            shared.check_scales(job.key, &l)?;
            Ok((l, n, v))
        });
        let mut g = lock(&shared);
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
