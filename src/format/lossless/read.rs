//! Reading a logical range of a pack: coded blocks are read into staging buffers and
//! decoded into the caller's buffer (the buffer the model reads), the read of the next
//! chunk overlapping the decode of the one before it.
//!
//! Staging is a fixed pool ([`StagingPool`]: [`STAGING_BUFFERS`] buffers of
//! [`staging_buffer_bytes`]) shared by every reader of a store, so the memory plan can
//! count it exactly; a reader waits for a free buffer, and a decoder never does, so
//! readers cannot deadlock.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::sync_channel;
use std::sync::{Condvar, Mutex};
use std::time::Instant;

use anyhow::{bail, Result};

use super::codec;
use super::pack::{BlockRec, PackIndex};
use crate::io::{AlignedBuf, ShardFile};

/// Staging buffers of a store reading a pack.
pub const STAGING_BUFFERS: usize = 3;
/// Upper bound of one staging buffer, bytes.
pub const STAGING_MAX: u64 = 1 << 20;

/// Bytes of one staging buffer for `pack`: [`STAGING_MAX`], or less when no tensor's
/// blocks need that much (small models), but at least one block's stored size.
pub fn staging_buffer_bytes(pack: &PackIndex) -> u64 {
    let block = pack
        .blocks
        .iter()
        .map(|b| b.stored_len())
        .max()
        .unwrap_or(0);
    STAGING_MAX.min(pack.max_tensor_stored()).max(block)
}

/// The staging memory a store reading `pack` holds: [`STAGING_BUFFERS`] ×
/// [`staging_buffer_bytes`].
pub fn staging_bytes(pack: &PackIndex) -> u64 {
    STAGING_BUFFERS as u64 * staging_buffer_bytes(pack)
}

/// A fixed set of staging buffers.
pub struct StagingPool {
    free: Mutex<Vec<AlignedBuf>>,
    cv: Condvar,
    buf_bytes: usize,
}

impl StagingPool {
    /// [`STAGING_BUFFERS`] buffers of [`staging_buffer_bytes`] for `pack`.
    pub fn new(pack: &PackIndex) -> Self {
        let n = staging_buffer_bytes(pack) as usize;
        StagingPool {
            free: Mutex::new(AlignedBuf::carve(STAGING_BUFFERS, n)),
            cv: Condvar::new(),
            buf_bytes: n,
        }
    }

    fn take(&self) -> AlignedBuf {
        let mut g = self.free.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some(b) = g.pop() {
                return b;
            }
            g = self.cv.wait(g).unwrap_or_else(|p| p.into_inner());
        }
    }

    fn give(&self, b: AlignedBuf) {
        self.free.lock().unwrap_or_else(|p| p.into_inner()).push(b);
        self.cv.notify_one();
    }
}

/// What a logical read cost.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReadCost {
    /// Coded bytes read from the file.
    pub bytes_read: u64,
    /// Decoded bytes written.
    pub decoded_bytes: u64,
    /// CPU seconds spent checking CRCs and decoding.
    pub decode_s: f64,
}

/// A block's share of a logical read: decoded bytes `[from, to)` of block `block` go to
/// `dst[at..]`.
struct Piece {
    block: usize,
    from: usize,
    to: usize,
    at: usize,
}

/// The block pieces that cover logical bytes `[start, start + dst.len())` of `pack`,
/// in order; the bytes of `dst` no piece covers (between tensors) are zeroed.
fn pieces_of(pack: &PackIndex, start: u64, dst: &mut [u8]) -> Vec<Piece> {
    let end = start + dst.len() as u64;
    let bb = pack.header.block_bytes as u64;
    let mut pieces = Vec::new();
    let mut covered = 0usize;
    for t in pack.overlapping(start, end) {
        let a = t.offset.max(start);
        let b = (t.offset + t.len).min(end);
        let (k0, k1) = ((a - t.offset) / bb, (b - t.offset).div_ceil(bb));
        for k in k0..k1 {
            let blo = t.offset + k * bb;
            let from = a.max(blo) - blo;
            let to = b.min(blo + bb) - blo;
            let at = (blo + from - start) as usize;
            dst[covered..at].fill(0);
            covered = at + (to - from) as usize;
            pieces.push(Piece {
                block: t.first_block + k as usize,
                from: from as usize,
                to: to as usize,
                at,
            });
        }
    }
    dst[covered..].fill(0);
    pieces
}

/// Chunks of `pieces` (index ranges): runs whose blocks are contiguous in the file and
/// fit a staging buffer of `buf_bytes`, each read with one request.
fn chunks_of(pack: &PackIndex, pieces: &[Piece], buf_bytes: u64) -> Vec<std::ops::Range<usize>> {
    let mut chunks = Vec::new();
    let mut i = 0;
    while i < pieces.len() {
        let first = &pack.blocks[pieces[i].block];
        let mut j = i + 1;
        let mut span = first.stored_len();
        while j < pieces.len() {
            let b = &pack.blocks[pieces[j].block];
            let prev = &pack.blocks[pieces[j - 1].block];
            if b.offset != prev.offset + prev.stored_len() || span + b.stored_len() > buf_bytes {
                break;
            }
            span += b.stored_len();
            j += 1;
        }
        chunks.push(i..j);
        i = j;
    }
    chunks
}

/// Decodes logical bytes `[start, start + dst.len())` of `pack` (file `f`) into `dst`;
/// bytes between tensors are zero. Checks each block's CRC-32 before decoding.
///
/// Errors: a read error or short read (file and offset named), a CRC mismatch or a
/// block that does not decode (tensor and block named).
pub fn read_logical(
    pack: &PackIndex,
    f: &ShardFile,
    pool: &StagingPool,
    start: u64,
    dst: &mut [u8],
) -> Result<ReadCost> {
    let pieces = pieces_of(pack, start, dst);
    let chunks = chunks_of(pack, &pieces, pool.buf_bytes as u64);
    let span_of = |c: &std::ops::Range<usize>| {
        let a = pack.blocks[pieces[c.start].block].offset;
        let last = &pack.blocks[pieces[c.end - 1].block];
        (a, last.offset + last.stored_len() - a)
    };
    let read_chunk = |c: &std::ops::Range<usize>| -> Result<(AlignedBuf, u64)> {
        let (off, len) = span_of(c);
        let mut buf = pool.take();
        match crate::io::reader::read_range(f, off, len, &mut buf.full_mut()[..len as usize]) {
            Ok(_) => {
                buf.set_len(len as usize);
                Ok((buf, off))
            }
            Err(e) => {
                pool.give(buf);
                Err(e)
            }
        }
    };
    let mut cost = ReadCost::default();
    let mut scratch: Vec<u8> = Vec::new();
    // Decodes chunk `c` (read into `buf` from file offset `base`); returns decoded bytes.
    let mut decode_chunk =
        |c: &std::ops::Range<usize>, buf: &AlignedBuf, base: u64, dst: &mut [u8]| {
            let mut n = 0u64;
            for p in &pieces[c.clone()] {
                let rec = &pack.blocks[p.block];
                let s = (rec.offset - base) as usize;
                let coded = &buf.as_ref()[s..s + rec.coded_len as usize];
                decode_piece(pack, p, rec, coded, dst, &mut scratch)?;
                n += (p.to - p.from) as u64;
            }
            Ok::<u64, anyhow::Error>(n)
        };
    if chunks.len() <= 1 {
        for c in &chunks {
            let (buf, base) = read_chunk(c)?;
            cost.bytes_read += buf.len() as u64;
            let t0 = Instant::now();
            let r = decode_chunk(c, &buf, base, dst);
            cost.decode_s += t0.elapsed().as_secs_f64();
            pool.give(buf);
            cost.decoded_bytes += r?;
        }
        return Ok(cost);
    }
    // Several chunks: one thread reads ahead while this one decodes.
    let stop = AtomicBool::new(false);
    let (tx, rx) = sync_channel::<Result<(AlignedBuf, u64)>>(1);
    std::thread::scope(|s| -> Result<ReadCost> {
        let (chunks_r, read_chunk, stop) = (&chunks, &read_chunk, &stop);
        s.spawn(move || {
            for c in chunks_r {
                if stop.load(Ordering::Relaxed) {
                    return;
                }
                let r = read_chunk(c);
                let failed = r.is_err();
                if tx.send(r).is_err() || failed {
                    return;
                }
            }
        });
        let mut result = Ok(());
        for c in &chunks {
            let Ok(got) = rx.recv() else {
                result = Err(anyhow::anyhow!("internal: pack reader thread stopped"));
                break;
            };
            let (buf, base) = match got {
                Ok(x) => x,
                Err(e) => {
                    result = Err(e);
                    break;
                }
            };
            cost.bytes_read += buf.len() as u64;
            let t0 = Instant::now();
            let r = decode_chunk(c, &buf, base, dst);
            cost.decode_s += t0.elapsed().as_secs_f64();
            pool.give(buf);
            match r {
                Ok(n) => cost.decoded_bytes += n,
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        // After a failure: stop the reader and return the buffers it still sends.
        stop.store(true, Ordering::Relaxed);
        for (b, _) in rx.iter().flatten() {
            pool.give(b);
        }
        result.map(|_| cost)
    })
}

fn decode_piece(
    pack: &PackIndex,
    p: &Piece,
    rec: &BlockRec,
    coded: &[u8],
    dst: &mut [u8],
    scratch: &mut Vec<u8>,
) -> Result<()> {
    let name = || {
        pack.header
            .tensors
            .iter()
            .rev()
            .find(|t| t.first_block <= p.block)
            .map(|t| (t.name.as_str(), p.block - t.first_block))
            .unwrap_or(("?", 0))
    };
    if crc32fast::hash(coded) != rec.crc32 {
        let (t, k) = name();
        bail!(
            "lossless pack: block {k} of tensor {t} (file offset {}) fails its CRC-32 check (corrupt pack or disk)",
            rec.offset
        );
    }
    let whole = p.from == 0 && p.to == rec.decoded_len as usize;
    let out_len = p.to - p.from;
    let r = if whole {
        codec::decode(rec.kind, coded, &mut dst[p.at..p.at + out_len])
    } else {
        scratch.resize(rec.decoded_len as usize, 0);
        let r = codec::decode(rec.kind, coded, scratch);
        if r.is_ok() {
            dst[p.at..p.at + out_len].copy_from_slice(&scratch[p.from..p.to]);
        }
        r
    };
    r.map_err(|e| {
        let (t, k) = name();
        anyhow::anyhow!("lossless pack: block {k} of tensor {t} does not decode: {e}")
    })
}
