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

mod base;
mod sampling;
mod systemd;
#[cfg(test)]
mod tests;
mod v1;
mod v2;

use base::{own_path, LEAF_PREFIX};
pub use base::{Env, Mode, RunCgroup, Support, RUN_PREFIX};
pub use sampling::oom_hint;

/// Detects (and for cgroup v2 prepares) enforcement on this machine.
pub fn detect() -> Support {
    detect_in(&Env::current())
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
        // The child has exited. A run's processes end with it: whatever it left in
        // its cgroup (a daemonised grandchild, a timed-out engine's workers) is
        // killed, then the empty cgroup is removed. (cgroup v1 here has no freezer
        // and no cgroup.kill; membership is inherited, so the cgroup holds the tree.)
        let real = on_cgroup_fs(&dir);
        for _ in 0..20 {
            if real {
                for pid in procs(&dir) {
                    // SAFETY: kill has no memory-safety preconditions.
                    unsafe {
                        libc::kill(pid, libc::SIGKILL);
                    }
                }
            }
            if std::fs::remove_dir(&dir).is_ok() || !dir.exists() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }
}

/// The pids in `dir/cgroup.procs`, never 1 or this process.
fn procs(dir: &Path) -> Vec<i32> {
    let me = std::process::id() as i32;
    std::fs::read_to_string(dir.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse::<i32>().ok())
        .filter(|&p| p > 1 && p != me)
        .collect()
}

/// Whether `dir` is on a cgroup filesystem (v1 or v2), not a directory that only
/// looks like one (the tests' fakes): only there are its pids a run's processes.
fn on_cgroup_fs(dir: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    const CGROUP_SUPER_MAGIC: i64 = 0x27e0eb;
    const CGROUP2_SUPER_MAGIC: i64 = 0x6367_7270;
    let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: `c` is a valid C string and `st` a properly sized out-parameter.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statfs(c.as_ptr(), &mut st) } != 0 {
        return false;
    }
    matches!(st.f_type as i64, CGROUP_SUPER_MAGIC | CGROUP2_SUPER_MAGIC)
}
