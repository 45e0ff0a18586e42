//! Runs one sweep point as a child `memdial run … --metrics-json OUT` process.

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde_json::Value;

use super::cgroup::RunCgroup;
use super::child::{self, Event};
use super::memwatch::interval_at;
use crate::store_flags::StoreFlags;
use crate::sweep::record::memory::MemSamples;
use crate::sweep::spec::{Point, PromptSpec};

/// A resolved child command.
#[derive(Debug, Clone, PartialEq)]
pub struct ExtCommand {
    /// Program.
    pub program: PathBuf,
    /// Arguments.
    pub args: Vec<String>,
    /// Extra environment.
    pub env: Vec<(String, String)>,
    /// Files the engine writes its output to (its `ids_json`, `text_file`): removed before each
    /// attempt, so what is read after it was written by it.
    pub outputs: Vec<PathBuf>,
}

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
    /// Model shard files whose page-cache residency is sampled during the run.
    pub watch_files: &'a [PathBuf],
    /// Another engine's command, run instead of `memdial run` (no metrics file: the
    /// caller reads its output, see `sweep::engines::output`).
    pub external: Option<&'a ExtCommand>,
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
    /// What the child's stderr says went wrong: its first `error:` line, else its
    /// last lines (for error messages).
    pub stderr_tail: String,
    /// Whether `exit_code` is the harness's verdict, not the process's (a served run
    /// whose server stopped cleanly but a request failed): its error is then
    /// `stderr_tail` alone.
    pub exit_by_harness: bool,
    /// Memory sampled while the child ran.
    pub mem: MemSamples,
    /// When the attempt started (before the child was spawned): an output file
    /// older than this is not this attempt's.
    pub started: std::time::SystemTime,
    /// What the rest of the machine did while the child lived (the noise sentinel,
    /// [`memdial::tools::noise`]).
    pub noise: memdial::tools::noise::Noise,
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
        ]);
        a.extend(StoreFlags::budgeted(self.budget_bytes, p.io, p.prefetch, p.cache).to_args());
        a.extend(["--metrics-json".into(), metrics.display().to_string()]);
        if let Some(c) = self.max_context {
            a.extend(["--max-context".into(), c.to_string()]);
        }
        // Only when the spec lists the `start` axis: a default sweep's command is unchanged.
        if let Some(c) = p.axes.iter().find(|c| c.name == "start" && c.in_key) {
            a.extend(["--start".into(), c.value.clone()]);
        }
        if let Some(v) = &p.speculate {
            a.extend(["--speculate".into(), v.clone()]);
        }
        // Only above 0: a sweep without the axis runs the command it always ran.
        let depth = p.depth;
        if depth > 0 {
            a.extend(["--depth".into(), depth.to_string()]);
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
        self.remove_earlier_outputs()?;
        let started = std::time::SystemTime::now();
        let (bin, args) = match self.external {
            Some(x) => (x.program.as_path(), x.args.clone()),
            None => (self.bin, self.args(&attempt)),
        };
        let mut cmd = match self.cgroup {
            Some(cg) => cg.command(bin, &args),
            None => {
                let mut c = Command::new(bin);
                c.args(&args);
                c
            }
        };
        if let Some(x) = self.external {
            cmd.envs(x.env.iter().map(|(k, v)| (k, v)));
        }
        let out = std::fs::File::create(self.run_dir.join("stdout.txt"))?;
        let err = std::fs::File::create(self.run_dir.join("stderr.txt"))?;
        let sentinel = memdial::tools::noise::Sentinel::new(Some(self.model));
        let t0 = Instant::now();
        let before = sentinel.snapshot(None, 0.0);
        let mut child = child::spawn(&cmd, out.into(), err.into())
            .with_context(|| format!("cannot start {}", bin.display()))?;
        super::interrupt::set_child_supervisor(child.supervisor_pid() as i32);
        let mut mem = MemSamples::default();
        let mut next_sample = Instant::now();
        let mut after = None;
        let waited = child.wait_sampled(self.timeout, &mut |c, ev| match ev {
            Event::Running if Instant::now() >= next_sample => {
                mem.sample(Some(c.pid()), self.watch_files, self.cgroup);
                next_sample = Instant::now() + interval_at(t0.elapsed());
            }
            Event::Running => {}
            // The supervisor's /proc entry holds the reaped tree's CPU time and reads
            // until it is reaped.
            Event::Exited => {
                after =
                    Some(sentinel.snapshot(Some(c.supervisor_pid()), t0.elapsed().as_secs_f64()))
            }
        })?;
        super::interrupt::set_child_supervisor(0);
        let (status, timed_out) = (waited.status, waited.timed_out);
        let wall_s = t0.elapsed().as_secs_f64();
        let after = after.unwrap_or_else(|| sentinel.snapshot(None, wall_s));
        let noise = memdial::tools::noise::Noise::between(&before, &after, sentinel.ticks_per_s());
        // What the run left in the page cache counts too.
        mem.sample(None, self.watch_files, None);
        let stderr_tail = stderr_summary(&stderr_head(&self.run_dir.join("stderr.txt")));
        let (metrics, metrics_error) = read_metrics(&attempt, &final_metrics);
        Ok(RunOutcome {
            exit_code: status.code(),
            signal: status.signal(),
            timed_out,
            wall_s,
            metrics,
            metrics_error,
            stderr_tail,
            exit_by_harness: false,
            mem,
            started,
            noise,
        })
    }
}

impl RunRequest<'_> {
    /// Removes another engine's output files of an earlier attempt (or of another run,
    /// when they live outside the run directory): they must not be read as this one's.
    fn remove_earlier_outputs(&self) -> Result<()> {
        // Where the file really is (`{run_dir}/../x` is not in the run directory).
        let real = |p: &Path| -> Option<PathBuf> {
            let dir = std::fs::canonicalize(p.parent()?).ok()?;
            Some(dir.join(p.file_name()?))
        };
        let run_dir = std::fs::canonicalize(self.run_dir).ok();
        let out_dir = run_dir
            .as_deref()
            .and_then(|d| d.parent())
            .and_then(|d| d.parent());
        for f in self.external.map(|x| x.outputs.as_slice()).unwrap_or(&[]) {
            let at = real(f);
            let in_run = at
                .as_ref()
                .zip(run_dir.as_ref())
                .is_some_and(|(a, r)| a.starts_with(r));
            // The sweep's own files (sweep.json, results.json, other runs) are never
            // an engine's output.
            if !in_run
                && at
                    .as_ref()
                    .zip(out_dir)
                    .is_some_and(|(a, o)| a.starts_with(o))
            {
                anyhow::bail!(
                    "the engine's output {} is in the sweep's directory but outside this run's: \
                     not removed; write it under {{run_dir}}",
                    f.display()
                );
            }
            // Outside the run directory only a regular file (or a link) is removed:
            // `ids_json = "/dev/null"` must never delete a device.
            if let Ok(m) = std::fs::symlink_metadata(f) {
                let ours = in_run && !m.is_dir();
                if !ours && !m.is_file() && !m.file_type().is_symlink() {
                    anyhow::bail!(
                        "the engine's output {} is not a regular file (a directory, FIFO or device): \
                         not removed; give `ids_json` a file path",
                        f.display()
                    );
                }
            }
            match std::fs::remove_file(f) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => anyhow::bail!(
                    "cannot remove the engine's earlier output {} before the run: {e}",
                    f.display()
                ),
            }
        }
        Ok(())
    }
}

/// The first MiB of a child's stderr file and, when it holds more, its last 64 KiB
/// (an engine may print gigabytes; the summary needs its first error or last line).
pub(super) fn stderr_head(p: &Path) -> String {
    use std::io::{Read, Seek, SeekFrom};
    const HEAD: u64 = 1 << 20;
    const TAIL: u64 = 64 << 10;
    let Ok(mut f) = std::fs::File::open(p) else {
        return String::new();
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let mut buf = Vec::new();
    let _ = (&mut f).take(HEAD).read_to_end(&mut buf);
    if len > HEAD + TAIL && f.seek(SeekFrom::Start(len - TAIL)).is_ok() {
        buf.push(b'\n');
        let _ = f.take(TAIL).read_to_end(&mut buf);
    }
    String::from_utf8_lossy(&buf).into_owned()
}

/// The line of a child's stderr that says what went wrong, at most 400 characters: its
/// first `error:` line (a usage error is quoted whole, not reduced to clap's closing
/// "For more information, try '--help'."), else its last 3 non-empty lines
/// ([`child::last_lines`]).
pub(super) fn stderr_summary(stderr: &str) -> String {
    match stderr
        .lines()
        .find(|l| l.trim_start().starts_with("error:"))
    {
        Some(line) => line.chars().take(400).collect(),
        None => child::last_lines(stderr, 3),
    }
}

/// The run's metrics from this attempt's file (moved to `final_metrics`), or why
/// there are none.
fn read_metrics(attempt: &Path, final_metrics: &Path) -> (Option<Value>, Option<String>) {
    if !attempt.exists() {
        return (None, Some("no metrics file written".to_string()));
    }
    let text = match crate::sweep::util::read_output(attempt, crate::sweep::util::MAX_OUTPUT_BYTES)
    {
        Ok(t) => t,
        Err(e) => return (None, Some(format!("metrics file: {e:#}"))),
    };
    let _ = std::fs::rename(attempt, final_metrics);
    match serde_json::from_str::<Value>(&text) {
        Ok(v) if v.is_object() => (Some(v), None),
        Ok(_) => (None, Some("metrics JSON is not an object".to_string())),
        Err(e) => (None, Some(format!("metrics JSON does not parse: {e}"))),
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
