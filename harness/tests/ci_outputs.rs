//! What a CI system reads: `memdial sweep --junit` and `memdial report merge --junit`
//! write a JUnit report that validates against the Jenkins `junit-10.xsd`
//! (`tests/fixtures/junit-10.xsd`, with `xmlschema` from the oracle venv) and names
//! every point; with `GITHUB_ACTIONS=true` the job summary gets the verdict and the
//! annotations name the failing point.
//!
//! The schema check needs the oracle venv: reported as `ignored, REASON` when it cannot
//! be created, a failure under CI (libtest-mimic, `harness = false`).

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Output};

use memdial_testkit as testkit;
use memdial_testkit::memdial_bin;
use testkit::output_text as text;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn scratch() -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("ci-outputs");
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn model() -> PathBuf {
    testkit::fixture(memdial_bin!(), "tiny-k3", &scratch().join("tiny-k3"))
}

/// Validates `xml` against the JUnit schema; `Err(message)` when it does not.
fn validate(python: &Path, xml: &Path) -> Result<(), String> {
    let o = Command::new(python)
        .arg("-c")
        .arg("import sys, xmlschema; xmlschema.XMLSchema(sys.argv[1]).validate(sys.argv[2])")
        .arg(repo_root().join("harness/tests/fixtures/junit-10.xsd"))
        .arg(xml)
        .output()
        .unwrap();
    if o.status.success() {
        Ok(())
    } else {
        Err(text(&o))
    }
}

const SPEC: &str = r#"
name = "ci"
budgets = ["floor", "3x floor", "1KiB"]
io = ["direct"]
prompts = ["The capital of France is"]
max_tokens = 3
repeats = 1
"#;

fn sweep(out: &Path, extra: &[&str], envs: &[(&str, &Path)]) -> Output {
    let spec = scratch().join("ci.toml");
    std::fs::write(&spec, SPEC).unwrap();
    let _ = std::fs::remove_dir_all(out);
    let mut c = Command::new(memdial_bin!());
    c.arg("sweep")
        .arg("--model")
        .arg(model())
        .arg("--spec")
        .arg(&spec)
        .arg("--out")
        .arg(out)
        .args(["--bandwidth-probe", "4MiB", "--no-cgroup", "--check"])
        .args(extra)
        .env_remove("GITHUB_ACTIONS")
        .env_remove("GITHUB_STEP_SUMMARY");
    for (k, v) in envs {
        c.env(k, v);
    }
    c.output().unwrap()
}

fn junit_names_every_point_and_validates() -> testkit::Outcome {
    let python = match testkit::oracle::python(&repo_root()) {
        Ok(p) => p,
        Err(e) => return testkit::skip(format!("no oracle venv for xmlschema: {e}")),
    };
    let d = scratch();
    // A failing sweep: point 1 perturbed; point 2 below the floor.
    let xml = d.join("junit.xml");
    let summary = d.join("summary.md");
    let _ = std::fs::remove_file(&summary);
    let o = sweep(
        &d.join("failing"),
        &[
            "--test-perturb-point",
            "1",
            "--junit",
            xml.to_str().unwrap(),
        ],
        &[
            ("GITHUB_ACTIONS", Path::new("true")),
            ("GITHUB_STEP_SUMMARY", &summary),
        ],
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).lines().count(),
        1,
        "{}",
        text(&o)
    );
    validate(&python, &xml).unwrap();
    let x = std::fs::read_to_string(&xml).unwrap();
    assert!(
        x.contains("<testsuite name=\"ci\" tests=\"4\" failures=\"2\" errors=\"0\" skipped=\"1\""),
        "{x}"
    );
    assert!(x.contains("name=\"p0 budget=floor;io=direct"), "{x}");
    assert!(
        x.contains(
            "<failure type=\"mismatch\" message=\"output ids differ from the reference at token 0"
        ),
        "{x}"
    );
    assert!(x.contains("<skipped message=\"below the floor\"/>"), "{x}");
    assert!(
        x.contains("<testcase name=\"verdict\" classname=\"ci\""),
        "{x}"
    );
    // GitHub Actions: the summary holds the verdict, stderr the annotation.
    let s = std::fs::read_to_string(&summary).unwrap();
    assert!(
        s.contains("## memdial sweep `ci`") && s.contains("**FAIL"),
        "{s}"
    );
    assert!(s.contains("## Verdict"), "{s}");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("::error title=Output mismatch%3A p1 budget=3x floor"),
        "{err}"
    );
    // A passing sweep: every point case passes, the verdict case too; the merge of it
    // writes the same shape.
    let o = sweep(&d.join("passing"), &["--junit", xml.to_str().unwrap()], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    validate(&python, &xml).unwrap();
    let x = std::fs::read_to_string(&xml).unwrap();
    assert!(
        x.contains("failures=\"0\"") && !x.contains("<failure"),
        "{x}"
    );
    let merged_xml = d.join("merged.xml");
    let _ = std::fs::remove_dir_all(d.join("merged"));
    let o = Command::new(memdial_bin!())
        .args(["report", "merge"])
        .arg(d.join("passing"))
        .arg("--out")
        .arg(d.join("merged"))
        .arg("--junit")
        .arg(&merged_xml)
        .arg("--check")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    validate(&python, &merged_xml).unwrap();
    // The schema check can fail: a case without a name is refused.
    let bad = d.join("bad.xml");
    std::fs::write(
        &bad,
        x.replacen("<testcase name=\"verdict\"", "<testcase", 1),
    )
    .unwrap();
    assert!(validate(&python, &bad).is_err());
    Ok(testkit::Completion::Completed)
}

fn junit_path_is_checked_before_any_run() {
    let d = scratch();
    let o = sweep(&d.join("bad-path"), &["--junit", d.to_str().unwrap()], &[]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("is a directory"), "{}", text(&o));
    assert!(!d.join("bad-path/results.json").exists());
}

fn main() -> ExitCode {
    testkit::main(
        include_str!("ci_outputs.rs"),
        vec![
            testkit::ignorable(
                "junit_names_every_point_and_validates",
                junit_names_every_point_and_validates,
            ),
            testkit::test(
                "junit_path_is_checked_before_any_run",
                junit_path_is_checked_before_any_run,
            ),
        ],
    )
}
