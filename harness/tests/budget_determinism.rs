//! Byte-identical output at every budget, IO mode, prefetch policy, cache policy and
//! thread count; resident memory within the budget (read from /proc by the engine's
//! `--metrics-json`); under-floor budgets refused with exit code 2.

use std::path::{Path, PathBuf};
use std::process::Command;

use memdial_testkit as testkit;
use memdial_testkit::memdial_bin;

/// The fixture `preset`, generated for the calling test alone into `SCRATCH/PRESET`
/// (SCRATCH is removed when the returned guard drops).
fn fixture(preset: &str) -> (testkit::Scratch, PathBuf) {
    testkit::fixtures::by_binary(
        memdial_bin!(),
        preset,
        testkit::scratch!(&format!("det-{preset}")),
    )
}

fn plan_json(
    model: &Path,
    budget: u64,
    io: &str,
    prefetch: &str,
    max_context: usize,
    threads: &str,
) -> serde_json::Value {
    let out = Command::new(memdial_bin!())
        .args([
            "plan",
            "--json",
            "--budget",
            &budget.to_string(),
            "--io",
            io,
            "--prefetch",
            prefetch,
        ])
        .args([
            "--max-context",
            &max_context.to_string(),
            "--threads",
            threads,
        ])
        .arg("--model")
        .arg(model)
        .output()
        .unwrap();
    serde_json::from_slice(&out.stdout).expect("plan --json prints JSON")
}

struct RunOut {
    sha: String,
    metrics: serde_json::Value,
}

fn run(model: &Path, extra: &[&str]) -> RunOut {
    let scratch = testkit::scratch!("metrics");
    let mj = scratch.join("metrics.json");
    let out = Command::new(memdial_bin!())
        .args([
            "run",
            "--prompt-ids",
            "5,17,300,1023,42,7,1999,64",
            "--max-tokens",
            "10",
            "--ignore-eos",
            "--output",
            "ids",
        ])
        .args(["--max-context", "64", "--model"])
        .arg(model)
        .arg("--metrics-json")
        .arg(&mj)
        .args(extra)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "run {extra:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let metrics: serde_json::Value = serde_json::from_slice(&std::fs::read(&mj).unwrap()).unwrap();
    drop(scratch);
    RunOut {
        sha: metrics["output_ids_sha256"].as_str().unwrap().to_string(),
        metrics,
    }
}

#[test]
fn tiny_k3_ids_identical_across_the_full_grid() {
    let (_scratch, m) = fixture("tiny-k3");
    let reference = run(&m, &[]); // full residency, resident store
    let model_bytes = reference.metrics["model_bytes"].as_u64().unwrap();
    let mut n = 0;
    for prefetch in ["none", "next-layer", "lookahead"] {
        for io in ["direct", "buffered", "mmap"] {
            // The floor holds a kernel workspace region per thread: plan each count.
            for threads in ["1", "2"] {
                let floor = plan_json(&m, 0, io, prefetch, 64, threads)["floor_bytes"]
                    .as_u64()
                    .unwrap();
                let budgets = [
                    floor,
                    2 * floor,
                    (model_bytes / 4).max(floor),
                    (model_bytes / 2).max(floor),
                    floor + model_bytes,
                ];
                for b in budgets {
                    let bs = b.to_string();
                    let r = run(
                        &m,
                        &[
                            "--budget",
                            &bs,
                            "--io",
                            io,
                            "--prefetch",
                            prefetch,
                            "--threads",
                            threads,
                        ],
                    );
                    assert_eq!(
                        r.sha, reference.sha,
                        "budget {b} io {io} prefetch {prefetch} threads {threads}"
                    );
                    assert_eq!(
                        r.metrics["budget_overflows"].as_u64(),
                        Some(0),
                        "overflow at budget {b} io {io} prefetch {prefetch} threads {threads}"
                    );
                    assert!(r.metrics["peak_accounted_bytes"].as_u64().unwrap() <= b);
                    n += 1;
                }
            }
        }
    }
    // cache policy and oracle prefetch (with a recorded trace)
    let floor = plan_json(&m, 0, "buffered", "oracle", 64, "1")["floor_bytes"]
        .as_u64()
        .unwrap()
        .to_string();
    let trace_dir = testkit::scratch!("trace");
    let trace = trace_dir.join("trace.jsonl");
    let tr = trace.to_str().unwrap();
    let r = run(
        &m,
        &[
            "--budget",
            &floor,
            "--io",
            "buffered",
            "--cache",
            "lfru",
            "--record-trace",
            tr,
        ],
    );
    assert_eq!(r.sha, reference.sha);
    let r = run(
        &m,
        &[
            "--budget",
            &floor,
            "--io",
            "buffered",
            "--prefetch",
            "oracle",
            "--trace",
            tr,
        ],
    );
    assert_eq!(r.sha, reference.sha);
    assert_eq!(
        r.metrics["lookahead_precision"].as_f64(),
        Some(1.0),
        "the oracle replays the true choices"
    );
    assert!(trace.exists());
    assert_eq!(n, 90);
}

// The floor of tiny-k3 for a 4-position run is ≈ 550 KB since the trunk streams in
// sub-layer groups and the embedding rows are read on demand; 64 KiB is below it.
#[test]
fn under_floor_budget_exits_2_with_one_line() {
    let (_scratch, m) = fixture("tiny-k3");
    let out = Command::new(memdial_bin!())
        .args([
            "run",
            "--prompt-ids",
            "1,2",
            "--max-tokens",
            "2",
            // Under the floor (550 KiB for 4 positions since the floor streams
            // embeddings, lm_head and sub-layer groups).
            "--budget",
            "64KiB",
            "--model",
        ])
        .arg(&m)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("below the floor"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}

/// On `mini`: resident anonymous memory stays within budget + 64 MiB, and ids match
/// full residency, at the floor, 25 % and 100 % of the model.
#[test]
fn mini_rss_within_budget_and_ids_identical() {
    let (_scratch, m) = fixture("mini");
    let reference = run(&m, &["--threads", "2"]);
    let model_bytes = reference.metrics["model_bytes"].as_u64().unwrap();
    for (io, prefetch) in [
        ("direct", "none"),
        ("mmap", "lookahead"),
        ("buffered", "next-layer"),
    ] {
        let floor = plan_json(&m, 0, io, prefetch, 64, "2")["floor_bytes"]
            .as_u64()
            .unwrap();
        for b in [floor, (model_bytes / 4).max(floor), model_bytes + floor] {
            let bs = b.to_string();
            let r = run(
                &m,
                &[
                    "--budget",
                    &bs,
                    "--io",
                    io,
                    "--prefetch",
                    prefetch,
                    "--threads",
                    "2",
                ],
            );
            assert_eq!(
                r.sha, reference.sha,
                "budget {b} io {io} prefetch {prefetch}"
            );
            let anon = r.metrics["peak_rss_anon_bytes"].as_u64().unwrap();
            let file = r.metrics["rss_file_bytes"].as_u64().unwrap();
            assert!(
                anon <= b + (64 << 20),
                "{io}/{prefetch} at {b}: RssAnon peak {anon}"
            );
            if io == "mmap" {
                assert!(
                    anon + file <= b + (64 << 20),
                    "mmap at {b}: anon {anon} + file {file}"
                );
            }
        }
    }
}
