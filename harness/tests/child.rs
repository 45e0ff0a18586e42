//! Every child the harness starts runs under its supervisor (`memdial __child-shim`,
//! `sweep::run::child`): driven here with fake commands that leave a grandchild
//! (`sh -c 'sleep 100 & …; sleep 100'`), never with environment hooks.
//!
//! - the shim exits as its command did (code, or the same signal), and says why a
//!   command cannot start;
//! - `kill -9` of the shim's parent (a helper `sh`) ends the command and its grandchild;
//! - a sweep's engine that outlives `timeout_s` is killed with its whole tree;
//! - an engine that exits non-zero is reported by its code and its stderr's last lines;
//! - `kill -9` of a sweep (with `--no-cgroup`, and with the default cgroup choice)
//!   leaves neither the engine nor its grandchild running; nor of an engine's setup
//!   step.
//!
//! "Gone" means no such pid or a zombie (a container's init may not reap orphans),
//! polled for up to 10 s: no wall-clock limit is asserted tightly.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use memdial_testkit as testkit;
use memdial_testkit::fixtures::lock;
use memdial_testkit::memdial_bin;
use memdial_testkit::shared_scratch;
use testkit::output_text as text;

/// Whether `pid` runs (exists and is not a zombie).
fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => s
            .rsplit_once(')')
            .map(|(_, rest)| !rest.trim_start().starts_with('Z'))
            .unwrap_or(false),
        Err(_) => false,
    }
}

/// Polls until `pid` is gone (true) or 10 s pass (false).
fn gone_soon(pid: u32) -> bool {
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(10) {
        if !alive(pid) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

/// The pid written to `p`, once it is there (at most 60 s).
fn pid_in(p: &Path) -> u32 {
    let t0 = Instant::now();
    loop {
        if let Some(pid) = std::fs::read_to_string(p)
            .ok()
            .and_then(|s| s.trim().parse().ok())
        {
            return pid;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "{} never written",
            p.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Kills `pid` with SIGKILL.
fn kill_9(pid: u32) {
    let st = Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap();
    assert!(st.success());
}

#[test]
fn shim_exits_as_its_command_did() {
    let o = Command::new(memdial_bin!())
        .args([
            "__child-shim",
            "--",
            "sh",
            "-c",
            "echo out; echo err >&2; exit 3",
        ])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    assert_eq!(String::from_utf8_lossy(&o.stdout), "out\n");
    assert_eq!(String::from_utf8_lossy(&o.stderr), "err\n");
    use std::os::unix::process::ExitStatusExt;
    let o = Command::new(memdial_bin!())
        .args(["__child-shim", "--", "sh", "-c", "kill -TERM $$"])
        .output()
        .unwrap();
    assert_eq!(o.status.signal(), Some(libc::SIGTERM), "{}", text(&o));
    let o = Command::new(memdial_bin!())
        .args(["__child-shim", "--", "/no/such/program"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(127), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr)
            .contains("cannot start /no/such/program: No such file or directory"),
        "{}",
        text(&o)
    );
}

#[test]
fn kill_9_of_the_shims_parent_ends_the_whole_group() {
    let dir = shared_scratch!().join("child-parent-kill");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (c, gc) = (dir.join("c.pid"), dir.join("gc.pid"));
    let inner = format!(
        "sleep 100 & echo $! > {}; echo $$ > {}; sleep 100",
        gc.display(),
        c.display()
    );
    // The helper is the shim's parent: it starts the shim and waits.
    let mut helper = Command::new("sh")
        .arg("-c")
        .arg("\"$0\" __child-shim -- sh -c \"$1\" & wait")
        .arg(memdial_bin!())
        .arg(&inner)
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let (c, gc) = (pid_in(&c), pid_in(&gc));
    assert!(alive(c) && alive(gc));
    kill_9(helper.id());
    let _ = helper.wait();
    assert!(gone_soon(c), "the command {c} survived its shim's parent");
    assert!(
        gone_soon(gc),
        "the grandchild {gc} survived its shim's parent"
    );
}

fn model() -> PathBuf {
    testkit::fixture(
        memdial_bin!(),
        "tiny-k3",
        &shared_scratch!().join("tiny-k3"),
    )
}

/// A spec whose only engine runs `script` (`sh -c`), `timeout_s` per run, its budget
/// held by `budget` (`flag`: no cgroup; `cgroup`: one where the machine allows).
fn spec_held(script: &str, timeout_s: f64, budget: &str) -> String {
    format!(
        r#"
budgets = ["2x floor"]
prompts = ["The capital of France is"]
max_tokens = 4
repeats = 1
timeout_s = {timeout_s}
engines = ["fake"]
[engine.fake]
command = ["sh", "-c", {script:?}]
ids_stdout_regex = "^ids: (.*)$"
budget = "{budget}"
"#
    )
}

fn spec(script: &str, timeout_s: f64) -> String {
    spec_held(script, timeout_s, "flag")
}

/// `memdial sweep` of `spec` into a fresh `name` directory (not started yet).
fn sweep(spec: &str, name: &str, extra: &[&str]) -> (Command, PathBuf) {
    let spec_path = shared_scratch!().join(format!("{name}.toml"));
    std::fs::write(&spec_path, spec).unwrap();
    let out = shared_scratch!().join(name);
    let _ = std::fs::remove_dir_all(&out);
    let mut c = Command::new(memdial_bin!());
    c.arg("sweep")
        .arg("--model")
        .arg(model())
        .arg("--spec")
        .arg(&spec_path)
        .arg("--out")
        .arg(&out)
        .args(["--bandwidth-probe", "4MiB"])
        .args(extra);
    (c, out)
}

/// The only row of a finished sweep.
fn only_row(out: &Path) -> serde_json::Value {
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    let rows = v.as_array().unwrap();
    assert_eq!(rows.len(), 1, "{v:#}");
    rows[0].clone()
}

/// The file `name` of the sweep's first run directory.
fn run_file(out: &Path, name: &str) -> PathBuf {
    out.join("runs").join("p000-r0").join(name)
}

#[test]
fn a_timed_out_engine_ends_with_its_grandchild() {
    let _g = lock();
    let script = "sleep 100 & echo $! > {run_dir}/gc.pid; sleep 100";
    let (mut c, out) = sweep(&spec(script, 1.0), "child-timeout", &["--no-cgroup"]);
    let o = c.output().unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let r = only_row(&out);
    assert_eq!(r["status"], "timeout", "{r:#}");
    let gc = pid_in(&run_file(&out, "gc.pid"));
    assert!(gone_soon(gc), "the grandchild {gc} survived the timeout");
}

#[test]
fn a_failed_engine_is_reported_by_its_code_and_stderr() {
    let _g = lock();
    let script = "echo starting; echo 'first words' >&2; echo 'last words' >&2; exit 3";
    let (mut c, out) = sweep(&spec(script, 60.0), "child-exit3", &["--no-cgroup"]);
    let o = c.output().unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let r = only_row(&out);
    assert_eq!(r["status"], "failed", "{r:#}");
    assert_eq!(r["exit_code"], 3, "{r:#}");
    assert_eq!(r["error"], "exited 3: first words / last words", "{r:#}");

    let (mut c, out) = sweep(&spec("exit 4", 60.0), "child-exit4", &["--no-cgroup"]);
    let o = c.output().unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let r = only_row(&out);
    assert_eq!(r["error"], "exited 4, nothing on stderr", "{r:#}");
}

/// `kill -9` of a sweep while its engine (and the engine's own child) runs.
fn kill_9_of_the_sweep(name: &str, budget: &str, extra: &[&str]) {
    let script = "sleep 100 & echo $! > {run_dir}/gc.pid; echo $$ > {run_dir}/c.pid; sleep 100";
    let (mut c, out) = sweep(&spec_held(script, 600.0, budget), name, extra);
    let mut sweep = c
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let gc = pid_in(&run_file(&out, "gc.pid"));
    let c = pid_in(&run_file(&out, "c.pid"));
    assert!(alive(c) && alive(gc));
    kill_9(sweep.id());
    let _ = sweep.wait();
    assert!(gone_soon(c), "the engine {c} survived kill -9 of the sweep");
    assert!(
        gone_soon(gc),
        "the grandchild {gc} survived kill -9 of the sweep"
    );
}

#[test]
fn kill_9_of_a_sweep_leaves_no_child_without_a_cgroup() {
    let _g = lock();
    kill_9_of_the_sweep("child-kill9-nocg", "flag", &["--no-cgroup"]);
}

#[test]
fn kill_9_of_a_sweep_leaves_no_child_with_the_default_cgroup_choice() {
    let _g = lock();
    kill_9_of_the_sweep("child-kill9-cg", "cgroup", &[]);
}

/// The first file named `name` under `dir` (recursively), once there (at most 60 s).
fn find_file(dir: &Path, name: &str) -> PathBuf {
    fn walk(d: &Path, name: &str) -> Option<PathBuf> {
        for e in std::fs::read_dir(d).ok()?.flatten() {
            let p = e.path();
            if p.file_name().is_some_and(|n| n == name) {
                return Some(p);
            }
            if p.is_dir() {
                if let Some(f) = walk(&p, name) {
                    return Some(f);
                }
            }
        }
        None
    }
    let t0 = Instant::now();
    loop {
        if let Some(p) = walk(dir, name) {
            return p;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "no {name} under {}",
            dir.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn kill_9_of_a_sweep_ends_an_engines_setup_step() {
    let _g = lock();
    let cache = shared_scratch!().join("child-setup-cache");
    let _ = std::fs::remove_dir_all(&cache);
    let spec = spec("echo 'ids: 1'", 60.0).replace(
        "[engine.fake]\n",
        "[engine.fake]\nsetup = [\"sh\", \"-c\", \"sleep 100 & echo $! > {setup_dir}/gc.pid; \
         echo $$ > {setup_dir}/c.pid; sleep 100\"]\n",
    );
    let (mut c, _out) = sweep(&spec, "child-kill9-setup", &["--no-cgroup"]);
    let mut sweep = c
        .env("MEMDIAL_ENGINE_CACHE", &cache)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let gc = pid_in(&find_file(&cache, "gc.pid"));
    let c = pid_in(&find_file(&cache, "c.pid"));
    assert!(alive(c) && alive(gc));
    kill_9(sweep.id());
    let _ = sweep.wait();
    assert!(
        gone_soon(c),
        "the setup step {c} survived kill -9 of the sweep"
    );
    assert!(
        gone_soon(gc),
        "the setup's child {gc} survived kill -9 of the sweep"
    );
}
