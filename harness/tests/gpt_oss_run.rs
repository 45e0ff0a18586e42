//! `memdial run`, `inspect` and `plan` on a gpt-oss checkpoint (`gpt-oss-tiny`, no
//! tokenizer files): token-id prompts run resident and streamed at the plan's floor with
//! the same output ids for any prefill chunking, a text prompt is refused with the way
//! out, and `inspect` validates the checkpoint key by key.

use std::process::{Command, Output};

use memdial_testkit::memdial_bin;
use memdial_testkit::output_text as text;
use memdial_testkit::shared_fixture;

fn memdial(args: &[&str]) -> Output {
    Command::new(memdial_bin!()).args(args).output().unwrap()
}

fn run(extra: &[&str]) -> String {
    let dir = shared_fixture!("gpt-oss-tiny").to_str().unwrap();
    // 20 prompt ids + 12 new tokens: both past the sliding window (8).
    let ids: Vec<String> = (0..20).map(|i| ((i * 37 + 11) % 768).to_string()).collect();
    let ids = ids.join(",");
    let mut args = vec![
        "run",
        "--model",
        dir,
        "--prompt-ids",
        &ids,
        "--max-tokens",
        "12",
    ];
    args.extend_from_slice(&["--output", "ids"]);
    args.extend_from_slice(extra);
    let o = memdial(&args);
    assert!(o.status.success(), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout).trim().to_string();
    assert_eq!(out.split(',').count(), 12, "{out}");
    out
}

#[test]
fn prompt_ids_run_resident_and_streamed_with_the_same_ids() {
    let resident = run(&[]);
    assert_eq!(run(&["--prefill-chunk", "3"]), resident);
    // The plan's floor for this run, then a run at exactly that budget.
    let dir = shared_fixture!("gpt-oss-tiny").to_str().unwrap();
    let o = memdial(&["plan", "--model", dir, "--max-context", "32", "--json"]);
    assert!(o.status.success(), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let floor = v["floor_bytes"]
        .as_u64()
        .unwrap_or_else(|| panic!("no floor_bytes in {v}"));
    let b = floor.to_string();
    assert_eq!(
        run(&[
            "--budget",
            &b,
            "--max-context",
            "32",
            "--prefill-chunk",
            "5"
        ]),
        resident
    );
}

#[test]
fn plan_counts_the_key_value_caches() {
    let dir = shared_fixture!("gpt-oss-tiny").to_str().unwrap();
    let o = memdial(&["plan", "--model", dir, "--max-context", "64"]);
    assert!(o.status.success(), "{}", text(&o));
    // By hand: 2 full layers × 64 positions + 2 sliding layers × 8 positions, each
    // 2 KV heads × 24 × (key + value) × 4 bytes = 384 bytes: 55296 bytes = 54.00 KiB.
    assert!(
        text(&o).contains("54.00 KiB (key/value caches for 64 positions)"),
        "{}",
        text(&o)
    );
}

#[test]
fn a_text_prompt_without_tokenizer_is_refused_with_the_way_out() {
    let dir = shared_fixture!("gpt-oss-tiny").to_str().unwrap();
    let o = memdial(&["run", "--model", dir, "--prompt", "hello"]);
    assert!(!o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("--prompt-ids"), "{}", text(&o));
}

#[test]
fn inspect_validates_gpt_oss_key_by_key() {
    let dir = shared_fixture!("gpt-oss-tiny").to_str().unwrap();
    let o = memdial(&["inspect", "--model", dir, "--json"]);
    assert!(o.status.success(), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["valid"], serde_json::json!(true), "{v}");
    let s = &v["summary"];
    assert_eq!(s["model_type"], "gpt_oss");
    assert_eq!(
        (s["num_experts"].as_u64(), s["experts_per_token"].as_u64()),
        (Some(8), Some(4))
    );
    // One expert by hand: gate_up blocks 192·64/2 + scales 192·2, down blocks 64·96/2 +
    // scales 64·3, biases (192 + 64)·2 bytes.
    assert_eq!(
        s["bytes_per_expert"].as_u64(),
        Some(6144 + 384 + 3072 + 192 + 512)
    );
    // 2 KV heads × 24 × (key + value) × 4 bytes.
    assert_eq!(s["kv_cache_bytes_per_position"].as_u64(), Some(384));
}
