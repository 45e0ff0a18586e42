//! The CI files users copy validate against the published schemas: the composite
//! action (`.github/actions/sweep/action.yml`, schema `github-action`), the example
//! workflow (`examples/ci/github-sweep.yml`, `github-workflow`) and the GitLab example
//! (`examples/ci/gitlab-ci.yml`, `gitlab-ci`), with `check-jsonschema` from the oracle
//! venv (it bundles those schemas; nothing is fetched). A broken copy of each must be
//! refused, so the check can fail.
//!
//! Needs the oracle venv: reported as `ignored, REASON` when it cannot be created, a
//! failure under CI (libtest-mimic, `harness = false`).

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use memdial_testkit as testkit;
use testkit::output_text as text;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `check-jsonschema --builtin-schema vendor.SCHEMA FILE`: whether it validates, and
/// what it printed.
fn validates(python: &Path, schema: &str, file: &Path) -> (bool, String) {
    let o = Command::new(python)
        .args(["-m", "check_jsonschema", "--builtin-schema"])
        .arg(format!("vendor.{schema}"))
        .arg(file)
        .output()
        .unwrap();
    (o.status.success(), text(&o))
}

fn ci_files_validate_against_their_schemas() -> testkit::Outcome {
    let python = match testkit::oracle::python(&repo_root()) {
        Ok(p) => p,
        Err(e) => return testkit::skip(format!("no oracle venv for check-jsonschema: {e}")),
    };
    let scratch = testkit::until_exit(testkit::scratch!("ci-files"));
    let cases = [
        (
            "github-actions",
            ".github/actions/sweep/action.yml",
            ("using: composite", "using: compositely"),
        ),
        (
            "github-workflows",
            "examples/ci/github-sweep.yml",
            ("runs-on: ubuntu-latest", "runs-onn: ubuntu-latest"),
        ),
        (
            "gitlab-ci",
            "examples/ci/gitlab-ci.yml",
            ("when: always\n  needs:", "when: sometimes\n  needs:"),
        ),
    ];
    for (schema, rel, (good, bad)) in cases {
        let file = repo_root().join(rel);
        let (ok, out) = validates(&python, schema, &file);
        assert!(ok, "{rel} does not validate against {schema}:\n{out}");
        let src = std::fs::read_to_string(&file).unwrap();
        assert!(
            src.contains(good),
            "{rel}: the test's edit point {good:?} moved"
        );
        let broken = scratch.join(Path::new(rel).file_name().unwrap());
        std::fs::write(&broken, src.replacen(good, bad, 1)).unwrap();
        let (ok, out) = validates(&python, schema, &broken);
        assert!(
            !ok,
            "a broken {rel} ({bad:?}) validated against {schema}:\n{out}"
        );
    }
    Ok(testkit::Completion::Completed)
}

fn main() -> ExitCode {
    testkit::main(
        include_str!("ci_files.rs"),
        vec![testkit::ignorable(
            "ci_files_validate_against_their_schemas",
            ci_files_validate_against_their_schemas,
        )],
    )
}
