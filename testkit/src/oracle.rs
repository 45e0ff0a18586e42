//! The Python oracle venv (mlx-lm, tiktoken, transformers + torch), created on first use.
//!
//! `cargo test --workspace --release` alone must check the oracles on a fresh machine:
//! the first oracle test of a process calls [`python`], which runs
//! `bash fixtures/oracle/setup.sh --torch` (idempotent: it returns at once when the
//! venv's stamp is current) while holding an exclusive lock on `VENV.lock`, so the other
//! tests of the binary (and other test binaries or `cargo test` processes) wait for it.
//! It prints one line when it has to create or refresh the venv, and says where the log
//! is. Only when that fails (no package registry reachable, no `python3`) is the oracle
//! test skipped — visibly, and as a failure under `CI` (see [`crate::skip`]).
//!
//! The venv is `$ORACLE_VENV` if set (as in `setup.sh`), else `fixtures/oracle/.venv`.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Instant;

/// The venv directory for the repository at `repo_root`: `$ORACLE_VENV` or
/// `REPO/fixtures/oracle/.venv`.
pub fn venv_dir(repo_root: &Path) -> PathBuf {
    match std::env::var_os("ORACLE_VENV") {
        Some(v) if !v.is_empty() => PathBuf::from(v),
        _ => repo_root.join("fixtures/oracle/.venv"),
    }
}

/// The venv's python, after making sure (once per process) that the venv exists and is
/// current. `Err(reason)` when it cannot be created; the caller reports that through
/// [`crate::skip`].
pub fn python(repo_root: &Path) -> Result<PathBuf, String> {
    static ONCE: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    ONCE.get_or_init(|| ensure(repo_root)).clone()
}

fn ensure(repo_root: &Path) -> Result<PathBuf, String> {
    let venv = venv_dir(repo_root);
    let setup = repo_root.join("fixtures/oracle/setup.sh");
    if let Some(parent) = venv.parent() {
        std::fs::create_dir_all(parent).map_err(|e| format!("create {}: {e}", parent.display()))?;
    }
    let lock_path = PathBuf::from(format!("{}.lock", venv.display()));
    let lock = File::create(&lock_path).map_err(|e| format!("{}: {e}", lock_path.display()))?;
    if lock.try_lock().is_err() {
        eprintln!(
            "oracle venv: another test process holds {} (creating the venv); waiting for it",
            lock_path.display()
        );
        lock.lock()
            .map_err(|e| format!("lock {}: {e}", lock_path.display()))?;
    }
    let stamp = venv.join(".memdial-oracle-stamp");
    let creating = !stamp.exists();
    let log = PathBuf::from(format!("{}.setup.log", venv.display()));
    if creating {
        eprintln!(
            "oracle venv missing at {}: creating it once with `bash fixtures/oracle/setup.sh --torch` \
             (a few minutes; other oracle tests wait; log: {})",
            venv.display(),
            log.display()
        );
    }
    let t = Instant::now();
    let log_file = File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
    let err_file = log_file
        .try_clone()
        .map_err(|e| format!("{}: {e}", log.display()))?;
    let status = Command::new("bash")
        .arg(&setup)
        .arg("--torch")
        .env("ORACLE_VENV", &venv)
        .stdin(Stdio::null())
        .stdout(log_file)
        .stderr(err_file)
        .status();
    let mut text = String::new();
    let _ = File::open(&log).and_then(|mut f| f.read_to_string(&mut text));
    let tail: Vec<&str> = text.lines().rev().take(8).collect();
    let tail: Vec<&str> = tail.into_iter().rev().collect();
    match status {
        Ok(s) if s.success() => {
            if creating || !text.contains("up to date") {
                eprintln!(
                    "oracle venv ready at {} after {:.0} s",
                    venv.display(),
                    t.elapsed().as_secs_f64()
                );
            }
            // The lock is released when `lock` is dropped here.
            Ok(venv.join("bin/python"))
        }
        Ok(s) => {
            eprintln!(
                "oracle venv: `bash {} --torch` failed ({s}); last lines of {}:\n{}",
                setup.display(),
                log.display(),
                tail.join("\n")
            );
            Err(format!(
                "the oracle venv could not be created (fixtures/oracle/setup.sh --torch exited \
                 with code {}; no package registry reachable?), see {}",
                s.code().map_or("none".into(), |c| c.to_string()),
                log.display()
            ))
        }
        Err(e) => Err(format!("cannot run bash {}: {e}", setup.display())),
    }
}
