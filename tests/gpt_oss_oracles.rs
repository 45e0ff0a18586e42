//! gpt-oss against independent implementations (docs/oracles.md, docs/model.md gpt-oss).
//!
//! Every live check generates `gpt-oss-tiny` (seed 0, the published MXFP4 layout, sliding
//! window 8, so the 64 teacher-forced positions run 56 past it) into a scratch directory
//! of its own and runs `fixtures/oracle/gpt_oss_logits.py` with the oracle venv's python
//! (created on first use by `testkit::oracle`; skipped visibly without it, a failure
//! under `CI`):
//! - `gpt_oss_tiny_matches_transformers_mxfp4_live`: transformers `GptOssForCausalLM`
//!   loading the MXFP4 checkpoint with `Mxfp4Config(dequantize=True)`;
//! - `gpt_oss_bf16_written_by_transformers_matches_transformers_live`: the same model
//!   written by transformers' `save_pretrained` in the BF16 layout (`gate_up_proj`
//!   `[E, D, 2I]`, `down_proj` `[E, I, D]`), read by memdial and by a fresh transformers load;
//! - `gpt_oss_tiny_matches_mlx_lm_live`: mlx-lm `gpt_oss` on the MXFP4 checkpoint, experts
//!   dequantized exactly to f32. mlx-lm's `YarnRoPE` always rounds the YaRN correction
//!   range (floor / ceil), ignoring the published `truncate: false` that transformers
//!   honours (at head_dim 24 the ramp is [3, 7] instead of [3.03, 6.52]: ≈ 2e-3 of the
//!   logits); so this check sets `rope_scaling.truncate = true` in the fixture's
//!   `config.json`, which both then read alike.
//!
//! Acceptance as in `engine_oracles.rs`: per position `max|e−o| ≤ 1e-3·max|o|`, argmax
//! equal where the oracle's margin exceeds that bound, 32 greedy ids identical.

mod oracle_util;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use memdial::model::{LogitsMode, Model};
use memdial_testkit as testkit;
use oracle_util::*;

/// `gpt-oss-tiny` (seed 0) in `scratch/gpt-oss-tiny`.
fn tiny(scratch: &testkit::Scratch) -> PathBuf {
    let dir = scratch.path().join("gpt-oss-tiny");
    memdial::tools::fixture::generate("gpt-oss-tiny", 0, &dir, false, None, &mut |_, _| {})
        .unwrap_or_else(|e| panic!("generate gpt-oss-tiny: {e:#}"));
    dir
}

/// Runs `gpt_oss_logits.py DIR --oracle ORACLE --out PREFIX [extra]`; returns PREFIX
/// (beside `dir`).
fn run_oracle(py: &Path, dir: &Path, oracle: &str, extra: &[&Path]) -> PathBuf {
    let prefix = dir.parent().unwrap().join(format!(
        "oracle-out-{oracle}-{}",
        dir.file_name().unwrap().to_string_lossy()
    ));
    let t = Instant::now();
    let mut cmd = Command::new(py);
    cmd.arg(root().join("fixtures/oracle/gpt_oss_logits.py"))
        .arg(dir)
        .arg("--oracle")
        .arg(oracle)
        .arg("--out")
        .arg(&prefix);
    if let [save] = extra {
        cmd.arg("--save-bf16").arg(save);
    }
    let out = cmd.output().expect("run gpt_oss_logits.py");
    assert!(
        out.status.success(),
        "gpt_oss_logits.py --oracle {oracle} failed\nstdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    println!(
        "gpt_oss_logits.py --oracle {oracle} {:.1} s: {}",
        t.elapsed().as_secs_f64(),
        String::from_utf8_lossy(&out.stdout).trim()
    );
    prefix
}

fn python() -> Result<PathBuf, testkit::Outcome> {
    testkit::oracle::python(root())
        .map_err(|why| testkit::skip(format!("gpt-oss oracle not checked: {why}")))
}

fn gpt_oss_tiny_matches_transformers_mxfp4_live() -> testkit::Outcome {
    let py = match python() {
        Ok(p) => p,
        Err(o) => return o,
    };
    let scratch = testkit::scratch!("gpt-oss-hf-mxfp4");
    let dir = tiny(&scratch);
    let prefix = run_oracle(&py, &dir, "transformers", &[]);
    let (j, _) = load_oracle(&prefix);
    assert_oracle_saw(&j, &dir);
    assert_eq!(j["oracle"].as_str(), Some("transformers"));
    check_against_oracle(&dir, &prefix, "gpt-oss-tiny (MXFP4) vs transformers (live)");
    Ok(testkit::Completion::Completed)
}

fn gpt_oss_bf16_written_by_transformers_matches_transformers_live() -> testkit::Outcome {
    let py = match python() {
        Ok(p) => p,
        Err(o) => return o,
    };
    let scratch = testkit::scratch!("gpt-oss-hf-bf16");
    let dir = tiny(&scratch);
    let bf16 = scratch.path().join("gpt-oss-tiny-bf16");
    run_oracle(&py, &dir, "transformers", &[&bf16]);
    // The checkpoint transformers wrote: BF16 experts in its own layout, no quantization.
    let cfg = memdial::format::config::load_config(&bf16).unwrap();
    let g = cfg.gpt_oss.as_ref().unwrap();
    assert_eq!(g.experts, memdial::format::config::GptOssExperts::Dense);
    let ck = memdial::format::checkpoint::Checkpoint::open(&bf16).unwrap();
    let gu = ck.get("model.layers.0.mlp.experts.gate_up_proj").unwrap();
    assert_eq!(gu.dtype, "BF16");
    // A fresh transformers load of that checkpoint is the oracle.
    let prefix = run_oracle(&py, &bf16, "transformers", &[]);
    let (j, _) = load_oracle(&prefix);
    assert_oracle_saw(&j, &bf16);
    check_against_oracle(
        &bf16,
        &prefix,
        "gpt-oss-tiny (BF16, save_pretrained) vs transformers (live)",
    );
    Ok(testkit::Completion::Completed)
}

fn gpt_oss_tiny_matches_mlx_lm_live() -> testkit::Outcome {
    let py = match python() {
        Ok(p) => p,
        Err(o) => return o,
    };
    let scratch = testkit::scratch!("gpt-oss-mlx");
    let dir = tiny(&scratch);
    let path = dir.join("config.json");
    let mut cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(cfg["rope_scaling"]["truncate"], serde_json::json!(false));
    cfg["rope_scaling"]["truncate"] = serde_json::json!(true);
    std::fs::write(&path, serde_json::to_string_pretty(&cfg).unwrap()).unwrap();
    let prefix = run_oracle(&py, &dir, "mlx", &[]);
    let (j, _) = load_oracle(&prefix);
    assert_oracle_saw(&j, &dir);
    assert_eq!(j["oracle"].as_str(), Some("mlx-lm"));
    check_against_oracle(&dir, &prefix, "gpt-oss-tiny (MXFP4) vs mlx-lm (live)");
    Ok(testkit::Completion::Completed)
}

/// Prefill in one call, token by token and in chunks of 5 give bit-identical logits
/// (every per-token operation is a decode step's), past the sliding window.
fn gpt_oss_prefill_and_decode_are_bit_identical() {
    let scratch = testkit::scratch!("gpt-oss-bits");
    let dir = tiny(&scratch);
    let model = Model::load(&dir, 2).unwrap();
    let v = model.config().vocab_size;
    let ids = fixed_ids(v, 40);
    let mut st = model.new_state(40);
    let all = model.forward(&mut st, &ids, LogitsMode::All).unwrap();
    let mut st = model.new_state(40);
    let mut one = Vec::new();
    for &t in &ids {
        one.extend(model.forward(&mut st, &[t], LogitsMode::All).unwrap());
    }
    let mut st = model.new_state(40);
    let mut five = Vec::new();
    for c in ids.chunks(5) {
        five.extend(model.forward(&mut st, c, LogitsMode::All).unwrap());
    }
    let bits = |a: &[f32]| a.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&all), bits(&one), "one call vs token by token");
    assert_eq!(bits(&all), bits(&five), "one call vs chunks of 5");
}

fn main() -> std::process::ExitCode {
    let mut trials = testkit::trials![gpt_oss_prefill_and_decode_are_bit_identical];
    trials.push(testkit::ignorable(
        "gpt_oss_tiny_matches_transformers_mxfp4_live",
        gpt_oss_tiny_matches_transformers_mxfp4_live,
    ));
    trials.push(testkit::ignorable(
        "gpt_oss_bf16_written_by_transformers_matches_transformers_live",
        gpt_oss_bf16_written_by_transformers_matches_transformers_live,
    ));
    trials.push(testkit::ignorable(
        "gpt_oss_tiny_matches_mlx_lm_live",
        gpt_oss_tiny_matches_mlx_lm_live,
    ));
    testkit::main(include_str!("gpt_oss_oracles.rs"), trials)
}
