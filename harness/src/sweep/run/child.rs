//! The one way the harness starts a child process (an engine run, a server, a setup
//! step, a version or check command): under a supervisor, the harness binary
//! re-executed as its hidden shim ([`super::child_shim`]).
//!
//! The shim starts the command as the leader of its own process group and ends that
//! whole group when the command exits, when the harness dies (even by `kill -9`), or
//! when asked to; so a timed-out, failed or stopped child leaves nothing running, with
//! or without a memory cgroup. Why a supervisor process: after `kill -9` of the
//! harness nobody signals a process group, and `PR_SET_PDEATHSIG` reaches only the
//! direct child (and fires when the spawning *thread* exits); the shim watches the
//! harness through a pidfd and outlives it just long enough to kill the group.
//!
//! [`Child::wait_sampled`] waits with a timeout and calls back between polls (memory
//! and noise sampling); [`Child::stop`] is the graceful stop (SIGTERM to the group,
//! SIGKILL after a grace); [`run_captured`] runs a short command with a timeout and
//! returns its output.

use std::ffi::OsString;
use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use super::child_shim::{KILL_NOW, SUBCOMMAND};

/// Time between polls of a waiting child.
const POLL: Duration = Duration::from_millis(10);

/// A running child under its supervisor; killed with its group (and reaped) on drop.
#[derive(Debug)]
pub struct Child {
    shim: std::process::Child,
    pid: u32,
    status: Option<ExitStatus>,
}

/// What [`Child::wait_sampled`] tells its callback.
#[derive(Debug, Clone, Copy)]
pub enum Event {
    /// The child still runs (called every poll, about every 10 ms).
    Running,
    /// The child's tree has ended and the supervisor, its root, is not yet reaped:
    /// `/proc/<supervisor_pid>` still holds the tree's totals (the CPU time and read
    /// bytes of the reaped command), for a last reading.
    Exited,
}

/// How a waited child ended.
#[derive(Debug, Clone, Copy)]
pub struct Waited {
    /// Its exit status (the command's own: the supervisor exits as it did).
    pub status: ExitStatus,
    /// Whether the timeout killed it.
    pub timed_out: bool,
}

/// Starts `cmd` (its program, arguments, environment and directory; its stdio is not
/// read, pass it here) under a supervisor, stdin null.
///
/// Errors: the supervisor or the command cannot be started (the command's own error,
/// as [`Command::spawn`] gives it: "No such file or directory" for a missing program).
pub fn spawn(cmd: &Command, stdout: Stdio, stderr: Stdio) -> std::io::Result<Child> {
    let (read_end, write_end) = report_pipe()?;
    let mut shim = Command::new("/proc/self/exe");
    shim.arg(SUBCOMMAND)
        .arg("--parent")
        .arg(std::process::id().to_string())
        .arg("--report-fd")
        .arg(write_end.as_raw_fd().to_string())
        .arg("--")
        .arg(cmd.get_program())
        .args(cmd.get_args());
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => shim.env(k, v),
            None => shim.env_remove(k),
        };
    }
    if let Some(d) = cmd.get_current_dir() {
        shim.current_dir(d);
    }
    // Its own group: the terminal's Ctrl-C goes to the harness, which ends the run.
    shim.stdin(Stdio::null())
        .stdout(stdout)
        .stderr(stderr)
        .process_group(0);
    let fd = write_end.as_raw_fd();
    // SAFETY: fcntl is async-signal-safe; only the shim inherits the report fd.
    unsafe {
        shim.pre_exec(move || {
            libc::fcntl(fd, libc::F_SETFD, 0);
            Ok(())
        });
    }
    let mut shim = shim.spawn()?;
    drop(write_end);
    let mut b = [0u8; 8];
    let got = std::fs::File::from(read_end).read_exact(&mut b);
    let errno = i32::from_ne_bytes(b[..4].try_into().unwrap_or_default());
    let pid = i32::from_ne_bytes(b[4..].try_into().unwrap_or_default());
    if got.is_err() || errno != 0 || pid <= 0 {
        let st = shim.wait()?;
        return Err(if got.is_ok() && errno != 0 {
            std::io::Error::from_raw_os_error(errno)
        } else {
            std::io::Error::other(format!("its supervisor ended first ({st})"))
        });
    }
    Ok(Child {
        shim,
        pid: pid as u32,
        status: None,
    })
}

/// A pipe whose ends close on exec (the shim's is reopened for it alone).
fn report_pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two fds into the array we own.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both fds are new and ours.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

impl Child {
    /// The command's pid (its process group's id): where its memory is read.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The supervisor's pid: the root of the child's process tree.
    pub fn supervisor_pid(&self) -> u32 {
        self.shim.id()
    }

    /// The exit status, when the child has ended (reaps it).
    pub fn try_wait(&mut self) -> std::io::Result<Option<ExitStatus>> {
        if self.status.is_none() {
            self.status = self.shim.try_wait()?;
        }
        Ok(self.status)
    }

    /// Waits for the child to end.
    pub fn wait(&mut self) -> std::io::Result<ExitStatus> {
        if let Some(s) = self.status {
            return Ok(s);
        }
        let s = self.shim.wait()?;
        self.status = Some(s);
        Ok(s)
    }

    /// SIGTERM to the child's whole group (forwarded by the supervisor); returns at once.
    pub fn terminate(&self) {
        self.signal(libc::SIGTERM);
    }

    /// SIGKILL to the child's whole group, then waits for it.
    pub fn kill(&mut self) -> std::io::Result<ExitStatus> {
        self.signal(KILL_NOW);
        self.wait()
    }

    /// The graceful stop: [`Child::terminate`], then [`Child::kill`] when it has not
    /// ended within `grace`; `on_poll` is called while it waits.
    pub fn stop(
        &mut self,
        grace: Duration,
        on_poll: &mut dyn FnMut(&Child, Event),
    ) -> std::io::Result<ExitStatus> {
        self.terminate();
        Ok(self.wait_sampled(grace, on_poll)?.status)
    }

    /// Waits at most `timeout` (then kills the whole group: `timed_out`), calling
    /// `on_poll` about every 10 ms (first at once) while the child runs and once with
    /// [`Event::Exited`] before it is reaped.
    pub fn wait_sampled(
        &mut self,
        timeout: Duration,
        on_poll: &mut dyn FnMut(&Child, Event),
    ) -> std::io::Result<Waited> {
        let t0 = Instant::now();
        loop {
            on_poll(self, Event::Running);
            if let Some(status) = self.status {
                return Ok(Waited {
                    status,
                    timed_out: false,
                });
            }
            if exited_unreaped(self.shim.id()) {
                on_poll(self, Event::Exited);
                let status = self.wait()?;
                return Ok(Waited {
                    status,
                    timed_out: false,
                });
            }
            if t0.elapsed() > timeout {
                let status = self.kill()?;
                return Ok(Waited {
                    status,
                    timed_out: true,
                });
            }
            std::thread::sleep(POLL);
        }
    }

    fn signal(&self, sig: libc::c_int) {
        if self.status.is_none() {
            // SAFETY: kill signals our own unreaped child (the supervisor).
            unsafe {
                libc::kill(self.shim.id() as i32, sig);
            }
        }
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        if self.status.is_none() {
            let _ = self.kill();
        }
    }
}

/// Whether child `pid` has exited and is waiting to be reaped (`waitid` with
/// `WNOWAIT`: the zombie, and its `/proc` figures, stay until `wait`).
pub fn exited_unreaped(pid: u32) -> bool {
    // SAFETY: waitid writes only into `info`, a zeroed siginfo_t we own; WNOHANG makes
    // it return at once, WNOWAIT leaves the child waitable.
    unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        let rc = libc::waitid(
            libc::P_PID,
            pid as libc::id_t,
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        );
        rc == 0 && info.si_pid() != 0
    }
}

/// What [`run_captured`] returns.
#[derive(Debug, Clone)]
pub struct Captured {
    /// Exit status.
    pub status: ExitStatus,
    /// Killed on timeout.
    pub timed_out: bool,
    /// Everything it wrote to stdout.
    pub stdout: Vec<u8>,
    /// Everything it wrote to stderr.
    pub stderr: Vec<u8>,
}

/// Runs `cmd` to its end (at most `timeout`, then its whole group is killed) and
/// returns its output.
///
/// Errors: it cannot be started.
pub fn run_captured(cmd: &Command, timeout: Duration) -> std::io::Result<Captured> {
    let mut child = spawn(cmd, Stdio::piped(), Stdio::piped())?;
    let reader = |r: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut v = Vec::new();
            if let Some(mut r) = r {
                let _ = r.read_to_end(&mut v);
            }
            v
        })
    };
    let out = reader(child.shim.stdout.take().map(|s| Box::new(s) as _));
    let err = reader(child.shim.stderr.take().map(|s| Box::new(s) as _));
    let w = child.wait_sampled(timeout, &mut |_, _| {})?;
    // The group is gone, so the pipes are closed: the readers end.
    Ok(Captured {
        status: w.status,
        timed_out: w.timed_out,
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
    })
}

/// Up to the last `n` non-empty lines of `text`, trimmed and joined with ` / `, at
/// most 400 characters (the end kept).
pub fn last_lines(text: &str, n: usize) -> String {
    let mut lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .rev()
        .take(n)
        .collect();
    lines.reverse();
    let s = lines.join(" / ");
    let skip = s.chars().count().saturating_sub(400);
    s.chars().skip(skip).collect()
}

/// `exited 3`, `killed by signal 9`: how a child ended.
pub fn describe(status: &ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(c), _) => format!("exited {c}"),
        (None, Some(s)) => format!("killed by signal {s}"),
        _ => format!("{status}"),
    }
}

/// `exited 3: LAST LINES` (or `exited 3, nothing on stderr`): a failed child, by its
/// status and its stderr's last lines.
pub fn failure(status: &ExitStatus, stderr: &str) -> String {
    match last_lines(stderr, 3) {
        t if t.is_empty() => format!("{}, nothing on stderr", describe(status)),
        t => format!("{}: {t}", describe(status)),
    }
}

/// The hidden subcommand's arguments, when this process was started as the shim.
pub fn shim_args() -> Option<Vec<OsString>> {
    let mut a = std::env::args_os().skip(1);
    (a.next()? == SUBCOMMAND).then(|| a.collect())
}
