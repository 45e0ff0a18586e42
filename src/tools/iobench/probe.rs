//! Cold sequential read bandwidth of a file, with and without the page cache.
//!
//! Used by `memdial sweep` (its report's environment section). Thin wrappers of
//! [`super::sequential_cold_read`], the same code `memdial iobench` runs:
//! the file is evicted from the page cache (fsync, then `posix_fadvise(DONTNEED)`)
//! and the eviction verified with mincore, then read sequentially from offset 0 in
//! 4 MiB requests at queue depth 1 up to `max_bytes`, and evicted again afterwards
//! so the caller starts cold. QD-1 sequential reads are a lower bound for what a
//! pread thread pool achieves; they are what the report needs to compare runs on
//! different machines (`memdial iobench` measures the engine's own requests).

use std::path::Path;

use anyhow::Result;

use super::{sequential_cold_read, SEQUENTIAL_REQUEST_BYTES};
use crate::io::IoMode;

/// Request size of the bandwidth probes, bytes.
pub const CHUNK_BYTES: usize = SEQUENTIAL_REQUEST_BYTES as usize;

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
/// 4096-aligned buffer), in GB/s. Errors when the filesystem does not support
/// direct IO.
pub fn direct_cold_gbps(path: &Path, max_bytes: u64) -> Result<f64> {
    Ok(direct_cold_read(path, max_bytes)?.gbps())
}

/// Cold buffered (page cache) sequential read of up to `max_bytes` of `path`
/// (4 MiB `pread`s, kernel read-ahead on), in GB/s. Errors when the page cache
/// cannot be emptied first (tmpfs).
pub fn buffered_cold_gbps(path: &Path, max_bytes: u64) -> Result<f64> {
    Ok(buffered_cold_read(path, max_bytes)?.gbps())
}

fn rate(path: &Path, mode: IoMode, max_bytes: u64) -> Result<ReadRate> {
    let r = sequential_cold_read(path, mode, max_bytes)?;
    Ok(ReadRate {
        bytes: r.bytes,
        seconds: r.elapsed_s,
    })
}

/// As [`direct_cold_gbps`], returning bytes and seconds.
pub fn direct_cold_read(path: &Path, max_bytes: u64) -> Result<ReadRate> {
    rate(path, IoMode::Direct, max_bytes)
}

/// As [`buffered_cold_gbps`], returning bytes and seconds.
pub fn buffered_cold_read(path: &Path, max_bytes: u64) -> Result<ReadRate> {
    rate(path, IoMode::Buffered, max_bytes)
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
