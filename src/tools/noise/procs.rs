//! The process table the sentinel sums other processes' CPU time over: every
//! `/proc/<pid>/stat`, with the run's tree, the measuring process and kernel threads
//! told apart.

use std::path::Path;

/// One process of the table, from `/proc/<pid>/stat`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProcEntry {
    /// Process id.
    pub pid: u32,
    /// Parent's pid.
    pub ppid: u32,
    /// Process group.
    pub pgrp: u32,
    /// `utime + stime + cutime + cstime`, clock ticks: its own CPU time and that of its
    /// reaped children.
    pub ticks: u64,
    /// A kernel thread (`PF_KTHREAD` in its flags).
    pub kthread: bool,
}

/// Every `/proc/<pid>/stat` under `root` (processes that vanish while being read are
/// skipped); `None` when the directory cannot be listed or holds no process.
pub(super) fn read_proc_table(root: &Path) -> Option<Vec<ProcEntry>> {
    let mut v = Vec::new();
    for e in std::fs::read_dir(root).ok()?.flatten() {
        let name = e.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        if let Some(p) = std::fs::read_to_string(e.path().join("stat"))
            .ok()
            .and_then(|s| parse_proc_entry(pid, &s))
        {
            v.push(p);
        }
    }
    (!v.is_empty()).then_some(v)
}

/// The kernel's `PF_KTHREAD` process flag.
const PF_KTHREAD: u64 = 0x0020_0000;

/// ppid (field 4), pgrp (5), flags (9), utime..cstime (14–17) of a `/proc/<pid>/stat`.
fn parse_proc_entry(pid: u32, stat: &str) -> Option<ProcEntry> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // After ")": field n is f[n - 3].
    let num = |n: usize| f.get(n - 3).and_then(|x| x.parse::<u64>().ok());
    let flags = num(9)?;
    Some(ProcEntry {
        pid,
        ppid: num(4)? as u32,
        pgrp: num(5)? as u32,
        ticks: num(14)? + num(15)? + num(16)? + num(17)?,
        kthread: flags & PF_KTHREAD != 0 || pid == 2 || num(4)? == 2,
    })
}

/// Σ ticks of the user-space processes of `t`, leaving out `skip_pid` and, when
/// `run` is given, the run's process group and every descendant of it.
pub(super) fn userspace_ticks(t: &[ProcEntry], skip_pid: Option<u32>, run: Option<u32>) -> u64 {
    let parent: std::collections::HashMap<u32, u32> = t.iter().map(|p| (p.pid, p.ppid)).collect();
    let in_run = |p: &ProcEntry| {
        let Some(r) = run else { return false };
        if p.pid == r || p.pgrp == r {
            return true;
        }
        let mut at = p.ppid;
        for _ in 0..64 {
            if at == r {
                return true;
            }
            match parent.get(&at) {
                Some(&pp) if pp != at && at > 1 => at = pp,
                _ => return false,
            }
        }
        false
    };
    t.iter()
        .filter(|p| !p.kthread && Some(p.pid) != skip_pid && !in_run(p))
        .map(|p| p.ticks)
        .sum()
}
