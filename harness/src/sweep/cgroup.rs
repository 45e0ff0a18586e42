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
use std::process::Command;

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

/// Detects (and for cgroup v2 prepares) enforcement on this machine.
pub fn detect() -> Support {
    detect_in(&Env::current())
}

/// The path of the controller line in `/proc/self/cgroup` whose controller list
/// satisfies `want` (v1: contains `memory`; v2: the `0::` line).
fn own_path(self_cgroup: &str, v2: bool) -> Option<String> {
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

fn join_cgroup(base: &Path, path: &str) -> PathBuf {
    let rel = path.trim_start_matches('/');
    if rel.is_empty() {
        base.to_path_buf()
    } else {
        base.join(rel)
    }
}

/// Makes and removes a probe child of `parent`, proving per-run cgroups can be made.
fn probe(parent: &Path, pid: u32) -> std::result::Result<(), String> {
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
        let own = join_cgroup(&env.root.join("memory"), &path);
        if !own.join("memory.limit_in_bytes").exists() {
            return Support::Unavailable(format!(
                "this process's cgroup v1 memory cgroup {} is not visible (no memory.limit_in_bytes)",
                own.display()
            ));
        }
        return match probe(&own, env.pid) {
            Ok(()) => Support::Available(Mode::V1(own)),
            Err(e) => Support::Unavailable(e),
        };
    }
    let v2_reason = match own_path(&env.self_cgroup, true) {
        Some(path) => match v2_prepare(env, &path) {
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

/// cgroup v2: enable the memory controller for children of our own cgroup.
fn v2_prepare(env: &Env, path: &str) -> std::result::Result<Mode, String> {
    let base = [env.root.clone(), env.root.join("unified")]
        .into_iter()
        .find(|b| b.join("cgroup.controllers").exists())
        .ok_or_else(|| "no cgroup v2 hierarchy is mounted".to_string())?;
    let own = join_cgroup(&base, path);
    let read = |f: &str| std::fs::read_to_string(own.join(f)).unwrap_or_default();
    let has = |t: &str| {
        t.split_whitespace()
            .any(|c| c == "memory" || c == "+memory")
    };
    if !has(&read("cgroup.controllers")) {
        return Err(format!(
            "the memory controller is not delegated to this process's cgroup v2 {}",
            own.display()
        ));
    }
    if !has(&read("cgroup.subtree_control")) {
        // No internal processes: move ourselves into a leaf, then enable memory.
        let others: Vec<String> = read("cgroup.procs")
            .split_whitespace()
            .filter(|p| *p != env.pid.to_string())
            .map(String::from)
            .collect();
        if !others.is_empty() {
            return Err(format!(
                "cgroup v2 {} holds other processes ({}), so the memory controller cannot be enabled for its children",
                own.display(),
                others.join(" ")
            ));
        }
        let leaf = own.join(format!("{LEAF_PREFIX}{}", env.pid));
        std::fs::create_dir_all(&leaf)
            .map_err(|e| format!("cannot create {}: {e}", leaf.display()))?;
        std::fs::write(leaf.join("cgroup.procs"), env.pid.to_string())
            .map_err(|e| format!("cannot move the harness into {}: {e}", leaf.display()))?;
        std::fs::write(own.join("cgroup.subtree_control"), "+memory").map_err(|e| {
            format!(
                "cannot enable the memory controller in {}: {e}",
                own.display()
            )
        })?;
    }
    probe(&own, env.pid)?;
    Ok(Mode::V2(own))
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

fn write(p: &Path, v: &str) -> Result<()> {
    std::fs::write(p, v).with_context(|| format!("cannot write {v:?} to {}", p.display()))
}

fn read_u64(p: &Path) -> Option<u64> {
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
            Mode::V2(_) => {
                write(&dir.join("memory.max"), &limit_bytes.to_string())?;
                if dir.join("memory.swap.max").exists() {
                    write(&dir.join("memory.swap.max"), "0")?;
                }
            }
            Mode::V1(_) => {
                write(&dir.join("memory.limit_in_bytes"), &limit_bytes.to_string())?;
                if dir.join("memory.memsw.limit_in_bytes").exists() {
                    write(
                        &dir.join("memory.memsw.limit_in_bytes"),
                        &limit_bytes.to_string(),
                    )?;
                }
                let _ = write(&dir.join("memory.swappiness"), "0");
            }
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

    /// The systemd unit name (`<name>.scope`).
    pub fn unit(&self) -> String {
        format!("{}.scope", self.name)
    }

    /// The command that runs `bin args…` inside the cgroup: v1/v2 join before exec
    /// (`sh -c 'echo $$ > cgroup.procs && exec "$@"'`), so every allocation of the
    /// engine is charged; systemd-run execs the command in a new scope (same pid).
    pub fn command(&self, bin: &Path, args: &[String]) -> Command {
        match self.dir() {
            Some(dir) => {
                let mut c = Command::new("/bin/sh");
                c.arg("-c")
                    .arg("echo $$ > \"$0\" && exec \"$@\"")
                    .arg(dir.join("cgroup.procs"))
                    .arg(bin)
                    .args(args);
                c
            }
            None => {
                let mut c = Command::new("systemd-run");
                c.args(self.systemd_args()).arg(bin).args(args);
                c
            }
        }
    }

    /// Arguments of `systemd-run` before the command.
    pub fn systemd_args(&self) -> Vec<String> {
        vec![
            "--scope".into(),
            "--quiet".into(),
            "--collect".into(),
            format!("--unit={}", self.unit()),
            "-p".into(),
            format!("MemoryMax={}", self.limit_bytes),
            "-p".into(),
            "MemorySwapMax=0".into(),
            "--".into(),
        ]
    }

    /// For systemd-run: the scope's cgroup directory from the child's
    /// `/proc/<pid>/cgroup` text (the `0::` line under the v2 mount).
    pub fn scope_dir(&self, proc_cgroup: &str) -> Option<PathBuf> {
        let Mode::SystemdRun(base) = &self.mode else {
            return self.dir();
        };
        let p = own_path(proc_cgroup, true)?;
        p.ends_with(&self.unit()).then(|| join_cgroup(base, &p))
    }

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

/// Hint attached to a run OOM-killed in its cgroup.
pub fn oom_hint(budget: u64, slack: u64) -> String {
    use memdial::store::plan::fmt_bytes;
    format!(
        "OOM-killed in its memory cgroup (limit = budget {} + cgroup_slack {}): the process needs more than the slack above its budget; raise `cgroup_slack` in the spec",
        fmt_bytes(budget),
        fmt_bytes(slack)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("cg-test-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn env(self_cgroup: &str, root: &Path, systemd: bool) -> Env {
        Env {
            self_cgroup: self_cgroup.into(),
            root: root.to_path_buf(),
            root_user: true,
            systemd,
            pid: 4242,
        }
    }

    #[test]
    fn v1_nests_under_own_memory_cgroup() {
        let r = tmp("v1");
        let own = r.join("memory/process_api/abc");
        std::fs::create_dir_all(&own).unwrap();
        std::fs::write(own.join("memory.limit_in_bytes"), "9223372036854771712\n").unwrap();
        let s = detect_in(&env("4:memory:/process_api/abc\n0::/\n", &r, false));
        assert_eq!(s, Support::Available(Mode::V1(own.clone())));
        // The probe child was removed again.
        assert!(!own.join(format!("{RUN_PREFIX}4242-probe")).exists());
        // Not visible → unenforced with the reason.
        let s = detect_in(&env("4:memory:/elsewhere\n", &r, false));
        assert!(matches!(s, Support::Unavailable(ref m) if m.contains("not visible")));
        let mut e = env("0::/\n", &r, false);
        e.root_user = false;
        assert!(matches!(detect_in(&e), Support::Unavailable(ref m) if m.contains("root")));
        std::fs::remove_dir_all(&r).unwrap();
    }

    #[test]
    fn v1_run_cgroup_writes_limits_and_wraps_the_command() {
        let r = tmp("v1run");
        let cg = RunCgroup::create(&Mode::V1(r.clone()), "p0-r0", 1000).unwrap();
        let d = cg.dir().unwrap();
        assert_eq!(
            std::fs::read_to_string(d.join("memory.limit_in_bytes")).unwrap(),
            "1000"
        );
        assert_eq!(
            std::fs::read_to_string(d.join("memory.swappiness")).unwrap(),
            "0"
        );
        std::fs::write(
            d.join("memory.oom_control"),
            "oom_kill_disable 0\noom_kill 2\n",
        )
        .unwrap();
        assert_eq!(cg.oom_kills(), Some(2));
        let c = cg.command(Path::new("/bin/memdial"), &["run".into()]);
        assert_eq!(c.get_program(), "/bin/sh");
        let a: Vec<_> = c
            .get_args()
            .map(|x| x.to_string_lossy().to_string())
            .collect();
        assert_eq!(a[2], d.join("cgroup.procs").display().to_string());
        assert_eq!(&a[3..], ["/bin/memdial", "run"]);
        std::fs::remove_dir_all(&r).unwrap();
    }

    #[test]
    fn v2_moves_into_a_leaf_and_enables_memory() {
        let r = tmp("v2");
        let own = r.join("user.slice/sess");
        std::fs::create_dir_all(&own).unwrap();
        std::fs::write(r.join("cgroup.controllers"), "cpu io memory\n").unwrap();
        std::fs::write(own.join("cgroup.controllers"), "cpu memory\n").unwrap();
        std::fs::write(own.join("cgroup.subtree_control"), "").unwrap();
        std::fs::write(own.join("cgroup.procs"), "4242\n").unwrap();
        let s = detect_in(&env("0::/user.slice/sess\n", &r, false));
        assert_eq!(s, Support::Available(Mode::V2(own.clone())));
        let leaf = own.join(format!("{LEAF_PREFIX}4242"));
        assert_eq!(
            std::fs::read_to_string(leaf.join("cgroup.procs")).unwrap(),
            "4242"
        );
        assert_eq!(
            std::fs::read_to_string(own.join("cgroup.subtree_control")).unwrap(),
            "+memory"
        );
        // Limits of a run cgroup.
        let cg = RunCgroup::create(&Mode::V2(own.clone()), "p1-r0", 5 << 20).unwrap();
        let d = cg.dir().unwrap();
        assert_eq!(
            std::fs::read_to_string(d.join("memory.max")).unwrap(),
            (5u64 << 20).to_string()
        );
        std::fs::write(
            d.join("memory.events"),
            "low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n",
        )
        .unwrap();
        std::fs::write(d.join("memory.peak"), "123\n").unwrap();
        assert_eq!(cg.oom_kills(), Some(1));
        assert_eq!(cg.peak_bytes(), Some(123));
        std::fs::remove_dir_all(&r).unwrap();
    }

    #[test]
    fn v2_shared_cgroup_falls_back_to_systemd_run_or_says_why() {
        let r = tmp("v2shared");
        std::fs::write(r.join("cgroup.controllers"), "cpu memory\n").unwrap();
        std::fs::write(r.join("cgroup.subtree_control"), "cpu\n").unwrap();
        std::fs::write(r.join("cgroup.procs"), "1\n4242\n77\n").unwrap();
        let s = detect_in(&env("0::/\n", &r, false));
        assert!(
            matches!(s, Support::Unavailable(ref m) if m.contains("other processes (1 77)") && m.contains("systemd-run is not available")),
            "{s:?}"
        );
        // Nothing was moved or enabled.
        assert!(!r.join(format!("{LEAF_PREFIX}4242")).exists());
        assert_eq!(
            std::fs::read_to_string(r.join("cgroup.subtree_control")).unwrap(),
            "cpu\n"
        );
        let s = detect_in(&env("0::/\n", &r, true));
        assert_eq!(s, Support::Available(Mode::SystemdRun(r.clone())));
        // No memory controller at all.
        std::fs::write(r.join("cgroup.controllers"), "cpu io\n").unwrap();
        let s = detect_in(&env("0::/\n", &r, false));
        assert!(matches!(s, Support::Unavailable(ref m) if m.contains("not delegated")));
        std::fs::remove_dir_all(&r).unwrap();
    }

    #[test]
    fn systemd_run_command_and_scope_files() {
        let r = tmp("sd");
        let cg = RunCgroup::create(&Mode::SystemdRun(r.clone()), "p2-r1", 300 << 20).unwrap();
        assert!(cg.dir().is_none());
        let c = cg.command(Path::new("/bin/memdial"), &["run".into(), "--x".into()]);
        assert_eq!(c.get_program(), "systemd-run");
        let a: Vec<_> = c
            .get_args()
            .map(|x| x.to_string_lossy().to_string())
            .collect();
        let unit = cg.unit();
        assert!(unit.starts_with(RUN_PREFIX) && unit.ends_with("-p2-r1.scope"));
        assert!(a.contains(&"--scope".to_string()));
        assert!(a.contains(&format!("--unit={unit}")));
        assert!(a.contains(&format!("MemoryMax={}", 300u64 << 20)));
        assert!(a.contains(&"MemorySwapMax=0".to_string()));
        assert_eq!(&a[a.len() - 3..], ["/bin/memdial", "run", "--x"]);
        // The scope is found from the child's /proc/<pid>/cgroup and read there.
        let scope = r.join("system.slice").join(&unit);
        std::fs::create_dir_all(&scope).unwrap();
        std::fs::write(scope.join("memory.current"), "4096\n").unwrap();
        std::fs::write(scope.join("memory.events"), "oom_kill 0\n").unwrap();
        let d = cg.scope_dir(&format!("0::/system.slice/{unit}\n")).unwrap();
        assert_eq!(d, scope);
        assert_eq!(cg.usage_at(&d), Some(4096));
        assert_eq!(cg.oom_kills_at(&d), Some(0));
        assert_eq!(cg.scope_dir("0::/user.slice/other.scope\n"), None);
        std::fs::remove_dir_all(&r).unwrap();
    }

    #[test]
    fn stale_run_cgroups_are_removed() {
        let r = tmp("stale");
        // pid 999999999 cannot exist (above pid_max); our own pid stays.
        let stale = r.join(format!("{RUN_PREFIX}999999999-p0-r0"));
        let mine = r.join(format!("{RUN_PREFIX}{}-p0-r0", std::process::id()));
        let other = r.join("someone-else");
        for d in [&stale, &mine, &other] {
            std::fs::create_dir_all(d).unwrap();
        }
        assert_eq!(clean_stale(&Mode::V1(r.clone())), 1);
        assert!(!stale.exists() && mine.exists() && other.exists());
        std::fs::remove_dir_all(&r).unwrap();
    }
}
