//! Memory as the budget sees it, sampled by the harness while a child run is alive.
//!
//! Every [`INTERVAL`] (every [`FIRST_INTERVAL`] during the run's first second, so
//! short runs are seen too) the harness reads the child's anonymous resident memory
//! (`RssAnon` in `/proc/<pid>/status`) and the page-cache residency of the model's
//! shard files (`mincore` over a fresh `PROT_READ` mapping of each file, which faults
//! nothing in), and, when the run is in a memory cgroup, the cgroup's current charge.
//! Their instantaneous sum is what a budget-limited machine would have to hold: the
//! engine's own accounting (what `--budget` limits) does not see the page cache that
//! `buffered` reads and `mmap` faults leave behind. The peak of that sum, taken
//! between samples, can miss spikes shorter than the interval; the engine's own
//! end-of-run reading (its anonymous peak plus the model's page cache it measured
//! before exiting) and its anonymous peak alone are also considered, and the
//! largest decides `over_budget` (see [`crate::sweep::record::memory::over_budget`]).

use std::path::{Path, PathBuf};
use std::time::Duration;

use memdial::io::pagecache::resident_bytes;

use super::cgroup::RunCgroup;
use crate::sweep::record::memory::MemSamples;

/// Time between samples.
pub const INTERVAL: Duration = Duration::from_millis(100);
/// Time between samples during the first second of a run.
pub const FIRST_INTERVAL: Duration = Duration::from_millis(10);

/// The interval after `elapsed` of run time.
pub fn interval_at(elapsed: Duration) -> Duration {
    if elapsed < Duration::from_secs(1) {
        FIRST_INTERVAL
    } else {
        INTERVAL
    }
}

/// `RssAnon` of `pid`, bytes (`None` once the process has exited).
pub fn rss_anon_bytes(pid: u32) -> Option<u64> {
    let t = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    t.lines().find_map(|l| {
        let v = l.strip_prefix("RssAnon:")?;
        let kb: u64 = v.trim().trim_end_matches("kB").trim().parse().ok()?;
        Some(kb * 1024)
    })
}

/// Sum of the page-cache residency of `files`, bytes (files that cannot be read
/// count 0).
pub fn page_cache_bytes(files: &[PathBuf]) -> u64 {
    files.iter().map(|f| resident_bytes(f).unwrap_or(0)).sum()
}

impl MemSamples {
    /// Takes one sample of child `pid` (`None` after it exited: page cache only).
    pub fn sample(&mut self, pid: Option<u32>, files: &[PathBuf], cg: Option<&RunCgroup>) {
        let anon = pid.and_then(rss_anon_bytes).unwrap_or(0);
        let pc = page_cache_bytes(files);
        self.samples += 1;
        self.anon_peak_bytes = self.anon_peak_bytes.max(anon);
        self.page_cache_peak_bytes = self.page_cache_peak_bytes.max(pc);
        self.anon_plus_page_cache_peak_bytes = self.anon_plus_page_cache_peak_bytes.max(anon + pc);
        if let (Some(cg), Some(pid)) = (cg, pid) {
            let dir = std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
                .ok()
                .and_then(|t| cg.scope_dir(&t));
            if let Some(d) = dir {
                self.record_cgroup(cg, &d);
            }
        }
    }

    fn record_cgroup(&mut self, cg: &RunCgroup, dir: &Path) {
        if let Some(u) = cg.usage_at(dir) {
            self.cgroup_usage_peak_bytes = Some(self.cgroup_usage_peak_bytes.unwrap_or(0).max(u));
        }
        if let Some(k) = cg.oom_kills_at(dir) {
            self.cgroup_oom_kills = Some(k);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_anon_is_read() {
        let v = std::hint::black_box(vec![1u8; 8 << 20]);
        let a = rss_anon_bytes(std::process::id()).unwrap();
        assert!(a >= 8 << 20, "{a}");
        drop(v);
        assert_eq!(rss_anon_bytes(u32::MAX), None);
    }
}
