//! `trace = "…"` in a sweep spec: every measured point's configuration replayed by
//! the simulator, the `predicted_*` columns, the report's "Predicted vs measured"
//! section and chart; a trace that does not fit the sweep refused before any run.
//! On tiny-k3 with `direct` IO and `none` prefetch, where the simulator's bytes are
//! exact: the predicted bytes per token equal the engine's own count, and the
//! predicted s/token is `compute + bytes ÷ bandwidth` by hand.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use memdial_testkit as testkit;
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_memdial");
const PROMPT: &str = "The capital of France is";

fn fixture(s: &testkit::Scratch) -> PathBuf {
    let d = s.join("tiny-k3");
    let st = Command::new(BIN)
        .args(["fixture", "--preset", "tiny-k3", "--out"])
        .arg(&d)
        .status()
        .unwrap();
    assert!(st.success());
    d
}

/// Records a trace of `prompt` with `max_tokens` tokens.
fn record(model: &Path, trace: &Path, prompt: &str, max_tokens: &str) {
    let out = Command::new(BIN)
        .args(["run", "--prompt", prompt, "--max-tokens", max_tokens])
        .args([
            "--ignore-eos",
            "--budget",
            "4MiB",
            "--output",
            "ids",
            "--model",
        ])
        .arg(model)
        .arg("--record-trace")
        .arg(trace)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "record: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn spec(dir: &Path, trace: &Path) -> PathBuf {
    let p = dir.join("spec.toml");
    let text = format!(
        r#"
name = "predict"
budgets = ["floor", "3x floor"]
io = ["direct"]
prefetch = ["none"]
cache = ["lru"]
threads = [1]
prompts = ["{PROMPT}"]
max_tokens = 4
repeats = 2
extra_args = ["--ignore-eos"]
trace = "{}"
device_gbps = 1.0
compute_s_per_token = 0.01
[noise]
other_cpu_cores = 1024.0
run_queue_wait_fraction = 1024.0
steal_cores = 1024.0
foreign_read_bytes = 1125899906842624
"#,
        trace.display()
    );
    std::fs::write(&p, text).unwrap();
    p
}

fn sweep(model: &Path, spec: &Path, out: &Path) -> Output {
    Command::new(BIN)
        .arg("sweep")
        .arg("--model")
        .arg(model)
        .arg("--spec")
        .arg(spec)
        .arg("--out")
        .arg(out)
        .args(["--bandwidth-probe", "4MiB", "--no-cgroup"])
        .output()
        .unwrap()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

#[test]
fn a_sweep_with_a_trace_predicts_every_point_and_refuses_a_foreign_trace() {
    let s = testkit::scratch!("sweep-predict");
    let model = fixture(&s);
    let trace = s.join("t.jsonl");
    record(&model, &trace, PROMPT, "4");
    let out = s.join("run");
    let o = sweep(&model, &spec(&s, &trace), &out);
    assert!(
        o.status.success(),
        "sweep: {}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );

    // The columns come after the schema's others, before the later axes.
    let csv = std::fs::read_to_string(out.join("results.csv")).unwrap();
    let header: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
    let at = header
        .iter()
        .position(|c| *c == "predicted_s_per_token")
        .unwrap();
    assert_eq!(
        &header[at..at + 3],
        [
            "predicted_s_per_token",
            "predicted_bytes_read_per_token",
            "prediction_error"
        ]
    );

    let rows: Vec<Value> =
        serde_json::from_slice(&std::fs::read(out.join("results.json")).unwrap()).unwrap();
    assert_eq!(rows.len(), 4);
    for point in [0, 1] {
        let mine: Vec<&Value> = rows.iter().filter(|r| r["point_index"] == point).collect();
        assert_eq!(mine.len(), 2);
        for r in &mine {
            assert_eq!(r["status"], "ok");
            // direct / none / lru: the simulator's bytes are the engine's count.
            let measured = r["bytes_read_per_token"].as_f64().unwrap();
            let predicted = r["predicted_bytes_read_per_token"].as_f64().unwrap();
            assert!(
                (predicted - measured).abs() < 1e-6 * measured.max(1.0),
                "point {point}: predicted {predicted} B/token, the engine read {measured}"
            );
            // `none`: compute + bytes ÷ bandwidth, 0.01 s + B / 1e9 B/s.
            let s_pred = r["predicted_s_per_token"].as_f64().unwrap();
            assert!((s_pred - (0.01 + measured / 1e9)).abs() < 1e-12);
        }
        let m = median(
            mine.iter()
                .map(|r| r["decode_s_per_token_median"].as_f64().unwrap())
                .collect(),
        );
        let s_pred = mine[0]["predicted_s_per_token"].as_f64().unwrap();
        let err = mine[0]["prediction_error"].as_f64().unwrap();
        assert!(
            (err - (s_pred / m - 1.0)).abs() < 1e-9,
            "{err} vs {s_pred}/{m}"
        );
    }

    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    let sec = &md[md.find("## Predicted vs measured").expect("the section")..];
    assert!(sec.contains("| p0 |") && sec.contains("| p1 |"), "{sec}");
    assert!(sec.contains("1.000 GB/s (the spec's device_gbps)"), "{sec}");
    assert!(sec.contains("Direct IO:"), "{sec}");
    assert!(out.join("predicted.svg").exists() && out.join("predicted.png").exists());
    let meta: Value =
        serde_json::from_slice(&std::fs::read(out.join("sweep.json")).unwrap()).unwrap();
    assert_eq!(meta["predictions"]["points"].as_object().unwrap().len(), 2);

    // Another prompt: refused (exit 2) before any run.
    let other = s.join("other.jsonl");
    record(&model, &other, "Once upon a time", "4");
    let bad = s.join("bad");
    let o = sweep(&model, &spec(&s, &other), &bad);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("does not match the sweep") && err.contains("prompt"),
        "{err}"
    );
    assert!(!bad.join("results.csv").exists());

    // Another token count: refused, naming the --max-tokens to record with.
    let long = s.join("long.jsonl");
    record(&model, &long, PROMPT, "6");
    let o = sweep(&model, &spec(&s, &long), &s.join("bad2"));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("--max-tokens 4"), "{err}");

    // The prediction settings without a trace, and a trace that is not a file.
    for (text, says) in [
        ("device_gbps = 1.0\n", "add trace ="),
        ("trace = \"missing.jsonl\"\n", "is not a file"),
    ] {
        let p = s.join("lone.toml");
        std::fs::write(&p, format!("budgets = [\"floor\"]\nmax_tokens = 4\n{text}")).unwrap();
        let o = sweep(&model, &p, &s.join("bad3"));
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert!(err.contains(says), "{err}");
    }
}

#[test]
fn interleaved_read_rates_are_measured_between_rounds_and_time_the_points() {
    let s = testkit::scratch!("sweep-predict-rates");
    let model = fixture(&s);
    let trace = s.join("t.jsonl");
    record(&model, &trace, PROMPT, "4");
    let p = spec(&s, &trace);
    let text = std::fs::read_to_string(&p).unwrap();
    let interleaved = text.replace("device_gbps = 1.0", "read_rates = \"interleaved\"");
    std::fs::write(&p, &interleaved).unwrap();
    let out = s.join("run");
    let o = sweep(&model, &p, &out);
    assert!(
        o.status.success(),
        "sweep: {}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    let meta: Value =
        serde_json::from_slice(&std::fs::read(out.join("sweep.json")).unwrap()).unwrap();
    let pr = &meta["predictions"];
    // 2 points × 2 repeats: samples before the first run, after the first round of 2
    // runs, and after the last run.
    let samples = pr["rate_samples"].as_array().unwrap();
    let after: Vec<u64> = samples
        .iter()
        .map(|x| x["after_runs"].as_u64().unwrap())
        .collect();
    assert_eq!(after, [0, 2, 4]);
    let trunk: Vec<f64> = samples
        .iter()
        .map(|x| x["trunk_gbps"].as_f64().unwrap())
        .collect();
    let expert: Vec<f64> = samples
        .iter()
        .map(|x| x["expert_gbps"].as_f64().unwrap())
        .collect();
    assert!(trunk
        .iter()
        .chain(&expert)
        .all(|g| g.is_finite() && *g > 0.0));
    // The rates are the samples' medians (of three: the middle one).
    let (rt, re) = (median(trunk), median(expert));
    assert_eq!(pr["device_gbps"].as_f64().unwrap(), rt);
    assert_eq!(pr["expert_gbps"].as_f64().unwrap(), re);
    assert!(pr["device_source"]
        .as_str()
        .unwrap()
        .starts_with("interleaved cells"));
    // `none`: 0.01 s + trunk bytes ÷ rT + (expert + embedding bytes) ÷ rE per token.
    for (_, pt) in pr["points"].as_object().unwrap() {
        let b = &pt["bytes"];
        let all = b["bytes"].as_f64().unwrap();
        let off_trunk =
            b["expert_bytes"].as_f64().unwrap() + b["embedding_bytes"].as_f64().unwrap();
        let want = 0.01 + (all - off_trunk) / (rt * 1e9) + off_trunk / (re * 1e9);
        let got = pt["s_per_token"].as_f64().unwrap();
        assert!((got - want).abs() < 1e-12, "{got} vs {want}");
    }

    // With another rate source, or an unknown value: refused before any run (exit 2).
    for (text, says) in [
        (
            interleaved.replace(
                "compute_s_per_token",
                "device_gbps = 1.0\ncompute_s_per_token",
            ),
            "not several",
        ),
        (
            interleaved.replace("\"interleaved\"", "\"often\""),
            "interleaved",
        ),
    ] {
        std::fs::write(&p, text).unwrap();
        let o = sweep(&model, &p, &s.join("bad"));
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert!(err.contains(says), "{err}");
    }
}
