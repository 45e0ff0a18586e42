//! `memdial compare A B` on the committed sample sweep's rows: the sweep against itself
//! (every ratio exactly 1, nothing significant), against a copy whose decode times are
//! 1.5× (by hand: every point's ratio 1.5, a regression beyond 25 %), with points only on
//! one side, and refused input (exit 2).

use std::path::{Path, PathBuf};
use std::process::Command;

const BIN: &str = memdial_testkit::memdial_bin!();

fn sample() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../reports/sample/results.csv")
}

/// A copy of the sample's rows with every decode time (`decode_s_per_token` and its
/// median) multiplied by `f`, and the rows of points matching `drop` removed.
fn scaled(dir: &Path, f: f64, drop: &str) -> PathBuf {
    let mut rd = csv::Reader::from_path(sample()).unwrap();
    let h = rd.headers().unwrap().clone();
    let col = |n: &str| h.iter().position(|c| c == n).unwrap();
    let (all, med, key) = (
        col("decode_s_per_token"),
        col("decode_s_per_token_median"),
        col("point_key"),
    );
    let out = dir.join("results.csv");
    let mut w = csv::Writer::from_path(&out).unwrap();
    w.write_record(&h).unwrap();
    for rec in rd.records() {
        let rec = rec.unwrap();
        if !drop.is_empty() && rec[key].contains(drop) {
            continue;
        }
        let mut v: Vec<String> = rec.iter().map(String::from).collect();
        v[all] = rec[all]
            .split_whitespace()
            .map(|t| (t.parse::<f64>().unwrap() * f).to_string())
            .collect::<Vec<_>>()
            .join(" ");
        if let Ok(m) = rec[med].parse::<f64>() {
            v[med] = (m * f).to_string();
        }
        w.write_record(&v).unwrap();
    }
    w.flush().unwrap();
    out
}

fn compare(args: &[&std::ffi::OsStr]) -> (Option<i32>, String, String) {
    let o = Command::new(BIN)
        .arg("compare")
        .args(args)
        .output()
        .unwrap();
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn a_sweep_against_itself_is_never_significant() {
    let s = sample();
    let (code, out, _) = compare(&[s.as_os_str(), s.as_os_str(), "--check".as_ref()]);
    assert_eq!(code, Some(0));
    assert_eq!(
        out.trim(),
        "compare: 0 of 24 points slower by more than 25%"
    );
    let (code, md, _) = compare(&[s.as_os_str(), s.as_os_str()]);
    assert_eq!(code, Some(0));
    assert_eq!(md.matches("not significant").count(), 24, "{md}");
    assert!(md.contains("| 1.000 ["), "{md}");
}

#[test]
fn slower_by_half_is_a_regression_and_unmatched_points_are_listed() {
    let scratch = memdial_testkit::scratch!("compare");
    let b = scaled(scratch.path(), 1.5, "io=mmap");
    let out = scratch.path().join("out");
    let s = sample();
    let (code, line, _) = compare(&[
        s.as_os_str(),
        b.as_os_str(),
        "--check".as_ref(),
        "--out".as_ref(),
        out.as_os_str(),
    ]);
    assert_eq!(code, Some(1), "{line}");
    // 24 points less the 8 mmap ones, each 1.5× (the first in budget order named).
    assert!(
        line.starts_with("compare: 16 of 16 points slower by more than 25% (e.g. budget=floor;")
            && line.trim_end().ends_with("+50%)"),
        "{line}"
    );
    let md = std::fs::read_to_string(out.join("compare.md")).unwrap();
    assert!(md.contains("Only in A (8):"), "{md}");
    assert_eq!(md.matches("**regression**").count(), 16, "{md}");
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("compare.json")).unwrap()).unwrap();
    for p in json["points"].as_array().unwrap() {
        let r = p["ratio"]["ratio"].as_f64().unwrap();
        assert!((r - 1.5).abs() < 1e-9, "{p}");
        assert!(p["p_welch"].as_f64().unwrap() < 0.05, "{p}");
    }
    let csv = std::fs::read_to_string(out.join("compare.csv")).unwrap();
    assert!(csv.starts_with("point_key,budget_bytes,prompt_tokens,max_tokens,"));
    assert_eq!(csv.lines().count(), 17);
    // Within a tolerance of 60 %: significant, but no regression.
    let (code, line, _) = compare(&[
        s.as_os_str(),
        b.as_os_str(),
        "--check".as_ref(),
        "--max-regression".as_ref(),
        "60%".as_ref(),
    ]);
    assert_eq!(
        (code, line.trim()),
        (Some(0), "compare: 0 of 16 points slower by more than 60%")
    );
}

#[test]
fn refused_input_is_a_usage_error() {
    let scratch = memdial_testkit::scratch!("compare-bad");
    let s = sample();
    let (code, _, err) = compare(&[s.as_os_str(), scratch.path().as_os_str()]);
    assert_eq!(code, Some(2));
    assert!(err.contains("no results.csv"), "{err}");
    let (code, _, err) = compare(&[
        s.as_os_str(),
        s.as_os_str(),
        "--max-regression".as_ref(),
        "fast".as_ref(),
    ]);
    assert_eq!(code, Some(2));
    assert!(err.contains("--max-regression"), "{err}");
    let junk = scratch.path().join("results.csv");
    std::fs::write(&junk, "a,b\n1,2\n").unwrap();
    let (code, _, err) = compare(&[s.as_os_str(), junk.as_os_str()]);
    assert_eq!(code, Some(2));
    assert!(err.contains("has no column point_key"), "{err}");
}
