//! `memdial run`'s output files: their paths are checked before anything is loaded, a
//! file that cannot be written fails the run only after the generated output is
//! printed, and nothing but a regular file is ever replaced (a link keeps pointing at
//! its target, a device stays a device); a sweep's `--out` that names a file is a
//! usage error.

use std::os::unix::fs::FileTypeExt;
use std::path::Path;
use std::process::{Command, Output};

use memdial_testkit as testkit;
use memdial_testkit::memdial_bin;
use memdial_testkit::shared_fixture;
use memdial_testkit::shared_scratch;
use testkit::output_text as text;

fn run(extra: &[&str]) -> Output {
    Command::new(memdial_bin!())
        .arg("run")
        .arg("--model")
        .arg(shared_fixture!("tiny-k3"))
        .args([
            "--prompt-ids",
            "1,2,3",
            "--max-tokens",
            "3",
            "--output",
            "ids",
        ])
        .args(extra)
        .output()
        .unwrap()
}

#[test]
fn unwritable_output_paths_are_refused_before_loading() {
    let missing = shared_scratch!().join("no-such-dir/m.json");
    let o = run(&["--metrics-json", missing.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("--metrics-json"), "{}", text(&o));
    assert!(o.stdout.is_empty(), "nothing generated: {}", text(&o));
    let o = run(&["--logits-out", shared_scratch!().to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("is a directory"), "{}", text(&o));
}

#[test]
fn links_and_devices_are_written_through_not_replaced() {
    let target = shared_scratch!().join("metrics-target.json");
    let link = shared_scratch!().join("metrics-link.json");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let o = run(&["--metrics-json", link.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    let m: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&target).unwrap()).unwrap();
    assert_eq!(m["output_ids"].as_array().unwrap().len(), 3, "{m}");
    let o = run(&["--metrics-json", "/dev/null"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let ft = std::fs::metadata("/dev/null").unwrap().file_type();
    assert!(ft.is_char_device(), "/dev/null is still a device");
}

#[test]
fn a_file_that_cannot_be_written_loses_no_output() {
    // /dev/full accepts the open and fails every write (ENOSPC).
    if !Path::new("/dev/full").exists() {
        return;
    }
    let o = run(&["--metrics-json", "/dev/full"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(
        out.trim().split(',').count(),
        3,
        "the ids are printed: {}",
        text(&o)
    );
    assert!(text(&o).contains("/dev/full"), "{}", text(&o));
    assert!(std::fs::metadata("/dev/full")
        .unwrap()
        .file_type()
        .is_char_device());
}

#[test]
fn sweep_out_naming_a_file_is_a_usage_error() {
    let f = shared_scratch!().join("not-a-dir");
    std::fs::write(&f, "x").unwrap();
    let o = Command::new(memdial_bin!())
        .arg("sweep")
        .arg("--model")
        .arg(shared_fixture!("tiny-k3"))
        .arg("--out")
        .arg(&f)
        .args(["--no-cgroup", "--check"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("is not a directory"), "{}", text(&o));
    assert_eq!(
        std::fs::read_to_string(&f).unwrap(),
        "x",
        "the file is left as it was"
    );
}
