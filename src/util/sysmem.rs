//! Process memory as the kernel reports it (`/proc/self/status`, via the procfs crate).
//!
//! `VmRSS`/`VmHWM` include mapped file pages, so anonymous and file-backed resident
//! memory are reported separately (docs/io.md §3).

use serde::Serialize;

/// One reading of this process's memory, in bytes.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct MemReading {
    /// Peak resident set size (VmHWM).
    pub vm_hwm_bytes: u64,
    /// Current resident set size (VmRSS).
    pub vm_rss_bytes: u64,
    /// Anonymous resident memory (RssAnon).
    pub rss_anon_bytes: u64,
    /// File-backed resident memory (RssFile), e.g. mmap'ed weights.
    pub rss_file_bytes: u64,
}

/// Reads `/proc/self/status`; zeros if unavailable (non-Linux).
pub fn read() -> MemReading {
    let Ok(me) = procfs::process::Process::myself() else {
        return MemReading::default();
    };
    let Ok(s) = me.status() else {
        return MemReading::default();
    };
    let kb = |v: Option<u64>| v.unwrap_or(0) * 1024;
    MemReading {
        vm_hwm_bytes: kb(s.vmhwm),
        vm_rss_bytes: kb(s.vmrss),
        rss_anon_bytes: kb(s.rssanon),
        rss_file_bytes: kb(s.rssfile),
    }
}

/// `MemAvailable` of `/proc/meminfo` in bytes: the kernel's estimate of memory a new
/// allocation can get without swapping (free memory plus reclaimable page cache).
/// `None` when unknown (non-Linux, or a kernel without the field).
pub fn mem_available() -> Option<u64> {
    use procfs::Current;
    procfs::Meminfo::current().ok()?.mem_available
}

/// Tracks the peak of `RssAnon` over samples (the kernel keeps no anonymous peak).
#[derive(Debug, Default, Clone, Copy)]
pub struct PeakTracker {
    pub peak_rss_anon_bytes: u64,
    pub last: MemReading,
}

impl PeakTracker {
    /// Takes a sample.
    pub fn sample(&mut self) {
        self.last = read();
        self.peak_rss_anon_bytes = self.peak_rss_anon_bytes.max(self.last.rss_anon_bytes);
    }
}
