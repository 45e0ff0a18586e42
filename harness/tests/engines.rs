//! The `engines` axis of `memdial sweep`: memdial and another engine on the same
//! points, one verdict.
//!
//! - `mlx_lm_agrees_with_memdial_on_tiny_fixtures`: a two-engine sweep (memdial +
//!   mlx-lm, the independent oracle, greedy in float32) on `tiny-k3` and
//!   `tiny-linear`: mlx-lm's ids equal memdial's, the resident-only engine's point
//!   under its memory need is `n/a` (not failed), the sweep passes. Needs the oracle
//!   venv (`fixtures/oracle/.venv`): reported as `ignored, REASON` without it and a
//!   failure under `CI=true`.
//! - `command_engine_mismatch_fails_only_when_it_must_match`: a generic `command`
//!   engine whose ids (read from stdout by a regex) differ from memdial's at token 0:
//!   exit 1 with `must_match = true`, exit 0 and reported with `must_match = false`;
//!   memdial's top-2 margin at the differing position is dumped.
//! - `llama_cpp_f32_agrees_with_memdial_on_tiny_fixtures`: with `MEMDIAL_LLAMA_BIN`
//!   (else visibly skipped): llama.cpp on the F32 GGUF gives memdial's ids.
//! - `llama_cpp_alone_on_a_random_llama_gguf`: with `MEMDIAL_LLAMA_BIN` (else visibly
//!   skipped): llama.cpp alone on a random-weight `llama` GGUF memdial's engine does not
//!   read, at a searched floor, a percentage and a size, in mmap / buffered / direct:
//!   every run gives a numpy oracle's ids.
//! - `hf_tokenizer_json_tokenizes_text_prompts`: a `tokenizer.json` trained by the Python
//!   `tokenizers` package (oracle venv) gives its ids to `memdial tokenize` and to a
//!   sweep's text prompts on a model memdial's engine does not read.
//! - `text_only_engine_is_checked_on_its_output_text`: a text-only engine's runs are
//!   compared on their output text's hash: PASS with the weaker wording, FAIL naming
//!   the run whose text differs, never a pass for empty text or nothing compared.
//! - `floor_search_runs_the_setup_first`: an engine with a setup step gets a searched
//!   floor (setup first, cached with the setup's identity). Needs a memory cgroup.
//! - `engines_check_runs_each_engine`: `engines check` runs each engine's check command.
//! - `unknown_engine_is_a_usage_error`, `missing_binary_is_a_usage_error_naming_how_to_build`.
//!
//! Runs one at a time (a global lock): concurrent sweeps would evict each other's pages.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Output};

use memdial_testkit as testkit;
use memdial_testkit::fixtures::lock;
use memdial_testkit::memdial_bin;
use memdial_testkit::shared_scratch;
use testkit::output_text as text;

fn model(preset: &str) -> PathBuf {
    testkit::fixture(memdial_bin!(), preset, &shared_scratch!().join(preset))
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn sweep(model: &Path, spec: &str, name: &str, env: &[(&str, &Path)]) -> (Output, PathBuf) {
    let spec_path = shared_scratch!().join(format!("{name}.toml"));
    std::fs::write(&spec_path, spec).unwrap();
    let out = shared_scratch!().join(name);
    let _ = std::fs::remove_dir_all(&out);
    let mut c = Command::new(memdial_bin!());
    c.arg("sweep")
        .arg("--model")
        .arg(model)
        .arg("--spec")
        .arg(&spec_path)
        .arg("--out")
        .arg(&out)
        .args(["--bandwidth-probe", "4MiB"]);
    for (k, v) in env {
        c.env(k, v);
    }
    (c.output().unwrap(), out)
}

fn json(p: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

fn rows(dir: &Path) -> Vec<serde_json::Value> {
    json(&dir.join("results.json")).as_array().unwrap().clone()
}

fn ids(r: &serde_json::Value) -> Vec<u64> {
    r["output_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap())
        .collect()
}

/// Two engines, two budgets; one prompt per model (text on tiny-k3, ids on
/// tiny-linear) to keep the mlx-lm loads (~10 s each) few.
fn two_engines(prompt: &str) -> String {
    format!(
        r#"
name = "two engines"
budgets = ["floor", "2GiB"]
prompts = [{prompt}]
max_tokens = 8
repeats = 1
engines = ["memdial", "mlx-lm"]
# What the sweep writes is checked here, on a busy machine too: no run is noisy.
[noise]
other_cpu_cores = 1024.0
run_queue_wait_fraction = 1024.0
steal_cores = 1024.0
foreign_read_bytes = 1125899906842624
"#
    )
}

fn mlx_lm_agrees_with_memdial_on_tiny_fixtures() -> testkit::Outcome {
    let python = match testkit::oracle::python(&repo_root()) {
        Ok(p) => p,
        Err(e) => return testkit::skip(format!("no oracle venv (mlx-lm): {e}")),
    };
    let _g = lock();
    for (preset, prompt) in [
        ("tiny-k3", "\"The capital of France is\""),
        (
            "tiny-linear",
            "{ ids = [976, 274, 403, 278, 280, 328, 454, 81, 766, 382, 17, 1200] }",
        ),
    ] {
        let m = model(preset);
        let (o, out) = sweep(
            &m,
            &two_engines(prompt),
            &format!("two-{preset}"),
            &[("MEMDIAL_MLX_PYTHON", &python)],
        );
        assert_eq!(o.status.code(), Some(0), "{preset}: {}", text(&o));
        let line = String::from_utf8_lossy(&o.stdout);
        assert!(
            line.contains("engines: mlx-lm identical to memdial"),
            "{line}"
        );
        let rows = rows(&out);
        // 2 budgets × 2 engines.
        assert_eq!(rows.len(), 4, "{rows:?}");
        let st = |e: &str, b: &str| -> Vec<&serde_json::Value> {
            rows.iter()
                .filter(|r| r["engine"] == e && r["budget_spec"] == b)
                .collect()
        };
        // mlx-lm holds the whole model in float32 plus python: the floor is n/a.
        for r in st("mlx-lm", "floor") {
            assert_eq!(r["status"], "n/a", "{r}");
            assert!(r["error"]
                .as_str()
                .unwrap()
                .contains("holds the whole model"));
        }
        for prompt in 0..1u64 {
            let pick = |e: &str, b: &str| {
                st(e, b)
                    .into_iter()
                    .find(|r| r["prompt_index"] == prompt)
                    .unwrap()
                    .clone()
            };
            let mlx = pick("mlx-lm", "2GiB");
            assert_eq!(mlx["status"], "ok", "{mlx}");
            let held = if mlx["cgroup_enforced"] == true {
                "cgroup"
            } else {
                "none"
            };
            assert_eq!(mlx["budget_held_by"], held, "{mlx}");
            assert!(
                mlx["engine_version"]
                    .as_str()
                    .unwrap()
                    .starts_with("mlx-lm "),
                "{mlx}"
            );
            assert_eq!(mlx["metric_sources"]["output_ids"], "engine");
            assert_eq!(mlx["metric_sources"]["output_ids_sha256"], "harness");
            let want = ids(&mlx);
            assert!(!want.is_empty());
            for b in ["floor", "2GiB"] {
                let me = pick("memdial", b);
                assert_eq!(me["status"], "ok", "{me}");
                assert_eq!(
                    ids(&me),
                    want,
                    "{preset} prompt {prompt} at {b}: memdial vs mlx-lm"
                );
            }
        }
        let v = json(&out.join("verdict.json"));
        assert_eq!(v["pass"], true);
        assert_eq!(v["engines"]["reference"], "memdial");
        assert_eq!(v["engines"]["pass"], true);
        for c in v["engines"]["comparisons"].as_array().unwrap() {
            assert_eq!(c["status"], "identical", "{c}");
        }
        assert_eq!(v["engines"]["table"][0][1], "identical");
        let md = std::fs::read_to_string(out.join("report.md")).unwrap();
        assert!(md.contains("## Engines agreement"), "{md}");
        assert!(md.contains("## Engines against memdial"), "{md}");
    }
    Ok(testkit::Completion::Completed)
}

fn fake_spec(must_match: bool) -> String {
    format!(
        r#"
budgets = ["2x floor"]
prompts = ["The capital of France is"]
max_tokens = 4
repeats = 1
engines = ["memdial", "fake"]
[engine.fake]
command = ["sh", "-c", "echo 'log line'; echo 'ids: 5, 6,7 8' ; echo '{{prompt_ids}} {{max_tokens}}' > {{run_dir}}/args.txt"]
ids_stdout_regex = "^ids: (.*)$"
budget = "flag"
must_match = {must_match}
"#
    )
}

/// Two settings of one adapter (`fake`, `fake-fast`: the same setup, another `env`) share
/// the setup's output: it runs once. Each engine's settings are in `sweep.json`.
fn settings_variants_share_their_adapters_setup() {
    let _g = lock();
    let m = model("tiny-k3");
    let cache = shared_scratch!().join("variants-engine-cache");
    let _ = std::fs::remove_dir_all(&cache);
    let counter = shared_scratch!().join("variants-setups.txt");
    let _ = std::fs::remove_file(&counter);
    let table = |name: &str, wait: &str| {
        format!(
            r#"
[engine.{name}]
adapter = "command"
setup = ["sh", "-c", "echo ran >> {c} && echo '5 6 7 8' > {{setup_dir}}/ids.txt"]
command = ["sh", "-c", "echo \"ids: $(cat {{setup_dir}}/ids.txt)\""]
ids_stdout_regex = "^ids: (.*)$"
budget = "flag"
must_match = false
env = {{ OMP_WAIT_POLICY = "{wait}" }}
"#,
            c = counter.display()
        )
    };
    let spec = format!(
        "budgets = [\"2x floor\"]\nprompts = [\"The capital of France is\"]\nmax_tokens = 4\nrepeats = 1\n\
         engines = [\"memdial\", \"fake\", \"fake-fast\"]\n{}{}",
        table("fake", "passive"),
        table("fake-fast", "active")
    );
    let (o, out) = sweep(&m, &spec, "variants", &[("MEMDIAL_ENGINE_CACHE", &cache)]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(
        std::fs::read_to_string(&counter).unwrap(),
        "ran\n",
        "the setup ran once"
    );
    let rows = rows(&out);
    for e in ["fake", "fake-fast"] {
        let r = rows.iter().find(|r| r["engine"] == e).unwrap();
        assert_eq!(ids(r), vec![5, 6, 7, 8], "{e}: {r}");
    }
    let meta = json(&out.join("sweep.json"));
    let settings = |e: &str| {
        meta["engines"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["name"] == e)
            .unwrap()["settings"]["env:OMP_WAIT_POLICY"]
            .clone()
    };
    assert_eq!(settings("fake"), "passive");
    assert_eq!(settings("fake-fast"), "active");
}

fn command_engine_mismatch_fails_only_when_it_must_match() {
    let _g = lock();
    let m = model("tiny-k3");
    let (o, out) = sweep(&m, &fake_spec(true), "fake-must", &[]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let line = String::from_utf8_lossy(&o.stdout);
    assert!(line.starts_with("FAIL: "), "{line}");
    assert!(
        line.contains("fake differs from memdial at token 0"),
        "{line}"
    );
    let rows = rows(&out);
    let fake = rows.iter().find(|r| r["engine"] == "fake").unwrap();
    assert_eq!(fake["status"], "ok", "{fake}");
    assert_eq!(ids(fake), vec![5, 6, 7, 8]);
    assert_eq!(fake["budget_held_by"], "flag");
    assert_eq!(fake["cgroup_enforced"], false);
    assert!(fake["point_key"]
        .as_str()
        .unwrap()
        .ends_with(";engine=fake"));
    // The template got memdial's prompt ids and the token count.
    let args = std::fs::read_to_string(
        out.join("runs")
            .join(format!("p{:03}-r0", fake["point_index"].as_u64().unwrap()))
            .join("args.txt"),
    )
    .unwrap();
    let me = rows.iter().find(|r| r["engine"] == "memdial").unwrap();
    assert_eq!(
        args.split_whitespace().nth(1),
        Some("4"),
        "max_tokens placeholder: {args}"
    );
    assert_eq!(
        args.split_whitespace().next().unwrap().split(',').count() as u64,
        me["prompt_tokens"].as_u64().unwrap()
    );
    let v = json(&out.join("verdict.json"));
    let c = &v["engines"]["comparisons"][0];
    assert_eq!(c["first_diff_position"], 0);
    assert_eq!(c["engine_id"], 5);
    assert_eq!(c["reference_id"], ids(me)[0]);
    // memdial's logits were dumped: its top-2 margin at token 0 is known.
    let margin = c["reference_margin"].as_f64().expect("margin");
    assert!(margin >= 0.0);
    assert!(
        c["status"] == "tie-break" || c["status"] == "disagrees",
        "{c}"
    );

    let (o, out) = sweep(&m, &fake_spec(false), "fake-report", &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let line = String::from_utf8_lossy(&o.stdout);
    assert!(line.starts_with("PASS: "), "{line}");
    assert!(line.contains("reported only: must_match = false"), "{line}");
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(
        md.contains("| **memdial** | identical | differs at token 0 (prompt 0) |"),
        "{md}"
    );
}

/// `start = "warm"` points of an engine whose adapter declares no warm start are
/// `n/a`; one that declares `warm = true` runs them, `{start}` naming the start.
fn warm_start_is_n_a_unless_the_adapter_declares_it() {
    let _g = lock();
    let m = model("tiny-k3");
    let spec = r#"
budgets = ["2x floor"]
prompts = ["The capital of France is"]
max_tokens = 4
repeats = 1
engines = ["memdial", "fake", "fakew"]
start = ["warm", "cold"]
[engine.fake]
command = ["sh", "-c", "echo 'ids: 5 6 7 8'"]
ids_stdout_regex = "^ids: (.*)$"
budget = "flag"
must_match = false
[engine.fakew]
command = ["sh", "-c", "echo 'ids: 5 6 7 8'; echo '{start}' > {run_dir}/start.txt"]
ids_stdout_regex = "^ids: (.*)$"
budget = "flag"
must_match = false
warm = true
"#;
    let (o, out) = sweep(&m, spec, "warm-na", &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let rows = rows(&out);
    let get = |e: &str, st: &str| {
        rows.iter()
            .find(|r| r["engine"] == e && r["start"] == st)
            .unwrap_or_else(|| panic!("no {e} {st} row"))
            .clone()
    };
    let na = get("fake", "warm");
    assert_eq!(na["status"], "n/a", "{na}");
    assert!(
        na["error"].as_str().unwrap().contains("has no warm start"),
        "{na}"
    );
    assert_eq!(get("fake", "cold")["status"], "ok");
    assert_eq!(get("memdial", "warm")["status"], "ok");
    assert!(get("memdial", "warm")["warm_fill_s"].as_f64().unwrap() > 0.0);
    for st in ["warm", "cold"] {
        let r = get("fakew", st);
        assert_eq!(r["status"], "ok", "{r}");
        let dir = out
            .join("runs")
            .join(format!("p{:03}-r0", r["point_index"].as_u64().unwrap()));
        assert_eq!(
            std::fs::read_to_string(dir.join("start.txt"))
                .unwrap()
                .trim(),
            st
        );
    }
}

/// `depth` points above 0 of an engine other than memdial are `n/a` (no adapter takes
/// a depth); the engines meet at depth 0, and memdial's depth-16 runs are compared
/// with each other only.
fn depth_is_n_a_for_other_engines() {
    let _g = lock();
    let m = model("tiny-k3");
    let spec = r#"
budgets = ["2x floor"]
prompts = ["The capital of France is"]
max_tokens = 4
repeats = 1
engines = ["memdial", "fake"]
depth = [0, 16]
[engine.fake]
command = ["sh", "-c", "echo 'ids: 5 6 7 8'"]
ids_stdout_regex = "^ids: (.*)$"
budget = "flag"
must_match = false
"#;
    let (o, out) = sweep(&m, spec, "depth-na", &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let rows = rows(&out);
    let get = |e: &str, d: &str| {
        rows.iter()
            .find(|r| r["engine"] == e && r["depth"] == d)
            .unwrap_or_else(|| panic!("no {e} depth {d} row"))
            .clone()
    };
    let na = get("fake", "16");
    assert_eq!(na["status"], "n/a", "{na}");
    assert!(
        na["error"]
            .as_str()
            .unwrap()
            .contains("depth = 16: only memdial takes a depth context"),
        "{na}"
    );
    assert_eq!(get("fake", "0")["status"], "ok");
    assert_eq!(get("memdial", "16")["status"], "ok");
    assert_eq!(get("memdial", "16")["depth_tokens"], 16);
    let v = json(&out.join("verdict.json"));
    let c = v["engines"]["comparisons"].as_array().unwrap();
    assert_eq!(c.len(), 1, "one comparison, at depth 0: {v}");
    assert_eq!(c[0]["engine"], "fake");
}

fn unknown_engine_is_a_usage_error() {
    let m = model("tiny-k3");
    let (o, _) = sweep(
        &m,
        "budgets = [\"floor\"]\nengines = [\"memdial\", \"nope\"]\n",
        "unknown",
        &[],
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("no command template"),
        "{}",
        text(&o)
    );
    let (o, _) = sweep(
        &m,
        "budgets = [\"floor\"]\nengines = [\"memdial\"]\n[engine.memdial]\nbogus = 1\n",
        "unknown-key",
        &[],
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
}

fn missing_binary_is_a_usage_error_naming_how_to_build() {
    let m = model("tiny-k3");
    let (o, _) = sweep(
        &m,
        "budgets = [\"floor\"]\nengines = [\"memdial\", \"kimi-k3-in-c\"]\n[engine.kimi-k3-in-c]\nbin = \"/nonexistent/k3\"\n",
        "missing-bin",
        &[],
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        e.contains("/nonexistent/k3 does not exist") && e.contains("tools/build-engines.sh"),
        "{e}"
    );
}

/// kimi-k3-in-c (`MEMDIAL_K3C_BIN`) against memdial on tiny-k3. Its trunk packer
/// needs every layer's trunk in one shard, which tiny-k3 does not have, so the
/// command is overridden to hold the trunk resident (`--cache-gb` only, no setup):
/// the ids, the step-table timings and the version are still read by the built-in
/// adapter's rules.
fn kimi_k3_in_c_agrees_with_memdial_on_tiny_k3() -> testkit::Outcome {
    let Some(bin) = std::env::var_os("MEMDIAL_K3C_BIN").filter(|b| !b.is_empty()) else {
        return testkit::skip_optional(
            "MEMDIAL_K3C_BIN is not set (build kimi-k3-in-c, see docs/engines.md)",
        );
    };
    let bin = PathBuf::from(bin);
    let _g = lock();
    let spec = r#"
budgets = ["2x floor"]
prompts = ["The capital of France is"]
max_tokens = 8
repeats = 1
engines = ["memdial", "kimi-k3-in-c"]
[engine.kimi-k3-in-c]
command = ["{bin}", "{model}", "--cache-gb", "0.1", "--ids", "{prompt_ids}", "--gen", "{max_tokens}",
           "--stop-id", "{eos_id}", "--threads", "{threads}", "--incremental", "--out", "{run_dir}/engine-out.json"]
setup = []
"#;
    let (o, out) = sweep(&model("tiny-k3"), spec, "k3c", &[("MEMDIAL_K3C_BIN", &bin)]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let rows = rows(&out);
    let k = rows.iter().find(|r| r["engine"] == "kimi-k3-in-c").unwrap();
    let me = rows.iter().find(|r| r["engine"] == "memdial").unwrap();
    assert_eq!(ids(k), ids(me));
    assert!(k["ttft_s"].as_f64().is_some(), "{k}");
    assert_eq!(k["metric_sources"]["decode_s_per_token"], "engine");
    assert!(
        k["engine_version"].as_str().unwrap().starts_with("k3 "),
        "{k}"
    );
    Ok(testkit::Completion::Completed)
}

/// llama.cpp (`MEMDIAL_LLAMA_BIN`: memdial's `tools/llama-ids` driver built against
/// llama.cpp) against memdial on tiny-k3 and tiny-linear: the setup step converts
/// each model with `memdial convert --to gguf` (cached under a scratch
/// `MEMDIAL_ENGINE_CACHE`); `llama.cpp-f32` (every weight F32) must give memdial's
/// ids, `llama.cpp` (native BF16 / MXFP4) is reported only. IO modes mmap and buffered.
fn llama_cpp_f32_agrees_with_memdial_on_tiny_fixtures() -> testkit::Outcome {
    let Some(bin) = std::env::var_os("MEMDIAL_LLAMA_BIN").filter(|b| !b.is_empty()) else {
        return testkit::skip_optional(
            "MEMDIAL_LLAMA_BIN is not set (tools/build-engines.sh DIR, see docs/engines.md)",
        );
    };
    let bin = PathBuf::from(bin);
    let cache = shared_scratch!().join("engine-cache");
    let _g = lock();
    for preset in ["tiny-k3", "tiny-linear"] {
        let spec = r#"
budgets = ["2GiB"]
io = ["mmap", "buffered"]
prompts = ["The capital of France is"]
max_tokens = 8
repeats = 1
engines = ["memdial", "llama.cpp-f32", "llama.cpp"]
"#;
        let (o, out) = sweep(
            &model(preset),
            spec,
            &format!("llama-{preset}"),
            &[
                ("MEMDIAL_LLAMA_BIN", &bin),
                ("MEMDIAL_ENGINE_CACHE", &cache),
            ],
        );
        assert_eq!(o.status.code(), Some(0), "{preset}: {}", text(&o));
        let rows = rows(&out);
        let me = rows
            .iter()
            .find(|r| r["engine"] == "memdial" && r["status"] == "ok")
            .unwrap();
        for io in ["mmap", "buffered"] {
            for e in ["llama.cpp-f32", "llama.cpp"] {
                let r = rows
                    .iter()
                    .find(|r| r["engine"] == e && r["io"] == io)
                    .unwrap_or_else(|| panic!("{preset}: no {e} row at {io}"));
                assert_eq!(r["status"], "ok", "{preset} {e} {io}: {r}");
                assert!(r["budget_held_by"] != "flag", "{r}");
                assert_eq!(r["metric_sources"]["decode_s_per_token"], "engine");
                // the GGUF (setup directory) is evicted with the model's 2 shards
                assert!(r["model_files"].as_u64().unwrap() > 2, "{r}");
                assert_eq!(r["cold_verified"], true, "{r}");
                if e == "llama.cpp-f32" {
                    assert_eq!(
                        ids(r),
                        ids(me),
                        "{preset} {io}: llama.cpp on the F32 GGUF vs memdial"
                    );
                }
            }
        }
        let v = json(&out.join("verdict.json"));
        assert_eq!(v["pass"], true, "{v}");
    }
    Ok(testkit::Completion::Completed)
}

/// llama.cpp alone (`MEMDIAL_LLAMA_BIN`) on a model memdial's engine does not read: a
/// 2-layer `llama` GGUF with random weights and a 328-token vocabulary, written by the
/// `gguf` package (`fixtures/oracle/tiny_llama_gguf.py`, oracle venv). The sweep runs
/// from a cold cache in memory cgroups at a searched `floor`, a percentage and a size,
/// in `mmap`, `buffered` and `direct`, for an ids prompt and a text prompt (tokenized
/// with the GGUF's own vocabulary: ids derived by hand): every run gives the ids of an
/// independent float64 numpy forward pass of the same file
/// (`fixtures/oracle/llama_numpy_generate.py`), so the ids are the same across budgets
/// and IO modes; the model is its one file (size,
/// eviction, identity); the floors are the engine's own, searched and then cached.
fn llama_cpp_alone_on_a_random_llama_gguf() -> testkit::Outcome {
    let Some(bin) = std::env::var_os("MEMDIAL_LLAMA_BIN").filter(|b| !b.is_empty()) else {
        return testkit::skip_optional(
            "MEMDIAL_LLAMA_BIN is not set (tools/build-engines.sh DIR, see docs/engines.md)",
        );
    };
    let python = match testkit::oracle::python(&repo_root()) {
        Ok(p) => p,
        Err(e) => return testkit::skip(format!("no oracle venv (gguf): {e}")),
    };
    let bin = PathBuf::from(bin);
    let _g = lock();
    let dir = shared_scratch!().join("tiny-llama");
    std::fs::create_dir_all(&dir).unwrap();
    let gguf = dir.join("tiny-llama.gguf");
    let py = |script: &str, args: &[&str]| {
        let o = Command::new(&python)
            .arg(repo_root().join("fixtures/oracle").join(script))
            .args(args)
            .output()
            .unwrap();
        assert!(o.status.success(), "{script}: {}", text(&o));
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    py("tiny_llama_gguf.py", &[gguf.to_str().unwrap()]);
    // The text prompt in the GGUF's own vocabulary, by hand: it has no token of two
    // characters, so SentencePiece's bigram merges never apply: BOS (1), then one id per
    // character of "▁The▁capital▁of▁France▁is" (spaces as `▁`, plus the leading dummy
    // prefix; `▁` 259, `a`–`z` 260–285, `A`–`Z` 286–311: tiny_llama_gguf.py's order).
    let text_ids: Vec<u64> = std::iter::once(1)
        .chain(" The capital of France is".chars().map(|c| match c {
            ' ' => 259,
            'a'..='z' => 260 + (c as u64 - 'a' as u64),
            _ => 286 + (c as u64 - 'A' as u64),
        }))
        .collect();
    let want: Vec<Vec<u64>> = [
        "1,100,200,300".to_string(),
        text_ids
            .iter()
            .map(|x| x.to_string())
            .collect::<Vec<_>>()
            .join(","),
    ]
    .iter()
    .map(|p| {
        py(
            "llama_numpy_generate.py",
            &[gguf.to_str().unwrap(), "--ids", p, "-n", "8", "--eos", "2"],
        )
        .lines()
        .find_map(|l| l.strip_prefix("ids: ").map(str::to_string))
        .unwrap()
        .split(',')
        .map(|x| x.parse().unwrap())
        .collect()
    })
    .collect();
    let spec = r#"
name = "llama.cpp alone"
budgets = ["floor", "50%", "256MiB"]
io = ["mmap", "buffered", "direct"]
prompts = [{ ids = [1, 100, 200, 300] }, "The capital of France is"]
max_tokens = 8
repeats = 1
threads = [2]
engines = ["llama.cpp"]
[engine."llama.cpp"]
floor_search = { max_run_s = 30, resolution = "4MiB", lowest = "1MiB" }
[noise]
other_cpu_cores = 1024.0
run_queue_wait_fraction = 1024.0
steal_cores = 1024.0
foreign_read_bytes = 1125899906842624
"#;
    let cache = dir.join("engine-cache");
    let _ = std::fs::remove_dir_all(&cache);
    let env = [
        ("MEMDIAL_LLAMA_BIN", bin.as_path()),
        ("MEMDIAL_ENGINE_CACHE", &cache),
    ];
    let (o, out) = sweep(&gguf, spec, "llama-alone", &env);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("searching its floor at io = buffered"),
        "{err}"
    );
    let meta = json(&out.join("sweep.json"));
    let size = std::fs::metadata(&gguf).unwrap().len();
    assert_eq!(meta["model_bytes"], size);
    assert_eq!(meta["opaque_model"]["files"], 1);
    assert_eq!(meta["opaque_model"]["model_type"], "llama");
    assert_eq!(
        meta["model_identity"]["files"][0]["name"],
        "tiny-llama.gguf"
    );
    let floors = meta["opaque_model"]["floors"].as_array().unwrap().clone();
    assert_eq!(floors.len(), 3, "{floors:?}");
    let rows = rows(&out);
    let ok: Vec<&serde_json::Value> = rows.iter().filter(|r| r["status"] == "ok").collect();
    for io in ["mmap", "buffered", "direct"] {
        let f = floors.iter().find(|f| f["io"] == io).unwrap();
        assert_eq!(f["source"], "search", "{f}");
        let at_floor = rows
            .iter()
            .find(|r| r["budget_spec"] == "floor" && r["io"] == io)
            .unwrap();
        assert_eq!(at_floor["budget_bytes"], f["bytes"], "{at_floor}");
        assert_eq!(at_floor["status"], "ok", "{at_floor}");
        assert!(ok.iter().filter(|r| r["io"] == io).count() >= 4, "{io}");
    }
    for r in &ok {
        let p = r["prompt_index"].as_u64().unwrap() as usize;
        assert_eq!(ids(r), want[p], "{} vs the numpy oracle", r["run_id"]);
        assert_eq!(r["model_files"], 1, "{r}");
        assert_eq!(r["cold_verified"], true, "{r}");
        assert_eq!(r["cgroup_enforced"], true, "{r}");
        assert_eq!(r["budget_held_by"], "cgroup", "{r}");
        let lm = match r["io"].as_str().unwrap() {
            "mmap" => "mmap",
            "buffered" => "none",
            _ => "dio",
        };
        assert_eq!(r["load_mode"], lm, "{r}");
        assert_eq!(r["n_prompt"], [4, text_ids.len()][p], "{r}");
        assert_eq!(r["n_gen"], want[p].len(), "{r}");
    }
    let v = json(&out.join("verdict.json"));
    assert_eq!(v["pass"], true, "{v}");
    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(report.contains("not available for this engine"), "{report}");
    // A second sweep takes the floors from the cache, and the same file's identity.
    let (o, out) = sweep(&gguf, spec, "llama-alone-2", &env);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let meta = json(&out.join("sweep.json"));
    for f in meta["opaque_model"]["floors"].as_array().unwrap() {
        assert_eq!(f["source"], "search (cached)", "{f}");
    }
    Ok(testkit::Completion::Completed)
}

/// Text prompts on a model memdial's engine does not read, through a Hugging Face
/// `tokenizer.json`: a byte-level BPE trained by the Python `tokenizers` package
/// (`fixtures/oracle/hf_tokenizer.py`, oracle venv), whose ids for fixed strings are
/// the oracle. `memdial tokenize` gives them (with and without the post-processor's
/// BOS, and decodes them back); a sweep of an engine that echoes its prompt ids gives
/// them from the model directory's `tokenizer.json` and from an engine's declared
/// `tokenizer`.
fn hf_tokenizer_json_tokenizes_text_prompts() -> testkit::Outcome {
    let python = match testkit::oracle::python(&repo_root()) {
        Ok(p) => p,
        Err(e) => return testkit::skip(format!("no oracle venv (tokenizers): {e}")),
    };
    let _g = lock();
    let texts = [
        "The capital of France is",
        "  two  spaces,\ttabs and\n\nnew lines   ",
        "東京 🙂 café naïve 12345<|im_end|>",
    ];
    let dir = shared_scratch!().join("hf-tok");
    let _ = std::fs::remove_dir_all(&dir);
    let o = Command::new(&python)
        .arg(repo_root().join("fixtures/oracle/hf_tokenizer.py"))
        .arg(&dir)
        .args(texts)
        .output()
        .unwrap();
    assert!(o.status.success(), "hf_tokenizer.py: {}", text(&o));
    let want: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let tokenize = |args: &[&str]| {
        let o = Command::new(memdial_bin!())
            .arg("tokenize")
            .arg("--model")
            .arg(&dir)
            .args(args)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", text(&o));
        serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap()
    };
    for (i, t) in texts.iter().enumerate() {
        assert_eq!(tokenize(&["--text", t]), want["with_special"][i], "{t:?}");
        assert_eq!(
            tokenize(&["--text", t, "--no-special"]),
            want["without_special"][i],
            "{t:?}"
        );
        let ids: Vec<String> = want["with_special"][i]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.to_string())
            .collect();
        assert_eq!(
            tokenize(&["--decode", &ids.join(","), "--no-special"]),
            want["decoded"][i],
            "{t:?}"
        );
    }
    // An opaque model: the tokenizer and a weights file no engine of memdial reads.
    std::fs::write(dir.join("weights.bin"), vec![7u8; 1 << 16]).unwrap();
    let prompts: Vec<String> = texts
        .iter()
        .map(|t| serde_json::to_string(t).unwrap())
        .collect();
    let spec = |declared: &str| {
        format!(
            r#"
budgets = ["4MiB"]
prompts = [{}]
max_tokens = 64
repeats = 1
engines = ["echo"]
[engine.echo]
command = ["sh", "-c", "echo ids: {{prompt_ids}}"]
ids_stdout_regex = "^ids: (.*)$"
budget = "flag"
{declared}
[noise]
other_cpu_cores = 1024.0
run_queue_wait_fraction = 1024.0
steal_cores = 1024.0
foreign_read_bytes = 1125899906842624
"#,
            prompts.join(", ")
        )
    };
    let check = |o: &Output, out: &Path| {
        assert_eq!(o.status.code(), Some(0), "{}", text(o));
        let rows = rows(out);
        assert_eq!(rows.len(), texts.len());
        for r in &rows {
            let p = r["prompt_index"].as_u64().unwrap() as usize;
            let w: Vec<u64> = want["with_special"][p]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_u64().unwrap())
                .collect();
            assert_eq!(ids(r), w, "prompt {p} vs the tokenizers oracle");
        }
    };
    let (o, out) = sweep(&dir, &spec(""), "hf-tok-dir", &[]);
    check(&o, &out);
    let bare = shared_scratch!().join("hf-tok-bare");
    std::fs::create_dir_all(&bare).unwrap();
    std::fs::write(bare.join("weights.bin"), vec![7u8; 1 << 16]).unwrap();
    let declared = format!(
        "tokenizer = {}",
        serde_json::to_string(&dir.join("tokenizer.json")).unwrap()
    );
    let (o, out) = sweep(&bare, &spec(&declared), "hf-tok-declared", &[]);
    check(&o, &out);
    // Without a tokenizer, text prompts are refused (usage).
    let (o, _) = sweep(&bare, &spec(""), "hf-tok-none", &[]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("no tokenizer for the text prompts"),
        "{}",
        text(&o)
    );
    Ok(testkit::Completion::Completed)
}

/// A text-only engine (`output = "text"`: it is given `{prompt_text}` and prints
/// text) alone on a model memdial's engine does not read: runs with identical text
/// pass with the weaker wording (ids not compared); text that depends on the budget
/// fails naming the differing run; a run that prints nothing is not a pass, and an
/// ids prompt is `n/a` for it (nothing compared, exit 1).
fn text_only_engine_is_checked_on_its_output_text() {
    let _g = lock();
    let model = shared_scratch!().join("opaque-text");
    std::fs::create_dir_all(&model).unwrap();
    std::fs::write(model.join("weights.bin"), vec![3u8; 1 << 16]).unwrap();
    let spec = |prompt: &str, command: &str| {
        format!(
            r#"
budgets = ["4MiB", "8MiB"]
prompts = [{prompt}]
max_tokens = 4
repeats = 1
engines = ["talk"]
[engine.talk]
command = [{command}]
output = "text"
budget = "flag"
[noise]
other_cpu_cores = 1024.0
run_queue_wait_fraction = 1024.0
steal_cores = 1024.0
foreign_read_bytes = 1125899906842624
"#
        )
    };
    let hello = r#""Hello there""#;
    let (o, out) = sweep(
        &model,
        // The text as one argument (never inside `sh -c`'s script: it is the user's text).
        &spec(
            hello,
            r#""sh", "-c", "printf 'you said: %s' \"$1\"", "sh", "{prompt_text}""#,
        ),
        "text-same",
        &[],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let line = String::from_utf8_lossy(&o.stdout);
    assert!(
        line.starts_with(
            "PASS: 2 runs at 2 points produced identical output text; ids not compared"
        ),
        "{line}"
    );
    // The hash is the SHA-256 of the text the engine printed, by coreutils' sha256sum.
    let sha = Command::new("sh")
        .arg("-c")
        .arg("printf '%s' 'you said: Hello there' | sha256sum")
        .output()
        .unwrap();
    let sha = String::from_utf8_lossy(&sha.stdout)
        .split_whitespace()
        .next()
        .unwrap()
        .to_string();
    let got = rows(&out);
    assert_eq!(got.len(), 2);
    for r in &got {
        assert_eq!(r["output_kind"], "text", "{r}");
        assert_eq!(r["output_text_sha256"], sha.as_str(), "{r}");
        assert_eq!(r["output_ids"].as_array().map(|a| a.len()), Some(0), "{r}");
    }
    let v = json(&out.join("verdict.json"));
    assert_eq!(v["pass"], true, "{v}");

    let (o, _) = sweep(
        &model,
        &spec(hello, r#""sh", "-c", "printf 'budget %s' {budget_bytes}""#),
        "text-differs",
        &[],
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let line = String::from_utf8_lossy(&o.stdout);
    assert!(line.starts_with("FAIL: "), "{line}");
    assert!(line.contains("output text differs from"), "{line}");
    assert!(line.contains("budget=8MiB"), "{line}");

    let (o, _) = sweep(&model, &spec(hello, r#""true""#), "text-empty", &[]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let line = String::from_utf8_lossy(&o.stdout);
    assert!(line.contains("the run printed no text"), "{line}");

    let (o, out) = sweep(
        &model,
        &spec("{ ids = [1, 2] }", r#""echo", "hi""#),
        "text-ids-prompt",
        &[],
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        rows(&out).iter().all(|r| r["status"] == "n/a"),
        "{}",
        text(&o)
    );
}

/// A floor search for an engine with a setup step: the setup runs first (once, into
/// the cached directory the runs use), the probes use what it wrote (here: how many
/// MiB the engine holds), a second sweep takes the floor from the cache, and a setup
/// made again (its directory removed) is another setup: searched again.
fn floor_search_runs_the_setup_first() -> testkit::Outcome {
    let _g = lock();
    let model = shared_scratch!().join("opaque-setup");
    std::fs::create_dir_all(&model).unwrap();
    std::fs::write(model.join("weights.bin"), vec![5u8; 1 << 16]).unwrap();
    let cache = shared_scratch!().join("setup-engine-cache");
    let _ = std::fs::remove_dir_all(&cache);
    let spec = r#"
budgets = ["floor", "256MiB"]
prompts = [{ ids = [1, 2, 3] }]
max_tokens = 2
repeats = 1
cgroup_slack = "8MiB"
engines = ["hold"]
[engine.hold]
setup = ["sh", "-c", "echo 48 > {setup_dir}/mib.txt"]
command = ["python3", "-c", "import sys; b = bytearray(int(open(sys.argv[1]).read()) << 20); b[::4096] = b'x' * len(b[::4096]); print('ids: 7, 8')", "{setup_dir}/mib.txt"]
ids_stdout_regex = "^ids: (.*)$"
budget = "cgroup"
floor_search = { max_run_s = 20, resolution = "4MiB", lowest = "1MiB", highest = "256MiB" }
[noise]
other_cpu_cores = 1024.0
run_queue_wait_fraction = 1024.0
steal_cores = 1024.0
foreign_read_bytes = 1125899906842624
"#;
    let env = [("MEMDIAL_ENGINE_CACHE", cache.as_path())];
    let (o, out) = sweep(&model, spec, "setup-floor", &env);
    let all = text(&o);
    if all.contains("no memory cgroup can be made here") {
        return testkit::skip("no memory cgroup here: a floor search cannot hold a budget");
    }
    assert_eq!(o.status.code(), Some(0), "{all}");
    let err = String::from_utf8_lossy(&o.stderr);
    let setup_at = err.find("engine hold: setup").expect("the setup ran");
    let search_at = err
        .find("searching its floor")
        .expect("the floor was searched");
    assert!(setup_at < search_at, "setup before the search: {err}");
    assert_eq!(
        err.matches("engine hold: setup").count(),
        1,
        "setup once: {err}"
    );
    let floor = |out: &Path| {
        let meta = json(&out.join("sweep.json"));
        let f = meta["opaque_model"]["floors"][0].clone();
        (
            f["bytes"].as_u64().unwrap(),
            f["source"].as_str().unwrap().to_string(),
        )
    };
    let (bytes, source) = floor(&out);
    assert_eq!(source, "search");
    // It holds 48 MiB (the setup's figure) in a cgroup of budget + 8 MiB: the floor is
    // well above the lowest budget tried, and the run at the floor completed.
    let mib = 1u64 << 20;
    assert!((24 * mib..=64 * mib).contains(&bytes), "floor {bytes}");
    let rows = rows(&out);
    assert!(rows.iter().all(|r| r["status"] == "ok"), "{rows:?}");
    let (o, out) = sweep(&model, spec, "setup-floor-2", &env);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(floor(&out), (bytes, "search (cached)".to_string()));
    // The setup made again: the cached floor is not its floor.
    std::fs::remove_dir_all(cache.join("hold")).unwrap();
    let (o, out) = sweep(&model, spec, "setup-floor-3", &env);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(floor(&out).1, "search");
    Ok(testkit::Completion::Completed)
}

/// `memdial engines check` runs each engine's check command: one that exits 0 is `ok`
/// with its first line, one that exits 3 is `broken` with its exit and stderr (exit 1).
fn engines_check_runs_each_engine() {
    let spec = shared_scratch!().join("check.toml");
    std::fs::write(
        &spec,
        r#"
budgets = ["floor"]
engines = ["memdial", "good", "bad"]
[engine.good]
command = ["true"]
ids_stdout_regex = "^ids: (.*)$"
check = ["sh", "-c", "echo good 1.0"]
[engine.bad]
command = ["true"]
ids_stdout_regex = "^ids: (.*)$"
check = ["sh", "-c", "echo oops >&2; exit 3"]
"#,
    )
    .unwrap();
    let o = Command::new(memdial_bin!())
        .args(["engines", "check", "--spec"])
        .arg(&spec)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        out.lines()
            .any(|l| l.starts_with("| good |") && l.ends_with("| ok (runs: good 1.0) |")),
        "{out}"
    );
    assert!(
        out.lines()
            .any(|l| l.starts_with("| bad |") && l.ends_with("| broken |")),
        "{out}"
    );
    assert!(err.contains("exited 3: oops"), "{err}");
}

fn main() -> ExitCode {
    testkit::main(
        include_str!("engines.rs"),
        vec![
            testkit::ignorable(
                "mlx_lm_agrees_with_memdial_on_tiny_fixtures",
                mlx_lm_agrees_with_memdial_on_tiny_fixtures,
            ),
            testkit::ignorable(
                "kimi_k3_in_c_agrees_with_memdial_on_tiny_k3",
                kimi_k3_in_c_agrees_with_memdial_on_tiny_k3,
            ),
            testkit::ignorable(
                "llama_cpp_f32_agrees_with_memdial_on_tiny_fixtures",
                llama_cpp_f32_agrees_with_memdial_on_tiny_fixtures,
            ),
            testkit::ignorable(
                "llama_cpp_alone_on_a_random_llama_gguf",
                llama_cpp_alone_on_a_random_llama_gguf,
            ),
            testkit::ignorable(
                "hf_tokenizer_json_tokenizes_text_prompts",
                hf_tokenizer_json_tokenizes_text_prompts,
            ),
            testkit::ignorable(
                "floor_search_runs_the_setup_first",
                floor_search_runs_the_setup_first,
            ),
            testkit::test(
                "text_only_engine_is_checked_on_its_output_text",
                text_only_engine_is_checked_on_its_output_text,
            ),
            testkit::test(
                "depth_is_n_a_for_other_engines",
                depth_is_n_a_for_other_engines,
            ),
            testkit::test(
                "command_engine_mismatch_fails_only_when_it_must_match",
                command_engine_mismatch_fails_only_when_it_must_match,
            ),
            testkit::test(
                "settings_variants_share_their_adapters_setup",
                settings_variants_share_their_adapters_setup,
            ),
            testkit::test(
                "warm_start_is_n_a_unless_the_adapter_declares_it",
                warm_start_is_n_a_unless_the_adapter_declares_it,
            ),
            testkit::test(
                "engines_check_runs_each_engine",
                engines_check_runs_each_engine,
            ),
            testkit::test(
                "unknown_engine_is_a_usage_error",
                unknown_engine_is_a_usage_error,
            ),
            testkit::test(
                "missing_binary_is_a_usage_error_naming_how_to_build",
                missing_binary_is_a_usage_error_naming_how_to_build,
            ),
        ],
    )
}
