//! Cold sequential read bandwidth of a file, with and without the page cache.
//!
//! Shared by `memdial sweep` (its report's environment section) and a future
//! `memdial iobench`. Both functions evict the file from the page cache first
//! (fsync, then `posix_fadvise(DONTNEED)`), read it sequentially from offset 0 in
//! 4 MiB requests at queue depth 1 up to `max_bytes`, and evict it again afterwards
//! so the caller starts cold. QD-1 sequential reads are a lower bound for what a
//! pread thread pool achieves; they are what the report needs to compare runs on
//! different machines.

use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::time::Instant;

use anyhow::{bail, Context, Result};

use super::aligned::AlignedBuf;
use super::pagecache::evict;

/// Request size of the bandwidth probes, bytes.
pub const CHUNK_BYTES: usize = 4 << 20;

/// A measured read: bytes and seconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ReadRate {
    /// Bytes read.
    pub bytes: u64,
    /// Wall time, seconds.
    pub seconds: f64,
}

impl ReadRate {
    /// Throughput in GB/s (10^9 bytes per second); 0 when nothing was read.
    pub fn gbps(&self) -> f64 {
        if self.seconds > 0.0 {
            self.bytes as f64 / self.seconds / 1e9
        } else {
            0.0
        }
    }
}

/// Cold O_DIRECT sequential read of up to `max_bytes` of `path` (4 MiB requests,
/// 4096-aligned buffer), in GB/s. Errors when the filesystem refuses O_DIRECT.
pub fn direct_cold_gbps(path: &Path, max_bytes: u64) -> Result<f64> {
    Ok(direct_cold_read(path, max_bytes)?.gbps())
}

/// Cold buffered (page cache) sequential read of up to `max_bytes` of `path`
/// (4 MiB `read`s, kernel read-ahead on), in GB/s.
pub fn buffered_cold_gbps(path: &Path, max_bytes: u64) -> Result<f64> {
    Ok(buffered_cold_read(path, max_bytes)?.gbps())
}

/// As [`direct_cold_gbps`], returning bytes and seconds.
pub fn direct_cold_read(path: &Path, max_bytes: u64) -> Result<ReadRate> {
    evict(path)?;
    let f = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)
        .with_context(|| format!("{}: cannot open with O_DIRECT", path.display()))?;
    let len = f.metadata()?.len().min(max_bytes);
    let mut buf = AlignedBuf::new(CHUNK_BYTES);
    let t0 = Instant::now();
    let mut off = 0u64;
    while off < len {
        let want = ((len - off) as usize).min(CHUNK_BYTES).div_ceil(4096) * 4096;
        let n = f
            .read_at(&mut buf.full_mut()[..want], off)
            .with_context(|| format!("{}: O_DIRECT read at {off}", path.display()))?;
        if n == 0 {
            break;
        }
        off += n as u64;
    }
    let seconds = t0.elapsed().as_secs_f64();
    evict(path)?;
    Ok(ReadRate {
        bytes: off.min(len),
        seconds,
    })
}

/// As [`buffered_cold_gbps`], returning bytes and seconds.
pub fn buffered_cold_read(path: &Path, max_bytes: u64) -> Result<ReadRate> {
    evict(path)?;
    let (resident, _) = super::pagecache::residency(path)?;
    if resident > 0 {
        bail!(
            "{}: {resident} pages stay in the page cache after DONTNEED (tmpfs?); a cold read cannot be measured",
            path.display()
        );
    }
    let mut f = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let len = f.metadata()?.len().min(max_bytes);
    let mut buf = vec![0u8; CHUNK_BYTES];
    let t0 = Instant::now();
    let mut done = 0u64;
    while done < len {
        let want = ((len - done) as usize).min(CHUNK_BYTES);
        let n = f
            .read(&mut buf[..want])
            .with_context(|| format!("{}: read at {done}", path.display()))?;
        if n == 0 {
            break;
        }
        done += n as u64;
    }
    let seconds = t0.elapsed().as_secs_f64();
    evict(path)?;
    Ok(ReadRate {
        bytes: done,
        seconds,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_whole_small_file() {
        let dir = std::env::current_dir()
            .unwrap()
            .join("target")
            .join("bench-test");
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join(format!("b{}", std::process::id()));
        std::fs::write(&p, vec![1u8; (1 << 20) + 100]).unwrap();
        if let Ok(r) = buffered_cold_read(&p, u64::MAX) {
            assert_eq!(r.bytes, (1 << 20) + 100);
            assert!(r.gbps() > 0.0);
        }
        if let Ok(r) = direct_cold_read(&p, 1 << 19) {
            assert_eq!(r.bytes, 1 << 19);
        }
        std::fs::remove_file(&p).unwrap();
    }
}
