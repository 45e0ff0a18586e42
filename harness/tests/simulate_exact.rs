//! `memdial simulate` against the engine's own counters: for the same trace and plan,
//! the simulator's bytes read after open, trunk and expert hit rates, expert-grouped
//! prefill fetches, warm-fill bytes and look-ahead accuracy EQUAL what
//! `memdial run --metrics-json` counted, on tiny-k3, for `lru`/`lfru` × `none`,
//! `next-layer`, `oracle` prefetch × cold and warm start, at budgets from the floor up.
//! With `none` every read is waited for, so the prefill/decode split is compared too;
//! with a read-ahead policy the engine counts a read when it completes, and the one
//! trunk group read ahead for the first decode token may finish before or after the
//! first token is reported, so only whole-run figures are compared there.

use std::path::{Path, PathBuf};
use std::process::Command;

use memdial_testkit as testkit;
use memdial_testkit::memdial_bin;
use serde_json::Value;

const PROMPT: &str = "1,2,3,4,5,6,7";

fn fixture(s: &testkit::Scratch) -> PathBuf {
    let d = s.join("tiny-k3");
    let st = Command::new(memdial_bin!())
        .args(["fixture", "--preset", "tiny-k3", "--out"])
        .arg(&d)
        .status()
        .unwrap();
    assert!(st.success());
    d
}

fn run(model: &Path, dir: &Path, tag: &str, args: &[&str]) -> (Value, PathBuf) {
    let (mj, tr) = (
        dir.join(format!("m-{tag}.json")),
        dir.join(format!("t-{tag}.jsonl")),
    );
    let out = Command::new(memdial_bin!())
        .args(["run", "--prompt-ids", PROMPT, "--prefill-chunk", "4"])
        .args([
            "--max-tokens",
            "6",
            "--ignore-eos",
            "--output",
            "ids",
            "--model",
        ])
        .arg(model)
        .arg("--metrics-json")
        .arg(&mj)
        .arg("--record-trace")
        .arg(&tr)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "run {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (
        serde_json::from_slice(&std::fs::read(&mj).unwrap()).unwrap(),
        tr,
    )
}

fn simulate(model: &Path, trace: &Path, args: &[&str]) -> Vec<Value> {
    let out = Command::new(memdial_bin!())
        .args(["simulate", "--output", "json", "--model"])
        .arg(model)
        .arg("--trace")
        .arg(trace)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "simulate {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// When a figure is compared: on every case, warm starts only, or `none` prefetch
/// only (a read-ahead policy moves a read between prefill and decode, see above).
#[derive(Clone, Copy, PartialEq)]
enum When {
    Always,
    Warm,
    NoPrefetch,
}

/// The figures compared: (the engine's `--metrics-json` key, the simulator's column,
/// when). `bytes_read_after_open` is the engine's `bytes_read_total −
/// bytes_read_load`.
const FIGURES: &[(&str, &str, When)] = &[
    (
        "bytes_read_after_open",
        "bytes_read_after_open",
        When::Always,
    ),
    ("trunk_hit_rate", "trunk_hit_rate", When::Always),
    ("expert_hit_rate", "expert_hit_rate", When::Always),
    ("lookahead_precision", "lookahead_precision", When::Always),
    ("lookahead_recall", "lookahead_recall", When::Always),
    (
        "prefill_expert_fetches",
        "prefill_expert_fetches",
        When::Always,
    ),
    ("budget_overflows", "budget_overflows", When::Always),
    ("warm_fill_bytes", "warm_fill_bytes", When::Warm),
    ("prefill_bytes_read", "prefill_bytes_read", When::NoPrefetch),
    ("bytes_read_per_token", "bytes_per_token", When::NoPrefetch),
];

const BUDGETS: [&str; 4] = ["2600000", "3000000", "4000000", "8000000"];
const PREFETCH: [&str; 3] = ["none", "next-layer", "oracle"];
const CACHES: [&str; 2] = ["lru", "lfru"];
const STARTS: [&str; 2] = ["cold", "warm"];

/// The engine's figure `k` (numbers compared as f64: hit rates and byte counts alike).
fn engine_figure(m: &Value, k: &str) -> Option<f64> {
    if k == "bytes_read_after_open" {
        return Some(m["bytes_read_total"].as_f64()? - m["bytes_read_load"].as_f64()?);
    }
    m[k].as_f64()
}

fn engine_matches_simulator() {
    let s = testkit::scratch!("sim-exact");
    let model = fixture(&s);
    let mut compared = 0;
    for budget in BUDGETS {
        for prefetch in PREFETCH {
            for cache in CACHES {
                for start in STARTS {
                    let tag = format!("{budget}-{prefetch}-{cache}-{start}");
                    let policy = [
                        "--budget",
                        budget,
                        "--prefetch",
                        prefetch,
                        "--cache",
                        cache,
                        "--start",
                        start,
                    ];
                    let mut args = policy.to_vec();
                    // Oracle replays the routing of a run of the same prompt.
                    let rec;
                    if prefetch == "oracle" {
                        rec = run(
                            &model,
                            s.path(),
                            &format!("{tag}-rec"),
                            &["--budget", budget],
                        )
                        .1;
                        args.push("--trace");
                        args.push(rec.to_str().unwrap());
                    }
                    let (m, tr) = run(&model, s.path(), &tag, &args);
                    let rows = simulate(&model, &tr, &policy);
                    assert_eq!(rows.len(), 1, "{tag}");
                    let r = &rows[0];
                    for &(k, col, when) in FIGURES {
                        let applies = match when {
                            When::Always => true,
                            When::Warm => start == "warm",
                            When::NoPrefetch => prefetch == "none",
                        };
                        if applies {
                            assert_eq!(engine_figure(&m, k), r[col].as_f64(), "{tag}: {k}");
                        }
                    }
                    if prefetch == "none" && start == "cold" {
                        belady_bounds(&model, &tr, &tag);
                    }
                    if prefetch == "oracle" {
                        // The oracle's guesses are the routing itself.
                        assert_eq!(m["lookahead_precision"].as_f64(), Some(1.0), "{tag}");
                    }
                    compared += 1;
                }
            }
        }
    }
    assert_eq!(
        compared,
        BUDGETS.len() * PREFETCH.len() * CACHES.len() * STARTS.len()
    );
    assert_eq!(compared, 48);
}

/// On the trace `tr`, at budgets from the floor to all experts cached, Belady's hit
/// rate (whole run and decode) is at least LRU's and LFRU's.
fn belady_bounds(model: &Path, tr: &Path, tag: &str) {
    let rows = simulate(
        model,
        tr,
        &[
            "--budgets",
            "2600000..9000000:12",
            "--cache",
            "lru,lfru,belady",
        ],
    );
    let mut checked = 0;
    for b in rows
        .iter()
        .filter(|r| r["policy"] == "belady" && r["below_floor"] == false)
    {
        for r in rows
            .iter()
            .filter(|r| r["budget_bytes"] == b["budget_bytes"] && r["policy"] != "belady")
        {
            for k in ["expert_hit_rate", "decode_expert_hit_rate"] {
                let (best, got) = (b[k].as_f64().unwrap(), r[k].as_f64().unwrap());
                assert!(
                    best >= got,
                    "{tag} budget {}: {k} belady {best} < {} {got}",
                    b["budget_bytes"],
                    r["policy"]
                );
            }
            checked += 1;
        }
    }
    assert!(checked >= 10, "{tag}: only {checked} comparisons");
}

/// A format-1 (headerless) trace is refused naming the format and what to do.
fn headerless_trace_is_refused() {
    let s = testkit::scratch!("sim-v1");
    let model = fixture(&s);
    let t = s.join("v1.jsonl");
    std::fs::write(&t, "{\"token\":0,\"layer\":1,\"experts\":[0,1,2,3]}\n").unwrap();
    let out = Command::new(memdial_bin!())
        .args(["simulate", "--budget", "3MB", "--model"])
        .arg(&model)
        .arg("--trace")
        .arg(&t)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(
        e.contains("format-1") && e.contains("--record-trace"),
        "{e}"
    );
}

/// Exact speculation with every draft accepted (`replay` of the plain run's own ids)
/// reads what `simulate --speculate ngram:K --mean-accepted-length K` replays from the
/// plain run's trace: passes of K + 1 rows tiling the decode positions, the plan holding
/// the restore point. Equal byte counts, at two budgets, K = 2 and 4, `none` prefetch.
fn speculation_with_every_draft_accepted_matches_the_engine() {
    let s = testkit::scratch!("sim-spec");
    let model = fixture(&s);
    let mut checked = 0;
    for budget in ["2600000", "3000000"] {
        let base = ["--budget", budget, "--prefetch", "none", "--io", "buffered"];
        let tag = format!("plain-{budget}");
        let (plain, tr) = run(&model, &s, &tag, &base);
        let ids = s.join(format!("{tag}.ids"));
        let out = Command::new(memdial_bin!())
            .args(["run", "--prompt-ids", PROMPT, "--prefill-chunk", "4"])
            .args([
                "--max-tokens",
                "6",
                "--ignore-eos",
                "--output",
                "ids",
                "--model",
            ])
            .arg(&model)
            .args(base)
            .output()
            .unwrap();
        assert!(out.status.success());
        std::fs::write(&ids, &out.stdout).unwrap();
        for k in [2usize, 4] {
            let spec = format!("replay:{}:{k}", ids.display());
            let mut args = base.to_vec();
            args.extend(["--speculate", spec.as_str()]);
            let (m, _) = run(&model, &s, &format!("spec-{budget}-{k}"), &args);
            assert_eq!(
                m["accepted_tokens"], m["drafted_tokens"],
                "replaying its own ids every draft is accepted"
            );
            assert!(
                m["bytes_read_per_token"].as_f64() < plain["bytes_read_per_token"].as_f64(),
                "{budget} K={k}: passes of several rows read less per token"
            );
            let ks = k.to_string();
            let rows = simulate(
                &model,
                &tr,
                &[
                    "--budget",
                    budget,
                    "--prefetch",
                    "none",
                    "--io",
                    "buffered",
                    "--cache",
                    "lru",
                    "--speculate",
                    &format!("ngram:{k}"),
                    "--mean-accepted-length",
                    &ks,
                ],
            );
            let r = &rows[0];
            for (ek, sk) in [
                ("bytes_read_per_token", "bytes_per_token"),
                ("prefill_bytes_read", "prefill_bytes_read"),
            ] {
                assert_eq!(
                    m[ek].as_f64(),
                    r[sk].as_f64(),
                    "{budget} K={k}: engine {ek} vs simulator {sk}"
                );
                checked += 1;
            }
            assert_eq!(
                engine_figure(&m, "bytes_read_after_open"),
                r["bytes_read_after_open"].as_f64(),
                "{budget} K={k}: bytes read after open"
            );
        }
        // The text header counts the decode tokens of the replays that ran, not of a
        // first budget below the floor: 6 generated tokens, the first from the prefill.
        let o = Command::new(memdial_bin!())
            .args(["simulate", "--output", "text", "--budgets"])
            .arg(format!("1000,{budget}"))
            .arg("--model")
            .arg(&model)
            .arg("--trace")
            .arg(&tr)
            .output()
            .unwrap();
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(
            out.contains(": 5 decode tokens,"),
            "{}",
            testkit::output_text(&o)
        );
        // Half a speculation, or more drafts accepted than drafted: refused with exit 2.
        for bad in [
            &["--speculate", "ngram:4"][..],
            &["--mean-accepted-length", "2"],
            &["--speculate", "ngram:2", "--mean-accepted-length", "3"],
        ] {
            let o = Command::new(memdial_bin!())
                .args(["simulate", "--budget", budget, "--model"])
                .arg(&model)
                .arg("--trace")
                .arg(&tr)
                .args(bad)
                .output()
                .unwrap();
            assert_eq!(
                o.status.code(),
                Some(2),
                "{bad:?}: {}",
                testkit::output_text(&o)
            );
        }
    }
    assert_eq!(checked, 8);
}

fn main() -> std::process::ExitCode {
    testkit::main(
        include_str!("simulate_exact.rs"),
        vec![
            testkit::test("engine_matches_simulator", engine_matches_simulator),
            testkit::test("headerless_trace_is_refused", headerless_trace_is_refused),
            testkit::test(
                "speculation_with_every_draft_accepted_matches_the_engine",
                speculation_with_every_draft_accepted_matches_the_engine,
            ),
        ],
    )
}
