//! The CI files users copy validate against the published schemas: the composite
//! action (`.github/actions/sweep/action.yml`, schema `github-action`), the example
//! workflow (`examples/ci/github-sweep.yml`, `github-workflow`) and the GitLab example
//! (`examples/ci/gitlab-ci.yml`, `gitlab-ci`), with `check-jsonschema` from the oracle
//! venv (it bundles those schemas; nothing is fetched). A broken copy of each must be
//! refused, so the check can fail.
//!
//! `tools/build-engines.sh` never deletes a kimi-k3-in-c source it is given: the cases
//! that would (SRC inside the folder it replaces, the copy inside SRC, a folder it did not
//! make) are refused with exit 2 before anything is built, and SRC is left as it was.
//!
//! The schema check needs the oracle venv: reported as `ignored, REASON` when it cannot be created, a
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

/// Runs `tools/build-engines.sh DIR --kimi-k3-in-c SRC` and returns its exit code and stderr.
fn build_engines(dir: &Path, src: &Path) -> (Option<i32>, String) {
    let o = Command::new("bash")
        .arg(repo_root().join("tools/build-engines.sh"))
        .arg(dir)
        .arg("--kimi-k3-in-c")
        .arg(src)
        .output()
        .unwrap();
    (o.status.code(), text(&o))
}

fn build_engines_never_deletes_its_source() {
    let scratch = testkit::scratch!("build-engines");
    let root = scratch.path();
    let make_src = |p: &Path| {
        std::fs::create_dir_all(p).unwrap();
        std::fs::write(p.join("Makefile"), "all:\n\ttrue\n").unwrap();
        std::fs::write(p.join("k3.c"), "int main(void) { return 0; }\n").unwrap();
    };
    // SRC kept inside DIR/kimi-k3-in-c, which the script would replace.
    let dir = root.join("a");
    let src = dir.join("kimi-k3-in-c/src");
    make_src(&src);
    // The copy DIR/kimi-k3-in-c would land inside SRC.
    let src_b = root.join("b");
    make_src(&src_b);
    // DIR/kimi-k3-in-c exists but this script did not copy it.
    let dir_c = root.join("c");
    let src_c = root.join("c-src");
    make_src(&src_c);
    make_src(&dir_c.join("kimi-k3-in-c"));
    for (dir, src, what) in [
        (dir.as_path(), src.as_path(), "is inside"),
        (src_b.as_path(), src_b.as_path(), "would be inside SRC"),
        (dir_c.as_path(), src_c.as_path(), "was not copied there"),
    ] {
        let (code, err) = build_engines(dir, src);
        assert_eq!(code, Some(2), "{dir:?} {src:?}: {err}");
        assert!(err.contains("refused") && err.contains(what), "{err}");
        assert!(
            src.join("Makefile").is_file() && src.join("k3.c").is_file(),
            "{src:?} was touched"
        );
    }
    assert!(dir_c.join("kimi-k3-in-c/k3.c").is_file());
}

fn main() -> ExitCode {
    testkit::main(
        include_str!("ci_files.rs"),
        vec![
            testkit::ignorable(
                "ci_files_validate_against_their_schemas",
                ci_files_validate_against_their_schemas,
            ),
            testkit::test(
                "build_engines_never_deletes_its_source",
                build_engines_never_deletes_its_source,
            ),
        ],
    )
}
