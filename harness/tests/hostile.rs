//! The hostile-input corpus of `memdial sweep`: one table of specs and engine
//! templates that are refused before any run — exit 2, a message naming the engine,
//! the key and what is wrong, and no `sweep.json` or run written — with a control
//! that passes; a run's processes ending with it without a cgroup (`--no-cgroup`);
//! and a full disk (a size-limited tmpfs: root only, else visibly skipped).
//!
//! Every command runs under a time limit ([`testkit::output_within`]): a hang (a FIFO
//! read, a chart that never finishes) fails the case instead of hanging the suite.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Output};
use std::time::Duration;

use memdial_testkit as testkit;
use memdial_testkit::memdial_bin;
use memdial_testkit::shared_fixture;
use memdial_testkit::shared_scratch;
use testkit::output_text as text;

/// Far more than any case takes on a loaded 2-core machine (each is a second or two).
const LIMIT: Duration = Duration::from_secs(180);

/// One point, one run: what every case starts from.
const BASE: &str = r#"
budgets = ["floor"]
io = ["buffered"]
threads = [1]
max_tokens = 2
repeats = 1
"#;

fn run(cmd: &mut Command) -> Output {
    testkit::output_within(cmd, LIMIT).unwrap_or_else(|e| panic!("{e}"))
}

/// `memdial sweep --no-cgroup` of spec text `spec` into `DIR/out` (`DIR` a fresh
/// directory `name` holding the spec).
fn sweep(name: &str, spec: &str, extra: &[&str]) -> (Output, PathBuf) {
    let d = shared_scratch!().join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    let p = d.join("spec.toml");
    std::fs::write(&p, spec).unwrap();
    let out = d.join("out");
    let o = run(Command::new(memdial_bin!())
        .args([
            "sweep",
            "--check",
            "--no-cgroup",
            "--bandwidth-probe",
            "4MiB",
        ])
        .arg("--model")
        .arg(shared_fixture!("tiny-k3"))
        .arg("--spec")
        .arg(&p)
        .arg("--out")
        .arg(&out)
        .args(extra));
    (o, out)
}

/// BASE with memdial and a `command` engine `x` whose `command` is the TOML array
/// `command`, plus `extra` lines in its table.
fn engine(command: &str, extra: &str) -> String {
    format!(
        "{BASE}prompts = [{{ ids = [1, 2] }}]\nengines = [\"memdial\", \"x\"]\n[engine.x]\n\
         command = {command}\nids_json = \"{{run_dir}}/o.json\"\nbudget = \"flag\"\nmust_match = false\n{extra}\n"
    )
}

/// A file `name` in the scratch directory with `text` and `mode`; its path.
fn file(name: &str, text: &str, mode: u32) -> String {
    use std::os::unix::fs::PermissionsExt;
    let p = shared_scratch!().join(name);
    std::fs::write(&p, text).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
    p.display().to_string()
}

/// A FIFO in the scratch directory; its path.
fn fifo() -> String {
    let p = shared_scratch!().join("prompt.fifo");
    if !p.exists() {
        let c = std::ffi::CString::new(p.to_str().unwrap()).unwrap();
        // SAFETY: mkfifo reads the NUL-terminated path we own.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    }
    p.display().to_string()
}

/// (case, spec text, fragments stderr must hold).
fn refused_cases() -> Vec<(&'static str, String, Vec<String>)> {
    let noexec = file("noexec.sh", "#!/bin/sh\necho\n", 0o644);
    let badinterp = file("badinterp.sh", "#!/no/such/interp\necho\n", 0o755);
    let prompts = |p: &str| format!("{BASE}prompts = [{p}]\n");
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    vec![
        // --- templates
        (
            "unknown placeholder",
            engine(r#"["sh", "-c", "echo {bogus}"]"#, ""),
            s(&[
                r#"engine "x": command[2] "echo {bogus}": unknown placeholder {bogus}"#,
                "write {{ and }} for literal braces",
            ]),
        ),
        (
            "JSON braces written without the escape",
            engine(
                r#"["sh", "-c", "printf '{\"a\": 1}' > {run_dir}/o.json"]"#,
                "",
            ),
            s(&["command[2]", r#"unknown placeholder {"a": 1}"#]),
        ),
        (
            "a lone closing brace",
            engine(r#"["sh", "-c", "echo }"]"#, ""),
            s(&["a } at byte 5 closes no placeholder (write }} for a literal })"]),
        ),
        (
            "an unclosed placeholder",
            engine(r#"["sh", "-c", "echo {run_dir"]"#, ""),
            s(&["unclosed placeholder at byte 5"]),
        ),
        (
            "a per-run placeholder in a setup step",
            engine(
                r#"["sh", "-c", "true"]"#,
                r#"setup = ["echo", "{threads}"]"#,
            ),
            s(&[r#"setup[1] "{threads}": placeholder {threads} has a value only in a run"#]),
        ),
        (
            "{io_args} inside an argument",
            engine(r#"["sh", "-c", "x {io_args}"]"#, ""),
            s(&["{io_args} must be a whole argument"]),
        ),
        (
            "{setup_dir} without a setup step",
            engine(r#"["sh", "-c", "ls {setup_dir}"]"#, ""),
            s(&["{setup_dir} is used but the engine has no `setup` step"]),
        ),
        (
            "a NUL in a template",
            engine(r#"["sh", "-c", "a\u0000b"]"#, ""),
            s(&["command[2]", "holds a NUL character (at byte 1)"]),
        ),
        (
            "an environment key with =",
            engine(r#"["sh", "-c", "true"]"#, r#"env = { "A=B" = "1" }"#),
            s(&[r#"env key "A=B" is not a variable name"#]),
        ),
        (
            "an empty command",
            engine("[]", ""),
            s(&["`command` is empty"]),
        ),
        (
            "an ids regex that does not compile",
            engine(r#"["sh", "-c", "true"]"#, r#"ids_stdout_regex = "(""#),
            s(&[r#"engine "x": ids_stdout_regex"#]),
        ),
        // --- programs that cannot start
        (
            "a missing program",
            engine(r#"["/no/such/engine-bin", "{model}"]"#, ""),
            s(&[
                r#"engine "x": command[0] "/no/such/engine-bin" cannot start: /no/such/engine-bin does not exist"#,
            ]),
        ),
        (
            "a program not on PATH",
            engine(r#"["no-such-engine-xyz"]"#, ""),
            s(&[r#""no-such-engine-xyz" is not found on PATH"#]),
        ),
        (
            "a program without the execute bit",
            engine(&format!("[{noexec:?}]"), ""),
            s(&["cannot start", "is not executable (mode 644"]),
        ),
        (
            "a script whose interpreter is missing",
            engine(&format!("[{badinterp:?}]"), ""),
            s(&["its #! interpreter /no/such/interp does not exist"]),
        ),
        (
            "a missing version command",
            engine(
                r#"["sh", "-c", "true"]"#,
                r#"version_command = ["/no/such/v"]"#,
            ),
            s(&[r#"version_command[0] "/no/such/v" cannot start"#]),
        ),
        (
            "a device as the ids file",
            engine(r#"["sh", "-c", "true"]"#, "").replace(
                r#"ids_json = "{run_dir}/o.json""#,
                r#"ids_json = "/dev/null""#,
            ),
            s(&[r#"engine "x": ids_json /dev/null is not a regular file"#]),
        ),
        // --- prompts
        (
            "a prompt with both ids and file",
            prompts(r#"{ ids = [1], file = "x.txt" }"#),
            s(&["prompt: both `ids` and `file` are given"]),
        ),
        (
            "a NUL in a text prompt",
            prompts(r#""a\u0000b""#),
            s(&["prompt 0 holds a NUL character (at byte 1)"]),
        ),
        (
            "a FIFO as prompt file",
            prompts(&format!("{{ file = {:?} }}", fifo())),
            s(&["is a FIFO (named pipe), not a text file"]),
        ),
        (
            "a directory as prompt file",
            prompts(&format!(
                "{{ file = {:?} }}",
                shared_scratch!().display().to_string()
            )),
            s(&["is a directory, not a text file"]),
        ),
        // --- limits (classes built earlier, kept in the table)
        (
            "an infinite timeout",
            format!("{BASE}timeout_s = inf\n"),
            s(&["timeout_s = inf is more than 604800 s"]),
        ),
        (
            "a timeout no run can meet",
            format!("{BASE}timeout_s = 1e-300\n"),
            s(&["timeout_s = 1e-300 is less than 0.1 s"]),
        ),
        (
            "max_tokens past any context",
            BASE.replace("max_tokens = 2", "max_tokens = 18446744073709551615"),
            s(&["at most 16777216 positions"]),
        ),
        (
            "a start listed twice",
            format!("{BASE}start = [\"warm\", \"warm\"]\n"),
            s(&["axis `start` lists \"warm\" more than once"]),
        ),
        (
            "a budget listed twice",
            "budgets = [\"floor\", \"floor\"]\n".into(),
            s(&["axis `budgets` lists \"floor\" more than once"]),
        ),
        (
            "an absurd budget",
            "budgets = [\"inf%\"]\n".into(),
            s(&["invalid budget \"inf%\""]),
        ),
    ]
}

fn hostile_specs_are_refused_before_any_run() {
    let mut failures = vec![];
    let cases = refused_cases();
    for (i, (name, spec, expect)) in cases.iter().enumerate() {
        let (o, out) = sweep(&format!("refused-{i}"), spec, &[]);
        let err = String::from_utf8_lossy(&o.stderr);
        let mut bad = vec![];
        if o.status.code() != Some(2) {
            bad.push(format!("exit {:?}, want 2", o.status.code()));
        }
        if err.contains("panicked") {
            bad.push("panicked".into());
        }
        for f in expect {
            if !err.contains(f.as_str()) {
                bad.push(format!("no {f:?}"));
            }
        }
        if out.join("sweep.json").exists() || out.join("runs").exists() {
            bad.push("a run directory was written".into());
        }
        if !bad.is_empty() {
            failures.push(format!("{name}: {}\n{spec}\n{}", bad.join("; "), text(&o)));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
    // Control: the escape writes literal braces (the engine's JSON ids file).
    let (o, out) = sweep(
        "escaped-braces",
        &engine(
            r#"["sh", "-c", "printf '{{\"output_ids\": [5, 6]}}' > {run_dir}/o.json"]"#,
            "",
        ),
        &[],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let rows: Vec<serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    let x = rows.iter().find(|r| r["engine"] == "x").unwrap();
    assert_eq!(x["status"], "ok", "{x}");
    assert_eq!(x["output_ids"], serde_json::json!([5, 6]), "{x}");
    // An engine named with a `|`: escaped in report.md's cells, so every row of the
    // per-point table has the header's cell count.
    let spec = engine(
        r#"["sh", "-c", "printf '{{\"output_ids\": [5, 6]}}' > {run_dir}/o.json"]"#,
        "",
    )
    .replace("\"x\"]", "\"x|y\"]")
    .replace("[engine.x]", "[engine.\"x|y\"]");
    let (o, out) = sweep("pipe-in-engine-name", &spec, &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    let cells = |l: &str| l.replace("\\|", "").matches('|').count();
    let mut lines = md
        .lines()
        .skip_while(|l| !l.starts_with("| point | budget |"));
    let header = cells(lines.next().expect("the per-point table"));
    let rows: Vec<&str> = lines.take_while(|l| l.starts_with('|')).collect();
    assert!(rows.iter().any(|l| l.contains("x\\|y")), "{md}");
    for l in rows {
        assert_eq!(cells(l), header, "{l}");
    }
}

/// Whether process `pid` is running (a zombie waiting for init to reap it is not).
fn running(pid: u32) -> bool {
    let st = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    st.rsplit_once(')')
        .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z'))
}

/// Without a cgroup a run's child has its own process group, killed with the run: a
/// grandchild an engine leaves behind (`sleep 301 &`) ends when the engine exits, and
/// one of an engine that times out ends with it.
fn no_cgroup_runs_leave_no_process_behind() {
    let spec = format!(
        "{BASE}timeout_s = 3\nprompts = [{{ ids = [1, 2] }}]\nengines = [\"memdial\", \"leaky\", \"hang\"]\n\
         [engine.leaky]\ncommand = [\"sh\", \"-c\", \"sleep 301 & echo $! > {{run_dir}}/child.pid; printf '{{{{\\\"output_ids\\\": [1]}}}}' > {{run_dir}}/ids.json\"]\n\
         ids_json = \"{{run_dir}}/ids.json\"\nbudget = \"flag\"\nmust_match = false\n\
         [engine.hang]\ncommand = [\"sh\", \"-c\", \"sleep 302 & echo $! > {{run_dir}}/child.pid; exec sleep 303\"]\n\
         ids_json = \"{{run_dir}}/ids.json\"\nbudget = \"flag\"\nmust_match = false\n"
    );
    let (o, out) = sweep("leftovers", &spec, &[]);
    let rows: Vec<serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap())
            .unwrap_or_else(|e| panic!("{e}: {}", text(&o)));
    let status = |e: &str| rows.iter().find(|r| r["engine"] == e).unwrap()["status"].clone();
    assert_eq!(
        (status("leaky"), status("hang")),
        ("ok".into(), "timeout".into()),
        "{}",
        text(&o)
    );
    let mut pids = vec![];
    for e in std::fs::read_dir(out.join("runs")).unwrap().flatten() {
        if let Ok(t) = std::fs::read_to_string(e.path().join("child.pid")) {
            pids.push(t.trim().parse::<u32>().unwrap());
        }
    }
    assert_eq!(pids.len(), 2, "{}", text(&o));
    for pid in pids {
        assert!(
            !running(pid),
            "grandchild {pid} outlived its run: {}",
            std::fs::read_to_string(format!("/proc/{pid}/cmdline")).unwrap_or_default()
        );
    }
}

/// A size-limited tmpfs mounted for one test, unmounted on drop.
struct Tmpfs(PathBuf);

impl Tmpfs {
    /// A tmpfs of `size` (mount's syntax, `1M`) at a fresh directory, or why not.
    fn mount(tag: &str, size: &str) -> Result<Tmpfs, String> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return Err(
                "not root: cannot mount a size-limited tmpfs for the full-disk checks".into(),
            );
        }
        let d = shared_scratch!().join(tag);
        std::fs::create_dir_all(&d).unwrap();
        let o = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&d)
            .output()
            .map_err(|e| format!("cannot run mount: {e}"))?;
        if !o.status.success() {
            return Err(format!(
                "mount -t tmpfs failed ({}): the full-disk checks need it",
                String::from_utf8_lossy(&o.stderr).trim()
            ));
        }
        Ok(Tmpfs(d))
    }

    fn remount(&self, size: &str) {
        let o = Command::new("mount")
            .args(["-o", &format!("remount,size={size}")])
            .arg(&self.0)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", text(&o));
    }

    /// Fills the filesystem to the last byte (a `filler` file).
    fn fill(&self) {
        use std::io::Write;
        let mut f = std::fs::File::create(self.0.join("filler")).unwrap();
        let block = vec![0u8; 4096];
        while f.write_all(&block).is_ok() {}
        while f.write_all(&[0]).is_ok() {}
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// Entries of `dir` whose names start with `.` (temporaries left behind).
fn temporaries(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect()
}

/// A full disk: `run --metrics-json` / `--logits-out` there exits 1 naming the file
/// and the cause, still prints the generated text (the same as a run that writes
/// nothing), and leaves the file already there unchanged and no temporary; a sweep
/// whose `--out` fills up fails with the cause, and after the disk has room again
/// its resume keeps what was written and passes.
fn full_disk_is_an_error_that_loses_nothing() -> testkit::Outcome {
    let fs = match Tmpfs::mount("full", "1M") {
        Ok(f) => f,
        Err(why) => return testkit::skip(why),
    };
    let m = shared_fixture!("tiny-k3").to_str().unwrap().to_string();
    let gen = [
        "run",
        "--model",
        &m,
        "--prompt-ids",
        "1,2,3",
        "--max-tokens",
        "3",
    ];
    let plain = run(Command::new(memdial_bin!()).args(gen));
    assert_eq!(plain.status.code(), Some(0), "{}", text(&plain));
    assert!(!plain.stdout.is_empty());
    for flag in ["--metrics-json", "--logits-out"] {
        let p = fs.0.join(format!("out{flag}"));
        std::fs::write(&p, "old").unwrap();
        fs.fill();
        let o = run(Command::new(memdial_bin!()).args(gen).arg(flag).arg(&p));
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{flag}: {}", text(&o));
        assert_eq!(
            o.stdout,
            plain.stdout,
            "{flag}: the generated text: {}",
            text(&o)
        );
        assert!(
            err.contains("No space left on device") && err.contains(&format!("out{flag}")),
            "{flag}: {err}"
        );
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "old", "{flag}");
        assert_eq!(temporaries(&fs.0), Vec::<String>::new(), "{flag}");
        std::fs::remove_file(fs.0.join("filler")).unwrap();
    }
    // A sweep whose --out fills up after its first run (256 KiB hold the run and
    // results.json, not the reports beside them).
    let spec = shared_scratch!().join("full-sweep.toml");
    let two = BASE.replace(
        "budgets = [\"floor\"]",
        "budgets = [\"floor\", \"3x floor\"]",
    );
    std::fs::write(&spec, format!("{two}prompts = [{{ ids = [1, 2] }}]\n")).unwrap();
    let out = fs.0.join("sweep");
    let sweep_into = || {
        run(Command::new(memdial_bin!())
            .args([
                "sweep",
                "--check",
                "--no-cgroup",
                "--bandwidth-probe",
                "4MiB",
            ])
            .args(["--model", &m])
            .arg("--spec")
            .arg(&spec)
            .arg("--out")
            .arg(&out))
    };
    fs.remount("256k");
    let o = sweep_into();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_ne!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        err.contains("No space left on device") && !err.contains("panicked"),
        "{}",
        text(&o)
    );
    assert_eq!(temporaries(&out), vec![".lock".to_string()], "{}", text(&o));
    let rows = |o: &Output| -> Vec<serde_json::Value> {
        match std::fs::read_to_string(out.join("results.json")) {
            Ok(t) => serde_json::from_str(&t).unwrap_or_else(|e| panic!("{e}: {}", text(o))),
            Err(_) => vec![],
        }
    };
    let before: Vec<serde_json::Value> = rows(&o)
        .into_iter()
        .filter(|r| r["status"] == "ok")
        .collect();
    fs.remount("64M");
    let o = sweep_into();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout).starts_with("PASS"),
        "{}",
        text(&o)
    );
    // The runs finished before the disk filled are kept, not run again.
    let after = rows(&o);
    for r in &before {
        let kept = after.iter().find(|x| x["run_id"] == r["run_id"]);
        assert_eq!(kept.map(|k| &k["wall_s"]), Some(&r["wall_s"]), "{r}");
    }
    Ok(testkit::Completion::Completed)
}

fn main() -> ExitCode {
    let mut trials = testkit::trials![
        hostile_specs_are_refused_before_any_run,
        no_cgroup_runs_leave_no_process_behind
    ];
    trials.push(testkit::ignorable(
        "full_disk_is_an_error_that_loses_nothing",
        full_disk_is_an_error_that_loses_nothing,
    ));
    testkit::main(include_str!("hostile.rs"), trials)
}
