//! The sentinel's figures from fake `/proc` trees and hand-made [`Noise`]s.

use super::*;

/// Writes a fake `/proc` with the given figures.
#[allow(clippy::too_many_arguments)]
fn fake_proc(
    root: &Path,
    busy_user: u64,
    steal: u64,
    run: (u64, u64),
    own: (u64, u64),
    psi: (u64, u64),
    sectors: u64,
    run_read: u64,
) {
    std::fs::create_dir_all(root.join("42")).unwrap();
    std::fs::create_dir_all(root.join("self")).unwrap();
    std::fs::create_dir_all(root.join("pressure")).unwrap();
    std::fs::write(
        root.join("stat"),
        format!("cpu  {busy_user} 0 0 5000 7 0 0 {steal} 0 0\ncpu0 1 2 3 4 5 6 7 8 9 10\n"),
    )
    .unwrap();
    // A command name with a space and a parenthesis, as a real one may have.
    let stat = |u: u64, s: u64| {
        format!("42 (mem dial) R 1 42 42 0 -1 4194304 10 0 0 0 {u} {s} 0 0 20 0 3 0 100 0 0")
    };
    std::fs::write(root.join("42/stat"), stat(run.0, run.1)).unwrap();
    std::fs::write(root.join("self/stat"), stat(own.0, own.1)).unwrap();
    std::fs::write(
        root.join("42/io"),
        format!("rchar: 1\nwchar: 2\nread_bytes: {run_read}\nwrite_bytes: 9\n"),
    )
    .unwrap();
    std::fs::write(root.join("self/io"), "read_bytes: 0\n").unwrap();
    std::fs::write(
        root.join("pressure/cpu"),
        format!(
            "some avg10=1.00 avg60=0 avg300=0 total={}\nfull avg10=0 avg60=0 avg300=0 total=0\n",
            psi.0
        ),
    )
    .unwrap();
    std::fs::write(
        root.join("pressure/io"),
        format!("some avg10=1.00 avg60=0 avg300=0 total={}\n", psi.1),
    )
    .unwrap();
    std::fs::write(
        root.join("diskstats"),
        format!(
            " 254       0 vda 10 0 {sectors} 0 0 0 0 0 0 0 0\n 254       1 vda1 10 0 999999 0 0 0 0 0 0 0 0\n"
        ),
    )
    .unwrap();
}

/// Writes `/proc/PID/stat` of a process with parent `ppid`, group `pgrp`, `flags`
/// and `utime stime cutime cstime` = `t`.
fn fake_pid(root: &Path, pid: u32, ppid: u32, pgrp: u32, flags: u64, t: [u64; 4]) {
    std::fs::create_dir_all(root.join(pid.to_string())).unwrap();
    std::fs::write(
        root.join(format!("{pid}/stat")),
        format!(
            "{pid} (cc1 (x)) R {ppid} {pgrp} {pgrp} 0 -1 {flags} 10 0 0 0 {} {} {} {} 20 0 1 0 100 0 0",
            t[0], t[1], t[2], t[3]
        ),
    )
    .unwrap();
}

#[test]
fn busy_neighbours_and_foreign_reads_make_a_run_noisy() {
    let root = std::env::temp_dir().join(format!("noise-{}", std::process::id()));
    let s = Sentinel::with_root(&root, Some((254, 0)), 100.0);
    fake_proc(&root, 1000, 10, (50, 10), (3, 1), (1_000_000, 0), 2048, 0);
    fake_pid(&root, 7, 1, 7, 0, [0, 0, 0, 0]);
    let before = s.snapshot(Some(42), 0.0);
    // 10 s later: the machine was busy 1500 ticks more; the run used 1000 (800 + 200),
    // the sentinel's own process 2, so others used 498 ticks = 4.98 s = 0.498 cores.
    // Steal 20 ticks = 0.2 s. PSI cpu 3 s, io 0.5 s. Device: 2048 → 4096 + 2048
    // sectors = 2 MiB read; the run read 1 MiB of it → 1 MiB foreign.
    fake_proc(
        &root,
        2500,
        30,
        (850, 210),
        (5, 1),
        (4_000_000, 500_000),
        6144,
        1 << 20,
    );
    // The neighbour's own counters say the same 498 ticks.
    fake_pid(&root, 7, 1, 7, 0, [400, 98, 0, 0]);
    let after = s.snapshot(Some(42), 10.0);
    let n = Noise::between(&before, &after, s.ticks_per_s());
    assert_eq!(n.wall_s, 10.0);
    assert!((n.other_cpu_s - 4.98).abs() < 1e-12, "{n:?}");
    assert!((n.steal_s - 0.2).abs() < 1e-12, "{n:?}");
    assert_eq!(n.psi_cpu_some_s, Some(3.0));
    assert_eq!(n.psi_io_some_s, Some(0.5));
    assert_eq!(n.foreign_read_bytes, Some(1 << 20));
    let why = n.noisy(&Thresholds::default()).unwrap();
    assert_eq!(why, "other processes used 0.50 cores (threshold 0.25)");
    let strict = Thresholds {
        foreign_read_bytes: 512 << 10,
        psi_cpu_some_fraction: Some(0.2),
        ..Thresholds::default()
    };
    let why = n.noisy(&strict).unwrap();
    assert!(why.contains("CPU pressure 30 % (threshold 20 %)"), "{why}");
    assert!(
        why.contains("1.00 MiB read from the model's disk by others"),
        "{why}"
    );
    std::fs::remove_dir_all(&root).unwrap();
}

/// Two `while :; do :; done` loops beside a 4 s run on a 2-core machine at 100
/// ticks/s: the machine is busy 2 × 4 × 100 = 800 ticks more than the run's own
/// 300 (250 user + 50 system) and the sentinel's 0, so others used 800 ticks =
/// 8 s = 2.00 cores, eight times the default threshold.
#[test]
fn two_busy_loops_beside_a_run_make_it_noisy() {
    let root = std::env::temp_dir().join(format!("noise-loops-{}", std::process::id()));
    let s = Sentinel::with_root(&root, None, 100.0);
    fake_proc(&root, 1000, 0, (0, 0), (0, 0), (0, 0), 0, 0);
    fake_pid(&root, 7, 1, 7, 0, [0, 0, 0, 0]);
    fake_pid(&root, 8, 1, 8, 0, [0, 0, 0, 0]);
    let before = s.snapshot(Some(42), 0.0);
    fake_proc(&root, 2100, 0, (250, 50), (0, 0), (0, 0), 0, 0);
    fake_pid(&root, 7, 1, 7, 0, [400, 0, 0, 0]);
    fake_pid(&root, 8, 1, 8, 0, [400, 0, 0, 0]);
    let after = s.snapshot(Some(42), 4.0);
    let n = Noise::between(&before, &after, s.ticks_per_s());
    assert_eq!(n.other_cpu_s, 8.0, "{n:?}");
    assert_eq!(
        n.noisy(&Thresholds::default()).as_deref(),
        Some("other processes used 2.00 cores (threshold 0.25)")
    );
    std::fs::remove_dir_all(&root).unwrap();
}

/// The process table, by hand: over 2 s a compiler (pid 10, child of make 9) used
/// 30 ticks and exited, reaped by make (its 30 + 20 earlier ticks move into make's
/// cutime); a new compiler 11 used 40; a kernel thread (flag 0x200000) 500; the
/// run's helper 43 (child of 42) 70 and a reparented process in the run's group 44
/// 10; the measuring process 99 (the `self` link) 15. Others: 30 + 40 = 70 ticks =
/// 0.7 s, while `/proc/stat` minus the run would have counted the kernel thread.
#[test]
fn other_cpu_comes_from_user_space_processes_own_counters() {
    let root = std::env::temp_dir().join(format!("noise-table-{}", std::process::id()));
    let s = Sentinel::with_root(&root, None, 100.0);
    fake_proc(&root, 1000, 0, (0, 0), (0, 0), (0, 0), 0, 0);
    std::fs::remove_dir_all(root.join("self")).unwrap();
    std::os::unix::fs::symlink("99", root.join("self")).unwrap();
    fake_pid(&root, 9, 1, 9, 0, [100, 0, 0, 0]);
    fake_pid(&root, 10, 9, 9, 0, [20, 0, 0, 0]);
    fake_pid(&root, 3, 2, 0, 0x0020_0040, [0, 0, 0, 0]);
    fake_pid(&root, 99, 1, 99, 0, [5, 0, 0, 0]);
    let before = s.snapshot(Some(42), 0.0);
    std::fs::remove_dir_all(root.join("10")).unwrap();
    fake_pid(&root, 9, 1, 9, 0, [100, 0, 50, 0]);
    fake_pid(&root, 11, 9, 9, 0, [30, 10, 0, 0]);
    fake_pid(&root, 3, 2, 0, 0x0020_0040, [0, 500, 0, 0]);
    fake_pid(&root, 43, 42, 42, 0, [60, 10, 0, 0]);
    fake_pid(&root, 44, 1, 42, 0, [10, 0, 0, 0]);
    fake_pid(&root, 99, 1, 99, 0, [20, 0, 0, 0]);
    let after = s.snapshot(Some(42), 2.0);
    let n = Noise::between(&before, &after, 100.0);
    assert!((n.other_cpu_s - 0.7).abs() < 1e-12, "{n:?}");
    std::fs::remove_dir_all(&root).unwrap();
}

/// One stray 10 ms tick on a 0.1 s run is 0.1 cores' worth of a neighbour but
/// below the 0.05 s minimum; three ticks (0.3 cores) are above the cores threshold
/// but still below the minimum; six are noisy.
#[test]
fn a_stray_tick_never_marks_a_short_run() {
    let n = |ticks: f64| Noise {
        wall_s: 0.1,
        other_cpu_s: ticks * 0.01,
        ..Noise::default()
    };
    let t = Thresholds::default();
    assert_eq!(n(1.0).noisy(&t), None);
    assert_eq!(n(3.0).noisy(&t), None);
    assert_eq!(
        n(6.0).noisy(&t).as_deref(),
        Some("other processes used 0.60 cores (threshold 0.25)")
    );
}

#[test]
fn the_runs_own_wait_is_thresholded_only_when_reported() {
    let t = Thresholds::default();
    let n = Noise {
        wall_s: 2.0,
        ..Noise::default()
    };
    assert_eq!(n.noisy(&t), None);
    assert_eq!(n.with_run_queue_wait(Some(0.13)).noisy(&t), None);
    assert_eq!(
        n.with_run_queue_wait(Some(0.40)).noisy(&t).as_deref(),
        Some("the run waited for a CPU 40 % of its decode time (threshold 25 %)")
    );
    assert_eq!(
        n.with_run_queue_wait(Some(f64::NAN))
            .run_queue_wait_fraction,
        None
    );
}

#[test]
fn a_quiet_run_is_quiet_and_missing_files_are_absent_figures() {
    let root = std::env::temp_dir().join(format!("noise-quiet-{}", std::process::id()));
    std::fs::create_dir_all(&root).unwrap();
    let s = Sentinel::with_root(&root, Some((254, 0)), 100.0);
    // Nothing there at all: every figure absent or zero, nothing noisy.
    let a = s.snapshot(Some(42), 0.0);
    let b = s.snapshot(Some(42), 1.0);
    let n = Noise::between(&a, &b, 100.0);
    assert_eq!(n.other_cpu_s, 0.0);
    assert_eq!(n.psi_cpu_some_s, None);
    assert_eq!(n.foreign_read_bytes, None);
    assert_eq!(n.noisy(&Thresholds::default()), None);
    // The run alone: all busy ticks are its own.
    fake_proc(&root, 100, 0, (10, 0), (0, 0), (0, 0), 0, 0);
    let a = s.snapshot(Some(42), 0.0);
    fake_proc(&root, 300, 0, (190, 20), (0, 0), (0, 0), 2048, 1 << 20);
    let b = s.snapshot(Some(42), 1.0);
    let n = Noise::between(&a, &b, 100.0);
    assert_eq!(n.other_cpu_s, 0.0);
    assert_eq!(n.foreign_read_bytes, Some(0));
    assert_eq!(n.noisy(&Thresholds::default()), None);
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn the_real_proc_gives_figures_for_this_process() {
    let s = Sentinel::new(Some(Path::new(env!("CARGO_MANIFEST_DIR"))));
    let a = s.snapshot(Some(std::process::id()), 0.0);
    assert!(a.cpu.busy > 0, "{a:?}");
    assert!(a.run_ticks.is_some(), "{a:?}");
}
