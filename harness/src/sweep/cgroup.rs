//! Optional memory-cgroup enforcement of the budget (`--cgroup`).
//!
//! The child `memdial run` is started inside a fresh memory cgroup whose limit is
//! the budget (plus the spec's `cgroup_slack`) with swap disabled, so buffered and
//! mmap runs are charged for the page cache they pull in. Supported:
//!
//! - cgroup v2 (unified hierarchy with the `memory` controller enabled in the root's
//!   `cgroup.subtree_control`): `memory.max`, `memory.swap.max = 0`, peak from
//!   `memory.peak`, OOM kills from `memory.events`;
//! - cgroup v1 when this process sits in the root of the memory hierarchy:
//!   `memory.limit_in_bytes`, `memory.memsw.limit_in_bytes` (when swap accounting
//!   exists), `memory.swappiness = 0`, peak from `memory.max_usage_in_bytes`.
//!
//! Anything else is reported as "not enforced" with the reason, and nothing is
//! touched: in particular a v1 memory cgroup that already confines this process
//! belongs to whoever put us there (a sandbox, a container runtime), and a v2
//! hierarchy without the memory controller delegated to its root is left alone.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

/// Which hierarchy is used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    /// cgroup v2 rooted at this directory.
    V2(PathBuf),
    /// cgroup v1 memory hierarchy rooted at this directory.
    V1(PathBuf),
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
            Support::Available(Mode::V2(p)) => format!("enforced (cgroup v2 at {})", p.display()),
            Support::Available(Mode::V1(p)) => format!("enforced (cgroup v1 at {})", p.display()),
            Support::Unavailable(r) => format!("not enforced: {r}"),
        }
    }
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Detects whether a memory cgroup can be used, from `/proc/self/cgroup` and the
/// mounted hierarchies. Never writes anything.
pub fn detect() -> Support {
    detect_at(
        &std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default(),
        Path::new("/sys/fs/cgroup"),
        is_root(),
    )
}

/// [`detect`] with injectable inputs (for tests).
pub fn detect_at(self_cgroup: &str, root: &Path, root_user: bool) -> Support {
    if !root_user {
        return Support::Unavailable("needs root".into());
    }
    // v1 memory controller line: "N:memory:/path" (possibly with other controllers).
    let v1 = self_cgroup.lines().find_map(|l| {
        let mut it = l.splitn(3, ':');
        let _ = it.next()?;
        let ctrls = it.next()?;
        let path = it.next()?;
        ctrls
            .split(',')
            .any(|c| c == "memory")
            .then(|| path.to_string())
    });
    if let Some(path) = v1 {
        let base = root.join("memory");
        if path != "/" {
            return Support::Unavailable(format!(
                "the cgroup v1 memory controller already confines this process ({path}); it belongs to another manager and is left alone"
            ));
        }
        if !base.join("memory.limit_in_bytes").exists() {
            return Support::Unavailable(format!(
                "{} is not a v1 memory hierarchy",
                base.display()
            ));
        }
        return Support::Available(Mode::V1(base));
    }
    // Pure v2 (/sys/fs/cgroup is cgroup2) or hybrid (/sys/fs/cgroup/unified).
    for base in [root.to_path_buf(), root.join("unified")] {
        let ctrl = std::fs::read_to_string(base.join("cgroup.controllers")).unwrap_or_default();
        if ctrl.is_empty() && !base.join("cgroup.controllers").exists() {
            continue;
        }
        if !ctrl.split_whitespace().any(|c| c == "memory") {
            return Support::Unavailable(format!(
                "the cgroup v2 hierarchy at {} has no memory controller (controllers: {})",
                base.display(),
                if ctrl.trim().is_empty() {
                    "none"
                } else {
                    ctrl.trim()
                }
            ));
        }
        let sub = std::fs::read_to_string(base.join("cgroup.subtree_control")).unwrap_or_default();
        if !sub.split_whitespace().any(|c| c == "memory") {
            return Support::Unavailable(format!(
                "the memory controller is not enabled in {}/cgroup.subtree_control",
                base.display()
            ));
        }
        return Support::Available(Mode::V2(base));
    }
    Support::Unavailable("no cgroup hierarchy with a memory controller is mounted".into())
}

/// A per-run memory cgroup; removed on drop.
#[derive(Debug)]
pub struct RunCgroup {
    mode: Mode,
    dir: PathBuf,
    /// The limit written, bytes.
    pub limit_bytes: u64,
}

fn write(p: &Path, v: &str) -> Result<()> {
    std::fs::write(p, v).with_context(|| format!("cannot write {v:?} to {}", p.display()))
}

impl RunCgroup {
    /// Creates `memdial-sweep-<pid>-<tag>` with `limit_bytes` and swap off.
    pub fn create(mode: &Mode, tag: &str, limit_bytes: u64) -> Result<Self> {
        let (base, v2) = match mode {
            Mode::V2(b) => (b, true),
            Mode::V1(b) => (b, false),
        };
        let dir = base.join(format!("memdial-sweep-{}-{tag}", std::process::id()));
        if dir.exists() {
            let _ = std::fs::remove_dir(&dir);
        }
        std::fs::create_dir(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let cg = RunCgroup {
            mode: mode.clone(),
            dir: dir.clone(),
            limit_bytes,
        };
        if v2 {
            write(&dir.join("memory.max"), &limit_bytes.to_string())?;
            if dir.join("memory.swap.max").exists() {
                write(&dir.join("memory.swap.max"), "0")?;
            }
        } else {
            write(&dir.join("memory.limit_in_bytes"), &limit_bytes.to_string())?;
            if dir.join("memory.memsw.limit_in_bytes").exists() {
                write(
                    &dir.join("memory.memsw.limit_in_bytes"),
                    &limit_bytes.to_string(),
                )?;
            }
            let _ = write(&dir.join("memory.swappiness"), "0");
        }
        Ok(cg)
    }

    /// File a process id is written to in order to join the cgroup.
    pub fn procs_file(&self) -> PathBuf {
        self.dir.join("cgroup.procs")
    }

    /// Peak memory charged (anon + page cache), bytes, when the kernel reports it.
    pub fn peak_bytes(&self) -> Option<u64> {
        let f = match self.mode {
            Mode::V2(_) => "memory.peak",
            Mode::V1(_) => "memory.max_usage_in_bytes",
        };
        std::fs::read_to_string(self.dir.join(f))
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    /// OOM kills inside the cgroup.
    pub fn oom_kills(&self) -> Option<u64> {
        let (f, key) = match self.mode {
            Mode::V2(_) => ("memory.events", "oom_kill"),
            Mode::V1(_) => ("memory.oom_control", "oom_kill"),
        };
        let t = std::fs::read_to_string(self.dir.join(f)).ok()?;
        t.lines().find_map(|l| {
            let (k, v) = l.split_once(' ')?;
            (k == key).then(|| v.trim().parse().ok()).flatten()
        })
    }
}

impl Drop for RunCgroup {
    fn drop(&mut self) {
        // The child has exited; an empty cgroup can be removed.
        for _ in 0..20 {
            if std::fs::remove_dir(&self.dir).is_ok() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sandbox_owned_v1_is_left_alone() {
        let s = detect_at(
            "4:memory:/process_api/abc\n0::/\n",
            Path::new("/nonexistent"),
            true,
        );
        assert!(
            matches!(s, Support::Unavailable(ref r) if r.contains("another manager")),
            "{s:?}"
        );
        let s = detect_at("0::/\n", Path::new("/nonexistent"), false);
        assert_eq!(s, Support::Unavailable("needs root".into()));
    }

    #[test]
    fn v2_without_memory_is_reported() {
        let d = std::env::temp_dir().join(format!("cg-test-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("cgroup.controllers"), "cpu io\n").unwrap();
        let s = detect_at("0::/user.slice\n", &d, true);
        assert!(
            matches!(s, Support::Unavailable(ref r) if r.contains("no memory controller")),
            "{s:?}"
        );
        std::fs::write(d.join("cgroup.controllers"), "cpu io memory\n").unwrap();
        std::fs::write(d.join("cgroup.subtree_control"), "cpu memory\n").unwrap();
        assert_eq!(
            detect_at("0::/user.slice\n", &d, true),
            Support::Available(Mode::V2(d.clone()))
        );
        std::fs::remove_dir_all(&d).unwrap();
    }
}
