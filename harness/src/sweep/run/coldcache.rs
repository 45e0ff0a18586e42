//! Cold page cache before every run: evict every shard of the model, then verify
//! with `mincore` that nothing is resident, and record what was found.

use std::path::PathBuf;

use anyhow::Result;
use memdial::io::pagecache::{evict, resident_bytes};

/// Result of making the model cold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cold {
    /// Files evicted.
    pub files: usize,
    /// Bytes still resident after eviction (0 = verified cold).
    pub resident_bytes: u64,
}

impl Cold {
    /// True when no page of any shard is resident.
    pub fn verified(&self) -> bool {
        self.resident_bytes == 0
    }
}

/// Evicts every file (fsync, `posix_fadvise(DONTNEED)`; the harness itself maps
/// nothing, and the previous child has exited, so no mapping pins pages), retries
/// once if pages survive (writeback racing), and measures residency with `mincore`.
pub fn make_cold(files: &[PathBuf]) -> Result<Cold> {
    let mut resident = 0;
    for attempt in 0..2 {
        for f in files {
            evict(f)?;
        }
        resident = 0;
        for f in files {
            resident += resident_bytes(f)?;
        }
        if resident == 0 || attempt == 1 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    Ok(Cold {
        files: files.len(),
        resident_bytes: resident,
    })
}
