//! The noise sentinel: what the rest of the machine did while a run was measured.
//!
//! A run's timings mean what they say only if nothing else competed for the CPU or
//! the model's disk. Around a run the harness takes a [`Snapshot`] before and after
//! (the after one while the child still exists, so its own counters can be read) and
//! [`Noise::between`] turns the two into figures of *other* activity:
//!
//! - other processes' CPU time, counted from their own `/proc/<pid>/stat`: the sum
//!   over every user-space process of `utime + stime + cutime + cstime` (a child's
//!   time moves into its parent's `cutime` when it is reaped, so the sum does not drop
//!   when a build's compiler processes come and go), kernel threads skipped (their
//!   work — irqs, the run's own IO completions — is not a neighbour), the run's
//!   process tree and the measuring process left out. Where the process table cannot
//!   be read, the busy time of `/proc/stat` minus the run's and the measuring
//!   process's own. Both count in clock ticks, so a minimum absolute amount
//!   ([`Thresholds::other_cpu_min_s`]) keeps one stray tick from marking a short run.
//!   Not the load average, which counts the run's own IO threads waiting on the disk;
//! - what the run suffered, measured by the run itself where the engine reports it:
//!   the share of its decode time its compute threads waited on the run queue
//!   (`run_queue_wait_fraction` of `--metrics-json`, ns resolution; see
//!   `engine::step_clock`);
//! - CPU steal (`steal` of `/proc/stat`): time the hypervisor gave to someone else;
//! - pressure stall time (`/proc/pressure/{cpu,io}` "some" totals) where the kernel
//!   has PSI — reported, not thresholded by default, because a streaming run stalls on
//!   its own reads (io) and, with more threads than cores, on its own threads (cpu);
//! - reads on the model's block device not made by the run: `/proc/diskstats` sectors
//!   read on that device minus the run's `/proc/<pid>/io` `read_bytes` (and the
//!   measuring process's own). Writes are not counted: the sweep writes its own run
//!   directories, possibly to the same disk, and a write does not queue before a
//!   `O_DIRECT` read the way a competing read does.
//!
//! [`Thresholds`] decide when a run is `noisy`; every figure is also reported.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// CPU time of the whole machine from the `cpu` line of `/proc/stat`, in clock ticks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CpuTicks {
    /// user + nice + system + irq + softirq (guest time is inside user).
    pub busy: u64,
    /// steal.
    pub steal: u64,
}

/// One reading of the machine and, optionally, of the run's process.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    /// Monotonic time of the reading, seconds (any origin; only differences are used).
    pub at_s: f64,
    /// The machine's CPU ticks.
    pub cpu: CpuTicks,
    /// The measured process's utime + stime, ticks (`None`: not given or gone).
    pub run_ticks: Option<u64>,
    /// The measured process's pid, when given.
    pub run_pid: Option<u32>,
    /// The measuring process's own utime + stime, ticks.
    pub self_ticks: u64,
    /// `/proc/pressure/cpu` and `/proc/pressure/io` "some" totals, µs (`None`: no PSI).
    pub psi_some_us: Option<(u64, u64)>,
    /// Bytes read from the model's device (`/proc/diskstats` sectors × 512).
    pub device_read_bytes: Option<u64>,
    /// The measured process's `read_bytes` (`/proc/<pid>/io`).
    pub run_read_bytes: Option<u64>,
    /// The measuring process's own `read_bytes`.
    pub self_read_bytes: u64,
    /// Every process of the table (`None`: `/proc/<pid>/stat` files unreadable).
    pub procs: Option<Vec<ProcEntry>>,
    /// The measuring process's pid, as the `self` link of the process table names it.
    pub self_pid: Option<u32>,
}

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

/// Where the sentinel reads from: `/proc` on a real machine, a directory laid out like
/// it in tests.
#[derive(Debug, Clone)]
pub struct Sentinel {
    root: PathBuf,
    /// `major:minor` of the model's block device, as `/proc/diskstats` names it.
    device: Option<(u64, u64)>,
    /// Clock ticks per second (`sysconf(_SC_CLK_TCK)`).
    ticks_per_s: f64,
}

impl Sentinel {
    /// A sentinel over the real `/proc`, watching the block device that holds `model`
    /// (a file or directory; `None` or an unreadable path: no device figures).
    pub fn new(model: Option<&Path>) -> Sentinel {
        use std::os::unix::fs::MetadataExt;
        let device = model
            .and_then(|p| std::fs::metadata(p).ok())
            .map(|m| (libc_major(m.dev()), libc_minor(m.dev())));
        // SAFETY: sysconf has no preconditions.
        let tck = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        Sentinel {
            root: PathBuf::from("/proc"),
            device,
            ticks_per_s: if tck > 0 { tck as f64 } else { 100.0 },
        }
    }

    /// A sentinel over a `/proc`-like directory `root` (tests), device `major:minor`,
    /// `ticks_per_s` clock ticks per second.
    pub fn with_root(root: &Path, device: Option<(u64, u64)>, ticks_per_s: f64) -> Sentinel {
        Sentinel {
            root: root.to_path_buf(),
            device,
            ticks_per_s,
        }
    }

    /// Reads the machine and, when `pid` is given and still exists, the run's process.
    /// Missing files read as absent figures, never as an error: a machine without PSI
    /// or a device the kernel does not list still gets the other figures.
    pub fn snapshot(&self, pid: Option<u32>, at_s: f64) -> Snapshot {
        let read = |rel: &str| std::fs::read_to_string(self.root.join(rel)).ok();
        let cpu = read("stat").and_then(|s| parse_cpu(&s)).unwrap_or_default();
        let proc_ticks = |who: &str| read(&format!("{who}/stat")).and_then(|s| parse_pid_ticks(&s));
        let proc_read = |who: &str| read(&format!("{who}/io")).and_then(|s| parse_read_bytes(&s));
        let psi = match (read("pressure/cpu"), read("pressure/io")) {
            (Some(c), Some(i)) => parse_psi_some(&c).zip(parse_psi_some(&i)),
            _ => None,
        };
        let device_read_bytes = self
            .device
            .and_then(|d| read("diskstats").and_then(|s| parse_disk_read_bytes(&s, d)));
        let procs = read_proc_table(&self.root);
        let self_pid = std::fs::read_link(self.root.join("self"))
            .ok()
            .and_then(|l| l.to_str().and_then(|s| s.parse().ok()));
        let pid = pid.map(|p| p.to_string());
        Snapshot {
            procs,
            self_pid,
            at_s,
            cpu,
            run_ticks: pid.as_deref().and_then(proc_ticks),
            run_pid: pid.as_deref().and_then(|p| p.parse().ok()),
            self_ticks: proc_ticks("self").unwrap_or(0),
            psi_some_us: psi,
            device_read_bytes,
            run_read_bytes: pid.as_deref().and_then(proc_read),
            self_read_bytes: proc_read("self").unwrap_or(0),
        }
    }

    /// Clock ticks per second this sentinel converts with.
    pub fn ticks_per_s(&self) -> f64 {
        self.ticks_per_s
    }
}

/// Every `/proc/<pid>/stat` under `root` (processes that vanish while being read are
/// skipped); `None` when the directory cannot be listed or holds no process.
fn read_proc_table(root: &Path) -> Option<Vec<ProcEntry>> {
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
fn userspace_ticks(t: &[ProcEntry], skip_pid: Option<u32>, run: Option<u32>) -> u64 {
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

/// Other activity between two snapshots (see the module docs).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Noise {
    /// Wall time between the snapshots, seconds.
    pub wall_s: f64,
    /// CPU seconds of other processes (never negative).
    pub other_cpu_s: f64,
    /// Share of the run's decode time its compute threads waited on the run queue,
    /// as the run measured it (`None`: not reported; set by the caller from the
    /// run's metrics, see [`Noise::with_run_queue_wait`]).
    #[serde(default)]
    pub run_queue_wait_fraction: Option<f64>,
    /// CPU seconds stolen by the hypervisor.
    pub steal_s: f64,
    /// PSI cpu "some" stall seconds (`None`: no PSI).
    pub psi_cpu_some_s: Option<f64>,
    /// PSI io "some" stall seconds (`None`: no PSI).
    pub psi_io_some_s: Option<f64>,
    /// Bytes read from the model's device by others (`None`: no device figures).
    pub foreign_read_bytes: Option<u64>,
}

impl Noise {
    /// The noise from `before` to `after`, with `ticks_per_s` clock ticks per second.
    /// The run's ticks and reads count as its own only where both snapshots have them
    /// (a process that ended between them is all "other").
    pub fn between(before: &Snapshot, after: &Snapshot, ticks_per_s: f64) -> Noise {
        let d = |a: u64, b: u64| a.saturating_sub(b);
        let run = match (after.run_ticks, before.run_ticks) {
            (Some(a), Some(b)) => d(a, b),
            (Some(a), None) => a,
            _ => 0,
        };
        let own = d(after.self_ticks, before.self_ticks);
        let busy = d(after.cpu.busy, before.cpu.busy);
        let run_pid = after.run_pid;
        let other = match (&before.procs, &after.procs) {
            (Some(b), Some(a)) => d(
                userspace_ticks(a, after.self_pid, run_pid),
                userspace_ticks(b, before.self_pid, run_pid),
            ),
            _ => busy.saturating_sub(run + own),
        };
        let psi = after
            .psi_some_us
            .zip(before.psi_some_us)
            .map(|((ac, ai), (bc, bi))| (d(ac, bc) as f64 * 1e-6, d(ai, bi) as f64 * 1e-6));
        let run_reads = match (after.run_read_bytes, before.run_read_bytes) {
            (Some(a), Some(b)) => d(a, b),
            (Some(a), None) => a,
            _ => 0,
        };
        let own_reads = d(after.self_read_bytes, before.self_read_bytes);
        let foreign = after
            .device_read_bytes
            .zip(before.device_read_bytes)
            .map(|(a, b)| d(a, b).saturating_sub(run_reads + own_reads));
        Noise {
            wall_s: (after.at_s - before.at_s).max(0.0),
            other_cpu_s: other as f64 / ticks_per_s,
            steal_s: d(after.cpu.steal, before.cpu.steal) as f64 / ticks_per_s,
            psi_cpu_some_s: psi.map(|p| p.0),
            psi_io_some_s: psi.map(|p| p.1),
            foreign_read_bytes: foreign,
            run_queue_wait_fraction: None,
        }
    }

    /// This noise with the run's own run-queue wait share (from its metrics).
    pub fn with_run_queue_wait(mut self, fraction: Option<f64>) -> Noise {
        self.run_queue_wait_fraction = fraction.filter(|f| f.is_finite() && *f >= 0.0);
        self
    }

    /// Why this run is noisy under `t` (every threshold it exceeds, `; `-separated), or
    /// `None` when it is quiet. Runs shorter than a clock tick are never noisy (their
    /// CPU figures are all rounding).
    pub fn noisy(&self, t: &Thresholds) -> Option<String> {
        if self.wall_s.is_nan() || self.wall_s <= 0.0 {
            return None;
        }
        let mut why = Vec::new();
        let cores = self.other_cpu_s / self.wall_s;
        if cores > t.other_cpu_cores && self.other_cpu_s > t.other_cpu_min_s {
            why.push(format!(
                "other processes used {cores:.2} cores (threshold {})",
                t.other_cpu_cores
            ));
        }
        if let Some(w) = self
            .run_queue_wait_fraction
            .filter(|&w| w > t.run_queue_wait_fraction)
        {
            why.push(format!(
                "the run waited for a CPU {:.0} % of its decode time (threshold {:.0} %)",
                w * 100.0,
                t.run_queue_wait_fraction * 100.0
            ));
        }
        let steal = self.steal_s / self.wall_s;
        if steal > t.steal_cores {
            why.push(format!(
                "CPU steal {steal:.2} cores (threshold {})",
                t.steal_cores
            ));
        }
        if let (Some(limit), Some(c)) = (t.psi_cpu_some_fraction, self.psi_cpu_some_s) {
            let f = c / self.wall_s;
            if f > limit {
                why.push(format!(
                    "CPU pressure {:.0} % (threshold {:.0} %)",
                    f * 100.0,
                    limit * 100.0
                ));
            }
        }
        if let Some(b) = self
            .foreign_read_bytes
            .filter(|&b| b > t.foreign_read_bytes)
        {
            why.push(format!(
                "{} read from the model's disk by others (threshold {})",
                crate::util::units::fmt_bytes(b),
                crate::util::units::fmt_bytes(t.foreign_read_bytes)
            ));
        }
        (!why.is_empty()).then(|| why.join("; "))
    }
}

/// When a run counts as `noisy` (each settable in a sweep spec's `[noise]` table).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Thresholds {
    /// Other processes' average CPU use during the run, in cores. Default 0.25: a
    /// quarter of a core taken from a run that uses every core slows its compute by
    /// that share on a 2-core machine.
    pub other_cpu_cores: f64,
    /// Other processes' CPU time must also exceed this many seconds, default 0.05
    /// (five 10 ms ticks): the counters tick in 1/`CLK_TCK` s, and one stray tick on
    /// a 0.1 s run would otherwise read as a quarter of a core.
    pub other_cpu_min_s: f64,
    /// The run's own measure: the share of its decode time its compute threads waited
    /// on the run queue (`run_queue_wait_fraction`), default 0.25: a quiet 2-core
    /// machine shows 0.10–0.13 for a 2-thread run (its own IO and sampling threads
    /// share the cores), one busy core beside it 0.42. Not checked when
    /// the engine does not report it.
    pub run_queue_wait_fraction: f64,
    /// Average CPU steal during the run, in cores. Default 0.05.
    pub steal_cores: f64,
    /// PSI cpu "some" stall share of the run's wall time (`None`: not checked, the
    /// default — a run with more threads than cores stalls on itself).
    pub psi_cpu_some_fraction: Option<f64>,
    /// Bytes others read from the model's disk during the run. Default 16 MiB.
    pub foreign_read_bytes: u64,
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds {
            other_cpu_cores: 0.25,
            other_cpu_min_s: 0.05,
            run_queue_wait_fraction: 0.25,
            steal_cores: 0.05,
            psi_cpu_some_fraction: None,
            foreign_read_bytes: 16 << 20,
        }
    }
}

fn libc_major(dev: u64) -> u64 {
    libc::major(dev) as u64
}

fn libc_minor(dev: u64) -> u64 {
    libc::minor(dev) as u64
}

/// `cpu  user nice system idle iowait irq softirq steal guest guest_nice`.
fn parse_cpu(stat: &str) -> Option<CpuTicks> {
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|x| x.parse().ok())
        .collect::<Option<_>>()?;
    let at = |i: usize| v.get(i).copied().unwrap_or(0);
    Some(CpuTicks {
        busy: at(0) + at(1) + at(2) + at(5) + at(6),
        steal: at(7),
    })
}

/// utime + stime (fields 14 and 15) of `/proc/<pid>/stat`; the command name in
/// parentheses may hold spaces, so fields are counted after its closing `)`.
fn parse_pid_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // After ")": field 3 (state) is f[0], so field n is f[n - 3].
    Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
}

/// `read_bytes:` of `/proc/<pid>/io`.
fn parse_read_bytes(io: &str) -> Option<u64> {
    io.lines()
        .find_map(|l| l.strip_prefix("read_bytes:"))
        .and_then(|v| v.trim().parse().ok())
}

/// `total=` of the `some` line of a `/proc/pressure/*` file, µs.
fn parse_psi_some(p: &str) -> Option<u64> {
    let line = p.lines().find(|l| l.starts_with("some "))?;
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix("total="))
        .and_then(|v| v.parse().ok())
}

/// Sectors read (field 6) × 512 of device `major:minor` in `/proc/diskstats`.
fn parse_disk_read_bytes(ds: &str, (major, minor): (u64, u64)) -> Option<u64> {
    ds.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        let (ma, mi) = (
            f.first()?.parse::<u64>().ok()?,
            f.get(1)?.parse::<u64>().ok()?,
        );
        if (ma, mi) == (major, minor) {
            Some(f.get(5)?.parse::<u64>().ok()? * 512)
        } else {
            None
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes a fake `/proc` with the given figures.
    #[allow(clippy::too_many_arguments)]
    fn fake_proc(
        root: &Path,
        busy_user: u64,
        steal: u64,
        run: (u64, u64),
        own: (u64, u64),
        psi: (u64, u64),
        sectors: u64,
        run_read: u64,
    ) {
        std::fs::create_dir_all(root.join("42")).unwrap();
        std::fs::create_dir_all(root.join("self")).unwrap();
        std::fs::create_dir_all(root.join("pressure")).unwrap();
        std::fs::write(
            root.join("stat"),
            format!("cpu  {busy_user} 0 0 5000 7 0 0 {steal} 0 0\ncpu0 1 2 3 4 5 6 7 8 9 10\n"),
        )
        .unwrap();
        // A command name with a space and a parenthesis, as a real one may have.
        let stat = |u: u64, s: u64| {
            format!("42 (mem dial) R 1 42 42 0 -1 4194304 10 0 0 0 {u} {s} 0 0 20 0 3 0 100 0 0")
        };
        std::fs::write(root.join("42/stat"), stat(run.0, run.1)).unwrap();
        std::fs::write(root.join("self/stat"), stat(own.0, own.1)).unwrap();
        std::fs::write(
            root.join("42/io"),
            format!("rchar: 1\nwchar: 2\nread_bytes: {run_read}\nwrite_bytes: 9\n"),
        )
        .unwrap();
        std::fs::write(root.join("self/io"), "read_bytes: 0\n").unwrap();
        std::fs::write(
            root.join("pressure/cpu"),
            format!("some avg10=1.00 avg60=0 avg300=0 total={}\nfull avg10=0 avg60=0 avg300=0 total=0\n", psi.0),
        )
        .unwrap();
        std::fs::write(
            root.join("pressure/io"),
            format!("some avg10=1.00 avg60=0 avg300=0 total={}\n", psi.1),
        )
        .unwrap();
        std::fs::write(
            root.join("diskstats"),
            format!(
                " 254       0 vda 10 0 {sectors} 0 0 0 0 0 0 0 0\n 254       1 vda1 10 0 999999 0 0 0 0 0 0 0 0\n"
            ),
        )
        .unwrap();
    }

    /// Writes `/proc/PID/stat` of a process with parent `ppid`, group `pgrp`, `flags`
    /// and `utime stime cutime cstime` = `t`.
    fn fake_pid(root: &Path, pid: u32, ppid: u32, pgrp: u32, flags: u64, t: [u64; 4]) {
        std::fs::create_dir_all(root.join(pid.to_string())).unwrap();
        std::fs::write(
            root.join(format!("{pid}/stat")),
            format!(
                "{pid} (cc1 (x)) R {ppid} {pgrp} {pgrp} 0 -1 {flags} 10 0 0 0 {} {} {} {} 20 0 1 0 100 0 0",
                t[0], t[1], t[2], t[3]
            ),
        )
        .unwrap();
    }

    #[test]
    fn busy_neighbours_and_foreign_reads_make_a_run_noisy() {
        let root = std::env::temp_dir().join(format!("noise-{}", std::process::id()));
        let s = Sentinel::with_root(&root, Some((254, 0)), 100.0);
        fake_proc(&root, 1000, 10, (50, 10), (3, 1), (1_000_000, 0), 2048, 0);
        fake_pid(&root, 7, 1, 7, 0, [0, 0, 0, 0]);
        let before = s.snapshot(Some(42), 0.0);
        // 10 s later: the machine was busy 1500 ticks more; the run used 1000 (800 + 200),
        // the sentinel's own process 2, so others used 498 ticks = 4.98 s = 0.498 cores.
        // Steal 20 ticks = 0.2 s. PSI cpu 3 s, io 0.5 s. Device: 2048 → 4096 + 2048
        // sectors = 2 MiB read; the run read 1 MiB of it → 1 MiB foreign.
        fake_proc(
            &root,
            2500,
            30,
            (850, 210),
            (5, 1),
            (4_000_000, 500_000),
            6144,
            1 << 20,
        );
        // The neighbour's own counters say the same 498 ticks.
        fake_pid(&root, 7, 1, 7, 0, [400, 98, 0, 0]);
        let after = s.snapshot(Some(42), 10.0);
        let n = Noise::between(&before, &after, s.ticks_per_s());
        assert_eq!(n.wall_s, 10.0);
        assert!((n.other_cpu_s - 4.98).abs() < 1e-12, "{n:?}");
        assert!((n.steal_s - 0.2).abs() < 1e-12, "{n:?}");
        assert_eq!(n.psi_cpu_some_s, Some(3.0));
        assert_eq!(n.psi_io_some_s, Some(0.5));
        assert_eq!(n.foreign_read_bytes, Some(1 << 20));
        let why = n.noisy(&Thresholds::default()).unwrap();
        assert_eq!(why, "other processes used 0.50 cores (threshold 0.25)");
        let strict = Thresholds {
            foreign_read_bytes: 512 << 10,
            psi_cpu_some_fraction: Some(0.2),
            ..Thresholds::default()
        };
        let why = n.noisy(&strict).unwrap();
        assert!(why.contains("CPU pressure 30 % (threshold 20 %)"), "{why}");
        assert!(
            why.contains("1.00 MiB read from the model's disk by others"),
            "{why}"
        );
        std::fs::remove_dir_all(&root).unwrap();
    }

    /// Two `while :; do :; done` loops beside a 4 s run on a 2-core machine at 100
    /// ticks/s: the machine is busy 2 × 4 × 100 = 800 ticks more than the run's own
    /// 300 (250 user + 50 system) and the sentinel's 0, so others used 800 ticks =
    /// 8 s = 2.00 cores, eight times the default threshold.
    #[test]
    fn two_busy_loops_beside_a_run_make_it_noisy() {
        let root = std::env::temp_dir().join(format!("noise-loops-{}", std::process::id()));
        let s = Sentinel::with_root(&root, None, 100.0);
        fake_proc(&root, 1000, 0, (0, 0), (0, 0), (0, 0), 0, 0);
        fake_pid(&root, 7, 1, 7, 0, [0, 0, 0, 0]);
        fake_pid(&root, 8, 1, 8, 0, [0, 0, 0, 0]);
        let before = s.snapshot(Some(42), 0.0);
        fake_proc(&root, 2100, 0, (250, 50), (0, 0), (0, 0), 0, 0);
        fake_pid(&root, 7, 1, 7, 0, [400, 0, 0, 0]);
        fake_pid(&root, 8, 1, 8, 0, [400, 0, 0, 0]);
        let after = s.snapshot(Some(42), 4.0);
        let n = Noise::between(&before, &after, s.ticks_per_s());
        assert_eq!(n.other_cpu_s, 8.0, "{n:?}");
        assert_eq!(
            n.noisy(&Thresholds::default()).as_deref(),
            Some("other processes used 2.00 cores (threshold 0.25)")
        );
        std::fs::remove_dir_all(&root).unwrap();
    }

    /// The process table, by hand: over 2 s a compiler (pid 10, child of make 9) used
    /// 30 ticks and exited, reaped by make (its 30 + 20 earlier ticks move into make's
    /// cutime); a new compiler 11 used 40; a kernel thread (flag 0x200000) 500; the
    /// run's helper 43 (child of 42) 70 and a reparented process in the run's group 44
    /// 10; the measuring process 99 (the `self` link) 15. Others: 30 + 40 = 70 ticks =
    /// 0.7 s, while `/proc/stat` minus the run would have counted the kernel thread.
    #[test]
    fn other_cpu_comes_from_user_space_processes_own_counters() {
        let root = std::env::temp_dir().join(format!("noise-table-{}", std::process::id()));
        let s = Sentinel::with_root(&root, None, 100.0);
        fake_proc(&root, 1000, 0, (0, 0), (0, 0), (0, 0), 0, 0);
        std::fs::remove_dir_all(root.join("self")).unwrap();
        std::os::unix::fs::symlink("99", root.join("self")).unwrap();
        fake_pid(&root, 9, 1, 9, 0, [100, 0, 0, 0]);
        fake_pid(&root, 10, 9, 9, 0, [20, 0, 0, 0]);
        fake_pid(&root, 3, 2, 0, 0x0020_0040, [0, 0, 0, 0]);
        fake_pid(&root, 99, 1, 99, 0, [5, 0, 0, 0]);
        let before = s.snapshot(Some(42), 0.0);
        std::fs::remove_dir_all(root.join("10")).unwrap();
        fake_pid(&root, 9, 1, 9, 0, [100, 0, 50, 0]);
        fake_pid(&root, 11, 9, 9, 0, [30, 10, 0, 0]);
        fake_pid(&root, 3, 2, 0, 0x0020_0040, [0, 500, 0, 0]);
        fake_pid(&root, 43, 42, 42, 0, [60, 10, 0, 0]);
        fake_pid(&root, 44, 1, 42, 0, [10, 0, 0, 0]);
        fake_pid(&root, 99, 1, 99, 0, [20, 0, 0, 0]);
        let after = s.snapshot(Some(42), 2.0);
        let n = Noise::between(&before, &after, 100.0);
        assert!((n.other_cpu_s - 0.7).abs() < 1e-12, "{n:?}");
        std::fs::remove_dir_all(&root).unwrap();
    }

    /// One stray 10 ms tick on a 0.1 s run is 0.1 cores' worth of a neighbour but
    /// below the 0.05 s minimum; three ticks (0.3 cores) are above the cores threshold
    /// but still below the minimum; six are noisy.
    #[test]
    fn a_stray_tick_never_marks_a_short_run() {
        let n = |ticks: f64| Noise {
            wall_s: 0.1,
            other_cpu_s: ticks * 0.01,
            ..Noise::default()
        };
        let t = Thresholds::default();
        assert_eq!(n(1.0).noisy(&t), None);
        assert_eq!(n(3.0).noisy(&t), None);
        assert_eq!(
            n(6.0).noisy(&t).as_deref(),
            Some("other processes used 0.60 cores (threshold 0.25)")
        );
    }

    #[test]
    fn the_runs_own_wait_is_thresholded_only_when_reported() {
        let t = Thresholds::default();
        let n = Noise {
            wall_s: 2.0,
            ..Noise::default()
        };
        assert_eq!(n.noisy(&t), None);
        assert_eq!(n.with_run_queue_wait(Some(0.13)).noisy(&t), None);
        assert_eq!(
            n.with_run_queue_wait(Some(0.40)).noisy(&t).as_deref(),
            Some("the run waited for a CPU 40 % of its decode time (threshold 25 %)")
        );
        assert_eq!(
            n.with_run_queue_wait(Some(f64::NAN))
                .run_queue_wait_fraction,
            None
        );
    }

    #[test]
    fn a_quiet_run_is_quiet_and_missing_files_are_absent_figures() {
        let root = std::env::temp_dir().join(format!("noise-quiet-{}", std::process::id()));
        std::fs::create_dir_all(&root).unwrap();
        let s = Sentinel::with_root(&root, Some((254, 0)), 100.0);
        // Nothing there at all: every figure absent or zero, nothing noisy.
        let a = s.snapshot(Some(42), 0.0);
        let b = s.snapshot(Some(42), 1.0);
        let n = Noise::between(&a, &b, 100.0);
        assert_eq!(n.other_cpu_s, 0.0);
        assert_eq!(n.psi_cpu_some_s, None);
        assert_eq!(n.foreign_read_bytes, None);
        assert_eq!(n.noisy(&Thresholds::default()), None);
        // The run alone: all busy ticks are its own.
        fake_proc(&root, 100, 0, (10, 0), (0, 0), (0, 0), 0, 0);
        let a = s.snapshot(Some(42), 0.0);
        fake_proc(&root, 300, 0, (190, 20), (0, 0), (0, 0), 2048, 1 << 20);
        let b = s.snapshot(Some(42), 1.0);
        let n = Noise::between(&a, &b, 100.0);
        assert_eq!(n.other_cpu_s, 0.0);
        assert_eq!(n.foreign_read_bytes, Some(0));
        assert_eq!(n.noisy(&Thresholds::default()), None);
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn the_real_proc_gives_figures_for_this_process() {
        let s = Sentinel::new(Some(Path::new(env!("CARGO_MANIFEST_DIR"))));
        let a = s.snapshot(Some(std::process::id()), 0.0);
        assert!(a.cpu.busy > 0, "{a:?}");
        assert!(a.run_ticks.is_some(), "{a:?}");
    }
}
