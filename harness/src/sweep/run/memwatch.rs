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
//! largest decides `over_budget` (see [`over_budget`]).

use std::path::{Path, PathBuf};
use std::time::Duration;

use memdial::io::pagecache::resident_bytes;

use super::cgroup::RunCgroup;

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

/// Peaks over the samples of one run. Bytes throughout.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemSamples {
    /// Samples taken.
    pub samples: u64,
    /// Peak page-cache residency of the model's shard files.
    pub page_cache_peak_bytes: u64,
    /// Peak `RssAnon` of the child.
    pub anon_peak_bytes: u64,
    /// Peak of `RssAnon + page-cache residency` taken at the same sample.
    pub anon_plus_page_cache_peak_bytes: u64,
    /// Peak charge of the run's memory cgroup (`memory.usage_in_bytes` /
    /// `memory.current`), when there is one.
    pub cgroup_usage_peak_bytes: Option<u64>,
    /// OOM kills last read from the cgroup's files while it existed.
    pub cgroup_oom_kills: Option<u64>,
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

/// Whether an unenforced finished run held more than `budget + slack` bytes as the
/// budget sees them: the largest of `seen` (the sampled `anon + page cache` peak,
/// the engine's end-of-run `anon peak + page cache`, its anonymous peak) against
/// `budget + slack`. Runs in a memory cgroup are never over budget (the kernel
/// holds them to it).
pub fn over_budget(enforced: bool, seen: &[Option<u64>], budget: u64, slack: u64) -> bool {
    if enforced {
        return false;
    }
    let m = seen.iter().map(|x| x.unwrap_or(0)).max().unwrap_or(0);
    m > budget.saturating_add(slack)
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

    #[test]
    fn over_budget_rule() {
        assert!(!over_budget(true, &[Some(10_000)], 100, 10));
        assert!(!over_budget(false, &[Some(110), Some(50)], 100, 10));
        assert!(over_budget(false, &[Some(111), Some(50)], 100, 10));
        assert!(over_budget(false, &[Some(20), None, Some(200)], 100, 10));
        assert!(!over_budget(false, &[None, None], 100, 10));
    }
}
