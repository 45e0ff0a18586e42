//! The supervisor every child of the harness runs under: `memdial __child-shim
//! [--parent PID] [--report-fd FD] -- PROGRAM ARGS…` (hidden; started by
//! [`super::child`], never by hand).
//!
//! It starts PROGRAM as the leader of a new process group and ends that whole group
//! (SIGKILL) when any of these happens:
//!
//! - PROGRAM exits: what it left running ends with it;
//! - the harness (`--parent`, default the shim's parent) dies, however it dies,
//!   `kill -9` included: seen through a pidfd of the harness (Linux 5.3+; else a
//!   `getppid` check every 100 ms). A pidfd watches the *process*, so the harness may
//!   spawn from a thread that exits, which `PR_SET_PDEATHSIG` would not survive;
//! - [`KILL_NOW`] (SIGUSR1) arrives: the harness's timeout or its interrupt handler.
//!
//! SIGTERM, SIGINT or SIGHUP to the shim are forwarded to the group as SIGTERM (a
//! graceful stop; the harness escalates with [`KILL_NOW`] after its grace). The shim
//! then exits as PROGRAM did: its exit code, or killed by the same signal, so the
//! harness reads the engine's own status. PROGRAM additionally gets
//! `PR_SET_PDEATHSIG(SIGKILL)` towards the shim (single-threaded, so it fires only when
//! the shim itself dies).
//!
//! `--report-fd FD`: once PROGRAM is started (or cannot be), the shim writes 8 bytes
//! to FD and closes it: the `errno` of the failed start (0 when it started) and
//! PROGRAM's pid, both `i32` native-endian. Exit codes of the shim's own: 125 bad
//! arguments or the harness already gone, 127 PROGRAM could not start.

use std::ffi::OsString;
use std::io::Write;
use std::os::fd::{FromRawFd, RawFd};
use std::os::unix::process::CommandExt;
use std::sync::atomic::{AtomicBool, Ordering};

/// The hidden subcommand that runs the shim.
pub const SUBCOMMAND: &str = "__child-shim";
/// The signal that makes the shim SIGKILL PROGRAM's whole group at once.
pub const KILL_NOW: libc::c_int = libc::SIGUSR1;

static TERM: AtomicBool = AtomicBool::new(false);
static KILL: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(sig: libc::c_int) {
    match sig {
        libc::SIGUSR1 => KILL.store(true, Ordering::SeqCst),
        libc::SIGCHLD => {}
        _ => TERM.store(true, Ordering::SeqCst),
    }
}

/// The shim's arguments.
struct Args {
    parent: i32,
    report_fd: Option<RawFd>,
    program: OsString,
    rest: Vec<OsString>,
}

fn parse(args: &[OsString]) -> Result<Args, String> {
    let mut parent = None;
    let mut report_fd = None;
    let mut i = 0;
    while i < args.len() {
        let a = args[i].to_string_lossy();
        let value = |i: usize| -> Result<i32, String> {
            args.get(i + 1)
                .and_then(|v| v.to_str())
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| format!("{a} needs a number"))
        };
        match a.as_ref() {
            "--parent" => parent = Some(value(i)?),
            "--report-fd" => report_fd = Some(value(i)?),
            "--" => {
                let program = args.get(i + 1).cloned().ok_or("no program after --")?;
                return Ok(Args {
                    // SAFETY: getppid has no preconditions.
                    parent: parent.unwrap_or_else(|| unsafe { libc::getppid() }),
                    report_fd,
                    program,
                    rest: args[i + 2..].to_vec(),
                });
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
        i += 2;
    }
    Err("usage: memdial __child-shim [--parent PID] [--report-fd FD] -- PROGRAM ARGS…".into())
}

/// Runs the shim with the arguments after the subcommand; never returns.
pub fn main(args: &[OsString]) -> ! {
    let a = match parse(args) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("error: {SUBCOMMAND}: {e}");
            std::process::exit(125);
        }
    };
    let mut report = a.report_fd.map(|fd| {
        // SAFETY: the harness passed this fd open for us alone; CLOEXEC keeps it from
        // PROGRAM, and the File owns (and closes) it.
        unsafe {
            libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
            std::fs::File::from_raw_fd(fd)
        }
    });
    let mut send = |errno: i32, pid: i32| {
        if let Some(mut f) = report.take() {
            let mut b = [0u8; 8];
            b[..4].copy_from_slice(&errno.to_ne_bytes());
            b[4..].copy_from_slice(&pid.to_ne_bytes());
            let _ = f.write_all(&b);
        }
    };
    block_signals();
    let parent_fd = pidfd_open(a.parent);
    // SAFETY: getppid has no preconditions.
    if unsafe { libc::getppid() } != a.parent {
        send(libc::ESRCH, 0);
        std::process::exit(125);
    }
    let me = std::process::id() as i32;
    let mut cmd = std::process::Command::new(&a.program);
    cmd.args(&a.rest).process_group(0);
    // SAFETY: prctl, getppid, sigprocmask and _exit are async-signal-safe.
    unsafe {
        cmd.pre_exec(move || {
            let mut none: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut none);
            libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            if libc::getppid() != me {
                libc::_exit(1);
            }
            Ok(())
        });
    }
    let child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: cannot start {}: {e}", a.program.to_string_lossy());
            send(e.raw_os_error().unwrap_or(libc::ENOENT), 0);
            std::process::exit(127);
        }
    };
    let pid = child.id() as i32;
    send(0, pid);
    let status = supervise(pid, a.parent, parent_fd);
    exit_as(status)
}

/// Blocks the signals the shim acts on (they are taken only inside `ppoll`, so none is
/// lost between a check and the wait) and installs their flag-setting handler.
fn block_signals() {
    // SAFETY: plain sigaction/sigprocmask calls on zeroed structs we own; the handler
    // only stores to atomics.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_signal as *const () as usize;
        libc::sigemptyset(&mut sa.sa_mask);
        for s in [
            libc::SIGTERM,
            libc::SIGINT,
            libc::SIGHUP,
            KILL_NOW,
            libc::SIGCHLD,
        ] {
            libc::sigaddset(&mut set, s);
            libc::sigaction(s, &sa, std::ptr::null_mut());
        }
        libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
}

/// A pidfd of `pid` (`None` where the kernel has none).
fn pidfd_open(pid: i32) -> Option<RawFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    (fd >= 0).then_some(fd as RawFd)
}

/// Waits for PROGRAM (`pid`, its group `pid`) to exit, acting on the events of the
/// module docs; returns its wait status once reaped.
fn supervise(pid: i32, parent: i32, parent_fd: Option<RawFd>) -> libc::c_int {
    let group = -pid;
    loop {
        // SAFETY: waitid writes into a zeroed siginfo_t we own; WNOWAIT keeps PROGRAM
        // a zombie, so its group id cannot be reused before the group is killed.
        let exited = unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            let rc = libc::waitid(
                libc::P_PID,
                pid as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
            );
            rc == 0 && info.si_pid() != 0
        };
        // SAFETY: getppid has no preconditions.
        let orphaned = unsafe { libc::getppid() } != parent;
        if exited || orphaned || KILL.swap(false, Ordering::SeqCst) {
            // SAFETY: kill(-pid) signals PROGRAM's own group, held by PROGRAM (alive or
            // an unreaped zombie).
            unsafe { libc::kill(group, libc::SIGKILL) };
        }
        if exited || orphaned {
            let mut st: libc::c_int = 0;
            // SAFETY: waits for our own child.
            unsafe { libc::waitpid(pid, &mut st, 0) };
            return st;
        }
        if TERM.swap(false, Ordering::SeqCst) {
            // SAFETY: as above.
            unsafe { libc::kill(group, libc::SIGTERM) };
        }
        wait_event(parent_fd);
    }
}

/// Sleeps until a signal arrives or the harness's pidfd becomes readable (it has
/// exited); without a pidfd, at most 100 ms.
fn wait_event(parent_fd: Option<RawFd>) {
    // SAFETY: ppoll over one pollfd we own (or none), with an empty signal mask for
    // its duration so the blocked signals are taken only here.
    unsafe {
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        let mut fds = [libc::pollfd {
            fd: parent_fd.unwrap_or(-1),
            events: libc::POLLIN,
            revents: 0,
        }];
        let tick = libc::timespec {
            tv_sec: 0,
            tv_nsec: 100_000_000,
        };
        let timeout = if parent_fd.is_some() {
            std::ptr::null()
        } else {
            &tick as *const libc::timespec
        };
        libc::ppoll(fds.as_mut_ptr(), 1, timeout, &none);
    }
}

/// Exits as a process with wait status `st` did: its code, or its signal.
fn exit_as(st: libc::c_int) -> ! {
    if libc::WIFSIGNALED(st) {
        let sig = libc::WTERMSIG(st);
        // SAFETY: default action, no core file from the shim, then the same signal.
        unsafe {
            let no_core = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            libc::setrlimit(libc::RLIMIT_CORE, &no_core);
            libc::signal(sig, libc::SIG_DFL);
            let mut none: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut none);
            libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
            libc::raise(sig);
        }
        std::process::exit(128 + sig);
    }
    std::process::exit(libc::WEXITSTATUS(st))
}
