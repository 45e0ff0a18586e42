//! A closed stdout ends every command quietly, as coreutils do: terminated by SIGPIPE
//! (what a shell reports for `memdial plan | head`), never a panic (exit 101, "failed
//! printing to stdout"), and with the files a command writes complete.
//!
//! Each command runs with its stdout the write end of a pipe whose read end is
//! already closed, so its first write to stdout meets a broken pipe.

use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};

use memdial_testkit as testkit;
use memdial_testkit::memdial_bin;
use memdial_testkit::shared_fixture;

/// Runs `memdial ARGS` with stdout a broken pipe; returns its stderr after checking it
/// was terminated by SIGPIPE and printed no panic.
fn closed_stdout(args: &[&str]) -> String {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let o = Command::new(memdial_bin!())
        .args(args)
        .stdin(Stdio::null())
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(
        !err.contains("panicked") && !err.contains("failed printing"),
        "{args:?}: {err}"
    );
    assert_eq!(
        o.status.signal(),
        Some(libc::SIGPIPE),
        "{args:?}: {:?}, stderr:\n{err}",
        o.status
    );
    err
}

#[test]
fn plan_tokenize_inspect_and_help_end_by_sigpipe() {
    let m = shared_fixture!("tiny-k3").to_str().unwrap();
    closed_stdout(&["plan", "--model", m, "--budget", "1GiB"]);
    closed_stdout(&["plan", "--model", m, "--budget", "1GiB", "--json"]);
    closed_stdout(&[
        "tokenize",
        "--model",
        m,
        "--text",
        "The capital of France is",
    ]);
    closed_stdout(&["tokenize", "--model", m, "--decode", "1,2,3"]);
    closed_stdout(&["inspect", "--model", m]);
    closed_stdout(&[
        "run",
        "--model",
        m,
        "--prompt-ids",
        "1,2,3",
        "--max-tokens",
        "2",
    ]);
    closed_stdout(&["--help"]);
    closed_stdout(&["--version"]);
}

/// `run` writes its metrics file before printing: the file is complete when the
/// broken pipe ends the process.
#[test]
fn run_keeps_its_metrics_when_stdout_is_closed() {
    let s = testkit::scratch!("broken-pipe-run");
    let metrics = s.join("m.json");
    closed_stdout(&[
        "run",
        "--model",
        shared_fixture!("tiny-k3").to_str().unwrap(),
        "--prompt-ids",
        "1,2,3",
        "--max-tokens",
        "3",
        "--ignore-eos",
        "--metrics-json",
        metrics.to_str().unwrap(),
    ]);
    let j: serde_json::Value = serde_json::from_slice(&std::fs::read(&metrics).unwrap()).unwrap();
    let ids = j["output_ids"]
        .as_array()
        .or_else(|| j["metrics"]["output_ids"].as_array())
        .unwrap_or_else(|| panic!("no output_ids in {j}"));
    assert_eq!(ids.len(), 3, "{j}");
}

#[test]
fn sweep_ends_by_sigpipe_after_writing_its_report() {
    let s = testkit::scratch!("broken-pipe-sweep");
    let spec = s.join("spec.toml");
    std::fs::write(
        &spec,
        r#"
name = "pipe"
budgets = ["floor"]
io = ["buffered"]
prefetch = ["none"]
cache = ["lru"]
threads = [1]
prompts = ["The capital of France is"]
max_tokens = 2
repeats = 1
"#,
    )
    .unwrap();
    let out = s.join("out");
    closed_stdout(&[
        "sweep",
        "--model",
        shared_fixture!("tiny-k3").to_str().unwrap(),
        "--spec",
        spec.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--bandwidth-probe",
        "4MiB",
    ]);
    assert!(out.join("report.md").is_file());
    assert!(out.join("sweep.json").is_file());
}
