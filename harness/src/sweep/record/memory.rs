//! Memory as a run's record holds it: the harness's samples of a child's memory
//! ([`MemSamples`], taken by `run::memwatch`) and the rule that calls an unenforced
//! run over its budget.

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
    fn over_budget_rule() {
        assert!(!over_budget(true, &[Some(10_000)], 100, 10));
        assert!(!over_budget(false, &[Some(110), Some(50)], 100, 10));
        assert!(over_budget(false, &[Some(111), Some(50)], 100, 10));
        assert!(over_budget(false, &[Some(20), None, Some(200)], 100, 10));
        assert!(!over_budget(false, &[None, None], 100, 10));
    }
}
