//! Runs one sweep point as a child `memdial run … --metrics-json OUT` process.

use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde_json::Value;

use super::cgroup::{self, RunCgroup};
use super::coldcache::make_cold;
use super::host::Host;
use super::row::Row;
use super::spec::{Point, PromptSpec, RunSlot, Spec};
use super::util::utc_now_rfc3339;
use crate::cmd_sweep::SweepArgs;

/// Environment variable naming the binary used for child runs instead of this
/// executable (for tests of the harness against a stand-in).
pub const RUN_BIN_ENV: &str = "MEMDIAL_SWEEP_RUN_BIN";

/// Everything needed to start one run.
#[derive(Debug)]
pub struct RunRequest<'a> {
    /// The `memdial` binary.
    pub bin: &'a Path,
    /// Model directory.
    pub model: &'a Path,
    /// The point.
    pub point: &'a Point,
    /// Resolved budget, bytes.
    pub budget_bytes: u64,
    /// The point's prompt.
    pub prompt: &'a PromptSpec,
    /// `--max-tokens`.
    pub max_tokens: usize,
    /// `--max-context`, when the spec sets it.
    pub max_context: Option<usize>,
    /// Extra arguments from the spec.
    pub extra_args: &'a [String],
    /// Hidden test switch: `--perturb-logit ID`.
    pub perturb_logit: Option<u32>,
    /// Directory for this run's metrics, stdout and stderr.
    pub run_dir: &'a Path,
    /// Kill the child after this long.
    pub timeout: Duration,
    /// Memory cgroup to start the child in.
    pub cgroup: Option<&'a RunCgroup>,
}

/// What a child run produced.
#[derive(Debug)]
pub struct RunOutcome {
    /// Exit code (`None` when killed by a signal).
    pub exit_code: Option<i32>,
    /// Signal that killed the child, if any.
    pub signal: Option<i32>,
    /// Whether the harness killed it on timeout.
    pub timed_out: bool,
    /// Child wall time, seconds.
    pub wall_s: f64,
    /// Parsed metrics JSON, when the file exists and parses.
    pub metrics: Option<Value>,
    /// Why the metrics could not be read.
    pub metrics_error: Option<String>,
    /// Last non-empty stderr line (for error messages).
    pub stderr_tail: String,
}

impl RunRequest<'_> {
    /// The `memdial run` arguments (without the binary).
    pub fn args(&self, metrics: &Path) -> Vec<String> {
        let p = self.point;
        let mut a: Vec<String> = vec![
            "run".into(),
            "--model".into(),
            self.model.display().to_string(),
        ];
        match self.prompt {
            PromptSpec::Text(t) => a.extend(["--prompt".into(), t.clone()]),
            PromptSpec::File { file } => {
                a.extend(["--prompt-file".into(), file.display().to_string()])
            }
            PromptSpec::Ids { ids } => a.extend([
                "--prompt-ids".into(),
                ids.iter()
                    .map(|i| i.to_string())
                    .collect::<Vec<_>>()
                    .join(","),
            ]),
        }
        a.extend([
            "--max-tokens".into(),
            self.max_tokens.to_string(),
            "--threads".into(),
            p.threads.to_string(),
            "--budget".into(),
            self.budget_bytes.to_string(),
            "--io".into(),
            p.io.clone(),
            "--prefetch".into(),
            p.prefetch.clone(),
            "--cache".into(),
            p.cache.clone(),
            "--metrics-json".into(),
            metrics.display().to_string(),
        ]);
        if let Some(c) = self.max_context {
            a.extend(["--max-context".into(), c.to_string()]);
        }
        if let Some(id) = self.perturb_logit {
            a.extend(["--perturb-logit".into(), id.to_string()]);
        }
        a.extend(self.extra_args.iter().cloned());
        a
    }

    /// Runs the child to completion (or timeout). Output goes to `run_dir/stdout.txt`
    /// and `run_dir/stderr.txt`; metrics to `run_dir/metrics.json`. The metrics are
    /// written under a per-attempt name and renamed, so a stale child of an
    /// interrupted sweep can never be mistaken for this run.
    pub fn execute(&self) -> Result<RunOutcome> {
        std::fs::create_dir_all(self.run_dir)
            .with_context(|| format!("cannot create {}", self.run_dir.display()))?;
        let attempt = self
            .run_dir
            .join(format!("metrics.{}.{}.json", std::process::id(), nonce()));
        let final_metrics = self.run_dir.join("metrics.json");
        let _ = std::fs::remove_file(&final_metrics);
        let args = self.args(&attempt);
        let mut cmd = match self.cgroup {
            Some(cg) => {
                // Join the cgroup before exec, so every allocation of the engine is charged.
                let mut c = Command::new("/bin/sh");
                c.arg("-c")
                    .arg("echo $$ > \"$0\" && exec \"$@\"")
                    .arg(cg.procs_file())
                    .arg(self.bin)
                    .args(&args);
                c
            }
            None => {
                let mut c = Command::new(self.bin);
                c.args(&args);
                c
            }
        };
        let out = std::fs::File::create(self.run_dir.join("stdout.txt"))?;
        let err = std::fs::File::create(self.run_dir.join("stderr.txt"))?;
        cmd.stdin(Stdio::null()).stdout(out).stderr(err);
        // SAFETY: prctl is async-signal-safe; the child dies with the harness, so an
        // interrupted sweep leaves no orphan engine running.
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let t0 = Instant::now();
        let mut child = cmd
            .spawn()
            .with_context(|| format!("cannot start {}", self.bin.display()))?;
        let mut timed_out = false;
        let status = loop {
            if let Some(s) = child.try_wait()? {
                break s;
            }
            if t0.elapsed() > self.timeout {
                let _ = child.kill();
                timed_out = true;
                break child.wait()?;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        let wall_s = t0.elapsed().as_secs_f64();
        let stderr = std::fs::read_to_string(self.run_dir.join("stderr.txt")).unwrap_or_default();
        let stderr_tail = stderr
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("")
            .chars()
            .take(400)
            .collect();
        let (metrics, metrics_error) = if attempt.exists() {
            let text = std::fs::read_to_string(&attempt).unwrap_or_default();
            let _ = std::fs::rename(&attempt, &final_metrics);
            match serde_json::from_str::<Value>(&text) {
                Ok(v) if v.is_object() => (Some(v), None),
                Ok(_) => (None, Some("metrics JSON is not an object".to_string())),
                Err(e) => (None, Some(format!("metrics JSON does not parse: {e}"))),
            }
        } else {
            (None, Some("no metrics file written".to_string()))
        };
        Ok(RunOutcome {
            exit_code: status.code(),
            signal: status.signal(),
            timed_out,
            wall_s,
            metrics,
            metrics_error,
            stderr_tail,
        })
    }
}

fn nonce() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

/// The binary for child runs: `$MEMDIAL_SWEEP_RUN_BIN` or this executable.
pub fn run_binary() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os(RUN_BIN_ENV) {
        return Ok(PathBuf::from(p));
    }
    std::env::current_exe().context("cannot locate the memdial executable")
}

/// The fields every row of point `p` shares (axes, floor, host), before the run.
pub fn base_row(spec: &Spec, host: &Host, p: &Point, budget: u64, floor: u64) -> Row {
    Row {
        point_index: p.index,
        point_key: p.key(),
        budget_spec: p.budget_spec.clone(),
        budget_bytes: budget,
        io: p.io.clone(),
        prefetch: p.prefetch.clone(),
        cache: p.cache.clone(),
        threads: p.threads,
        prompt_index: p.prompt_index,
        max_tokens: spec.max_tokens,
        planned_floor_bytes: floor,
        host_name: host.host_name.clone(),
        cpu_model: host.cpu_model.clone(),
        cpu_cores: host.cpu_cores,
        ram_bytes: host.ram_bytes,
        kernel: host.kernel.clone(),
        model_fs: host.model_fs.clone(),
        model_device: host.model_device.clone(),
        memdial_version: env!("CARGO_PKG_VERSION").to_string(),
        started_utc: utc_now_rfc3339(),
        ..Default::default()
    }
}

/// What one run needs besides its slot and budget.
pub struct RunCtx<'a> {
    pub a: &'a SweepArgs,
    pub spec: &'a Spec,
    pub host: &'a Host,
    pub bin: &'a Path,
    pub model: &'a Path,
    pub out: &'a Path,
    pub shard_files: &'a [PathBuf],
    pub cg_mode: Option<&'a cgroup::Mode>,
    pub slack: u64,
}

/// Step 3 (per run): cold cache, optional cgroup, the child `memdial run`, and its
/// row with a status (`ok`, `failed`, `refused`, `timeout`).
pub fn run_slot(c: &RunCtx, slot: &RunSlot, budget_bytes: u64, floor_bytes: u64) -> Result<Row> {
    let mut row = base_row(c.spec, c.host, &slot.point, budget_bytes, floor_bytes);
    row.run_id = slot.run_id();
    row.repeat = slot.repeat;
    row.warmup = slot.warmup;
    let cold = make_cold(c.shard_files)?;
    row.model_files = cold.files;
    row.resident_before_bytes = cold.resident_bytes;
    row.cold_verified = cold.verified();
    let cg = match c.cg_mode {
        Some(m) => match RunCgroup::create(m, &slot.dir_name(), budget_bytes + c.slack) {
            Ok(cg) => Some(cg),
            Err(e) => {
                eprintln!(
                    "warning: cannot create a memory cgroup ({e:#}); this run is not enforced"
                );
                None
            }
        },
        None => None,
    };
    let prompt = &c.spec.prompts[slot.point.prompt_index];
    let run_dir = c.out.join("runs").join(slot.dir_name());
    let req = RunRequest {
        bin: c.bin,
        model: c.model,
        point: &slot.point,
        budget_bytes: budget_bytes,
        prompt,
        max_tokens: c.spec.max_tokens,
        max_context: c.spec.max_context,
        extra_args: &c.spec.extra_args,
        perturb_logit: (c.a.test_perturb_point == Some(slot.point.index))
            .then_some(c.a.test_perturb_logit),
        run_dir: &run_dir,
        timeout: Duration::from_secs_f64(c.spec.timeout_s),
        cgroup: cg.as_ref(),
    };
    row.started_utc = utc_now_rfc3339();
    let o = req.execute()?;
    row.wall_s = Some(o.wall_s);
    row.exit_code = o.exit_code;
    if let Some(cg) = &cg {
        row.cgroup_enforced = true;
        row.cgroup_limit_bytes = Some(cg.limit_bytes);
        row.cgroup_peak_bytes = cg.peak_bytes();
        row.cgroup_oom_kills = cg.oom_kills();
    }
    drop(cg);
    let why = || {
        if !o.stderr_tail.is_empty() {
            o.stderr_tail.clone()
        } else if let Some(sig) = o.signal {
            format!("killed by signal {sig}")
        } else {
            o.metrics_error.clone().unwrap_or_default()
        }
    };
    row.status = if o.timed_out {
        row.error = Some(format!("timed out after {:.0} s", c.spec.timeout_s));
        "timeout".into()
    } else if o.exit_code == Some(0) {
        match &o.metrics {
            Some(m) => match row.fill_metrics(m) {
                Ok(()) => "ok".into(),
                Err(e) => {
                    row.error = Some(format!("{e:#}"));
                    "failed".into()
                }
            },
            None => {
                row.error = o.metrics_error.clone();
                "failed".into()
            }
        }
    } else if o.exit_code == Some(2) {
        row.error = Some(why());
        "refused".into()
    } else {
        row.error = Some(why());
        "failed".into()
    };
    Ok(row)
}
