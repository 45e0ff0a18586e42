//! The types and file helpers every cgroup flavour (v1, v2, systemd-run) and the
//! sampling share: where per-run cgroups are made ([`Mode`]), whether they can be
//! ([`Support`]), the machine facts detection reads ([`Env`]) and the per-run
//! cgroup itself ([`RunCgroup`]).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

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

/// A per-run memory cgroup; removed on drop.
#[derive(Debug)]
pub struct RunCgroup {
    pub(super) mode: Mode,
    pub(super) name: String,
    /// The limit written, bytes.
    pub limit_bytes: u64,
}

pub(super) fn write(p: &Path, v: &str) -> Result<()> {
    std::fs::write(p, v).with_context(|| format!("cannot write {v:?} to {}", p.display()))
}

pub(super) fn read_u64(p: &Path) -> Option<u64> {
    std::fs::read_to_string(p).ok()?.trim().parse().ok()
}
