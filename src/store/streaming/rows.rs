//! The streaming store's reads below whole groups and whole tensors: embedding rows on
//! demand (one read per distinct row of a forward, a copy in mmap mode), `lm_head` in the
//! plan's row blocks, a group's first use in a forward (with the group after it when
//! prefetching), and whole-tensor access to tensors the plan reads in parts.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context, Result};

use super::caches::Key;
use super::io::{self, lock};
use super::StreamingStore;
use crate::io::{AlignedBuf, IoMode};
use crate::store::{slice_rows, Bytes, WeightStore};

impl StreamingStore {
    /// The streamed group read after group `gi` (cyclically: after the last `lm_head`
    /// block comes the first streamed group of the next token); `None` when `gi` is
    /// the only streamed group.
    pub(super) fn next_streamed_group(&self, gi: usize) -> Option<usize> {
        let n = self.shared.plan.groups.len();
        let next = if gi + 1 < n {
            gi + 1
        } else {
            self.first_streamed
        };
        (next != gi && next < n).then_some(next)
    }

    /// Requests streamed group `gi` on its first use in this forward (and, with
    /// trunk prefetch, the group after it); then blocks until it is loaded.
    pub(super) fn load_group(&self, gi: usize) -> Result<Arc<io::Loaded>> {
        let mut g = lock(&self.shared);
        if g.touched.insert(gi) {
            g = self.request_blocking(g, Key::Group(gi));
            if self.opts.prefetch.trunk_ahead() {
                if let Some(n) = self.next_streamed_group(gi) {
                    self.request(&mut g, Key::Group(n), true);
                }
            }
        }
        self.wait(g, Key::Group(gi))
    }

    /// Block `[r0, …)` of row-blocked tensor `key` read through group `gi` (or pinned).
    pub(super) fn block_bytes(&self, key: &str, r0: usize, gi: usize) -> Result<Bytes> {
        let tb = self.shared.plan.groups[gi].read.tensor_bytes;
        if self.opts.record_trace.is_some() {
            // This forward computes logits (memdial records 1 row: the bytes do not depend on the count).
            if let Some(f) = lock(&self.shared).trace_forwards.last_mut() {
                f.logits = 1;
            }
        }
        if let Some(b) = self.pinned.get(&block_key(key, r0)) {
            let mut g = lock(&self.shared);
            g.metrics.trunk_request_bytes += tb;
            g.metrics.trunk_hit_bytes += tb;
            return Ok(b.clone());
        }
        lock(&self.shared).metrics.trunk_request_bytes += tb;
        let loaded = self.load_group(gi)?;
        let m = &self.shared.group(Key::Group(gi)).members[0];
        let (owner, p) = loaded.locate(m.range, m.offset);
        Ok(Bytes::new(owner, p, m.len as usize))
    }

    /// Reads `len` bytes at `offset` of shard `shard` outside the plan's buffers (one
    /// embedding row, or a whole tensor asked for by a tool); counts the bytes read.
    pub(super) fn read_loose(&self, shard: usize, offset: u64, len: u64) -> Result<Bytes> {
        let f = &self.shared.files[shard];
        let t0 = Instant::now();
        let (bytes, n) = if self.opts.io == IoMode::Mmap {
            // A copy, not a view of the mapping: faulting one row in would map the
            // whole page-cache folio around it (measured: ~340 KiB per row on `mini`),
            // memory the plan does not count.
            f.check_unchanged()?;
            let mut v = vec![0u8; len as usize];
            std::os::unix::fs::FileExt::read_exact_at(f.file(), &mut v, offset)
                .with_context(|| format!("reading {} at offset {offset}", f.path.display()))?;
            (Bytes::from_vec(v), len)
        } else {
            let mut b = AlignedBuf::new(f.buffer_len_for(offset, len));
            let (d, n) = self.shared.read_buf(shard, offset, len, &mut b)?;
            let owner: Arc<dyn AsRef<[u8]> + Send + Sync> = Arc::new(b);
            (Bytes::new(owner, d, len as usize), n)
        };
        let mut g = lock(&self.shared);
        g.metrics.bytes_read += n;
        g.metrics.reads += 1;
        g.metrics.embedding_bytes_read += n;
        let dt = t0.elapsed().as_secs_f64();
        g.metrics.io_wait_s += dt;
        g.metrics.io_wait_split.rows_s += dt;
        Ok(bytes)
    }

    pub(super) fn rows_on_demand(
        &self,
        layer: Option<usize>,
        name: &str,
        row_bytes: usize,
        rows: &[usize],
    ) -> Result<Vec<Bytes>> {
        let on_demand = self
            .embedding_loc
            .filter(|_| layer.is_none() && name == self.shared.plan.embedding_key);
        let Some((shard, off, len)) = on_demand else {
            let t = self.tensor(layer, name)?;
            return slice_rows(&t, name, row_bytes, rows);
        };
        // One read per distinct row of the call (a prefill chunk reads its rows together).
        let mut got: HashMap<usize, Bytes> = HashMap::new();
        let mut out = Vec::with_capacity(rows.len());
        for &r in rows {
            let end = (r as u64 + 1) * row_bytes as u64;
            if end > len {
                bail!(
                    "row {r} out of range for tensor {}{name} ({} rows)",
                    self.prefix,
                    len / row_bytes.max(1) as u64
                );
            }
            let b = match got.get(&r) {
                Some(b) => b.clone(),
                None => {
                    let b = self.read_loose(
                        shard,
                        off + r as u64 * row_bytes as u64,
                        row_bytes as u64,
                    )?;
                    got.insert(r, b.clone());
                    b
                }
            };
            out.push(b);
        }
        Ok(out)
    }

    pub(super) fn blocks_of(
        &self,
        layer: Option<usize>,
        name: &str,
        rows: usize,
    ) -> Vec<std::ops::Range<usize>> {
        match (layer, self.row_groups.get(name)) {
            (None, Some(b)) => b.iter().map(|(r, _)| r.clone()).collect(),
            #[allow(clippy::single_range_in_vec_init)] // one block: all rows
            _ => vec![0..rows],
        }
    }

    pub(super) fn block_of(
        &self,
        layer: Option<usize>,
        name: &str,
        rows: std::ops::Range<usize>,
        row_bytes: usize,
    ) -> Result<Bytes> {
        if let (None, Some(blocks)) = (layer, self.row_groups.get(name)) {
            let (_, gi) = blocks.iter().find(|(r, _)| *r == rows).with_context(|| {
                format!(
                    "rows {rows:?} of {}{name} are not a block of its plan",
                    self.prefix
                )
            })?;
            return self.block_bytes(name, rows.start, *gi);
        }
        let t = self.tensor(layer, name)?;
        if rows.end * row_bytes > t.len() {
            bail!(
                "rows {rows:?} out of range for tensor {}{name}",
                self.prefix
            );
        }
        Ok(t.slice(rows.start * row_bytes, rows.len() * row_bytes))
    }
}

/// Key of a pinned block of rows starting at row `r0` of tensor `key`.
pub(super) fn block_key(key: &str, r0: usize) -> String {
    format!("{key}#rows{r0}")
}
