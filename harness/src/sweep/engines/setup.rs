//! Setup steps of engines (run once per model, cached) and how an engine's version
//! is found.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

use crate::sweep::run::child;
use crate::sweep::spec::engines::def::SETUP_CACHE_ENV;
use crate::sweep::spec::engines::template::Vars;

/// `$MEMDIAL_ENGINE_CACHE`, `$XDG_CACHE_HOME/memdial/engines`, `~/.cache/memdial/engines`.
pub fn setup_cache() -> PathBuf {
    if let Some(p) = std::env::var_os(SETUP_CACHE_ENV).filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(|| PathBuf::from(".cache"));
    base.join("memdial").join("engines")
}

/// Runs a setup step into `dir` unless `dir/.memdial-setup-done` exists (then the
/// cached result is used); its output goes to `dir/setup.log`.
pub fn run_setup(name: &str, setup: &[String], vars: &Vars, dir: &Path) -> Result<()> {
    let stamp = dir.join(".memdial-setup-done");
    if stamp.exists() {
        return Ok(());
    }
    let args = vars.expand_args(setup)?;
    if args.is_empty() {
        return Ok(());
    }
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    eprintln!(
        "engine {name}: setup (once per model, cached in {}): {}",
        dir.display(),
        args.join(" ")
    );
    let log = std::fs::File::create(dir.join("setup.log"))?;
    let mut cmd = Command::new(&args[0]);
    cmd.args(&args[1..]);
    // Under the child supervisor: the step and what it starts end with the sweep
    // (even by kill -9) or on timeout.
    let mut child = child::spawn(&cmd, log.try_clone()?.into(), log.into())
        .with_context(|| format!("engine {name}: cannot start setup {}", args[0]))?;
    let w = child.wait_sampled(SETUP_TIMEOUT, &mut |_, _| {})?;
    let log = dir.join("setup.log");
    if w.timed_out {
        bail!(
            "engine {name}: setup did not finish within {} s: killed; see {}",
            SETUP_TIMEOUT.as_secs(),
            log.display()
        );
    }
    if !w.status.success() {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        bail!(
            "engine {name}: setup failed ({}); see {}",
            child::failure(&w.status, &text),
            log.display()
        );
    }
    std::fs::write(&stamp, args.join(" "))?;
    Ok(())
}

/// How long a setup step may take before it is killed with what it started (it
/// converts or downloads a model once; this only bounds one that hangs).
pub const SETUP_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2 * 3600);

/// How long a version command may take before it is killed (the version is then
/// unknown): it runs before any run, so one that never ends must not hang the sweep.
pub const VERSION_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// The first non-empty line (at most 120 characters) a version command prints on
/// stdout or stderr; `None` when it cannot start or takes over [`VERSION_TIMEOUT`]
/// (then it is killed with what it started, and a warning says so).
pub fn first_line_of(args: &[String]) -> Option<String> {
    let mut cmd = Command::new(args.first()?);
    cmd.args(&args[1..]);
    let o = child::run_captured(&cmd, VERSION_TIMEOUT).ok()?;
    if o.timed_out {
        eprintln!(
            "warning: version command `{}` did not finish in {} s: killed (version unknown)",
            args.join(" "),
            VERSION_TIMEOUT.as_secs()
        );
        return None;
    }
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    text.lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .map(|l| l.chars().take(120).collect())
}

/// `sha256 abcdef123456` of a binary (its identity when it reports no version).
pub fn file_sha_label(p: &Path) -> Option<String> {
    let bytes = std::fs::read(p).ok()?;
    Some(format!(
        "sha256 {}",
        &crate::sweep::util::sha256_hex(&bytes)[..12]
    ))
}
