//! systemd-run: the scope a run starts in, and the command that starts it there.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::base::{join_cgroup, own_path, Mode, RunCgroup};

impl RunCgroup {
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
}
