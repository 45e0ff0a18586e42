//! Reading a run cgroup's memory: usage, peak and OOM kills.

use std::path::Path;

use super::base::{read_u64, Mode, RunCgroup};

impl RunCgroup {
    /// Memory charged now (anon + page cache), bytes, from `dir`.
    pub fn usage_at(&self, dir: &Path) -> Option<u64> {
        match self.mode {
            Mode::V1(_) => read_u64(&dir.join("memory.usage_in_bytes")),
            _ => read_u64(&dir.join("memory.current")),
        }
    }

    /// Peak memory charged (anon + page cache), bytes, when the kernel reports it
    /// (v1/v2 only; a systemd scope is gone once the child exits).
    pub fn peak_bytes(&self) -> Option<u64> {
        let f = match self.mode {
            Mode::V2(_) => "memory.peak",
            Mode::V1(_) => "memory.max_usage_in_bytes",
            Mode::SystemdRun(_) => return None,
        };
        read_u64(&self.dir()?.join(f))
    }

    /// OOM kills inside the cgroup in `dir`.
    pub fn oom_kills_at(&self, dir: &Path) -> Option<u64> {
        let (f, key) = match self.mode {
            Mode::V1(_) => ("memory.oom_control", "oom_kill"),
            _ => ("memory.events", "oom_kill"),
        };
        let t = std::fs::read_to_string(dir.join(f)).ok()?;
        t.lines().find_map(|l| {
            let (k, v) = l.split_once(' ')?;
            (k == key).then(|| v.trim().parse().ok()).flatten()
        })
    }

    /// OOM kills inside the cgroup (v1/v2).
    pub fn oom_kills(&self) -> Option<u64> {
        self.oom_kills_at(&self.dir()?)
    }
}

/// Hint attached to a run OOM-killed in its cgroup.
pub fn oom_hint(budget: u64, slack: u64) -> String {
    use memdial::util::units::fmt_bytes;
    format!(
        "OOM-killed in its memory cgroup (limit = budget {} + cgroup_slack {}): the process needs more than the slack above its budget; raise `cgroup_slack` in the spec",
        fmt_bytes(budget),
        fmt_bytes(slack)
    )
}
