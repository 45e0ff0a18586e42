//! `memdial iobench`: a cold cell really starts from an empty page cache (mincore
//! residency 0 before the timed reads) and direct reads leave the residency at 0;
//! the command writes its CSV / Markdown / chart report, replays a recorded trace,
//! and refuses bad arguments with exit code 2.
//!
//! Each test uses its own `tiny-k3` fixture under `CARGO_TARGET_TMPDIR` (on disk:
//! eviction does nothing on tmpfs, so the cold checks would be meaningless there),
//! so tests running in parallel never evict each other's files.

use std::path::{Path, PathBuf};
use std::process::Command;

use memdial::io::pagecache::residency;
use memdial::io::IoMode;
use memdial::tools::iobench::{
    preload, run_cell, CacheState, CellSpec, Pattern, Workload, DEFAULT_SEED,
};
use memdial_testkit::memdial_bin;

/// A fresh `tiny-k3` fixture in `SCRATCH/tiny-k3`, where SCRATCH is a directory
/// unique to the caller under `CARGO_TARGET_TMPDIR` (removed when the guard drops).
fn fixture(name: &str) -> (memdial_testkit::Scratch, PathBuf) {
    memdial_testkit::fixtures::by_binary(
        memdial_bin!(),
        "tiny-k3",
        memdial_testkit::scratch!(&format!("iobench-{name}")),
    )
}

/// Resident pages of every file of `w` (mincore, independently of iobench).
fn resident_pages(w: &Workload) -> u64 {
    w.files.iter().map(|f| residency(f).unwrap().0).sum()
}

fn assert_evictable(w: &Workload) {
    let left = memdial::tools::iobench::evict_all(&w.files).unwrap();
    assert_eq!(
        left,
        0,
        "{} keeps pages after fadvise(DONTNEED) (tmpfs?); these tests need a disk filesystem",
        env!("CARGO_TARGET_TMPDIR")
    );
}

#[test]
fn cold_cells_start_empty_and_direct_reads_leave_the_cache_empty() {
    let (_scratch, dir) = fixture("cold");
    for pattern in [Pattern::Trunk, Pattern::Experts] {
        let w = Workload::from_model(&dir, &pattern, DEFAULT_SEED).unwrap();
        assert_evictable(&w);
        for mode in [IoMode::Direct, IoMode::Buffered, IoMode::Mmap] {
            // Make the cache hot first, so "cold" has something to undo.
            preload(&w).unwrap();
            assert!(resident_pages(&w) > 0, "preload made nothing resident");
            let spec = CellSpec {
                mode,
                qd: 2,
                cache: CacheState::Cold,
                seconds: 30.0,
            };
            let r = run_cell(&w, &spec).unwrap();
            let what = format!("{} {}", w.name, mode.as_str());
            assert_eq!(r.status.as_str(), "ok", "{what}");
            assert_eq!(r.cache, "cold");
            assert_eq!(r.resident_before_bytes, 0, "{what}: not cold");
            assert!(r.cold_verified, "{what}");
            // One pass over the distinct requests, every byte read once.
            assert_eq!(r.requests as usize, w.cold_sequence().len(), "{what}");
            assert_eq!(r.bytes, w.pass_bytes(), "{what}");
            assert!(r.gb_per_s > 0.0 && r.latency_p50_us > 0.0, "{what}");
            match mode {
                IoMode::Direct => {
                    assert_eq!(
                        r.resident_after_bytes, 0,
                        "{what}: O_DIRECT populated the cache"
                    );
                    assert_eq!(
                        resident_pages(&w),
                        0,
                        "{what}: O_DIRECT populated the cache"
                    );
                    assert!(
                        r.device_read_bytes >= r.bytes,
                        "{what}: {} of {} bytes came from the device",
                        r.device_read_bytes,
                        r.bytes
                    );
                }
                // The residency check is not vacuous: cached reads do show up.
                _ => assert!(r.resident_after_bytes >= r.bytes, "{what}: {r:?}"),
            }
        }
    }
}

#[test]
fn warm_cells_are_labelled_warm_and_direct_ignores_the_cache() {
    let (_scratch, dir) = fixture("warm");
    let w = Workload::from_model(&dir, &Pattern::Trunk, DEFAULT_SEED).unwrap();
    assert_evictable(&w);
    for mode in [IoMode::Buffered, IoMode::Direct] {
        let spec = CellSpec {
            mode,
            qd: 1,
            cache: CacheState::Warm,
            seconds: 0.2,
        };
        let r = run_cell(&w, &spec).unwrap();
        assert_eq!(r.cache, "warm");
        assert!(!r.cold_verified);
        assert!(r.resident_before_bytes >= w.pass_bytes(), "{r:?}");
        assert!(
            r.passes >= 1.0,
            "a warm cell replays for the whole time: {r:?}"
        );
        if mode == IoMode::Buffered {
            assert!(
                r.device_read_bytes < r.bytes / 10,
                "warm buffered reads came from the device: {r:?}"
            );
        } else {
            assert!(
                r.device_read_bytes >= r.bytes,
                "direct reads were served from the cache: {r:?}"
            );
        }
    }
}

fn csv_rows(path: &Path) -> Vec<std::collections::HashMap<String, String>> {
    csv::Reader::from_path(path)
        .unwrap()
        .deserialize()
        .map(|r| r.unwrap())
        .collect()
}

#[test]
fn cli_writes_the_report_and_replays_a_trace() {
    let (_scratch, dir) = fixture("cli");
    let trace = dir.join("trace.jsonl");
    let st = Command::new(memdial_bin!())
        .args(["run", "--prompt-ids", "1,2,3,4", "--max-tokens", "3"])
        .args(["--budget", "64MiB", "--io", "buffered", "--record-trace"])
        .arg(&trace)
        .arg("--model")
        .arg(&dir)
        .output()
        .unwrap();
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    let out = dir.join("report");
    let o = Command::new(memdial_bin!())
        .args(["iobench", "--modes", "direct,buffered,mmap", "--qd", "1,2"])
        .args(["--seconds", "0.2", "--pattern"])
        .arg(format!("trunk,trace:{}", trace.display()))
        .arg("--model")
        .arg(&dir)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{stderr}");
    for f in [
        "results.csv",
        "results.json",
        "iobench.json",
        "report.md",
        "chart.svg",
        "chart.png",
    ] {
        assert!(out.join(f).exists(), "{f} missing: {stderr}");
    }
    let rows = csv_rows(&out.join("results.csv"));
    let ours: Vec<_> = rows.iter().filter(|r| r["tool"] == "memdial").collect();
    // 2 patterns × 3 modes × 2 queue depths × cold/warm.
    assert_eq!(ours.len(), 24);
    for r in &ours {
        assert_eq!(r["status"], "ok", "{r:?}");
        match r["cache"].as_str() {
            "cold" => {
                assert_eq!(r["cold_verified"], "true", "{r:?}");
                assert_eq!(r["resident_before_bytes"], "0", "{r:?}");
            }
            "warm" => assert_eq!(r["cold_verified"], "false", "{r:?}"),
            c => panic!("row labelled {c:?}"),
        }
        if r["io"] == "direct" && r["cache"] == "cold" {
            assert_eq!(r["resident_after_bytes"], "0", "{r:?}");
        }
    }
    assert!(ours.iter().any(|r| r["pattern"] == "trace:trace.jsonl"));
    let fio = rows.iter().filter(|r| r["tool"] == "fio").count();
    if memdial::tools::iobench::fio_version().is_some() {
        assert_eq!(fio, 24, "one fio row per cell when fio is installed");
    } else {
        assert_eq!(fio, 0);
    }
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(md.contains("## Pattern `trunk`") && md.contains("## Pattern `trace:trace.jsonl`"));
    assert!(md.contains("| direct | 1 | cold | yes |"), "{md}");
    assert!(md.contains("How to read this"));
    let svg = std::fs::read_to_string(out.join("chart.svg")).unwrap();
    assert!(
        svg.contains("pattern trunk, warm") && svg.contains("buffered qd2"),
        "chart labels rendered"
    );
}

#[test]
fn bad_arguments_exit_2() {
    let dir = memdial_testkit::scratch!("iobench-bad-args");
    for bad in [
        ["--modes", "direct,floppy"],
        ["--qd", "0"],
        ["--pattern", "sequential"],
        ["--seconds", "-1"],
        ["--cache", "lukewarm"],
    ] {
        let o = Command::new(memdial_bin!())
            .args(["iobench", "--model"])
            .arg(dir.path())
            .args(bad)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{bad:?}");
    }
}
