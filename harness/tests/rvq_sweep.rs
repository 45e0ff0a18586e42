//! `memdial sweep` with `layout = ["safetensors", "rvq3"]` against the real `memdial
//! run` on `tiny-k3`: the lossy layout is packed once into the cache, runs at the exact
//! layout's budgets, is never counted as identical (its own verdict groups, the line
//! says so, the recommendation leaves it out), and its agreement figures equal a NumPy
//! reference on the same teacher-forced logits (fixtures/oracle/lossy_agreement.py).
//! A `[lossy.rvq3] min_top1` the layout does not meet fails `--check` (exit 1).

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Output};

use memdial_testkit as testkit;
use memdial_testkit::output_text as text;
use memdial_testkit::{memdial_bin, shared_fixture, shared_scratch};
use serde_json::Value;

/// The prompt as ids, so the test can rebuild the teacher-forced input.
const PROMPT: [u32; 5] = [17, 300, 5, 42, 1000];

fn spec(limit: f64) -> String {
    format!(
        r#"
name = "rvq"
budgets = ["floor", "100%"]
io = ["direct", "mmap"]
prefetch = ["next-layer"]
prompts = [{{ ids = [17, 300, 5, 42, 1000] }}]
max_tokens = 6
repeats = 1
layout = ["safetensors", "rvq3"]
[lossy.rvq3]
min_top1 = {limit}
# What the sweep writes is checked here, on whatever machine runs it: no run is noisy.
[noise]
other_cpu_cores = 1024.0
run_queue_wait_fraction = 1024.0
steal_cores = 1024.0
foreign_read_bytes = 1125899906842624
"#
    )
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn sweep(spec: &str, out: &str) -> (Output, PathBuf) {
    let spec_path = shared_scratch!().join(format!("{out}.toml"));
    std::fs::write(&spec_path, spec).unwrap();
    let out = shared_scratch!().join(out);
    let _ = std::fs::remove_dir_all(&out);
    let o = Command::new(memdial_bin!())
        .arg("sweep")
        .arg("--model")
        .arg(shared_fixture!("tiny-k3"))
        .arg("--spec")
        .arg(&spec_path)
        .arg("--out")
        .arg(&out)
        .args(["--bandwidth-probe", "4MiB", "--check"])
        .env("MEMDIAL_CACHE_DIR", shared_scratch!().join("cache"))
        .output()
        .unwrap();
    (o, out)
}

fn json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// `memdial run --logits-out` of `model` on `ids` (max-tokens 1): the file.
fn logits(model: &Path, ids: &[u32], f: &Path) {
    let ids: Vec<String> = ids.iter().map(|i| i.to_string()).collect();
    let o = Command::new(memdial_bin!())
        .arg("run")
        .arg("--model")
        .arg(model)
        .args(["--prompt-ids", &ids.join(","), "--max-tokens", "1"])
        .args(["--output", "ids", "--logits-out"])
        .arg(f)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
}

fn lossy_layout_is_compared_by_agreement() -> testkit::Outcome {
    let py = match testkit::oracle::python(&repo()) {
        Ok(p) => p,
        Err(why) => return testkit::skip(why),
    };
    let _g = testkit::fixtures::lock();
    let (o, out) = sweep(&spec(0.0), "agree");
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let line = String::from_utf8_lossy(&o.stdout).trim().to_string();
    assert!(line.starts_with("PASS: "), "{line}");
    assert!(
        line.contains("4 runs of the exact layouts produced identical output ids"),
        "{line}"
    );
    assert!(
        line.contains("4 runs of the lossy rvq3 agree among themselves"),
        "{line}"
    );
    assert!(line.contains("never as identical"), "{line}");

    let rows: Vec<Value> = serde_json::from_value(json(&out.join("results.json"))).unwrap();
    let ok: Vec<&Value> = rows.iter().filter(|r| r["status"] == "ok").collect();
    assert_eq!(
        ok.len(),
        8,
        "2 budgets × 2 IO × 2 layouts, mmap included for rvq3"
    );
    let of = |l: &str| ok.iter().filter(|r| r["layout"] == l).collect::<Vec<_>>();
    let (exact, lossy) = (of("safetensors"), of("rvq3"));
    // Each layout identical within itself; the two differ (so "identical" would be false).
    assert!(exact
        .iter()
        .all(|r| r["output_ids_sha256"] == exact[0]["output_ids_sha256"]));
    assert!(lossy
        .iter()
        .all(|r| r["output_ids_sha256"] == lossy[0]["output_ids_sha256"]));
    assert_ne!(exact[0]["output_ids_sha256"], lossy[0]["output_ids_sha256"]);
    // Equal budgets at each point.
    for r in &lossy {
        let twin = r["point_key"]
            .as_str()
            .unwrap()
            .replace("=rvq3", "=safetensors");
        let t = exact
            .iter()
            .find(|x| x["point_key"] == twin.as_str())
            .unwrap();
        assert_eq!(r["budget_bytes"], t["budget_bytes"], "{twin}");
    }

    let v = json(&out.join("verdict.json"));
    let groups = v["groups"].as_array().unwrap();
    assert_eq!(groups.len(), 2, "{v}");
    assert!(groups.iter().any(|g| g["lossy_layout"] == "rvq3"));
    assert_ne!(
        v["recommendation"]["layout"], "rvq3",
        "the answer is for the exact output"
    );

    // The figures against NumPy on the same teacher-forced logits.
    let exact_ids: Vec<u32> = serde_json::from_value(exact[0]["output_ids"].clone()).unwrap();
    let lossy_ids: Vec<u32> = serde_json::from_value(lossy[0]["output_ids"].clone()).unwrap();
    let n = exact_ids.len();
    let input: Vec<u32> = PROMPT.iter().chain(&exact_ids[..n - 1]).copied().collect();
    let packed = Path::new(lossy[0]["model"].as_str().unwrap()).to_path_buf();
    let (fe, fl) = (out.join("exact.npy"), out.join("lossy.npy"));
    logits(shared_fixture!("tiny-k3"), &input, &fe);
    logits(&packed, &input, &fl);
    let o = Command::new(&py)
        .arg(repo().join("fixtures/oracle/lossy_agreement.py"))
        .arg(&fe)
        .arg(&fl)
        .arg((PROMPT.len() - 1).to_string())
        .arg(n.to_string())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let want: Value = serde_json::from_slice(&o.stdout).unwrap();
    let a = &json(&out.join("lossy/agreement.json"))[0];
    assert_eq!(a["positions"].as_u64(), Some(n as u64), "{a}");
    assert_eq!(a["top1_agreement"], want["top1"], "{a} vs {want}");
    for (k, w) in [
        ("logit_max_rel_dev", "max_rel_dev"),
        ("logit_median_rel_dev", "median_rel_dev"),
    ] {
        let (got, exp) = (a[k].as_f64().unwrap(), want[w].as_f64().unwrap());
        assert!(
            (got - exp).abs() <= 1e-12 * exp.abs(),
            "{k}: {got} vs NumPy {exp}"
        );
    }
    let first = exact_ids.iter().zip(&lossy_ids).position(|(x, y)| x != y);
    assert_eq!(a["first_diff_token"].as_u64(), first.map(|p| p as u64));

    // `memdial inspect` says what the pack is.
    let o = Command::new(memdial_bin!())
        .args(["inspect", "--json", "--model"])
        .arg(&packed)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["rvq_bits"], 3, "{v}");

    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(report.contains("## Lossy layouts: agreement with the exact layout"));
    Ok(testkit::Completion::Completed)
}

fn an_unmet_min_top1_fails_the_check() {
    let _g = testkit::fixtures::lock();
    let (o, out) = sweep(&spec(1.0), "strict");
    let line = String::from_utf8_lossy(&o.stdout).trim().to_string();
    let a = &json(&out.join("lossy/agreement.json"))[0];
    if a["top1_agreement"].as_f64() == Some(1.0) {
        panic!("tiny-k3's rvq3 agrees everywhere: this test needs a layout that does not");
    }
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(line.starts_with("FAIL: "), "{line}");
    assert!(line.contains("BELOW min_top1 1"), "{line}");
}

fn main() -> ExitCode {
    testkit::main(
        include_str!("rvq_sweep.rs"),
        vec![
            testkit::ignorable(
                "lossy_layout_is_compared_by_agreement",
                lossy_layout_is_compared_by_agreement,
            ),
            testkit::test(
                "an_unmet_min_top1_fails_the_check",
                an_unmet_min_top1_fails_the_check,
            ),
        ],
    )
}
