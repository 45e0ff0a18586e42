//! The verdict corpus: one case per way a verdict could pass over nothing or over
//! inputs it did not check — a sweep that compares no run, an incomplete merge, runs
//! whose metrics do not prove their ids, stale engine output, a resume onto a
//! changed model or prompt or a tampered `results.json`, a baseline gate that
//! cannot decide — each with its exact exit code and a fragment of its message; and
//! `memdial report verify` on a clean and on tampered run directories.
//!
//! Sweeps run on the `tiny-k3` fixture with `--no-cgroup`. Hostile `memdial run`
//! outputs come from a stand-in child binary (`MEMDIAL_SWEEP_RUN_BIN`, a shell script
//! writing a given metrics file); hostile engine outputs from the `command` adapter.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use memdial_testkit::fixtures::lock;
use memdial_testkit::memdial_bin;
use memdial_testkit::output_text as text;
use memdial_testkit::shared_fixture;
use memdial_testkit::shared_scratch;
use serde_json::{json, Value};

/// 2 budgets × 1 IO mode × 2 repeats = 4 runs of 2 tokens.
const SPEC: &str = r#"
name = "corpus"
budgets = ["floor", "3x floor"]
io = ["buffered"]
prefetch = ["none"]
cache = ["lru"]
threads = [1]
prompts = [{ ids = [1, 2, 3] }]
max_tokens = 2
repeats = 2
"#;

/// A fresh directory `name` in the scratch directory.
fn fresh(name: &str) -> PathBuf {
    let d = shared_scratch!().join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn write(p: &Path, s: &str) -> PathBuf {
    std::fs::write(p, s).unwrap();
    p.to_path_buf()
}

/// `memdial sweep --check --no-cgroup` of `spec` on `model` into `out`.
fn sweep_on(model: &Path, spec: &Path, out: &Path, extra: &[&str], env: &[(&str, &str)]) -> Output {
    // Under a time limit: a case that would hang (a chart of far-out timings) fails.
    let limit = std::time::Duration::from_secs(300);
    memdial_testkit::output_within(
        Command::new(memdial_bin!())
            .args([
                "sweep",
                "--check",
                "--no-cgroup",
                "--bandwidth-probe",
                "4MiB",
            ])
            .arg("--model")
            .arg(model)
            .arg("--spec")
            .arg(spec)
            .arg("--out")
            .arg(out)
            .args(extra)
            .envs(env.iter().copied()),
        limit,
    )
    .unwrap_or_else(|e| panic!("{e}"))
}

fn sweep(spec: &Path, out: &Path, extra: &[&str]) -> Output {
    sweep_on(shared_fixture!("tiny-k3"), spec, out, extra, &[])
}

fn memdial(args: &[&str]) -> Output {
    Command::new(memdial_bin!()).args(args).output().unwrap()
}

fn json_of(p: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// A clean, passing sweep of SPEC in its own directory `name`.
fn clean_sweep(name: &str) -> PathBuf {
    let d = fresh(name);
    let out = d.join("out");
    let o = sweep(&write(&d.join("spec.toml"), SPEC), &out, &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    out
}

/// Rewrites `dir/results.json` through `f`.
fn tamper(dir: &Path, f: impl Fn(&mut Vec<Value>)) {
    let p = dir.join("results.json");
    let mut rows: Vec<Value> = serde_json::from_value(json_of(&p)).unwrap();
    f(&mut rows);
    std::fs::write(&p, serde_json::to_string_pretty(&rows).unwrap()).unwrap();
}

/// A stand-in for `memdial run` that writes `payload` as its metrics file.
fn stand_in(dir: &Path, payload: &Value) -> PathBuf {
    let m = write(&dir.join("metrics-payload.json"), &payload.to_string());
    let script = dir.join("fake-memdial.sh");
    write(
        &script,
        &format!(
            "#!/bin/sh\nwhile [ $# -gt 0 ]; do [ \"$1\" = --metrics-json ] && out=$2; shift; done\ncat {} > \"$out\"\n",
            m.display()
        ),
    );
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    script
}

/// The metrics a proving run of `ids` reports (the hash is the engine's, i.e. of the
/// little-endian u32 ids).
fn proving(ids: &[u32]) -> Value {
    json!({
        "schema_version": 1,
        "output_ids": ids,
        "generated_tokens": ids.len(),
        "output_ids_sha256": memdial::engine::generate::ids_sha256(ids),
        "decode_s_per_token": [0.01, 0.01],
        "ttft_s": 0.02,
    })
}

/// A sweep of SPEC whose child runs all report `payload`.
fn hostile_run(name: &str, payload: Value) -> Output {
    let d = fresh(name);
    let bin = stand_in(&d, &payload);
    sweep_on(
        shared_fixture!("tiny-k3"),
        &write(&d.join("spec.toml"), SPEC),
        &d.join("out"),
        &[],
        &[("MEMDIAL_SWEEP_RUN_BIN", s(&bin))],
    )
}

/// A sweep of memdial and a `command` engine `fake` whose command is `cmd` and whose
/// ids file is `ids_json` (braces in `cmd` are placeholders: JSON is written with
/// printf's octal escapes 173 and 175).
fn engine_run(name: &str, cmd: &str, ids_json: &str) -> Output {
    engine_run_with(name, cmd, ids_json, "")
}

/// [`engine_run`] with `extra` lines in the engine's table.
fn engine_run_with(name: &str, cmd: &str, ids_json: &str, extra: &str) -> Output {
    let d = fresh(name);
    let spec = format!(
        "{SPEC}engines = [\"memdial\", \"fake\"]\n[engine.fake]\ncommand = [\"sh\", \"-c\", {cmd:?}]\nids_json = {ids_json:?}\nbudget = \"flag\"\nmust_match = false\n{extra}\n"
    );
    sweep(&write(&d.join("spec.toml"), &spec), &d.join("out"), &[])
}

struct Case {
    name: &'static str,
    run: Box<dyn Fn() -> Output>,
    code: i32,
    expect: &'static [&'static str],
    /// Checked on the run's stdout line: must not contain these.
    never: &'static [&'static str],
}

fn case(
    name: &'static str,
    code: i32,
    expect: &'static [&'static str],
    run: impl Fn() -> Output + 'static,
) -> Case {
    Case {
        name,
        run: Box::new(run),
        code,
        expect,
        never: &["PASS"],
    }
}

fn cases() -> Vec<Case> {
    let mut v = vec![
        // --- nothing compared
        case(
            "every point below the floor",
            1,
            &["NOTHING COMPARED", "2 point(s) below the floor"],
            || {
                let d = fresh("below");
                let spec = SPEC.replace(
                    r#"budgets = ["floor", "3x floor"]"#,
                    r#"budgets = ["1KiB", "2KiB"]"#,
                );
                let out = d.join("out");
                let o = sweep(&write(&d.join("spec.toml"), &spec), &out, &[]);
                let v = json_of(&out.join("verdict.json"));
                assert_eq!(
                    (v["pass"].clone(), v["outcome"].clone()),
                    (json!(false), json!("nothing_compared")),
                    "{v}"
                );
                o
            },
        ),
        case(
            "a shard with no point",
            1,
            &["NOTHING COMPARED", "0 row(s) in all"],
            || {
                let d = fresh("empty-shard");
                sweep(
                    &write(&d.join("spec.toml"), SPEC),
                    &d.join("out"),
                    &["--shard", "5/5"],
                )
            },
        ),
        case(
            "report merge of a directory with nothing compared",
            1,
            &["NOTHING COMPARED"],
            || {
                let d = fresh("merge-nothing");
                let spec = SPEC.replace(
                    r#"budgets = ["floor", "3x floor"]"#,
                    r#"budgets = ["1KiB"]"#,
                );
                let a = d.join("a");
                sweep(&write(&d.join("spec.toml"), &spec), &a, &[]);
                memdial(&[
                    "report",
                    "merge",
                    s(&a),
                    "--out",
                    s(&d.join("m")),
                    "--check",
                ])
            },
        ),
        // --- incomplete merge
        case(
            "merge with shard 2 of 2 missing",
            1,
            &["INCOMPLETE", "shard(s) 2/2 missing"],
            || {
                let d = fresh("merge-missing");
                let a = d.join("a");
                let o = sweep(&write(&d.join("spec.toml"), SPEC), &a, &["--shard", "1/2"]);
                assert_eq!(o.status.code(), Some(0), "{}", text(&o));
                let m = d.join("m");
                let o = memdial(&["report", "merge", s(&a), "--out", s(&m), "--check"]);
                let v = json_of(&m.join("verdict.json"));
                assert_eq!(
                    (v["pass"].clone(), v["complete"].clone()),
                    (json!(false), json!(false)),
                    "{v}"
                );
                assert_eq!(v["missing_shards"], json!(["2/2"]), "{v}");
                let md = std::fs::read_to_string(m.join("report.md")).unwrap();
                assert!(md.contains("shard(s) 2/2 of the split are missing"), "{md}");
                o
            },
        ),
        case(
            "merge of a directory with a row deleted and runs_planned lowered to match",
            1,
            &["INCOMPLETE (3 of 4 runs)"],
            || {
                let out = clean_sweep("merge-deleted");
                tamper(&out, |rows| {
                    rows.remove(0);
                });
                let p = out.join("sweep.json");
                let mut m = json_of(&p);
                m["runs_planned"] = json!(3);
                std::fs::write(&p, m.to_string()).unwrap();
                let m = out.parent().unwrap().join("m");
                memdial(&["report", "merge", s(&out), "--out", s(&m), "--check"])
            },
        ),
        case(
            "merge of a shard whose sweep.json claims the whole sweep",
            1,
            &["INCOMPLETE (", "1 point(s) without a row (first: p1)"],
            || {
                let d = fresh("merge-unsharded-claim");
                let a = d.join("a");
                sweep(&write(&d.join("spec.toml"), SPEC), &a, &["--shard", "1/2"]);
                let p = a.join("sweep.json");
                let mut m = json_of(&p);
                m["shard"] = Value::Null;
                std::fs::write(&p, m.to_string()).unwrap();
                memdial(&[
                    "report",
                    "merge",
                    s(&a),
                    "--out",
                    s(&d.join("m")),
                    "--check",
                ])
            },
        ),
        // --- runs that do not prove themselves
        case(
            "a run with no ids",
            1,
            &["does not prove its output: output_ids: the run reported no ids"],
            || {
                let mut p = proving(&[]);
                p["output_ids_sha256"] = json!(memdial::engine::generate::ids_sha256(&[5, 6]));
                hostile_run("no-ids", p)
            },
        ),
        case(
            "ids not counted by generated_tokens",
            1,
            &["generated_tokens: 3, but output_ids holds 2 ids"],
            || {
                let mut p = proving(&[5, 6]);
                p["generated_tokens"] = json!(3);
                hostile_run("miscounted", p)
            },
        ),
        case(
            "more ids than max_tokens",
            1,
            &["output_ids: 3 ids, more than max_tokens = 2"],
            || hostile_run("too-many", proving(&[5, 6, 7])),
        ),
        case(
            "a hash that is not the hash of the ids",
            1,
            &["output_ids_sha256: 00 is not the hash"],
            || {
                let mut p = proving(&[5, 6]);
                p["output_ids_sha256"] = json!("00");
                hostile_run("bad-hash", p)
            },
        ),
        case(
            "a negative timing",
            1,
            &["ttft_s: -1 is not a finite non-negative figure"],
            || {
                let mut p = proving(&[5, 6]);
                p["ttft_s"] = json!(-1.0);
                hostile_run("negative-time", p)
            },
        ),
        // --- timings no clock gives: refused at ingestion, so no chart draws them
        // (1e200 s and 1e-300 s stalled plotters' tick search: the sweep hung)
        case(
            "a decode time of 1e200 s",
            1,
            &["decode_s_per_token[0]: 1e200 s is not a plausible time (0 or 1e-9 to 1e7 s)"],
            || {
                let mut p = proving(&[5, 6]);
                p["decode_s_per_token"] = json!([1e200, 1e200]);
                hostile_run("huge-time", p)
            },
        ),
        case(
            "a decode time of 1e-300 s",
            1,
            &["decode_s_per_token[0]: 1e-300 s is not a plausible time"],
            || {
                let mut p = proving(&[5, 6]);
                p["decode_s_per_token"] = json!([1e-300, 1e-300]);
                hostile_run("tiny-time", p)
            },
        ),
        case(
            "an engine whose step table reads 1e200 s",
            1,
            &["decode_s_per_token[0]: 1e200 s is not a plausible time"],
            || {
                engine_run_with(
                    "huge-steps",
                    "printf 'step 0.5\\nstep 1e200\\nstep 1e200\\n'; printf '{{\"output_ids\": [5, 6]}}' > {run_dir}/ids.json",
                    "{run_dir}/ids.json",
                    "steps_stdout_regex = \"^step (\\\\S+)$\"",
                )
            },
        ),
        case(
            "a resume of a directory whose rows hold 1e200 s",
            1,
            &["decode_s_per_token[0]: 1e200 s is not a plausible time"],
            || {
                let d = fresh("huge-resume");
                let mut p = proving(&[5, 6]);
                p["decode_s_per_token"] = json!([1e200, 1e200]);
                let bin = stand_in(&d, &p);
                let spec = write(&d.join("spec.toml"), SPEC);
                let env = [("MEMDIAL_SWEEP_RUN_BIN", s(&bin))];
                sweep_on(
                    shared_fixture!("tiny-k3"),
                    &spec,
                    &d.join("out"),
                    &["--test-stop-after", "1"],
                    &env,
                );
                sweep_on(shared_fixture!("tiny-k3"), &spec, &d.join("out"), &[], &env)
            },
        ),
        // --- stale engine output
        case(
            "an engine that writes nothing, with an ids file left outside the run directory",
            1,
            &["fake wrote no ids file"],
            || {
                let f = shared_scratch!().join("outside-ids.json");
                write(&f, r#"{"output_ids": [5, 6]}"#);
                engine_run("stale-outside", "true", s(&f))
            },
        ),
        case(
            "an engine whose ids file is older than the run",
            1,
            &["is older than this run"],
            || {
                engine_run(
                "stale-old",
                "printf '\\173\"output_ids\": [5, 6]\\175' > {run_dir}/ids.json; touch -d 2001-01-01 {run_dir}/ids.json",
                "{run_dir}/ids.json",
            )
            },
        ),
        case(
            "an engine that reports no ids",
            1,
            &["does not prove its output: output_ids"],
            || {
                engine_run(
                    "empty-ids",
                    "printf '\\173\"output_ids\": []\\175' > {run_dir}/ids.json",
                    "{run_dir}/ids.json",
                )
            },
        ),
        case(
            "an engine whose ids file is a FIFO (a read would block)",
            1,
            &[
                "its ids file",
                "is not a regular file (a directory, FIFO or device): not read",
            ],
            || {
                engine_run(
                    "fifo-ids",
                    "mkfifo {run_dir}/ids.json",
                    "{run_dir}/ids.json",
                )
            },
        ),
        case(
            "an engine that prints more stdout than the harness reads",
            1,
            &["its stdout", "more than the 67108864 the harness reads"],
            || {
                engine_run_with(
                    "huge-stdout",
                    "head -c 70000000 /dev/zero; printf '{{\"output_ids\": [5, 6]}}' > {run_dir}/ids.json",
                    "{run_dir}/ids.json",
                    "steps_stdout_regex = \"^step (\\\\S+)$\"",
                )
            },
        ),
        case(
            "an engine whose ids file is the sweep's own results.json",
            1,
            &["is in the sweep's directory but outside this run's: not removed"],
            || {
                let o = engine_run("own-results", "true", "{run_dir}/../../results.json");
                let out = shared_scratch!().join("own-results").join("out");
                assert!(out.join("results.json").is_file(), "{}", text(&o));
                o
            },
        ),
        // --- resume checks what it trusts
        case(
            "resume onto a model whose tensor data changed",
            2,
            &[
                "was written for other inputs: model: ",
                "modified (mtime changed)",
            ],
            || {
                let d = fresh("changed-model");
                let m = d.join("model");
                std::fs::create_dir_all(&m).unwrap();
                for e in std::fs::read_dir(shared_fixture!("tiny-k3")).unwrap() {
                    let e = e.unwrap();
                    std::fs::copy(e.path(), m.join(e.file_name())).unwrap();
                }
                let spec = write(&d.join("spec.toml"), SPEC);
                let out = d.join("out");
                let o = sweep_on(&m, &spec, &out, &["--test-stop-after", "1"], &[]);
                assert_eq!(o.status.code(), Some(1), "{}", text(&o));
                // One byte in the middle of the largest shard: same size, same header.
                let big = std::fs::read_dir(&m)
                    .unwrap()
                    .map(|e| e.unwrap().path())
                    .filter(|p| p.extension().is_some_and(|x| x == "safetensors"))
                    .max_by_key(|p| std::fs::metadata(p).unwrap().len())
                    .unwrap();
                let mut bytes = std::fs::read(&big).unwrap();
                let mid = bytes.len() / 2;
                bytes[mid] ^= 1;
                std::thread::sleep(std::time::Duration::from_millis(20));
                std::fs::write(&big, bytes).unwrap();
                sweep_on(&m, &spec, &out, &[], &[])
            },
        ),
        case(
            "resume after the prompt file was edited",
            2,
            &["prompt ", "prompt.txt: "],
            || {
                let d = fresh("changed-prompt");
                let p = write(&d.join("prompt.txt"), "The capital of France is");
                let spec = SPEC.replace(
                    "prompts = [{ ids = [1, 2, 3] }]",
                    r#"prompts = [{ file = "prompt.txt" }]"#,
                );
                let spec = write(&d.join("spec.toml"), &spec);
                let out = d.join("out");
                let o = sweep(&spec, &out, &["--test-stop-after", "1"]);
                assert_eq!(o.status.code(), Some(1), "{}", text(&o));
                write(&p, "The capital of Italy is");
                sweep(&spec, &out, &[])
            },
        ),
        case(
            "resume of results.json with a row's status set to below_floor",
            2,
            &["cannot be resumed", "foreign row", "#skip"],
            || {
                let out = clean_sweep("tamper-status");
                tamper(&out, |rows| rows[0]["status"] = json!("below_floor"));
                sweep(&out.parent().unwrap().join("spec.toml"), &out, &[])
            },
        ),
        case(
            "resume of results.json with a duplicated row",
            2,
            &["duplicate row"],
            || {
                let out = clean_sweep("tamper-dup");
                tamper(&out, |rows| {
                    let r = rows[0].clone();
                    rows.push(r)
                });
                sweep(&out.parent().unwrap().join("spec.toml"), &out, &[])
            },
        ),
        case(
            "resume of results.json with a foreign row",
            2,
            &["foreign row", "outside the spec's 2 points"],
            || {
                let out = clean_sweep("tamper-foreign");
                tamper(&out, |rows| {
                    let mut r = rows[0].clone();
                    r["point_index"] = json!(7);
                    r["repeat"] = json!(9);
                    r["run_id"] = json!(format!("{}#r9", r["point_key"].as_str().unwrap()));
                    rows.push(r)
                });
                sweep(&out.parent().unwrap().join("spec.toml"), &out, &[])
            },
        ),
        case(
            "merge of a directory whose row's ids were swapped",
            2,
            &["disagrees with its run", "output_ids"],
            || {
                let out = clean_sweep("tamper-ids-merge");
                tamper(&out, |rows| rows[0]["output_ids"] = json!([9, 9]));
                memdial(&[
                    "report",
                    "merge",
                    s(&out),
                    "--out",
                    s(&out.parent().unwrap().join("m")),
                    "--check",
                ])
            },
        ),
        // --- the baseline gate that cannot decide
        case(
            "baseline with repeats = 1",
            1,
            &["BASELINE UNDECIDED", "insufficient repeats"],
            || {
                let d = fresh("undecided");
                let spec = write(
                    &d.join("spec.toml"),
                    &SPEC.replace("repeats = 2", "repeats = 1"),
                );
                let base = d.join("base");
                let o = sweep(&spec, &base, &[]);
                assert_eq!(o.status.code(), Some(0), "{}", text(&o));
                let o = sweep(
                    &spec,
                    &d.join("new"),
                    &["--baseline", s(&base.join("results.csv"))],
                );
                assert!(
                    !String::from_utf8_lossy(&o.stdout).contains("0 of"),
                    "{}",
                    text(&o)
                );
                o
            },
        ),
        case(
            "baseline with non-finite and text cells",
            1,
            &["BASELINE UNDECIDED", "not a finite number"],
            || {
                let base = clean_sweep("nan-base");
                let p = base.join("results.csv");
                let mut rd = csv::Reader::from_path(&p).unwrap();
                let h = rd.headers().unwrap().clone();
                let recs: Vec<csv::StringRecord> = rd.records().map(|r| r.unwrap()).collect();
                let ct = h.iter().position(|x| x == "decode_s_per_token").unwrap();
                let mut w = csv::Writer::from_path(&p).unwrap();
                w.write_record(&h).unwrap();
                for (i, r) in recs.iter().enumerate() {
                    let rec: Vec<String> = r
                        .iter()
                        .enumerate()
                        .map(|(j, x)| match (j == ct, i % 2) {
                            (true, 0) => "NaN NaN".to_string(),
                            (true, _) => "fast slow".to_string(),
                            _ => x.to_string(),
                        })
                        .collect();
                    w.write_record(&rec).unwrap();
                }
                w.flush().unwrap();
                let d = base.parent().unwrap();
                sweep(&d.join("spec.toml"), &d.join("new"), &["--baseline", s(&p)])
            },
        ),
        // --- report verify
        case(
            "verify of a directory whose results.csv was edited",
            1,
            &["results.csv is not the file verdict.json was computed from"],
            || {
                let out = clean_sweep("verify-csv");
                let p = out.join("results.csv");
                let t = std::fs::read_to_string(&p).unwrap();
                std::fs::write(&p, t.replacen(",ok,", ",below_floor,", 1)).unwrap();
                memdial(&["report", "verify", s(&out)])
            },
        ),
        case(
            "verify of a directory whose row's ids were swapped",
            1,
            &["disagrees with its run", "results.json is not the file"],
            || {
                let out = clean_sweep("verify-ids");
                tamper(&out, |rows| rows[1]["output_ids"] = json!([9, 9]));
                memdial(&["report", "verify", s(&out)])
            },
        ),
        case(
            "verify of a directory with a row deleted",
            1,
            &["holds a metrics.json but results.json has no row"],
            || {
                let out = clean_sweep("verify-deleted");
                tamper(&out, |rows| {
                    rows.remove(0);
                });
                memdial(&["report", "verify", s(&out)])
            },
        ),
    ];
    // Controls: the same machinery passes when nothing is wrong.
    v.push(Case {
        never: &["FAIL", "UNDECIDED"],
        ..case(
            "control: a proving stand-in",
            0,
            &["PASS: 4 runs at 2 points"],
            || hostile_run("control-proving", proving(&[5, 6])),
        )
    });
    v.push(Case {
        never: &["FAIL"],
        ..case(
            "control: an undecided gate accepted by --baseline-undecided pass",
            0,
            &[
                "PASS: ",
                "baseline: undecided",
                "accepted: --baseline-undecided pass",
            ],
            || {
                let d = fresh("undecided-pass");
                let spec = write(
                    &d.join("spec.toml"),
                    &SPEC.replace("repeats = 2", "repeats = 1"),
                );
                let base = d.join("base");
                sweep(&spec, &base, &[]);
                sweep(
                    &spec,
                    &d.join("new"),
                    &[
                        "--baseline",
                        s(&base.join("results.csv")),
                        "--baseline-undecided",
                        "pass",
                    ],
                )
            },
        )
    });
    v.push(Case {
        never: &["FAIL"],
        ..case(
            "control: verify of a clean directory",
            0,
            &["verified: 4 rows agree", "; PASS: 4 runs"],
            || memdial(&["report", "verify", s(&clean_sweep("verify-clean"))]),
        )
    });
    v.push(Case {
        never: &["PASS"],
        ..case(
            "verify of an interrupted directory: consistent, but not a pass",
            1,
            &["verified: 1 rows agree", "; INCOMPLETE (1 of 4 runs)"],
            || {
                let d = fresh("verify-interrupted");
                let out = d.join("out");
                sweep(
                    &write(&d.join("spec.toml"), SPEC),
                    &out,
                    &["--test-stop-after", "1"],
                );
                memdial(&["report", "verify", s(&out)])
            },
        )
    });
    v.push(Case {
        never: &["FAIL"],
        ..case(
            "control: resume re-runs a row that disagrees with its run",
            0,
            &["PASS: 4 runs"],
            || {
                let out = clean_sweep("resume-rerun");
                tamper(&out, |rows| rows[0]["output_ids"] = json!([9, 9]));
                let o = sweep(&out.parent().unwrap().join("spec.toml"), &out, &[]);
                assert!(
                    String::from_utf8_lossy(&o.stderr).contains("is run again"),
                    "{}",
                    text(&o)
                );
                o
            },
        )
    });
    v
}

#[test]
fn every_vacuous_or_unchecked_verdict_is_refused() {
    let _g = lock();
    let mut failures = vec![];
    let all = cases();
    for c in &all {
        let o = (c.run)();
        let stdout = String::from_utf8_lossy(&o.stdout);
        let both = format!("{}{}", String::from_utf8_lossy(&o.stderr), stdout);
        let mut bad = vec![];
        if o.status.code() != Some(c.code) {
            bad.push(format!("exit {:?}, want {}", o.status.code(), c.code));
        }
        if both.contains("panicked") {
            bad.push("panicked".into());
        }
        for f in c.expect {
            if !both.contains(f) {
                bad.push(format!("no {f:?}"));
            }
        }
        for f in c.never {
            if stdout.contains(f) {
                bad.push(format!("stdout says {f:?}"));
            }
        }
        if !bad.is_empty() {
            failures.push(format!("{}: {}\n{}", c.name, bad.join("; "), text(&o)));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        all.len(),
        failures.join("\n")
    );
}
