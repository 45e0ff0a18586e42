//! Fixture models for tests: one generated per test process and shared read-only, or one
//! per test made by the `memdial` binary.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, MutexGuard, OnceLock};

use crate::Scratch;

/// The directory `make` returns for `key`, made once per test process (the first caller
/// makes it; later callers of any test get the same path). For a fixture the tests of one
/// binary share read-only: `make` typically generates it under
/// [`crate::until_exit`]`(`[`crate::scratch!`]`(…))`, so it is removed at exit.
///
/// Panics (failing the test) if `make` panics; a later call for the same key runs `make` again.
pub fn shared(key: &'static str, make: impl FnOnce() -> PathBuf) -> PathBuf {
    static DIRS: OnceLock<Mutex<HashMap<&'static str, PathBuf>>> = OnceLock::new();
    let m = DIRS.get_or_init(Default::default);
    let mut g = m.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(p) = g.get(key) {
        return p.clone();
    }
    let p = make();
    g.insert(key, p.clone());
    p
}

/// Serializes the tests of one test binary that must not overlap (a sweep measures the
/// machine it runs on; tests that write beside a shared fixture). One lock per test
/// process; a test that failed holding it does not fail the others (poisoning is ignored).
pub fn lock() -> MutexGuard<'static, ()> {
    static L: Mutex<()> = Mutex::new(());
    L.lock().unwrap_or_else(|e| e.into_inner())
}

/// The fixture checkpoint `preset` in `dir/PRESET`, written by the `memdial` binary `bin`
/// ([`crate::fixture`]: kept if it is already there) once per test process and shared
/// read-only by the tests of the binary ([`crate::shared_fixture!`] passes the binary's
/// [`crate::shared_scratch!`]).
///
/// Panics (failing the test) if the binary cannot run or exits nonzero.
pub fn preset(bin: &str, preset: &'static str, dir: &Path) -> &'static Path {
    static DIRS: OnceLock<Mutex<HashMap<&'static str, &'static Path>>> = OnceLock::new();
    let m = DIRS.get_or_init(Default::default);
    let mut g = m.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(p) = g.get(preset) {
        return p;
    }
    let p: &'static Path =
        Box::leak(crate::fixture(bin, preset, &dir.join(preset)).into_boxed_path());
    g.insert(preset, p);
    p
}

/// `BIN fixture --preset PRESET --out SCRATCH/PRESET`: a fresh fixture for the calling
/// test alone, in `scratch` (removed when the returned guard drops). `bin` is the
/// `memdial` binary ([`crate::memdial_bin!`] in the harness's tests).
///
/// Panics (failing the test) if the binary cannot run or exits nonzero.
pub fn by_binary(bin: &str, preset: &str, scratch: Scratch) -> (Scratch, PathBuf) {
    let d = scratch.join(preset);
    let st = Command::new(bin)
        .args(["fixture", "--preset", preset, "--out"])
        .arg(&d)
        .status()
        .unwrap_or_else(|e| panic!("run {bin}: {e}"));
    assert!(st.success(), "fixture generation of {preset} failed ({st})");
    (scratch, d)
}
