//! Shards on a real scheduler: a one-node Slurm cluster started here (munged,
//! slurmctld, slurmd from Debian's slurm-wlm and munge, which `.ci/run` installs)
//! runs `tools/slurm/submit.sh`: an `sbatch --array` of `memdial sweep --shard i/N`
//! and a merge job that depends on it (`afterany`); the merged directory must hold one
//! complete, passing verdict over every planned run.
//!
//! Needs root (the daemons run as root) and the Slurm binaries: otherwise reported as
//! `ignored, REASON`, a failure under CI (libtest-mimic, `harness = false`).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use memdial_testkit as testkit;
use memdial_testkit::memdial_bin;
use testkit::output_text as text;

fn scratch() -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("slurm");
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn which(cmd: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/sbin")])
            .map(|d| d.join(cmd))
            .find(|c| c.is_file())
    })
}

/// The daemons of the test cluster; stopped (with every job cancelled) when dropped.
struct Cluster {
    conf: PathBuf,
    daemons: Vec<Child>,
}

impl Cluster {
    fn cmd(&self, prog: &str) -> Command {
        let mut c = Command::new(which(prog).unwrap_or_else(|| prog.into()));
        c.env("SLURM_CONF", &self.conf);
        c
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = self
            .cmd("scancel")
            .arg("--full")
            .arg("--user=root")
            .status();
        for d in &mut self.daemons {
            let _ = d.kill();
            let _ = d.wait();
        }
    }
}

/// Starts munged (unless one answers already), slurmctld and slurmd in the foreground
/// as children, on ports of their own, with state under `dir`; waits until the node is
/// idle.
fn start_cluster(dir: &Path) -> Result<Cluster, String> {
    let ok = |c: &mut Command| {
        c.stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    let munge_works = || {
        Command::new("sh")
            .args(["-c", "munge -n | unmunge"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if !munge_works() {
        let _ = std::fs::create_dir_all("/run/munge");
        let _ = ok(Command::new("chown").args(["munge:munge", "/run/munge"]));
        // As root munged wants --force; it daemonizes and outlives the test (harmless).
        if !ok(Command::new(which("munged").ok_or("no munged")?).arg("--force")) {
            return Err("munged would not start".into());
        }
        let t0 = Instant::now();
        while !munge_works() {
            if t0.elapsed() > Duration::from_secs(10) {
                return Err("munge does not answer".into());
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    let host = String::from_utf8(
        Command::new("hostname")
            .arg("-s")
            .output()
            .map_err(|e| e.to_string())?
            .stdout,
    )
    .map_err(|e| e.to_string())?
    .trim()
    .to_string();
    // Two free ports for slurmctld and slurmd: asked of the kernel (both held at once,
    // so they differ), then released for the daemons.
    let bind =
        || std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| format!("no free port: {e}"));
    let (a, b) = (bind()?, bind()?);
    let port_of =
        |l: &std::net::TcpListener| l.local_addr().map(|a| a.port()).map_err(|e| e.to_string());
    let (port, port_d) = (port_of(&a)?, port_of(&b)?);
    drop((a, b));
    let d = dir.display();
    let conf = dir.join("slurm.conf");
    for sub in ["state", "spool"] {
        std::fs::create_dir_all(dir.join(sub)).unwrap();
    }
    std::fs::write(
        &conf,
        format!(
            "ClusterName=memdialtest\nSlurmctldHost={host}(127.0.0.1)\nAuthType=auth/munge\n\
             ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\nSelectType=select/cons_tres\n\
             SelectTypeParameters=CR_Core\nSlurmUser=root\nSlurmdUser=root\n\
             SlurmctldPidFile={d}/slurmctld.pid\nSlurmdPidFile={d}/slurmd.pid\n\
             SlurmdSpoolDir={d}/spool\nStateSaveLocation={d}/state\n\
             SlurmctldLogFile={d}/slurmctld.log\nSlurmdLogFile={d}/slurmd.log\n\
             JobAcctGatherType=jobacct_gather/none\nAccountingStorageType=accounting_storage/none\n\
             MpiDefault=none\nReturnToService=2\nSlurmctldPort={port}\nSlurmdPort={port_d}\n\
             NodeName={host} NodeAddr=127.0.0.1 CPUs=2 State=UNKNOWN\n\
             PartitionName=test Nodes={host} Default=YES MaxTime=INFINITE State=UP\n"
        ),
    )
    .unwrap();
    let mut cluster = Cluster {
        conf: conf.clone(),
        daemons: Vec::new(),
    };
    for (prog, args) in [
        ("slurmctld", &["-D", "-c", "-i"][..]),
        ("slurmd", &["-D"][..]),
    ] {
        let log = std::fs::File::create(dir.join(format!("{prog}.stderr"))).unwrap();
        let child = cluster
            .cmd(prog)
            .args(args)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| format!("{prog}: {e}"))?;
        cluster.daemons.push(child);
        std::thread::sleep(Duration::from_millis(500));
    }
    let t0 = Instant::now();
    loop {
        let o = cluster.cmd("sinfo").args(["-h", "-o", "%T"]).output();
        if o.as_ref()
            .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "idle")
        {
            return Ok(cluster);
        }
        if t0.elapsed() > Duration::from_secs(30) {
            let log = std::fs::read_to_string(dir.join("slurmctld.log")).unwrap_or_default();
            return Err(format!(
                "the node did not become idle in 30 s: {o:?}\n{log}"
            ));
        }
        std::thread::sleep(Duration::from_millis(300));
    }
}

fn array_sweep_merges_into_one_verdict() -> testkit::Outcome {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return testkit::skip("the Slurm daemons need root");
    }
    for prog in ["munged", "slurmctld", "slurmd", "sbatch", "sinfo"] {
        if which(prog).is_none() {
            let why =
                format!("{prog} not found (Debian's slurm-wlm and munge; .ci/run installs them)");
            // Optional on a developer's machine; CI installs them, so there it must run.
            return if testkit::ci() {
                testkit::skip(why)
            } else {
                testkit::skip_optional(why)
            };
        }
    }
    let dir = scratch();
    let cluster = match start_cluster(&dir) {
        Ok(c) => c,
        Err(e) => panic!("could not start a one-node Slurm cluster: {e}"),
    };
    let model = dir.join("tiny-k3");
    let o = Command::new(memdial_bin!())
        .args(["fixture", "--preset", "tiny-k3", "--out"])
        .arg(&model)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    // 2 budgets × 2 IO modes × 1 repeat = 4 runs over 2 shards.
    let spec = dir.join("spec.toml");
    std::fs::write(
        &spec,
        "name = \"slurm\"\nbudgets = [\"floor\", \"2x floor\"]\nio = [\"direct\", \"buffered\"]\n\
         prefetch = [\"none\"]\nthreads = [1]\nprompts = [\"The capital of France is\"]\n\
         max_tokens = 3\nrepeats = 1\n",
    )
    .unwrap();
    let out = dir.join("out");
    let submit = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tools/slurm/submit.sh");
    let t0 = Instant::now();
    let o = cluster
        .cmd("bash")
        .arg(&submit)
        .arg("2")
        .arg(&model)
        .arg(&spec)
        .arg(&out)
        .arg("--wait")
        .env("MEMDIAL", memdial_bin!())
        .env("MEMDIAL_SWEEP_ARGS", "--bandwidth-probe 4MiB")
        .env(
            "PATH",
            std::env::var("PATH").unwrap_or_default() + ":/usr/sbin:/sbin",
        )
        .output()
        .unwrap();
    let logs = || {
        let mut s = String::new();
        for e in std::fs::read_dir(&out).into_iter().flatten().flatten() {
            let p = e.path();
            if p.extension().is_some_and(|x| x == "out") {
                s += &format!(
                    "--- {}\n{}",
                    p.display(),
                    std::fs::read_to_string(&p).unwrap_or_default()
                );
            }
        }
        s
    };
    assert!(o.status.success(), "{}\n{}", text(&o), logs());
    eprintln!(
        "array sweep + merge on Slurm: {:.1} s",
        t0.elapsed().as_secs_f64()
    );
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        stdout.contains("array=") && stdout.contains("merge="),
        "{stdout}"
    );
    for i in 1..=2 {
        assert!(
            out.join(format!("shard-{i}/results.json")).is_file(),
            "shard {i}\n{}",
            logs()
        );
    }
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("merged/verdict.json")).unwrap())
            .unwrap();
    assert_eq!(v["pass"], true, "{v}");
    assert_eq!(v["complete"], true, "{v}");
    assert_eq!(v["runs_planned"], 4, "{v}");
    assert_eq!(v["runs_done"], 4, "{v}");
    assert!(logs().contains("PASS"), "{}", logs());
    drop(cluster);
    Ok(testkit::Completion::Completed)
}

fn main() -> ExitCode {
    testkit::main(
        include_str!("slurm.rs"),
        vec![testkit::ignorable(
            "array_sweep_merges_into_one_verdict",
            array_sweep_merges_into_one_verdict,
        )],
    )
}
