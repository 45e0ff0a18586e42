//! The budget holds for every IO mode: `memdial sweep` runs each child in a memory
//! cgroup limited to budget + `cgroup_slack` by default, samples anon + model page
//! cache while it runs, marks unenforced runs that went over as `over_budget`, and
//! turns an OOM kill into a failed run with a hint naming the slack.
//!
//! Tests that need a memory cgroup are reported as `ignored, REASON` when this
//! machine cannot make one (not root, no memory controller), and fail under CI
//! (libtest-mimic, `harness = false`).

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Output};

use memdial_testkit as testkit;
use memdial_testkit::fixtures::lock;
use memdial_testkit::memdial_bin;
use testkit::output_text as text;

fn scratch() -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("budget-enforcement");
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The tiny-k3 fixture on disk (page cache behaves as for a real model).
fn model() -> &'static Path {
    memdial_testkit::fixtures::preset(memdial_bin!(), "tiny-k3", &scratch())
}

fn spec(name: &str, io: &str, slack: &str) -> PathBuf {
    let p = scratch().join(format!("{name}.toml"));
    std::fs::write(
        &p,
        format!(
            "name = \"{name}\"\nbudgets = [\"floor\"]\nio = [\"{io}\"]\nprefetch = [\"none\"]\n\
             threads = [1]\nprompts = [\"The capital of France is\"]\nmax_tokens = 4\nrepeats = 1\n\
             cgroup_slack = \"{slack}\"\n"
        ),
    )
    .unwrap();
    p
}

fn sweep(spec: &Path, name: &str, extra: &[&str]) -> (Output, PathBuf) {
    let out = scratch().join(name);
    let _ = std::fs::remove_dir_all(&out);
    let o = Command::new(memdial_bin!())
        .arg("sweep")
        .arg("--model")
        .arg(model())
        .arg("--spec")
        .arg(spec)
        .arg("--out")
        .arg(&out)
        .args(["--bandwidth-probe", "4MiB"])
        .args(extra)
        .output()
        .unwrap();
    (o, out)
}

fn only_row(dir: &Path) -> serde_json::Value {
    let t = std::fs::read_to_string(dir.join("results.json")).unwrap();
    let v: Vec<serde_json::Value> = serde_json::from_str(&t).unwrap();
    assert_eq!(v.len(), 1);
    v.into_iter().next().unwrap()
}

fn u(r: &serde_json::Value, k: &str) -> u64 {
    r[k].as_u64()
        .unwrap_or_else(|| panic!("{k} missing in {r:#}"))
}

/// The skip of a test whose run was not in a memory cgroup.
fn unenforced(r: &serde_json::Value) -> Option<testkit::Outcome> {
    (r["cgroup_enforced"] != true).then(|| {
        testkit::skip(format!(
            "no memory cgroup on this machine: {}",
            r["cgroup_reason"].as_str().unwrap_or("?")
        ))
    })
}

fn buffered_floor_run_is_held_by_the_cgroup() -> testkit::Outcome {
    let _g = lock();
    let (o, out) = sweep(&spec("held", "buffered", "32MiB"), "held", &["--check"]);
    let r = only_row(&out);
    if let Some(skip) = unenforced(&r) {
        return skip;
    }
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(r["status"], "ok");
    assert_eq!(r["cgroup_reason"], serde_json::Value::Null);
    let budget = u(&r, "budget_bytes");
    let slack = u(&r, "cgroup_slack_bytes");
    assert_eq!(slack, 32 << 20);
    assert_eq!(u(&r, "cgroup_limit_bytes"), budget + slack);
    assert_eq!(u(&r, "cgroup_oom_kills"), 0);
    assert!(u(&r, "memory_samples") >= 2, "{r:#}");
    let seen = u(&r, "anon_plus_page_cache_peak_bytes");
    assert!(
        seen > 0 && seen <= budget + slack,
        "{seen} > {budget} + {slack}"
    );
    assert!(u(&r, "rss_anon_peak_sampled_bytes") > 0);
    assert_eq!(r["over_budget"], false);
    let line = String::from_utf8_lossy(&o.stdout);
    assert!(
        line.starts_with("PASS") && !line.contains("exceeded"),
        "{line}"
    );
    let meta: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("sweep.json")).unwrap()).unwrap();
    assert!(meta["cgroup"].as_str().unwrap().starts_with("enforced"));
    Ok(testkit::Completion::Completed)
}

fn oom_kill_is_a_failed_run_naming_the_slack() -> testkit::Outcome {
    let _g = lock();
    // 1 MiB above the floor cannot hold the process itself (binary, stacks: ~16 MiB).
    let (o, out) = sweep(&spec("oom", "direct", "1MiB"), "oom", &["--check"]);
    let r = only_row(&out);
    if let Some(skip) = unenforced(&r) {
        return skip;
    }
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert_eq!(r["status"], "failed");
    assert!(u(&r, "cgroup_oom_kills") >= 1, "{r:#}");
    let e = r["error"].as_str().unwrap();
    assert!(
        e.contains("OOM-killed") && e.contains("cgroup_slack"),
        "{e}"
    );
    Ok(testkit::Completion::Completed)
}

/// A run's processes end with it: an engine that leaves a grandchild running (here a
/// `sleep 300` it backgrounds) has it killed with its cgroup, and the cgroup removed.
fn a_runs_leftover_processes_are_killed_with_its_cgroup() -> testkit::Outcome {
    let _g = lock();
    let p = scratch().join("leaky.toml");
    let cmd = "sleep 300 & echo $! > {run_dir}/child.pid; printf '\\173\"output_ids\": [1]\\175' > {run_dir}/ids.json";
    std::fs::write(
        &p,
        format!(
            "name = \"leaky\"\nbudgets = [\"floor\"]\nio = [\"direct\"]\nprefetch = [\"none\"]\n\
             threads = [1]\nprompts = [\"The capital of France is\"]\nmax_tokens = 2\nrepeats = 1\n\
             engines = [\"memdial\", \"leaky\"]\n[engine.leaky]\ncommand = [\"sh\", \"-c\", {cmd:?}]\n\
             ids_json = \"{{run_dir}}/ids.json\"\nbudget = \"cgroup\"\nmust_match = false\n"
        ),
    )
    .unwrap();
    let (o, out) = sweep(&p, "leaky", &["--check"]);
    let t = std::fs::read_to_string(out.join("results.json")).unwrap();
    let rows: Vec<serde_json::Value> = serde_json::from_str(&t).unwrap();
    let Some(r) = rows.iter().find(|r| r["engine"] == "leaky") else {
        panic!("no leaky row: {}", text(&o));
    };
    if let Some(skip) = unenforced(r) {
        return skip;
    }
    let pidfile = std::fs::read_dir(out.join("runs"))
        .unwrap()
        .flatten()
        .map(|e| e.path().join("child.pid"))
        .find(|p| p.exists())
        .unwrap_or_else(|| panic!("no child.pid: {}", text(&o)));
    let pid: u32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // Gone, or a zombie waiting for init to reap it: not running.
    let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let running = state
        .rsplit_once(')')
        .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z'));
    assert!(
        !running,
        "the engine's grandchild {pid} outlived its run: {state}"
    );
    Ok(testkit::Completion::Completed)
}

/// An engine's setup step dies with the sweep, even when the sweep is killed with
/// SIGKILL (it runs with `PR_SET_PDEATHSIG`).
fn setup_step_dies_with_a_killed_sweep() {
    let _g = lock();
    let p = scratch().join("setup-kill.toml");
    let marker = format!(
        "{}",
        86_400 + std::time::UNIX_EPOCH.elapsed().unwrap().as_secs() % 1000
    );
    std::fs::write(
        &p,
        format!(
            "name = \"setup-kill\"\nbudgets = [\"floor\"]\nio = [\"direct\"]\nprefetch = [\"none\"]\n\
             threads = [1]\nprompts = [\"The capital of France is\"]\nmax_tokens = 2\nrepeats = 1\n\
             engines = [\"memdial\", \"slow\"]\n[engine.slow]\ncommand = [\"true\"]\n\
             ids_json = \"{{run_dir}}/ids.json\"\nsetup = [\"sleep\", \"{marker}\"]\nmust_match = false\n"
        ),
    )
    .unwrap();
    let out = scratch().join("setup-kill");
    let _ = std::fs::remove_dir_all(&out);
    let mut child = Command::new(memdial_bin!())
        .arg("sweep")
        .arg("--model")
        .arg(model())
        .arg("--spec")
        .arg(&p)
        .arg("--out")
        .arg(&out)
        .args(["--bandwidth-probe", "4MiB", "--no-cgroup", "--check"])
        .env("MEMDIAL_ENGINE_CACHE", scratch().join("setup-kill-cache"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // The setup's `sleep MARKER`, a child of the sweep.
    let sleeper = || -> Option<u32> {
        std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
            (cmd == format!("sleep\0{marker}\0").as_bytes()).then_some(pid)
        })
    };
    let t0 = std::time::Instant::now();
    let pid = loop {
        if let Some(pid) = sleeper() {
            break pid;
        }
        assert!(t0.elapsed().as_secs() < 60, "the setup step never started");
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let t1 = std::time::Instant::now();
    while std::path::Path::new(&format!("/proc/{pid}/cmdline")).exists()
        && std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| !c.is_empty())
    {
        assert!(
            t1.elapsed().as_secs() < 10,
            "setup step {pid} outlived the killed sweep"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

fn unenforced_run_over_budget_is_marked_not_failed() {
    let _g = lock();
    // No slack: the process's own memory (binary, stacks) already exceeds the floor.
    let (o, out) = sweep(
        &spec("over", "buffered", "0"),
        "over",
        &["--no-cgroup", "--check"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let r = only_row(&out);
    assert_eq!(r["cgroup_enforced"], false);
    assert_eq!(r["cgroup_reason"], "not requested (--no-cgroup)");
    assert_eq!(r["over_budget"], true, "{r:#}");
    let line = String::from_utf8_lossy(&o.stdout);
    assert!(
        line.starts_with("PASS")
            && line.contains("1 run(s) exceeded their budget through the page cache"),
        "{line}"
    );
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(
        md.contains("over budget†") && md.contains("† over budget:"),
        "{md}"
    );
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("verdict.json")).unwrap()).unwrap();
    assert_eq!(v["over_budget"].as_array().unwrap().len(), 1);
}

fn cgroup_flags_conflict() {
    let _g = lock();
    let (o, _) = sweep(
        &spec("flags", "direct", "32MiB"),
        "flags",
        &["--cgroup", "--no-cgroup"],
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
}

fn direct_run_leaves_no_shard_pages_in_the_page_cache() -> testkit::Outcome {
    let _g = lock();
    let m = model();
    let shards: Vec<PathBuf> = std::fs::read_dir(m)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "safetensors"))
        .collect();
    assert!(!shards.is_empty());
    for s in &shards {
        memdial::io::pagecache::evict(s).unwrap();
    }
    let cold: u64 = shards
        .iter()
        .map(|s| memdial::io::pagecache::resident_bytes(s).unwrap())
        .sum();
    if cold != 0 {
        // tmpfs or a filesystem that ignores DONTNEED: nothing to measure.
        return testkit::skip(format!(
            "{cold} bytes of the shards stay cached after eviction (tmpfs?)"
        ));
    }
    let o = Command::new(memdial_bin!())
        .args(["run", "--model"])
        .arg(m)
        .args(["--prompt", "The capital of France is", "--max-tokens", "3"])
        .args(["--io", "direct", "--budget", "1GiB"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    for s in &shards {
        let r = memdial::io::pagecache::resident_bytes(s).unwrap();
        assert_eq!(
            r,
            0,
            "{} has {r} bytes cached after a direct run",
            s.display()
        );
    }
    Ok(testkit::Completion::Completed)
}

fn main() -> ExitCode {
    testkit::main(
        include_str!("budget_enforcement.rs"),
        vec![
            testkit::ignorable(
                "buffered_floor_run_is_held_by_the_cgroup",
                buffered_floor_run_is_held_by_the_cgroup,
            ),
            testkit::ignorable(
                "oom_kill_is_a_failed_run_naming_the_slack",
                oom_kill_is_a_failed_run_naming_the_slack,
            ),
            testkit::ignorable(
                "direct_run_leaves_no_shard_pages_in_the_page_cache",
                direct_run_leaves_no_shard_pages_in_the_page_cache,
            ),
            testkit::ignorable(
                "a_runs_leftover_processes_are_killed_with_its_cgroup",
                a_runs_leftover_processes_are_killed_with_its_cgroup,
            ),
            testkit::test(
                "setup_step_dies_with_a_killed_sweep",
                setup_step_dies_with_a_killed_sweep,
            ),
            testkit::test(
                "unenforced_run_over_budget_is_marked_not_failed",
                unenforced_run_over_budget_is_marked_not_failed,
            ),
            testkit::test("cgroup_flags_conflict", cgroup_flags_conflict),
        ],
    )
}
