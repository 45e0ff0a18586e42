//! Memory-cgroup enforcement of the budget (on by default in `memdial sweep`).
//!
//! Each child `memdial run` starts inside a fresh memory cgroup whose limit is the
//! budget plus the spec's `cgroup_slack`, with swap off, so `buffered` and `mmap`
//! runs are charged for the page cache they pull in and cannot borrow memory the
//! budget does not count. Where the per-run cgroup is created:
//!
//! - **cgroup v1** (a `memory` line in `/proc/self/cgroup`): as a child of this
//!   process's *own* memory cgroup (`<mount>/memory/<own path>/memdial-sweep-…`),
//!   the standard way to nest limits inside a container or sandbox; the hierarchy
//!   root is never needed. Limits: `memory.limit_in_bytes`,
//!   `memory.memsw.limit_in_bytes` (when swap accounting exists),
//!   `memory.swappiness = 0`; peak from `memory.max_usage_in_bytes`, OOM kills from
//!   `memory.oom_control`.
//! - **cgroup v2** (`0::/path`): as a child of this process's own cgroup, once the
//!   memory controller is enabled in its `cgroup.subtree_control`. v2 forbids
//!   processes in a cgroup that delegates controllers ("no internal processes"), so
//!   the harness first moves itself into a leaf `memdial-harness-<pid>`; when other
//!   processes share the cgroup this is impossible and the next option is tried.
//!   Limits: `memory.max`, `memory.swap.max = 0`; peak `memory.peak`, OOM kills
//!   `memory.events`.
//! - **systemd-run** (systemd is PID 1, `/run/systemd/system` exists):
//!   `systemd-run --scope -p MemoryMax=… -p MemorySwapMax=0 -- memdial run …`.
//!
//! Otherwise runs go on unenforced and every row says why (`cgroup_reason`).
//! Cgroups of earlier sweeps whose harness is gone are removed at start
//! ([`clean_stale`]). Measured on the development machine (cgroup v1, nested,
//! `mini` at the floor, 12 tokens): the process needs about 16 MiB above its budget
//! (binary pages, thread stacks, kernel memory charged to the cgroup) and is
//! OOM-killed with 8 MiB of slack; the default slack of 32 MiB is twice that.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

mod sampling;
mod systemd;
#[cfg(test)]
mod tests;
mod v1;
mod v2;

pub use sampling::oom_hint;

/// Prefix of per-run cgroup (and systemd unit) names: `memdial-sweep-<pid>-<tag>`.
pub const RUN_PREFIX: &str = "memdial-sweep-";
/// Prefix of the v2 leaf the harness moves itself into: `memdial-harness-<pid>`.
pub const LEAF_PREFIX: &str = "memdial-harness-";

/// Where per-run cgroups are made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    /// cgroup v2: children of this directory (our own cgroup, memory delegated).
    V2(PathBuf),
    /// cgroup v1: children of this directory (our own memory cgroup).
    V1(PathBuf),
    /// `systemd-run --scope`; the path is the cgroup v2 mount used to find the
    /// scope's files while it runs.
    SystemdRun(PathBuf),
}

/// Outcome of detection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Support {
    /// Enforcement is possible.
    Available(Mode),
    /// Not enforced, with the reason.
    Unavailable(String),
}

impl Support {
    /// Human description for the report.
    pub fn describe(&self) -> String {
        match self {
            Support::Available(Mode::V2(p)) => {
                format!("enforced (cgroup v2, children of {})", p.display())
            }
            Support::Available(Mode::V1(p)) => {
                format!("enforced (cgroup v1, children of {})", p.display())
            }
            Support::Available(Mode::SystemdRun(_)) => {
                "enforced (systemd-run --scope, MemoryMax + MemorySwapMax=0)".into()
            }
            Support::Unavailable(r) => format!("not enforced: {r}"),
        }
    }
}

/// The facts detection reads, injectable for tests against a fake cgroup filesystem.
#[derive(Debug, Clone)]
pub struct Env {
    /// Contents of `/proc/self/cgroup`.
    pub self_cgroup: String,
    /// The cgroup mount root (`/sys/fs/cgroup`).
    pub root: PathBuf,
    /// Effective uid 0.
    pub root_user: bool,
    /// systemd runs (`/run/systemd/system` exists) and `systemd-run` is on PATH.
    pub systemd: bool,
    /// This process's id (moved into the v2 leaf).
    pub pid: u32,
}

impl Env {
    /// The real machine.
    pub fn current() -> Env {
        Env {
            self_cgroup: std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default(),
            root: PathBuf::from("/sys/fs/cgroup"),
            // SAFETY: geteuid has no preconditions.
            root_user: unsafe { libc::geteuid() == 0 },
            systemd: Path::new("/run/systemd/system").is_dir() && on_path("systemd-run"),
            pid: std::process::id(),
        }
    }
}

fn on_path(exe: &str) -> bool {
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(exe).is_file()))
        .unwrap_or(false)
}

/// Detects (and for cgroup v2 prepares) enforcement on this machine.
pub fn detect() -> Support {
    detect_in(&Env::current())
}

/// The path of the controller line in `/proc/self/cgroup` whose controller list
/// satisfies `want` (v1: contains `memory`; v2: the `0::` line).
pub(super) fn own_path(self_cgroup: &str, v2: bool) -> Option<String> {
    self_cgroup.lines().find_map(|l| {
        let mut it = l.splitn(3, ':');
        let id = it.next()?;
        let ctrls = it.next()?;
        let path = it.next()?;
        let hit = if v2 {
            id == "0" && ctrls.is_empty()
        } else {
            ctrls.split(',').any(|c| c == "memory")
        };
        hit.then(|| path.to_string())
    })
}

pub(super) fn join_cgroup(base: &Path, path: &str) -> PathBuf {
    let rel = path.trim_start_matches('/');
    if rel.is_empty() {
        base.to_path_buf()
    } else {
        base.join(rel)
    }
}

/// Makes and removes a probe child of `parent`, proving per-run cgroups can be made.
pub(super) fn probe(parent: &Path, pid: u32) -> std::result::Result<(), String> {
    let d = parent.join(format!("{RUN_PREFIX}{pid}-probe"));
    let _ = std::fs::remove_dir(&d);
    std::fs::create_dir(&d)
        .map_err(|e| format!("cannot create a child cgroup in {}: {e}", parent.display()))?;
    let _ = std::fs::remove_dir(&d);
    Ok(())
}

/// [`detect`] against `env`. For cgroup v1 it only probes (mkdir + rmdir of a child);
/// for cgroup v2 it may move this process into a leaf and enable the memory
/// controller for the children of its own cgroup.
pub fn detect_in(env: &Env) -> Support {
    if !env.root_user {
        return Support::Unavailable("needs root (memory cgroups are created per run)".into());
    }
    if let Some(path) = own_path(&env.self_cgroup, false) {
        return v1::detect(env, &path);
    }
    let v2_reason = match own_path(&env.self_cgroup, true) {
        Some(path) => match v2::prepare(env, &path) {
            Ok(m) => return Support::Available(m),
            Err(r) => r,
        },
        None => "no memory cgroup in /proc/self/cgroup".to_string(),
    };
    if env.systemd {
        for base in [env.root.clone(), env.root.join("unified")] {
            if base.join("cgroup.controllers").exists() {
                return Support::Available(Mode::SystemdRun(base));
            }
        }
    }
    Support::Unavailable(format!("{v2_reason}; systemd-run is not available"))
}

/// Removes per-run cgroups (and v2 harness leaves) left by sweeps whose harness no
/// longer runs. A cgroup still holding a process is not removable and stays.
/// Returns the number removed.
pub fn clean_stale(mode: &Mode) -> usize {
    let parent = match mode {
        Mode::V1(p) | Mode::V2(p) => p,
        Mode::SystemdRun(_) => return 0, // systemd removes scopes itself
    };
    let me = std::process::id();
    let mut n = 0;
    for e in std::fs::read_dir(parent).into_iter().flatten().flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        let Some(rest) = name
            .strip_prefix(RUN_PREFIX)
            .or_else(|| name.strip_prefix(LEAF_PREFIX))
        else {
            continue;
        };
        let pid: u32 = match rest.split('-').next().and_then(|p| p.parse().ok()) {
            Some(p) => p,
            None => continue,
        };
        if pid == me || Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        if std::fs::remove_dir(e.path()).is_ok() {
            n += 1;
        }
    }
    n
}

/// A per-run memory cgroup; removed on drop.
#[derive(Debug)]
pub struct RunCgroup {
    mode: Mode,
    name: String,
    /// The limit written, bytes.
    pub limit_bytes: u64,
}

pub(super) fn write(p: &Path, v: &str) -> Result<()> {
    std::fs::write(p, v).with_context(|| format!("cannot write {v:?} to {}", p.display()))
}

pub(super) fn read_u64(p: &Path) -> Option<u64> {
    std::fs::read_to_string(p).ok()?.trim().parse().ok()
}

impl RunCgroup {
    /// Creates `memdial-sweep-<pid>-<tag>` with `limit_bytes` and swap off (for
    /// systemd-run the scope is created when the child starts).
    pub fn create(mode: &Mode, tag: &str, limit_bytes: u64) -> Result<Self> {
        let name = format!("{RUN_PREFIX}{}-{tag}", std::process::id());
        let cg = RunCgroup {
            mode: mode.clone(),
            name,
            limit_bytes,
        };
        let Some(dir) = cg.dir() else {
            return Ok(cg);
        };
        if dir.exists() {
            let _ = std::fs::remove_dir(&dir);
        }
        std::fs::create_dir(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
        match mode {
            Mode::V2(_) => v2::write_limits(&dir, limit_bytes)?,
            Mode::V1(_) => v1::write_limits(&dir, limit_bytes)?,
            Mode::SystemdRun(_) => {}
        }
        Ok(cg)
    }

    /// The cgroup directory (v1/v2; `None` for systemd-run, whose scope path is
    /// found from the child's `/proc/<pid>/cgroup`, see [`RunCgroup::scope_dir`]).
    pub fn dir(&self) -> Option<PathBuf> {
        match &self.mode {
            Mode::V1(p) | Mode::V2(p) => Some(p.join(&self.name)),
            Mode::SystemdRun(_) => None,
        }
    }
}

impl Drop for RunCgroup {
    fn drop(&mut self) {
        let Some(dir) = self.dir() else { return };
        // The child has exited; an empty cgroup can be removed.
        for _ in 0..20 {
            if std::fs::remove_dir(&dir).is_ok() || !dir.exists() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }
}
