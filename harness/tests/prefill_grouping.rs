//! Expert-grouped chunked prefill is bit-identical to token-by-token prefill: output
//! ids and every position's logits (`--logits-out`, compared byte for byte) equal the
//! fully resident `--prefill-chunk 1` run, at several chunk sizes, budgets (floor and
//! above) and IO modes, on tiny-k3 and mini; the grouped runs fetch each routed
//! expert at most once per chunk and layer.

use std::path::{Path, PathBuf};
use std::process::Command;

use memdial_testkit as testkit;
use memdial_testkit::memdial_bin;

/// A fresh fixture in a scratch directory of its own (removed when the guard drops).
fn fixture(preset: &str) -> (testkit::Scratch, PathBuf) {
    testkit::fixtures::by_binary(
        memdial_bin!(),
        preset,
        testkit::scratch!(&format!("grp-{preset}")),
    )
}

/// The floor of a 2-kernel-thread run (the runs below use `--threads 2`).
fn floor(model: &Path, io: &str, max_context: usize) -> u64 {
    let out = Command::new(memdial_bin!())
        .args([
            "plan",
            "--json",
            "--budget",
            "0",
            "--io",
            io,
            "--threads",
            "2",
        ])
        .args(["--max-context", &max_context.to_string(), "--model"])
        .arg(model)
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("plan --json");
    v["floor_bytes"].as_u64().unwrap()
}

/// Runs 3 decode steps after `prompt`; returns (ids sha, logits bytes, metrics).
fn run(model: &Path, prompt: &str, extra: &[&str]) -> (String, Vec<u8>, serde_json::Value) {
    let tag = extra.join("_").replace('/', "");
    let dir = testkit::scratch!("grp-run");
    let (mj, lg) = (
        dir.join(format!("g-{tag}.json")),
        dir.join(format!("g-{tag}.npy")),
    );
    let out = Command::new(memdial_bin!())
        .args([
            "run",
            "--prompt-ids",
            prompt,
            "--max-tokens",
            "3",
            "--ignore-eos",
        ])
        .args(["--output", "ids", "--model"])
        .arg(model)
        .arg("--metrics-json")
        .arg(&mj)
        .arg("--logits-out")
        .arg(&lg)
        .args(extra)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "run {extra:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let m: serde_json::Value = serde_json::from_slice(&std::fs::read(&mj).unwrap()).unwrap();
    let logits = std::fs::read(&lg).unwrap();
    std::fs::remove_file(&mj).unwrap();
    std::fs::remove_file(&lg).unwrap();
    (
        m["output_ids_sha256"].as_str().unwrap().to_string(),
        logits,
        m,
    )
}

fn check(preset: &str, prompt_len: usize, vocab: usize, grid: &[(&str, u64, &str)]) {
    let (_scratch, m) = fixture(preset);
    let prompt: Vec<String> = (0..prompt_len)
        .map(|i| ((i * 7919 + 13) % vocab).to_string())
        .collect();
    let prompt = prompt.join(",");
    let (sha, logits, _) = run(&m, &prompt, &["--prefill-chunk", "1"]);
    let fl = |io| floor(&m, io, prompt_len + 3);
    for &(io, mult, chunk) in grid {
        let mut args = vec!["--prefill-chunk", chunk, "--threads", "2"];
        let b;
        if io != "resident" {
            b = (fl(io) * mult).to_string();
            args.extend(["--budget", &b, "--io", io]);
        }
        let (s, l, met) = run(&m, &prompt, &args);
        assert_eq!(s, sha, "{preset} {args:?}: ids");
        assert!(l == logits, "{preset} {args:?}: logits differ");
        if io != "resident" {
            assert_eq!(met["budget_overflows"].as_u64(), Some(0), "{args:?}");
        }
    }
}

#[test]
fn tiny_k3_grouped_prefill_bit_identical() {
    let grid = [
        ("resident", 1, "0"),
        ("resident", 1, "5"),
        ("direct", 1, "0"),
        ("direct", 1, "7"),
        ("buffered", 2, "5"),
        ("mmap", 1, "0"),
        ("mmap", 4, "16"),
    ];
    check("tiny-k3", 24, 2048, &grid);
}

#[test]
fn mini_grouped_prefill_bit_identical() {
    let grid = [
        ("resident", 1, "0"),
        ("direct", 1, "0"),
        ("buffered", 1, "9"),
        ("mmap", 2, "0"),
    ];
    check("mini", 20, 33024, &grid);
}
