//! Integration tests of `memdial sweep` and `memdial report merge` against the real
//! `memdial run`, on the `tiny-k3` fixture generated into the target directory
//! (on disk, so direct IO and page-cache eviction behave as on a real model).
//!
//! The tests share one fixture and run one at a time (a global lock): concurrent
//! sweeps would evict each other's pages and make "cold" unverifiable.

use memdial_testkit::fixtures::lock;
use memdial_testkit::memdial_bin;
use memdial_testkit::output_text as text;
use memdial_testkit::shared_fixture;
use memdial_testkit::shared_scratch;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Spec used by most tests: 2 budgets × 2 IO modes × 2 repeats = 8 runs of 4 tokens.
const SPEC: &str = r#"
name = "test"
budgets = ["floor", "3x floor"]
io = ["direct", "buffered"]
prefetch = ["none"]
cache = ["lru"]
threads = [1]
prompts = ["The capital of France is"]
max_tokens = 4
repeats = 2
# These tests check what a sweep writes, on whatever machine runs them (a shared
# CI runner is busy): no run is noisy here. The sentinel's own test has a fake /proc.
[noise]
other_cpu_cores = 1024.0
run_queue_wait_fraction = 1024.0
steal_cores = 1024.0
foreign_read_bytes = 1125899906842624
"#;
const SPEC_RUNS: usize = 8;

fn spec_file(name: &str, text: &str) -> PathBuf {
    let p = shared_scratch!().join(name);
    std::fs::write(&p, text).unwrap();
    p
}

fn sweep(spec: &Path, out: &Path, extra: &[&str]) -> Output {
    Command::new(memdial_bin!())
        .arg("sweep")
        .arg("--model")
        .arg(shared_fixture!("tiny-k3"))
        .arg("--spec")
        .arg(spec)
        .arg("--out")
        .arg(out)
        .args(["--bandwidth-probe", "4MiB"])
        .args(extra)
        .output()
        .unwrap()
}

fn fresh(name: &str) -> PathBuf {
    let d = shared_scratch!().join(name);
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// Runs `memdial report merge ARGS…`.
fn merge(args: &[&Path]) -> Output {
    Command::new(memdial_bin!())
        .args(["report", "merge"])
        .args(args)
        .output()
        .unwrap()
}

/// Rows of results.json.
fn rows(dir: &Path) -> Vec<serde_json::Value> {
    let t = std::fs::read_to_string(dir.join("results.json")).unwrap();
    serde_json::from_str::<Vec<serde_json::Value>>(&t).unwrap()
}

fn hashes(dir: &Path) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = rows(dir)
        .iter()
        .map(|r| {
            (
                r["run_id"].as_str().unwrap().to_string(),
                r["output_ids_sha256"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    v.sort();
    v
}

/// An uninterrupted full sweep of SPEC, run once and shared.
fn full_run() -> &'static PathBuf {
    static F: OnceLock<PathBuf> = OnceLock::new();
    F.get_or_init(|| {
        let out = fresh("full");
        let o = sweep(&spec_file("full.toml", SPEC), &out, &["--check"]);
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        out
    })
}

#[test]
fn small_sweep_passes_and_writes_every_file() {
    let _g = lock();
    let t0 = Instant::now();
    let out = full_run();
    // results.csv: the documented columns, one row per run, all finished and cold.
    let mut rd = csv::Reader::from_path(out.join("results.csv")).unwrap();
    let header: Vec<String> = rd.headers().unwrap().iter().map(String::from).collect();
    for col in [
        "run_id",
        "point_index",
        "repeat",
        "status",
        "budget_bytes",
        "io",
        "prefetch",
        "cache",
        "threads",
        "cold_verified",
        "resident_before_bytes",
        "decode_s_per_token_median",
        "tokens_per_s",
        "bytes_read_per_token",
        "io_wait_fraction",
        "peak_rss_bytes",
        "output_ids",
        "output_ids_sha256",
        "cpu_model",
        "kernel",
    ] {
        assert!(
            header.contains(&col.to_string()),
            "column {col} missing from {header:?}"
        );
    }
    let recs: Vec<csv::StringRecord> = rd.records().map(|r| r.unwrap()).collect();
    assert_eq!(recs.len(), SPEC_RUNS);
    let col = |n: &str| header.iter().position(|h| h == n).unwrap();
    let hashes: std::collections::BTreeSet<&str> = recs
        .iter()
        .map(|r| r.get(col("output_ids_sha256")).unwrap())
        .collect();
    assert_eq!(hashes.len(), 1, "{hashes:?}");
    assert_eq!(hashes.iter().next().unwrap().len(), 64);
    for r in &recs {
        assert_eq!(r.get(col("status")), Some("ok"));
        assert!(
            r.get(col("decode_s_per_token_median"))
                .unwrap()
                .parse::<f64>()
                .unwrap()
                > 0.0
        );
        assert_eq!(r.get(col("output_ids")).unwrap().split(' ').count(), 4);
        if std::env::var_os("MEMDIAL_TEST_TMPFS").is_none() {
            assert_eq!(
                r.get(col("cold_verified")),
                Some("true"),
                "model dir must be on a real disk"
            );
        }
    }
    // results.json has the same rows with arrays preserved.
    let js = rows(out);
    assert_eq!(js.len(), SPEC_RUNS);
    assert_eq!(js[0]["output_ids"].as_array().unwrap().len(), 4);
    // report.md, charts.
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(md.contains("**PASS"), "{md}");
    assert!(md.contains("## Environment") && md.contains("Cold read, O_DIRECT"));
    assert!(md.contains("| p0 |") && md.contains("| p3 |"));
    assert!(md.contains("](curve.svg)"));
    for f in ["curve.svg", "io.svg"] {
        let svg = std::fs::read_to_string(out.join(f)).unwrap();
        assert!(svg.len() > 2000, "{f} too small");
        assert!(
            svg.contains("memory budget (bytes, log scale)"),
            "{f} lacks the x axis label"
        );
    }
    let svg = std::fs::read_to_string(out.join("curve.svg")).unwrap();
    assert!(svg.contains("decode time (s/token, log scale)"));
    assert!(
        svg.contains("direct / none") && svg.contains("buffered / none"),
        "legend"
    );
    for f in ["curve.png", "io.png"] {
        let png = std::fs::read(out.join(f)).unwrap();
        assert!(png.len() > 10_000, "{f} too small");
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    }
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("verdict.json")).unwrap()).unwrap();
    assert_eq!(v["pass"], true);
    assert!(out.join("runs/p000-r0/metrics.json").exists());
    // The recommendation comes first in report.md and is in verdict.json; the curve
    // has one panel per IO mode.
    let first = md.find("## ").unwrap();
    assert!(md[first..].starts_with("## Recommendation"), "{md}");
    let modes = v["recommendation"]["modes"].as_array().unwrap();
    assert_eq!(modes.len(), 2);
    assert_eq!(
        v["recommendation"]["by_budget"].as_array().unwrap().len(),
        2
    );
    assert!(svg.contains("io = direct") && svg.contains("io = buffered"));
    eprintln!("small sweep: {:.1} s", t0.elapsed().as_secs_f64());
}

#[test]
fn perturbed_point_fails_and_is_named() {
    let _g = lock();
    let out = fresh("perturbed");
    let spec = r#"
budgets = ["floor", "3x floor"]
io = ["direct"]
prompts = ["The capital of France is"]
max_tokens = 4
repeats = 1
"#;
    let o = sweep(
        &spec_file("perturbed.toml", spec),
        &out,
        &["--test-perturb-point", "1", "--check"],
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let line = String::from_utf8_lossy(&o.stdout);
    assert_eq!(line.lines().count(), 1, "--check prints one line: {line}");
    assert!(line.starts_with("FAIL"), "{line}");
    assert!(line.contains("p1 [budget=3x floor;io=direct"), "{line}");
    assert!(line.contains("first difference at token 0"), "{line}");
    assert!(!line.contains("p0 ["), "{line}");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("verdict.json")).unwrap()).unwrap();
    assert_eq!(v["pass"], false);
    let m = &v["groups"][0]["mismatches"][0];
    assert_eq!(m["point_index"], 1);
    assert_eq!(m["first_diff_position"], 0);
    assert_eq!(m["got_id"], 7);
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(
        md.contains("**FAIL") && md.contains("Differing points: p1"),
        "{md}"
    );
}

#[test]
fn killed_sweep_resumes_without_rerunning_finished_runs() {
    let _g = lock();
    let full = full_run();
    let out = fresh("killed");
    let spec = spec_file("killed.toml", SPEC);
    let mut child = Command::new(memdial_bin!())
        .arg("sweep")
        .arg("--model")
        .arg(shared_fixture!("tiny-k3"))
        .arg("--spec")
        .arg(&spec)
        .arg("--out")
        .arg(&out)
        .args(["--bandwidth-probe", "4MiB", "--check"])
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    loop {
        let n = std::fs::read_to_string(out.join("results.json"))
            .ok()
            .and_then(|t| serde_json::from_str::<Vec<serde_json::Value>>(&t).ok())
            .map(|v| v.len())
            .unwrap_or(0);
        if n >= 1 {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(120), "no run finished");
        assert!(
            child.try_wait().unwrap().is_none(),
            "sweep ended before it could be killed"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    child.kill().unwrap(); // SIGKILL: no chance to clean up
    child.wait().unwrap();
    // The partial directory is valid: parseable results, a report saying it is partial.
    let before = rows(&out);
    assert!(
        !before.is_empty() && before.len() < SPEC_RUNS,
        "{} rows",
        before.len()
    );
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(md.contains("Partial report"), "{md}");
    csv::Reader::from_path(out.join("results.csv"))
        .unwrap()
        .records()
        .for_each(|r| {
            r.unwrap();
        });
    // Re-run: completes, keeps the finished runs untouched.
    let o = sweep(&spec, &out, &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        stderr.contains(&format!("{} already finished", before.len())),
        "{stderr}"
    );
    let after = rows(&out);
    assert_eq!(after.len(), SPEC_RUNS);
    for b in &before {
        let a = after
            .iter()
            .find(|a| a["run_id"] == b["run_id"])
            .expect("finished run kept");
        assert_eq!(
            a["started_utc"], b["started_utc"],
            "run {} was re-run",
            b["run_id"]
        );
        assert_eq!(a["wall_s"], b["wall_s"]);
    }
    // Same count and hashes as an uninterrupted sweep.
    assert_eq!(hashes(&out), hashes(full));
}

#[test]
fn shards_merge_into_the_full_verdict() {
    let _g = lock();
    let full = full_run();
    let spec = spec_file("shard.toml", SPEC);
    let a = fresh("shard1");
    let b = fresh("shard2");
    let o1 = sweep(&spec, &a, &["--shard", "1/2", "--check"]);
    assert_eq!(o1.status.code(), Some(0), "{}", text(&o1));
    let o2 = sweep(&spec, &b, &["--shard", "2/2", "--check"]);
    assert_eq!(o2.status.code(), Some(0), "{}", text(&o2));
    let (ra, rb) = (rows(&a), rows(&b));
    assert_eq!(ra.len() + rb.len(), SPEC_RUNS);
    assert!(ra
        .iter()
        .all(|r| r["point_index"].as_u64().unwrap() % 2 == 0));
    assert!(rb
        .iter()
        .all(|r| r["point_index"].as_u64().unwrap() % 2 == 1));
    let merged = fresh("merged");
    let o = merge(&[&a, &b, Path::new("--out"), &merged, Path::new("--check")]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let line = String::from_utf8_lossy(&o.stdout).trim().to_string();
    let fv: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(full.join("verdict.json")).unwrap()).unwrap();
    let mv: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(merged.join("verdict.json")).unwrap())
            .unwrap();
    assert_eq!(mv["pass"], fv["pass"]);
    assert_eq!(mv["runs_compared"], fv["runs_compared"]);
    assert_eq!(mv["groups"][0]["hash"], fv["groups"][0]["hash"]);
    assert!(
        line.starts_with(&format!("PASS: {SPEC_RUNS} runs at 4 points")),
        "{line}"
    );
    assert_eq!(hashes(&merged), hashes(full));
    assert!(merged.join("curve.png").exists() && merged.join("report.md").exists());
    // The merge carries the runs its rows are checked against.
    let o = Command::new(memdial_bin!())
        .args(["report", "verify"])
        .arg(&merged)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "report verify: {}", text(&o));
    // A lost shard makes the merge incomplete (exit 1), even when what is there passes,
    // and its runs count as planned (the shards record the whole sweep's).
    let partial = fresh("merged-partial");
    let o = merge(&[&a, &a, Path::new("--out"), &partial, Path::new("--check")]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let want = format!("({} of {SPEC_RUNS} runs; shard(s) 2/2 missing", ra.len());
    assert!(
        String::from_utf8_lossy(&o.stdout).contains(&want),
        "{want:?} in {}",
        text(&o)
    );
    let sj: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(partial.join("sweep.json")).unwrap())
            .unwrap();
    assert_eq!(sj["runs_planned"], SPEC_RUNS);
    // --out must not overwrite an input shard.
    let o = merge(&[&a, &b, Path::new("--out"), &a]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    // Re-merging into an earlier merge's directory is allowed.
    let o = merge(&[&a, &b, Path::new("--out"), &merged, Path::new("--check")]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    // A shard of another spec is refused.
    let other = fresh("other");
    let o3 = sweep(
        &spec_file("other.toml", &SPEC.replace("repeats = 2", "repeats = 1")),
        &other,
        &["--shard", "1/2", "--check"],
    );
    assert_eq!(o3.status.code(), Some(0), "{}", text(&o3));
    let o4 = merge(&[&a, &other, Path::new("--out"), &fresh("bad-merge")]);
    assert_eq!(o4.status.code(), Some(2), "{}", text(&o4));
}

#[test]
fn baseline_regression_gate() {
    let _g = lock();
    let full = full_run();
    let spec = spec_file("baseline.toml", SPEC);
    // Rewrite the baseline as if every point had been 1000× faster (medians and the
    // per-token decode times), next to a copy of its sweep.json.
    let fast_dir = fresh("fast-baseline");
    std::fs::create_dir_all(&fast_dir).unwrap();
    std::fs::copy(full.join("sweep.json"), fast_dir.join("sweep.json")).unwrap();
    let fast = fast_dir.join("results.csv");
    let mut rd = csv::Reader::from_path(full.join("results.csv")).unwrap();
    let h = rd.headers().unwrap().clone();
    let c = h
        .iter()
        .position(|x| x == "decode_s_per_token_median")
        .unwrap();
    let ct = h.iter().position(|x| x == "decode_s_per_token").unwrap();
    let mut w = csv::Writer::from_path(&fast).unwrap();
    w.write_record(&h).unwrap();
    for r in rd.records() {
        let r = r.unwrap();
        let v: f64 = r.get(c).unwrap().parse().unwrap();
        let rec: Vec<String> = r
            .iter()
            .enumerate()
            .map(|(i, x)| {
                if i == c {
                    (v / 1000.0).to_string()
                } else if i == ct {
                    x.split(' ')
                        .map(|t| (t.parse::<f64>().unwrap() / 1000.0).to_string())
                        .collect::<Vec<_>>()
                        .join(" ")
                } else {
                    x.to_string()
                }
            })
            .collect();
        w.write_record(&rec).unwrap();
    }
    w.flush().unwrap();
    let out = fresh("baseline-bad");
    let o = sweep(
        &spec,
        &out,
        &[
            "--check",
            "--baseline",
            fast.to_str().unwrap(),
            "--max-regression",
            "25%",
        ],
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let line = String::from_utf8_lossy(&o.stdout);
    // One outcome: the ids agree, the gate regressed, so the line says FAIL.
    assert!(
        line.starts_with("FAIL: ") && line.contains("baseline: 4 of 4 points slower"),
        "{line}"
    );
    assert!(std::fs::read_to_string(out.join("report.md"))
        .unwrap()
        .contains("**regressed**"));
    // Against itself with a generous tolerance it passes (the resumed directory re-uses the runs).
    let o = sweep(
        &spec,
        &out,
        &[
            "--check",
            "--baseline",
            full.join("results.csv").to_str().unwrap(),
            "--max-regression",
            "10000%",
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
}

#[test]
fn usage_errors_exit_2() {
    let _g = lock();
    let spec = spec_file("usage.toml", SPEC);
    let cases: Vec<(Vec<String>, &str)> = vec![
        (vec!["--shard".into(), "3/2".into()], "shard"),
        (vec!["--max-regression".into(), "fast".into()], "tolerance"),
        (vec!["--test-perturb-point".into(), "99".into()], "points"),
    ];
    for (extra, what) in cases {
        let extra: Vec<&str> = extra.iter().map(|s| s.as_str()).collect();
        let o = sweep(&spec, &fresh("usage"), &extra);
        assert_eq!(o.status.code(), Some(2), "{what}: {}", text(&o));
    }
    let bad = spec_file("bad.toml", "budgets = [\"lots\"]\n");
    assert_eq!(sweep(&bad, &fresh("usage"), &[]).status.code(), Some(2));
    let o = Command::new(memdial_bin!())
        .args(["sweep", "--model", "/nonexistent/model", "--spec"])
        .arg(&spec)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    // An --out holding a different sweep is refused.
    let full = full_run();
    let other = spec_file(
        "other2.toml",
        &SPEC.replace("max_tokens = 4", "max_tokens = 3"),
    );
    let o = sweep(&other, full, &["--check"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
}

#[test]
fn baseline_from_another_spec_or_without_sweep_json_is_refused() {
    let _g = lock();
    let full = full_run();
    let other = spec_file(
        "other-baseline.toml",
        &SPEC.replace("max_tokens = 4", "max_tokens = 3"),
    );
    let base = full.join("results.csv");
    let o = sweep(
        &other,
        &fresh("baseline-other"),
        &["--check", "--baseline", base.to_str().unwrap()],
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("spec differs"), "{err}");
    // A results.csv alone (no sweep.json next to it) is refused too.
    let lone_dir = fresh("baseline-lone");
    std::fs::create_dir_all(&lone_dir).unwrap();
    std::fs::copy(&base, lone_dir.join("results.csv")).unwrap();
    let o = sweep(
        &spec_file("lone.toml", SPEC),
        &fresh("baseline-lone-out"),
        &[
            "--check",
            "--baseline",
            lone_dir.join("results.csv").to_str().unwrap(),
        ],
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stderr).contains("no sweep.json"));
    // A baseline written before the results schema existed names the reason.
    let old_dir = fresh("baseline-old");
    std::fs::create_dir_all(&old_dir).unwrap();
    std::fs::copy(&base, old_dir.join("results.csv")).unwrap();
    let mut meta: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(full.join("sweep.json")).unwrap()).unwrap();
    meta.as_object_mut().unwrap().remove("results_schema");
    std::fs::write(old_dir.join("sweep.json"), meta.to_string()).unwrap();
    let o = sweep(
        &spec_file("old.toml", SPEC),
        &fresh("baseline-old-out"),
        &[
            "--check",
            "--baseline",
            old_dir.join("results.csv").to_str().unwrap(),
        ],
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stderr).contains("before results schema"));
}

/// Spec of the interrupt test: 3 budgets × 2 IO modes × 3 repeats = 18 runs, long
/// enough to be interrupted in the middle.
const LONG_SPEC: &str = r#"
name = "long"
budgets = ["floor", "2x floor", "3x floor"]
io = ["direct", "buffered"]
prefetch = ["none"]
cache = ["lru"]
threads = [1]
prompts = ["The capital of France is"]
max_tokens = 4
repeats = 3
"#;
const LONG_RUNS: usize = 18;

/// This test process's pid, from `/proc/self` (the scratch-name lint keeps
/// `process::id()` out of tests, where it could name directories shared between them).
fn own_pid() -> u32 {
    std::fs::read_link("/proc/self")
        .ok()
        .and_then(|p| p.to_str()?.parse().ok())
        .unwrap_or(0)
}

/// Processes other than `except` whose command line mentions `needle`.
fn processes_mentioning(needle: &str, except: u32) -> Vec<String> {
    let mut v = vec![];
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Ok(pid) = name.parse::<u32>() else {
            continue;
        };
        if pid == except || pid == own_pid() {
            continue;
        }
        if let Ok(c) = std::fs::read(e.path().join("cmdline")) {
            let c = String::from_utf8_lossy(&c).replace('\0', " ");
            if c.contains(needle) {
                v.push(format!("{pid}: {c}"));
            }
        }
    }
    v
}

/// A second sweep into a running sweep's --out exits 2 naming the
/// holder's pid; SIGTERM makes the sweep print the exact resume command and its
/// child run dies with it (PR_SET_PDEATHSIG); that command completes the sweep, and
/// under --check prints one progress line per run it finishes.
#[test]
fn locked_out_dir_and_interrupt_print_the_resume_command() {
    let _g = lock();
    let out = fresh("locked");
    let spec = spec_file("long.toml", LONG_SPEC);
    let mut a = Command::new(memdial_bin!())
        .arg("sweep")
        .arg("--model")
        .arg(shared_fixture!("tiny-k3"))
        .arg("--spec")
        .arg(&spec)
        .arg("--out")
        .arg(&out)
        .args(["--bandwidth-probe", "4MiB", "--check"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while !out.join("runs").exists() {
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "sweep A never started a run"
        );
        assert!(a.try_wait().unwrap().is_none(), "sweep A ended early");
        std::thread::sleep(Duration::from_millis(5));
    }
    // A second sweep into the same directory is refused, naming A's pid.
    let b = sweep(&spec, &out, &["--check"]);
    assert_eq!(b.status.code(), Some(2), "{}", text(&b));
    assert!(
        String::from_utf8_lossy(&b.stderr)
            .contains(&format!("is in use by another sweep (pid {})", a.id())),
        "{}",
        text(&b)
    );
    assert!(
        a.try_wait().unwrap().is_none(),
        "sweep A ended before SIGTERM"
    );
    // SIGTERM: A prints the resume command and exits 128 + 15.
    let st = Command::new("kill")
        .args(["-TERM", &a.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    let o = a.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(143), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    let resume = err
        .lines()
        .skip_while(|l| !l.contains("resume it with:"))
        .nth(1)
        .unwrap_or_else(|| panic!("no resume command:\n{err}"))
        .trim()
        .to_string();
    assert!(
        resume.contains(" sweep ") && resume.ends_with(&format!("--out {}", out.display())),
        "{resume}"
    );
    // The child run died with the harness: nothing is left writing into --out.
    let needle = out.display().to_string();
    let t1 = Instant::now();
    while !processes_mentioning(&needle, 0).is_empty() {
        assert!(
            t1.elapsed() < Duration::from_secs(5),
            "orphaned runs: {:?}",
            processes_mentioning(&needle, 0)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let done_before = rows(&out).len();
    assert!(done_before < LONG_RUNS, "{done_before} rows");
    // The printed command resumes and completes the sweep.
    let r = Command::new("/bin/sh")
        .arg("-c")
        .arg(&resume)
        .output()
        .unwrap();
    assert_eq!(r.status.code(), Some(0), "{}", text(&r));
    assert!(
        String::from_utf8_lossy(&r.stdout).starts_with(&format!("PASS: {LONG_RUNS} runs")),
        "{}",
        text(&r)
    );
    assert_eq!(rows(&out).len(), LONG_RUNS);
    // --check: one progress line per run this invocation finished.
    let progress = String::from_utf8_lossy(&r.stderr)
        .lines()
        .filter(|l| l.starts_with('[') && l.contains("] p"))
        .count();
    assert_eq!(progress, LONG_RUNS - done_before, "{}", text(&r));
}

/// A sweep killed before its first sweep.json (only the lock, a temporary of the
/// interrupted write and the same spec.toml are there) is resumed as new, and the
/// stale temporary removed; a directory holding anything else is refused.
#[test]
fn sweep_killed_before_sweep_json_resumes_and_stale_temps_go() {
    let _g = lock();
    let out = fresh("early-kill");
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(out.join("spec.toml"), SPEC).unwrap();
    std::fs::write(out.join(".lock"), "999999999\n").unwrap();
    std::fs::write(out.join(".sweep.json.tmp999999999"), "{\"format\": 1, ").unwrap();
    let o = sweep(&spec_file("early.toml", SPEC), &out, &["--check"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(!out.join(".sweep.json.tmp999999999").exists());
    assert_eq!(rows(&out).len(), SPEC_RUNS);
    let foreign = fresh("foreign");
    std::fs::create_dir_all(&foreign).unwrap();
    std::fs::write(foreign.join("notes.txt"), "mine").unwrap();
    let o = sweep(&spec_file("early.toml", SPEC), &foreign, &["--check"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("holds no sweep (notes.txt)"),
        "{}",
        text(&o)
    );
}

/// An interrupted sweep's verdict is not a pass: verdict.json says complete = false
/// and pass = false, the line reads INCOMPLETE (n of m runs), exit 1 under --check.
#[test]
fn incomplete_sweep_verdict_says_so() {
    let _g = lock();
    let out = fresh("incomplete");
    let o = sweep(
        &spec_file("incomplete.toml", SPEC),
        &out,
        &["--check", "--test-stop-after", "1"],
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let line = String::from_utf8_lossy(&o.stdout).trim().to_string();
    assert!(
        line.starts_with(&format!("INCOMPLETE (1 of {SPEC_RUNS} runs)")) && !line.contains("PASS"),
        "{line}"
    );
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("verdict.json")).unwrap()).unwrap();
    assert_eq!(v["complete"], false, "{v}");
    assert_eq!(v["pass"], false, "{v}");
    assert_eq!(v["runs_done"], 1, "{v}");
    assert_eq!(v["runs_planned"], SPEC_RUNS, "{v}");
    // --check: exactly one progress line, for the one run it finished.
    let progress = String::from_utf8_lossy(&o.stderr)
        .lines()
        .filter(|l| l.starts_with(&format!("[1/{SPEC_RUNS}] p")))
        .count();
    assert_eq!(progress, 1, "{}", text(&o));
}

/// A full sweep plus its own shard 1/2 merges complete (each run
/// counted once); two copies of a run that disagree, or a shard from another model
/// (another model content hash in sweep.json), exit 2 naming both directories.
#[test]
fn merge_proves_its_inputs() {
    let _g = lock();
    let full = full_run();
    let spec = spec_file("full.toml", SPEC);
    let a = fresh("proof-shard1");
    let o = sweep(&spec, &a, &["--shard", "1/2", "--check"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    // Full + its shard: complete, PASS, SPEC_RUNS runs (the shard's copies once).
    let m = fresh("proof-merged");
    let o = merge(&[full, &a, Path::new("--out"), &m, Path::new("--check")]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout).starts_with(&format!("PASS: {SPEC_RUNS} runs")),
        "{}",
        text(&o)
    );
    assert_eq!(rows(&m).len(), SPEC_RUNS);
    // A copy of the shard whose first run reports another output (its row and its
    // run's metrics.json agree with each other): refused, naming both.
    let bad = fresh("proof-conflict");
    std::fs::create_dir_all(&bad).unwrap();
    for f in ["sweep.json", "results.json", "spec.toml"] {
        std::fs::copy(a.join(f), bad.join(f)).unwrap();
    }
    let mut rs = rows(&bad);
    let id = rs[0]["run_id"].as_str().unwrap().to_string();
    for r in &rs {
        let run = format!(
            "p{:03}-{}{}",
            r["point_index"].as_u64().unwrap(),
            if r["warmup"] == true { "w" } else { "r" },
            r["repeat"].as_u64().unwrap()
        );
        std::fs::create_dir_all(bad.join("runs").join(&run)).unwrap();
        std::fs::copy(
            a.join("runs").join(&run).join("metrics.json"),
            bad.join("runs").join(&run).join("metrics.json"),
        )
        .unwrap();
    }
    let other_ids: Vec<u32> = vec![9; rs[0]["output_ids"].as_array().unwrap().len()];
    let other_hash = memdial::engine::generate::ids_sha256(&other_ids);
    rs[0]["output_ids"] = serde_json::json!(other_ids);
    rs[0]["output_ids_sha256"] = serde_json::json!(other_hash);
    let run0 = bad.join("runs").join(format!(
        "p{:03}-r{}",
        rs[0]["point_index"].as_u64().unwrap(),
        rs[0]["repeat"].as_u64().unwrap()
    ));
    let mut m0: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run0.join("metrics.json")).unwrap()).unwrap();
    m0["output_ids"] = serde_json::json!(other_ids);
    m0["output_ids_sha256"] = serde_json::json!(other_hash);
    std::fs::write(run0.join("metrics.json"), m0.to_string()).unwrap();
    std::fs::write(
        bad.join("results.json"),
        serde_json::to_string(&rs).unwrap(),
    )
    .unwrap();
    let o = merge(&[&a, &bad, Path::new("--out"), &fresh("proof-out1")]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(&format!("run {id} differs between {}", a.display()))
            && err.contains(&bad.display().to_string()),
        "{}",
        text(&o)
    );
    // A shard from another model (same size, another content hash): refused.
    let other = fresh("proof-other-model");
    std::fs::create_dir_all(&other).unwrap();
    for f in ["results.json", "spec.toml"] {
        std::fs::copy(a.join(f), other.join(f)).unwrap();
    }
    let mut meta: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(a.join("sweep.json")).unwrap()).unwrap();
    assert!(meta["model_content_hash"].is_string(), "{meta}");
    meta["model_content_hash"] = serde_json::json!("f".repeat(64));
    std::fs::write(other.join("sweep.json"), meta.to_string()).unwrap();
    let o = merge(&[full, &other, Path::new("--out"), &fresh("proof-out2")]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("was made from another model (model content hash ffffffffffff…)")
            && err.contains(&full.display().to_string()),
        "{}",
        text(&o)
    );
}

/// A sweep whose every run is over the `[noise]` thresholds (other CPU use above −1
/// cores: any) says so at the top of report.md and in the `--check` line, and gives no
/// answer; its `start` axis runs each point warm (the fill in its own columns) and cold.
#[test]
fn noisy_runs_are_said_and_decide_nothing_and_warm_starts_fill_apart() {
    let _g = lock();
    let out = fresh("noisy");
    let spec = SPEC
        .replace("repeats = 2", "repeats = 1")
        .replace("[noise]", "start = [\"warm\", \"cold\"]\n[noise]")
        .replace(
            "other_cpu_cores = 1024.0",
            "other_cpu_cores = -1.0\nother_cpu_min_s = -1.0",
        );
    let o = sweep(&spec_file("noisy.toml", &spec), &out, &["--check"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let line = String::from_utf8_lossy(&o.stdout).trim().to_string();
    assert!(line.starts_with("PASS: 8 runs"), "{line}");
    assert!(
        line.ends_with("; NOISY: 8 of 8 measured runs marked noisy (left out of the statistics)"),
        "{line}"
    );
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    let first = md.find("## ").unwrap();
    assert!(
        md[..first].contains("> **Noisy machine:** 8 of 8 measured runs were marked noisy"),
        "{md}"
    );
    assert!(md.contains("**Bottom line: no answer**"), "{md}");
    let js = rows(&out);
    assert_eq!(js.len(), 8);
    for r in &js {
        let key = r["point_key"].as_str().unwrap();
        let reason = r["noisy"].as_str().unwrap_or_default();
        assert!(reason.starts_with("other processes used"), "{r}");
        assert!(r["noise_other_cpu_s"].as_f64().unwrap() >= 0.0);
        match r["start"].as_str().unwrap() {
            "warm" => {
                assert!(key.ends_with(";start=warm"), "{key}");
                assert!(r["warm_fill_s"].as_f64().unwrap() > 0.0, "{r}");
                assert!(r["warm_fill_bytes"].as_u64().unwrap() > 0, "{r}");
            }
            "cold" => {
                assert!(key.ends_with(";start=cold"), "{key}");
                assert!(r["warm_fill_s"].is_null(), "{r}");
            }
            s => panic!("start {s:?}"),
        }
    }
}

/// `repeats = "auto"` with a precision every point of a quiet-enough machine reaches
/// at its third run (±99 % of the median): the sweep plans 4 rounds (16 runs) and
/// stops each point once its interval is that narrow, so fewer runs pass as complete,
/// the verdict counts the runs not needed, and the medians table says what each
/// point took; interrupted, the same sweep is INCOMPLETE, not a pass.
#[test]
fn auto_repeats_stop_at_the_precision_and_pass_with_fewer_runs() {
    let _g = lock();
    let spec = SPEC.replace(
        "repeats = 2",
        "repeats = \"auto\"\nprecision = \"99%\"\nmax_repeats = 4",
    );
    let spec = spec_file("auto.toml", &spec);
    let out = fresh("auto");
    let o = sweep(&spec, &out, &["--check"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let line = String::from_utf8_lossy(&o.stdout).trim().to_string();
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("verdict.json")).unwrap()).unwrap();
    let done = rows(&out).len();
    assert!((12..=16).contains(&done), "{done} rows");
    assert_eq!(v["runs_planned"], 16, "{v}");
    assert_eq!(
        v["runs_not_needed"].as_u64().unwrap_or(0) as usize,
        16 - done
    );
    assert_eq!(v["complete"], true, "{v}");
    let reps = v["repeats_auto"].as_array().unwrap();
    assert_eq!(reps.len(), 4, "{v}");
    let reached = reps.iter().filter(|r| r["reached"] == true).count();
    assert!(
        line.contains(&format!(
            "; repeats auto: {reached} of 4 point(s) reached ±99 % before 4 runs ({} planned run(s) not needed)",
            16 - done
        )),
        "{line}"
    );
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(md.contains(" of 4 (±"), "{md}");
    assert!(md.contains(", precision reached)"), "{md}");
    let o = Command::new(memdial_bin!())
        .args(["report", "verify"])
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    // Interrupted after 5 runs: no point can have its third run yet.
    let out = fresh("auto-stopped");
    let o = sweep(&spec, &out, &["--check", "--test-stop-after", "5"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let line = String::from_utf8_lossy(&o.stdout).trim().to_string();
    assert!(line.starts_with("INCOMPLETE (5 of 16 runs)"), "{line}");
}

/// `concurrency = [1, 2]` at two budgets: concurrency 1 is the ordinary run, 2 is
/// `memdial serve --max-batch 2` with two streaming clients; every request's ids
/// equal the ordinary run's, both concurrencies of a budget run at the same bytes
/// (resolved against the two-sequence floor), and the report gives the curve.
#[test]
fn concurrency_sweep_serves_clients_whose_ids_equal_the_single_runs() {
    let _g = lock();
    let out = fresh("concurrency");
    let spec = SPEC
        .replace("repeats = 2", "repeats = 1")
        .replace("io = [\"direct\", \"buffered\"]", "io = [\"direct\"]")
        .replace(
            "budgets = [\"floor\", \"3x floor\"]",
            "budgets = [\"floor\", \"2x floor\"]",
        )
        // Targets no run on this machine misses (1000 s): every request is goodput.
        .replace(
            "[noise]",
            "concurrency = [1, 2]\nslo = { ttft_s = 1000.0, tpot_s = 1000.0 }\n[noise]",
        );
    let o = sweep(&spec_file("concurrency.toml", &spec), &out, &["--check"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let line = String::from_utf8_lossy(&o.stdout).trim().to_string();
    // Each request counts as a run compared: 2 ordinary runs + 2 × 2 requests.
    assert!(line.starts_with("PASS: 6 runs at 4 points"), "{line}");
    let js = rows(&out);
    assert_eq!(js.len(), 4);
    let ids = |r: &serde_json::Value| -> Vec<u64> {
        r["output_ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap())
            .collect()
    };
    for budget in ["floor", "2x floor"] {
        let at: Vec<&serde_json::Value> =
            js.iter().filter(|r| r["budget_spec"] == budget).collect();
        assert_eq!(at.len(), 2, "{budget}");
        let (one, two) = if at[0]["concurrency"] == "1" {
            (at[0], at[1])
        } else {
            (at[1], at[0])
        };
        assert_eq!(two["concurrency"], "2", "{two}");
        assert_eq!(one["status"], "ok", "{one}");
        assert_eq!(two["status"], "ok", "{two}");
        let single = ids(one);
        assert_eq!(single.len(), 4, "{one}");
        let requests = two["requests_output_ids"].as_array().unwrap();
        assert_eq!(requests.len(), 2, "{two}");
        for q in requests {
            let q: Vec<u64> = q
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_u64().unwrap())
                .collect();
            assert_eq!(
                q, single,
                "a served request's ids differ from memdial run's"
            );
        }
        assert_eq!(one["budget_bytes"], two["budget_bytes"]);
        assert!(
            two["planned_floor_bytes"].as_u64() > one["planned_floor_bytes"].as_u64(),
            "the two-sequence floor holds a second sequence's state: {one} {two}"
        );
        assert!(two["planned_floor_for"]
            .as_str()
            .unwrap()
            .ends_with("× 2 sequences"));
        for r in [one, two] {
            assert!(r["aggregate_tokens_per_s"].as_f64().unwrap() > 0.0, "{r}");
            assert!(r["ttft_p50_s"].as_f64().unwrap() > 0.0, "{r}");
            assert!(r["itl_p90_s"].as_f64().unwrap() >= r["itl_p50_s"].as_f64().unwrap());
            assert_eq!(r["goodput_fraction"], 1.0, "{r}");
            assert!(r["goodput_requests_per_s"].as_f64().unwrap() > 0.0, "{r}");
        }
        // Every request of the served run met the SLO: its goodput rate is its
        // requests over its clients' time, 2 ÷ (2 × 4 tokens ÷ aggregate tokens/s).
        let rate = two["goodput_requests_per_s"].as_f64().unwrap();
        let agg = two["aggregate_tokens_per_s"].as_f64().unwrap();
        assert!((rate - agg / 4.0).abs() <= 1e-9 * rate, "{two}");
        // The server's decode bytes per token after the first, from its /metrics.
        assert!(two["bytes_read_total"].as_f64().unwrap() > 0.0, "{two}");
        assert!(two["bytes_read_per_token"].as_f64().is_some(), "{two}");
        assert!(one["requests_output_ids"].as_array().unwrap().is_empty());
    }
    let csv = std::fs::read_to_string(out.join("results.csv")).unwrap();
    assert!(
        csv.lines()
            .next()
            .unwrap()
            .ends_with(",concurrency,speculate,depth"),
        "{csv}"
    );
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(
        md.contains("## Concurrency: the memory/throughput curve")
            && md.contains("goodput share | goodput requests/s |")
            && md.contains("](concurrency.svg)"),
        "{md}"
    );
    for f in ["concurrency.svg", "concurrency.png"] {
        assert!(out.join(f).is_file(), "{f} not written");
    }
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("verdict.json")).unwrap()).unwrap();
    // Two ordinary runs and two served runs of two requests each.
    assert_eq!(v["runs_compared"], 6, "{v}");
    // Resumed, nothing runs again: each served run left its record (metrics.json,
    // requests.json) and its row agrees with it.
    let o = sweep(&spec_file("concurrency.toml", &spec), &out, &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        text(&o).contains("0 runs to do (4 already finished)") && !text(&o).contains("run again"),
        "{}",
        text(&o)
    );
}

/// The `depth` axis: runs at depth 16 decode other ids than at depth 0, and the
/// verdict compares them within their depth (across depths it would have failed);
/// every depth of a budget runs at the same bytes, the deepest point's floor.
#[test]
fn depth_sweep_compares_ids_within_a_depth() {
    let _g = lock();
    let out = fresh("depth");
    let spec = SPEC
        .replace("repeats = 2", "repeats = 1")
        .replace("io = [\"direct\", \"buffered\"]", "io = [\"direct\"]")
        .replace("[noise]", "depth = [0, 16]\n[noise]");
    let o = sweep(&spec_file("depth.toml", &spec), &out, &["--check"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let line = String::from_utf8_lossy(&o.stdout).trim().to_string();
    assert!(line.starts_with("PASS: 4 runs at 4 points"), "{line}");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("verdict.json")).unwrap()).unwrap();
    let groups = v["groups"].as_array().unwrap();
    assert_eq!(groups.len(), 2, "{v}");
    let depth_of = |g: &serde_json::Value| g["depth"].as_u64().unwrap_or(0);
    let (g0, g16) = if depth_of(&groups[0]) == 0 {
        (&groups[0], &groups[1])
    } else {
        (&groups[1], &groups[0])
    };
    assert_eq!((depth_of(g0), depth_of(g16)), (0, 16), "{v}");
    assert_eq!(
        (g0["runs"].as_u64(), g16["runs"].as_u64()),
        (Some(2), Some(2))
    );
    assert_ne!(g0["hash"], g16["hash"], "the context changes the ids: {v}");
    let js = rows(&out);
    assert_eq!(js.len(), 4);
    for budget in ["floor", "3x floor"] {
        let at: Vec<&serde_json::Value> =
            js.iter().filter(|r| r["budget_spec"] == budget).collect();
        assert_eq!(at.len(), 2, "{budget}");
        let (a, b) = if at[0]["depth"] == "0" {
            (at[0], at[1])
        } else {
            (at[1], at[0])
        };
        assert_eq!((&a["depth"], &b["depth"]), (&"0".into(), &"16".into()));
        assert_eq!(a["budget_bytes"], b["budget_bytes"], "{a} {b}");
        // The deeper context's plan holds more (its activations and caches): the
        // shared budget is resolved against it.
        assert!(
            b["planned_floor_bytes"].as_u64() > a["planned_floor_bytes"].as_u64(),
            "{a} {b}"
        );
        if budget == "floor" {
            assert_eq!(b["budget_bytes"], b["planned_floor_bytes"], "{b}");
        }
        assert_eq!(
            (&a["depth_tokens"], &b["depth_tokens"]),
            (&0.into(), &16.into())
        );
        assert_eq!((&a["n_depth"], &b["n_depth"]), (&0.into(), &16.into()));
        assert!(b["depth_prefill_s"].as_f64().unwrap() > 0.0, "{b}");
        // 16 positions more: the context the run's MLA cache holds.
        assert_eq!(
            b["max_context"].as_u64().unwrap(),
            a["max_context"].as_u64().unwrap() + 16
        );
        assert!(b["point_key"].as_str().unwrap().ends_with(";depth=16"));
    }
    let csv = std::fs::read_to_string(out.join("results.csv")).unwrap();
    assert!(
        csv.lines().next().unwrap().ends_with(",speculate,depth"),
        "{csv}"
    );
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(md.contains("## Depth: decode after a context"), "{md}");
    assert!(
        md.contains("![decode time vs context depth](depth.svg)"),
        "{md}"
    );
    assert!(out.join("depth.png").is_file() && out.join("depth.svg").is_file());
}
