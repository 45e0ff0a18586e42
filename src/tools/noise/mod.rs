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

mod procs;
pub use procs::ProcEntry;
use procs::{read_proc_table, userspace_ticks};

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
mod tests;
