//! Test support shared by memdial's test binaries (a dev-dependency only).
//!
//! - [`scratch_in`] / [`scratch!`]: a scratch directory unique to the calling test
//!   (created with `O_EXCL` semantics by `tempfile`, so two tests — or two processes —
//!   can never share one), removed when dropped; [`until_exit`] keeps one for the whole
//!   process (a fixture shared read-only by the tests of one binary) and removes it at exit.
//! - [`main`], [`test()`], [`ignorable`], [`skip`]: test binaries with `harness = false`
//!   run on `libtest-mimic`, whose "ignored" outcome is decided at run time. A check that
//!   cannot run here (no oracle venv, no tmpfs, not root) is reported as
//!   `test NAME ... ignored, REASON` and counted in the `N ignored` of the summary line —
//!   and is a failure when `CI` is set (`CI=true`), so CI never passes a check it skipped.
//!   [`skip_optional`] is for inputs that are optional by design (another engine's binary
//!   given by path): visibly skipped everywhere, CI included; [`skip_hardware`] for a
//!   variant this CPU cannot run (an instruction set it lacks), likewise.
//! - [`oracle`]: the Python oracle venv, created on first use under a file lock.
//! - [`fixtures`]: a fixture model shared by the tests of a binary, or made for one test
//!   by the `memdial` binary; the lock that serializes a binary's tests; with
//!   [`shared_scratch!`] (a scratch directory for a whole test binary), [`shared_fixture!`]
//!   (a fixture in it) and [`memdial_bin!`] (the `memdial` binary under test).
//! - [`source`], [`modgraph`]: a crate's own sources as code (comments and literals
//!   blanked) and its module graph (circles, layers).

use std::fmt::Display;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Mutex, Once};

pub use libtest_mimic::{Completion, Failed, Trial};
use tempfile::TempDir;

pub mod fixtures;
pub mod layers;
pub mod modgraph;
pub mod oracle;
pub mod source;

/// A scratch directory unique to one test, removed (recursively) on drop. Derefs to
/// its [`Path`], so `dir.join("x")` and `&dir` (as `&Path`) work as on a `PathBuf`.
pub struct Scratch(TempDir);

impl Scratch {
    /// The directory.
    pub fn path(&self) -> &Path {
        self.0.path()
    }
}

impl std::ops::Deref for Scratch {
    type Target = Path;
    fn deref(&self) -> &Path {
        self.0.path()
    }
}

impl AsRef<Path> for Scratch {
    fn as_ref(&self) -> &Path {
        self.0.path()
    }
}

/// A fresh, empty directory `BASE/TAG-XXXXXX` that no other test or process can be
/// handed (`tempfile` creates it exclusively), removed (recursively) when the returned
/// guard is dropped. `BASE` is created if missing.
///
/// Panics (failing the test) if the directory cannot be created.
pub fn scratch_in(base: impl AsRef<Path>, tag: &str) -> Scratch {
    let base = base.as_ref();
    try_scratch_in(base, tag)
        .unwrap_or_else(|e| panic!("create scratch dir {tag}-* in {}: {e}", base.display()))
}

/// [`scratch_in`] that returns the error instead of panicking (for a test that skips
/// when, e.g., a tmpfs is not writable).
pub fn try_scratch_in(base: impl AsRef<Path>, tag: &str) -> std::io::Result<Scratch> {
    let base = base.as_ref();
    std::fs::create_dir_all(base)?;
    Ok(Scratch(
        tempfile::Builder::new()
            .prefix(&format!("{tag}-"))
            .tempdir_in(base)?,
    ))
}

/// `scratch!("tag")`: [`scratch_in`] under the calling test crate's
/// `CARGO_TARGET_TMPDIR` (on disk in the target directory, not tmpfs).
#[macro_export]
macro_rules! scratch {
    ($tag:expr) => {
        $crate::scratch_in(env!("CARGO_TARGET_TMPDIR"), $tag)
    };
}

/// `shared_scratch!()`: one scratch directory for all the tests of the calling test
/// binary (its name, `CARGO_CRATE_NAME`, is the tag), made by the first caller and kept
/// until the process exits ([`scratch!`] kept by [`until_exit`]); its path.
#[macro_export]
macro_rules! shared_scratch {
    () => {
        $crate::fixtures::shared(concat!("scratch ", env!("CARGO_CRATE_NAME")), || {
            $crate::until_exit($crate::scratch!(env!("CARGO_CRATE_NAME")))
        })
    };
}

/// `shared_fixture!("PRESET")`: the fixture checkpoint PRESET, made once per test binary
/// by the `memdial` binary under test in [`shared_scratch!`] and shared read-only by the
/// binary's tests ([`fixtures::preset`]); a `&'static Path`.
#[macro_export]
macro_rules! shared_fixture {
    ($preset:literal) => {
        $crate::fixtures::preset($crate::memdial_bin!(), $preset, &$crate::shared_scratch!())
    };
}

/// `memdial_bin!()`: the path of the `memdial` binary built for the calling crate's
/// tests, `env!("CARGO_BIN_EXE_memdial")` expanded at the call site (cargo sets it only
/// for the tests of the crate that builds the binary).
#[macro_export]
macro_rules! memdial_bin {
    () => {
        env!("CARGO_BIN_EXE_memdial")
    };
}

static AT_EXIT: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

extern "C" fn remove_registered() {
    if let Ok(dirs) = AT_EXIT.lock() {
        for d in dirs.iter() {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

/// Keeps `dir` until the process exits (then removes it, from an `atexit` handler):
/// for a fixture that the tests of one binary share read-only, created once (e.g. in a
/// `OnceLock`). Returns its path.
pub fn until_exit(dir: Scratch) -> PathBuf {
    static REGISTER: Once = Once::new();
    REGISTER.call_once(|| {
        // SAFETY: `remove_registered` is a plain `extern "C" fn()` that never unwinds
        // across the boundary (it ignores every error).
        unsafe {
            libc::atexit(remove_registered);
        }
    });
    let p = dir.0.keep();
    AT_EXIT
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(p.clone());
    p
}

/// Whether this is a CI run: `CI` set to anything but empty, `0` or `false`.
pub fn ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "0" && !v.eq_ignore_ascii_case("false"))
}

/// The result of a trial that may be skipped at run time.
pub type Outcome = Result<Completion, Failed>;

/// A check that cannot run here: reported as `ignored, REASON` in the `cargo test`
/// output (and counted as ignored in the summary line), or a failure naming the reason
/// under CI ([`ci`]).
pub fn skip(reason: impl Display) -> Outcome {
    if ci() {
        Err(format!("CI is set, so this check may not be skipped: {reason}").into())
    } else {
        Ok(Completion::ignored_with(reason))
    }
}

/// A check whose input is optional by design (a binary of another engine given by an
/// environment variable, a large fixture the user generates): always reported as
/// `ignored, REASON (optional input)` — also under CI, where the input is not expected.
/// Use [`skip`] for anything CI is meant to check.
pub fn skip_optional(reason: impl Display) -> Outcome {
    Ok(Completion::ignored_with(format!(
        "{reason} (optional input)"
    )))
}

/// A variant of a check that this machine's hardware cannot run (an instruction set
/// the CPU lacks): always reported as `ignored, REASON (not on this CPU)`, also under
/// CI, whose machine the project does not choose.
pub fn skip_hardware(reason: impl Display) -> Outcome {
    Ok(Completion::ignored_with(format!(
        "{reason} (not on this CPU)"
    )))
}

/// [`ignorable`] for a closure (a check run once per variant: per ISA, per preset).
pub fn ignorable_with(
    name: impl Into<String>,
    f: impl FnOnce() -> Outcome + Send + 'static,
) -> Trial {
    Trial::ignorable_test(name, f)
}

/// A trial that always runs: `f` passes unless it panics.
pub fn test(name: &str, f: fn()) -> Trial {
    Trial::test(name, move || {
        f();
        Ok(())
    })
}

/// A trial that may be skipped at run time: `f` returns [`skip`]`(…)` when it cannot
/// run, `Ok(Completion::Completed)` when it checked everything.
pub fn ignorable(name: &str, f: fn() -> Outcome) -> Trial {
    Trial::ignorable_test(name, f)
}

/// `trials![f, g]`: [`test()`] trials named after the functions.
#[macro_export]
macro_rules! trials {
    ($($f:ident),* $(,)?) => {
        vec![$($crate::test(stringify!($f), $f)),*]
    };
}

/// `main` of a `harness = false` test binary: refuses a source that still holds
/// libtest `#[test]` attributes (which would silently not run without the libtest
/// harness), then runs `trials` with the command-line arguments `cargo test` passes
/// (filters, `--ignored`, `--test-threads`, …).
///
/// `own_source` is the binary's source text: `include_str!("this_file.rs")`.
pub fn main(own_source: &str, trials: Vec<Trial>) -> ExitCode {
    let attr = concat!("#[", "test]");
    if let Some((n, _)) = own_source
        .lines()
        .enumerate()
        .find(|(_, l)| l.trim_start().starts_with(attr))
    {
        eprintln!(
            "line {}: {attr} does not run in a harness = false test binary; list the function in main() instead",
            n + 1
        );
        return ExitCode::from(101);
    }
    libtest_mimic::run(&libtest_mimic::Arguments::from_args(), trials).exit_code()
}

/// A finished child process described for an assertion message: its exit code, then
/// its stdout and stderr as (lossy) UTF-8.
pub fn output_text(o: &std::process::Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Runs `cmd` to completion, or kills it (with every process of its own process
/// group) once it has run for `limit`: a test of something that must not hang fails
/// with "did not finish" instead of hanging the suite. Stdout and stderr are
/// collected as by [`std::process::Command::output`].
///
/// Errors: the command cannot start, or it ran past `limit` (then the message holds
/// what it printed so far).
pub fn output_within(
    cmd: &mut std::process::Command,
    limit: std::time::Duration,
) -> Result<std::process::Output, String> {
    use std::os::unix::process::CommandExt;
    use std::process::Stdio;
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .map_err(|e| format!("cannot start {cmd:?}: {e}"))?;
    let pid = child.id() as i32;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(limit) {
        Ok(o) => o.map_err(|e| format!("{cmd:?}: {e}")),
        Err(_) => {
            // SAFETY: kill with a negative pid signals the command's own group only.
            unsafe {
                libc::kill(-pid, libc::SIGKILL);
            }
            let o = rx.recv_timeout(std::time::Duration::from_secs(10));
            Err(format!(
                "{cmd:?} did not finish within {} s (killed){}",
                limit.as_secs_f64(),
                match o {
                    Ok(Ok(o)) => format!(":\n{}", output_text(&o)),
                    _ => String::new(),
                }
            ))
        }
    }
}

/// The fixture checkpoint `preset` in `out`, written there with
/// `BIN fixture --preset PRESET --out OUT` unless `out/config.json` already exists
/// (`bin`: the memdial binary under test). Returns `out`.
///
/// Panics (failing the test) if the binary cannot run or exits nonzero.
pub fn fixture(bin: &str, preset: &str, out: &Path) -> PathBuf {
    if out.join("config.json").exists() {
        return out.to_path_buf();
    }
    // Tests of one binary run in parallel and often share a fixture: one generates
    // it under an exclusive lock, the others wait and then find it written.
    let parent = out.parent().expect("fixture path has a parent");
    std::fs::create_dir_all(parent)
        .unwrap_or_else(|e| panic!("cannot create {}: {e}", parent.display()));
    let name = out
        .file_name()
        .expect("fixture path has a file name")
        .to_string_lossy();
    let lock_path = parent.join(format!(".{name}.lock"));
    let lock = std::fs::File::create(&lock_path)
        .unwrap_or_else(|e| panic!("cannot create {}: {e}", lock_path.display()));
    lock.lock()
        .unwrap_or_else(|e| panic!("cannot lock {}: {e}", lock_path.display()));
    if !out.join("config.json").exists() {
        let o = std::process::Command::new(bin)
            .args(["fixture", "--preset", preset, "--out"])
            .arg(out)
            .output()
            .unwrap_or_else(|e| panic!("cannot run {bin}: {e}"));
        assert!(o.status.success(), "{}", output_text(&o));
    }
    out.to_path_buf()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scratch_dirs_are_unique_and_removed_on_drop() {
        let base = std::env::temp_dir().join(format!("memdial-testkit-{}", std::process::id()));
        let a = scratch_in(&base, "same");
        let b = scratch_in(&base, "same");
        assert_ne!(a.path(), b.path());
        assert!(a.path().is_dir() && b.path().is_dir());
        let pa = a.path().to_path_buf();
        drop(a);
        assert!(!pa.exists());
        drop(b);
        std::fs::remove_dir_all(&base).unwrap();
    }

    /// No test of the workspace builds a scratch path by hand from the process id or
    /// in the shared system temp dir: two tests of one binary get the same pid, and such
    /// names were once shared by two tests that deleted each other's fixture.
    #[test]
    fn no_test_names_its_scratch_dir_by_hand() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        let mut files = Vec::new();
        let mut dirs = vec![root.join("tests"), root.join("harness/tests")];
        while let Some(dir) = dirs.pop() {
            for e in std::fs::read_dir(dir).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() {
                    dirs.push(p);
                } else if p.extension().is_some_and(|x| x == "rs") {
                    files.push(p);
                }
            }
        }
        assert!(files.len() >= 10, "found only {files:?}");
        let mut bad = Vec::new();
        for f in &files {
            let text = std::fs::read_to_string(f).unwrap();
            for (n, line) in text.lines().enumerate() {
                let code = line.split("//").next().unwrap_or("");
                for pat in ["process::id()", "temp_dir()"] {
                    if code.contains(pat) {
                        bad.push(format!("{}:{}: {pat}", f.display(), n + 1));
                    }
                }
            }
        }
        assert!(
            bad.is_empty(),
            "use memdial_testkit::scratch!(TAG) (unique per call) instead:\n{}",
            bad.join("\n")
        );
    }
}
