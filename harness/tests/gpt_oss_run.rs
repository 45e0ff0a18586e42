//! `memdial run`, `inspect` and `plan` on a gpt-oss checkpoint (`gpt-oss-tiny`, no
//! tokenizer files): token-id prompts run resident and streamed at the plan's floor with
//! the same output ids for any prefill chunking, a text prompt is refused with the way
//! out, and `inspect` validates the checkpoint key by key. With gpt-oss tokenizer files
//! added (1003 o200k ranks + the first 21 harmony specials after them, as the embedding
//! has 1024 rows), `--prompt` and `--chat` give the ids Python computed for the same files
//! (`fixtures/tokenizer/harmony/tiny_cases.json`: tiktoken, HF tokenizers, transformers'
//! `apply_chat_template` with the date pinned; `SOURCE_DATE_EPOCH` pins it here).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use memdial::tools::fixture::harmony_vocab::{write_harmony_tokenizer_files, SpecialLayout};
use sha2::Digest;

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

/// `gpt-oss-tiny` copied into a scratch directory with the tokenizer files of
/// `tiny_cases.json` added; the parsed cases.
fn tiny_with_tokenizer(tag: &str) -> (memdial_testkit::Scratch, PathBuf, serde_json::Value) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let text =
        std::fs::read_to_string(root.join("fixtures/tokenizer/harmony/tiny_cases.json")).unwrap();
    let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    let scratch = memdial_testkit::scratch!(tag);
    let dir = scratch.path().join("gpt-oss-tiny-tok");
    std::fs::create_dir_all(&dir).unwrap();
    for e in std::fs::read_dir(shared_fixture!("gpt-oss-tiny")).unwrap() {
        let p = e.unwrap().path();
        if p.is_file() {
            std::fs::copy(&p, dir.join(p.file_name().unwrap())).unwrap();
        }
    }
    let (n_base, n_after) = (
        doc["n_base"].as_u64().unwrap(),
        doc["n_after"].as_u64().unwrap(),
    );
    write_harmony_tokenizer_files(
        &dir,
        n_base as u32,
        SpecialLayout::AfterRanks(n_after as u32),
    )
    .unwrap();
    for (name, want) in doc["sha256_after"].as_object().unwrap() {
        let got: String = sha2::Sha256::digest(std::fs::read(dir.join(name)).unwrap())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(
            &got, want,
            "{name} differs from the one tiny_cases.json was made from"
        );
    }
    (scratch, dir, doc)
}

/// `memdial run ... --output json` with SOURCE_DATE_EPOCH set; the parsed output.
fn run_json(dir: &Path, epoch: &str, extra: &[&str]) -> serde_json::Value {
    let o = Command::new(memdial_bin!())
        .args(["run", "--model", dir.to_str().unwrap(), "--max-tokens", "3"])
        .args(["--output", "json"])
        .args(extra)
        .env("SOURCE_DATE_EPOCH", epoch)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    serde_json::from_slice(&o.stdout).unwrap()
}

#[test]
fn text_and_chat_prompts_with_gpt_oss_tokenizer_files() {
    let (_s, dir, doc) = tiny_with_tokenizer("gpt-oss-tok");
    let epoch = doc["source_date_epoch"].to_string();
    for c in doc["cases"].as_array().unwrap() {
        let t = c["text"].as_str().unwrap();
        if t.is_empty() {
            continue;
        }
        let v = run_json(&dir, &epoch, &["--prompt", t]);
        assert_eq!(v["prompt_ids"], c["ids_after"], "{t:?}");
        assert!(v["text"].is_string(), "{v}");
    }
    let mut n_chat = 0;
    for c in doc["chat"].as_array().unwrap() {
        let m = c["messages"].as_array().unwrap();
        let (system, user) = match m.as_slice() {
            [u] => (None, u),
            [s, u] if s["role"] == "system" => (Some(s["content"].as_str().unwrap()), u),
            _ => continue,
        };
        let mut args = vec!["--chat", "--prompt", user["content"].as_str().unwrap()];
        if let Some(s) = system {
            args.extend(["--system", s]);
        }
        if user["content"] == "" {
            continue;
        }
        let v = run_json(&dir, &epoch, &args);
        assert_eq!(v["prompt_ids"], c["ids"], "{m:?}");
        n_chat += 1;
    }
    assert!(n_chat >= 4, "{n_chat} chat cases ran");
    // A clock that is not a number is refused by name.
    let o = memdial(&[
        "run",
        "--model",
        dir.to_str().unwrap(),
        "--chat",
        "--prompt",
        "hi",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let o = Command::new(memdial_bin!())
        .args([
            "run",
            "--model",
            dir.to_str().unwrap(),
            "--chat",
            "--prompt",
            "hi",
        ])
        .env("SOURCE_DATE_EPOCH", "yesterday")
        .output()
        .unwrap();
    assert!(
        !o.status.success() && text(&o).contains("SOURCE_DATE_EPOCH"),
        "{}",
        text(&o)
    );
}

#[test]
fn broken_gpt_oss_tokenizer_files_are_refused_by_name() {
    let (_s, dir, _) = tiny_with_tokenizer("gpt-oss-tok-bad");
    let d = dir.to_str().unwrap();
    std::fs::write(dir.join("tokenizer.json"), "{\"model\": 3").unwrap();
    let o = memdial(&["run", "--model", d, "--prompt", "hello"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("tokenizer.json"), "{}", text(&o));
    // Without tokenizer.json the ranks file is read; a bad line is named with its number.
    std::fs::remove_file(dir.join("tokenizer.json")).unwrap();
    let o = memdial(&[
        "run",
        "--model",
        d,
        "--prompt",
        "hello",
        "--max-tokens",
        "1",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    std::fs::write(dir.join("o200k_base.tiktoken"), "IQ== 0\n!!!! 1\n").unwrap();
    let o = memdial(&["run", "--model", d, "--prompt", "hello"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("o200k_base.tiktoken:2"), "{}", text(&o));
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
