//! Detection and run-cgroup tests against a fake cgroup filesystem.

use super::base::*;
use super::*;

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("cg-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn env(self_cgroup: &str, root: &Path, systemd: bool) -> Env {
    Env {
        self_cgroup: self_cgroup.into(),
        root: root.to_path_buf(),
        root_user: true,
        systemd,
        pid: 4242,
    }
}

#[test]
fn v1_nests_under_own_memory_cgroup() {
    let r = tmp("v1");
    let own = r.join("memory/process_api/abc");
    std::fs::create_dir_all(&own).unwrap();
    std::fs::write(own.join("memory.limit_in_bytes"), "9223372036854771712\n").unwrap();
    let s = detect_in(&env("4:memory:/process_api/abc\n0::/\n", &r, false));
    assert_eq!(s, Support::Available(Mode::V1(own.clone())));
    // The probe child was removed again.
    assert!(!own.join(format!("{RUN_PREFIX}4242-probe")).exists());
    // Not visible → unenforced with the reason.
    let s = detect_in(&env("4:memory:/elsewhere\n", &r, false));
    assert!(matches!(s, Support::Unavailable(ref m) if m.contains("not visible")));
    let mut e = env("0::/\n", &r, false);
    e.root_user = false;
    assert!(matches!(detect_in(&e), Support::Unavailable(ref m) if m.contains("root")));
    std::fs::remove_dir_all(&r).unwrap();
}

#[test]
fn v1_run_cgroup_writes_limits_and_wraps_the_command() {
    let r = tmp("v1run");
    let cg = RunCgroup::create(&Mode::V1(r.clone()), "p0-r0", 1000).unwrap();
    let d = cg.dir().unwrap();
    assert_eq!(
        std::fs::read_to_string(d.join("memory.limit_in_bytes")).unwrap(),
        "1000"
    );
    assert_eq!(
        std::fs::read_to_string(d.join("memory.swappiness")).unwrap(),
        "0"
    );
    std::fs::write(
        d.join("memory.oom_control"),
        "oom_kill_disable 0\noom_kill 2\n",
    )
    .unwrap();
    assert_eq!(cg.oom_kills(), Some(2));
    let c = cg.command(Path::new("/bin/memdial"), &["run".into()]);
    assert_eq!(c.get_program(), "/bin/sh");
    let a: Vec<_> = c
        .get_args()
        .map(|x| x.to_string_lossy().to_string())
        .collect();
    assert_eq!(a[2], d.join("cgroup.procs").display().to_string());
    assert_eq!(&a[3..], ["/bin/memdial", "run"]);
    std::fs::remove_dir_all(&r).unwrap();
}

#[test]
fn v2_moves_into_a_leaf_and_enables_memory() {
    let r = tmp("v2");
    let own = r.join("user.slice/sess");
    std::fs::create_dir_all(&own).unwrap();
    std::fs::write(r.join("cgroup.controllers"), "cpu io memory\n").unwrap();
    std::fs::write(own.join("cgroup.controllers"), "cpu memory\n").unwrap();
    std::fs::write(own.join("cgroup.subtree_control"), "").unwrap();
    std::fs::write(own.join("cgroup.procs"), "4242\n").unwrap();
    let s = detect_in(&env("0::/user.slice/sess\n", &r, false));
    assert_eq!(s, Support::Available(Mode::V2(own.clone())));
    let leaf = own.join(format!("{LEAF_PREFIX}4242"));
    assert_eq!(
        std::fs::read_to_string(leaf.join("cgroup.procs")).unwrap(),
        "4242"
    );
    assert_eq!(
        std::fs::read_to_string(own.join("cgroup.subtree_control")).unwrap(),
        "+memory"
    );
    // Limits of a run cgroup.
    let cg = RunCgroup::create(&Mode::V2(own.clone()), "p1-r0", 5 << 20).unwrap();
    let d = cg.dir().unwrap();
    assert_eq!(
        std::fs::read_to_string(d.join("memory.max")).unwrap(),
        (5u64 << 20).to_string()
    );
    std::fs::write(
        d.join("memory.events"),
        "low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n",
    )
    .unwrap();
    std::fs::write(d.join("memory.peak"), "123\n").unwrap();
    assert_eq!(cg.oom_kills(), Some(1));
    assert_eq!(cg.peak_bytes(), Some(123));
    std::fs::remove_dir_all(&r).unwrap();
}

#[test]
fn v2_shared_cgroup_falls_back_to_systemd_run_or_says_why() {
    let r = tmp("v2shared");
    std::fs::write(r.join("cgroup.controllers"), "cpu memory\n").unwrap();
    std::fs::write(r.join("cgroup.subtree_control"), "cpu\n").unwrap();
    std::fs::write(r.join("cgroup.procs"), "1\n4242\n77\n").unwrap();
    let s = detect_in(&env("0::/\n", &r, false));
    assert!(
        matches!(s, Support::Unavailable(ref m) if m.contains("other processes (1 77)") && m.contains("systemd-run is not available")),
        "{s:?}"
    );
    // Nothing was moved or enabled.
    assert!(!r.join(format!("{LEAF_PREFIX}4242")).exists());
    assert_eq!(
        std::fs::read_to_string(r.join("cgroup.subtree_control")).unwrap(),
        "cpu\n"
    );
    let s = detect_in(&env("0::/\n", &r, true));
    assert_eq!(s, Support::Available(Mode::SystemdRun(r.clone())));
    // No memory controller at all.
    std::fs::write(r.join("cgroup.controllers"), "cpu io\n").unwrap();
    let s = detect_in(&env("0::/\n", &r, false));
    assert!(matches!(s, Support::Unavailable(ref m) if m.contains("not delegated")));
    std::fs::remove_dir_all(&r).unwrap();
}

#[test]
fn systemd_run_command_and_scope_files() {
    let r = tmp("sd");
    let cg = RunCgroup::create(&Mode::SystemdRun(r.clone()), "p2-r1", 300 << 20).unwrap();
    assert!(cg.dir().is_none());
    let c = cg.command(Path::new("/bin/memdial"), &["run".into(), "--x".into()]);
    assert_eq!(c.get_program(), "systemd-run");
    let a: Vec<_> = c
        .get_args()
        .map(|x| x.to_string_lossy().to_string())
        .collect();
    let unit = cg.unit();
    assert!(unit.starts_with(RUN_PREFIX) && unit.ends_with("-p2-r1.scope"));
    assert!(a.contains(&"--scope".to_string()));
    assert!(a.contains(&format!("--unit={unit}")));
    assert!(a.contains(&format!("MemoryMax={}", 300u64 << 20)));
    assert!(a.contains(&"MemorySwapMax=0".to_string()));
    assert_eq!(&a[a.len() - 3..], ["/bin/memdial", "run", "--x"]);
    // The scope is found from the child's /proc/<pid>/cgroup and read there.
    let scope = r.join("system.slice").join(&unit);
    std::fs::create_dir_all(&scope).unwrap();
    std::fs::write(scope.join("memory.current"), "4096\n").unwrap();
    std::fs::write(scope.join("memory.events"), "oom_kill 0\n").unwrap();
    let d = cg.scope_dir(&format!("0::/system.slice/{unit}\n")).unwrap();
    assert_eq!(d, scope);
    assert_eq!(cg.usage_at(&d), Some(4096));
    assert_eq!(cg.oom_kills_at(&d), Some(0));
    assert_eq!(cg.scope_dir("0::/user.slice/other.scope\n"), None);
    std::fs::remove_dir_all(&r).unwrap();
}

#[test]
fn stale_run_cgroups_are_removed() {
    let r = tmp("stale");
    // pid 999999999 cannot exist (above pid_max); our own pid stays.
    let stale = r.join(format!("{RUN_PREFIX}999999999-p0-r0"));
    let mine = r.join(format!("{RUN_PREFIX}{}-p0-r0", std::process::id()));
    let other = r.join("someone-else");
    for d in [&stale, &mine, &other] {
        std::fs::create_dir_all(d).unwrap();
    }
    assert_eq!(clean_stale(&Mode::V1(r.clone())), 1);
    assert!(!stale.exists() && mine.exists() && other.exists());
    std::fs::remove_dir_all(&r).unwrap();
}
