//! SIGINT / SIGTERM during a sweep: print the exact command that resumes it, then
//! exit (130 / 143, the shell's 128 + signal). Nothing needs finishing first: every
//! file of the run directory is written atomically, the running child's process
//! group is killed (its supervisor would end it anyway once the harness is gone,
//! [`super::child`]),
//! the directory lock is released by the kernel, and
//! the next sweep removes stale temporaries and cgroups.

use std::path::Path;
use std::sync::atomic::{AtomicI32, AtomicPtr, AtomicUsize, Ordering};

/// The message the handler writes (leaked, set once before the handler is installed).
static MSG: AtomicPtr<u8> = AtomicPtr::new(std::ptr::null_mut());
static MSG_LEN: AtomicUsize = AtomicUsize::new(0);
/// Supervisor pid of the run now running (0: none), told by the handler to kill the
/// run's group: a run's child has its own group, so the terminal's SIGINT does not
/// reach what it started.
static CHILD_SUPERVISOR: AtomicI32 = AtomicI32::new(0);

/// Records the supervisor ([`super::child::Child::supervisor_pid`]) of the run now
/// running (0 when it has ended), for the handler to end its group on SIGINT / SIGTERM.
pub fn set_child_supervisor(pid: i32) {
    CHILD_SUPERVISOR.store(pid, Ordering::SeqCst);
}

/// `argv` with `--out` set to `out` (replacing `--out X` / `--out=X`, else added),
/// shell-quoted: the command that resumes this sweep.
pub fn resume_command(argv: &[String], out: &Path) -> String {
    let mut v: Vec<String> = Vec::with_capacity(argv.len() + 2);
    let mut skip = false;
    for a in argv {
        if skip {
            skip = false;
        } else if a == "--out" {
            skip = true;
        } else if !a.starts_with("--out=") {
            v.push(a.clone());
        }
    }
    v.push("--out".into());
    v.push(out.display().to_string());
    shlex::try_join(v.iter().map(String::as_str)).unwrap_or_else(|_| v.join(" "))
}

/// Installs the SIGINT / SIGTERM handler that prints `resume` (see the module docs).
pub fn install(resume: &str) {
    let text = format!("\nsweep interrupted; resume it with:\n  {resume}\n");
    let bytes: &'static mut [u8] = Box::leak(text.into_bytes().into_boxed_slice());
    MSG_LEN.store(bytes.len(), Ordering::SeqCst);
    MSG.store(bytes.as_mut_ptr(), Ordering::SeqCst);
    // SAFETY: a plain sigaction with an `extern "C"` handler that only calls
    // async-signal-safe functions (write, _exit) and reads atomics.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_signal as *const () as usize;
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaction(libc::SIGINT, &sa, std::ptr::null_mut());
        libc::sigaction(libc::SIGTERM, &sa, std::ptr::null_mut());
    }
}

extern "C" fn on_signal(sig: libc::c_int) {
    let p = MSG.load(Ordering::SeqCst);
    let n = MSG_LEN.load(Ordering::SeqCst);
    let supervisor = CHILD_SUPERVISOR.load(Ordering::SeqCst);
    // SAFETY: `p`/`n` are a leaked, never-freed buffer stored before the handler was
    // installed; kill(2), write(2) and _exit(2) are async-signal-safe; `supervisor` is
    // our running child (> 1). It would end the group anyway once we are gone; the
    // signal only makes it immediate.
    unsafe {
        if supervisor > 1 {
            libc::kill(supervisor, super::child_shim::KILL_NOW);
        }
        if !p.is_null() {
            libc::write(2, p.cast(), n);
        }
        libc::_exit(128 + sig);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resume_command_sets_out_and_quotes() {
        let argv: Vec<String> = ["memdial", "sweep", "--out", "a", "--spec", "my spec.toml"]
            .map(String::from)
            .to_vec();
        assert_eq!(
            resume_command(&argv, Path::new("reports/x y")),
            "memdial sweep --spec 'my spec.toml' --out 'reports/x y'"
        );
        let argv: Vec<String> = ["memdial", "sweep", "--out=b"].map(String::from).to_vec();
        assert_eq!(
            resume_command(&argv, Path::new("b")),
            "memdial sweep --out b"
        );
    }
}
