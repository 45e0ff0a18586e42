//! Step 3 of a sweep: one run slot → one results row (cold cache, memory cgroup,
//! child process, status classification).

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Result;
use memdial::util::units::fmt_bytes;

use super::cgroup::{self, Mode, RunCgroup};
use super::coldcache::make_cold;
use super::plugin::{EnginePlugin, RunCtx, RunEngine};
use super::points::Resolved;
use super::runner::{RunOutcome, RunRequest};
use crate::sweep::record::host::Host;
use crate::sweep::record::row::Row;
use crate::sweep::record::status::RunStatus;
use crate::sweep::spec::{Point, RunSlot, Spec};
use crate::sweep::util::utc_now_rfc3339;

/// What every run of one sweep invocation shares.
pub struct RunEnv<'a> {
    /// The spec.
    pub spec: &'a Spec,
    /// Host facts copied into every row.
    pub host: Host,
    /// The `memdial` binary started for each run.
    pub bin: PathBuf,
    /// Model directory (canonical).
    pub model: &'a Path,
    /// The sweep's run directory.
    pub out: &'a Path,
    /// Model shard files (evicted before each run, watched during it).
    pub shard_files: &'a [PathBuf],
    /// Where per-run memory cgroups are made (`None`: unenforced).
    pub cg_mode: Option<Mode>,
    /// Why runs are unenforced when `cg_mode` is `None`.
    pub no_cg_reason: String,
    /// `--cgroup`: a cgroup that cannot be made is an error.
    pub require_cgroup: bool,
    /// Spec `cgroup_slack`, bytes above the budget.
    pub slack: u64,
    /// Per-run timeout.
    pub timeout: Duration,
    /// Test only: (point index, logit id) to perturb.
    pub perturb: Option<(usize, u32)>,
    /// The spec's engines.
    pub engines: &'a dyn EnginePlugin,
    /// Prompt ids of every prompt (other engines are given ids).
    pub prompt_ids: &'a [Vec<u32>],
    /// The packed layout `lossless` points read (the `layout` axis), when the spec
    /// lists it.
    pub packed: &'a [super::packed::PackedLayout],
}

/// `p3 25% direct/none lru 2t r0`: the progress label of a run.
pub fn run_label(slot: &RunSlot, budget_bytes: u64) -> String {
    format!(
        "p{}{} {} {}/{} {} {}t {}{}",
        slot.point.index,
        if slot.point.engine_in_key {
            format!(" {}", slot.point.engine)
        } else {
            String::new()
        },
        crate::sweep::spec::budget_label(&slot.point.budget_spec, budget_bytes),
        slot.point.io.as_str(),
        slot.point.prefetch.as_str(),
        slot.point.cache.as_str(),
        slot.point.threads,
        if slot.warmup { "w" } else { "r" },
        slot.repeat
    ) + &axes_label(&slot.point)
}

/// ` warm` / ` cold`, ` lossless` / ` safetensors` when the spec lists the `start`
/// or `layout` axis (else empty).
fn axes_label(p: &Point) -> String {
    p.axes
        .iter()
        .filter(|c| c.in_key)
        .map(|c| format!(" {}", c.value))
        .collect()
}

/// A short outcome for progress lines: `0.0123 s/token`, `4 requests, 7.20 tokens/s
/// aggregate` (a served run), `ok`, or the status.
pub fn outcome_label(row: &Row) -> String {
    if let (RunStatus::Ok, Some(a), false) = (
        row.status,
        row.aggregate_tokens_per_s,
        row.requests_output_ids.is_empty(),
    ) {
        return format!(
            "{} requests, {a:.2} tokens/s aggregate",
            row.requests_output_ids.len()
        );
    }
    match (row.status, row.metrics.decode_s_per_token_median) {
        (RunStatus::Ok, Some(s)) => format!("{s:.4} s/token"),
        (st, _) => st.to_string(),
    }
}

impl RunEnv<'_> {
    /// A row with the point's and host's columns filled.
    pub fn base_row(&self, p: &Point, budget: u64, floor: u64) -> Row {
        let host = &self.host;
        Row {
            point_index: p.index,
            point_key: p.key(),
            budget_spec: p.budget_spec.clone(),
            budget_bytes: budget,
            io: p.io,
            prefetch: p.prefetch,
            cache: p.cache,
            threads: p.threads,
            prompt_index: p.prompt_index,
            max_tokens: self.spec.max_tokens,
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
            engine: p.engine.to_string(),
            axes: p
                .axes
                .iter()
                .map(|c| (c.name.clone(), c.value.clone().into()))
                .collect(),
            ..Default::default()
        }
    }

    /// The `n/a` row of a point its engine cannot run.
    pub fn not_applicable_row(&self, r: &Resolved, why: &str) -> Row {
        let mut row = self.base_row(&r.point, r.budget_bytes, r.floor_bytes);
        row.planned_floor_for = Some(r.floor_for.clone());
        row.run_id = format!("{}#na", r.point.key());
        row.status = RunStatus::NotApplicable;
        row.error = Some(why.to_string());
        row
    }

    /// The `below_floor` row of a point whose budget is below the floor.
    pub fn below_floor_row(&self, r: &Resolved) -> Row {
        let mut row = self.base_row(&r.point, r.budget_bytes, r.floor_bytes);
        row.planned_floor_for = Some(r.floor_for.clone());
        row.run_id = format!("{}#skip", r.point.key());
        row.status = RunStatus::BelowFloor;
        row.error = Some(format!(
            "budget {} is below the floor {} for {}",
            fmt_bytes(r.budget_bytes),
            fmt_bytes(r.floor_bytes),
            r.floor_for
        ));
        row
    }

    /// Runs one slot from a cold cache in its memory cgroup and classifies the
    /// outcome (`ok`, `failed`, `refused` for exit 2, `timeout`).
    ///
    /// Errors: the cache cannot be evicted, the child cannot be started, or
    /// `--cgroup` is required and no cgroup can be made.
    pub fn run_slot(&self, slot: &RunSlot, r: &Resolved) -> Result<Row> {
        let spec = self.spec;
        let mut row = self.base_row(&slot.point, r.budget_bytes, r.floor_bytes);
        row.planned_floor_for = Some(r.floor_for.clone());
        row.run_id = slot.run_id();
        row.repeat = slot.repeat;
        row.warmup = slot.warmup;
        let engine = self
            .engines
            .engine(&slot.point.engine)
            .ok_or_else(|| anyhow::anyhow!("engine {:?} is not in the spec", slot.point.engine))?;
        let run_dir = self.out.join("runs").join(slot.dir_name());
        let ids = &self.prompt_ids[slot.point.prompt_index];
        let text = self.engines.prompt_text(spec, slot.point.prompt_index);
        let ext_ctx = RunCtx {
            model_dir: self.model,
            prompt_ids: ids,
            prompt_text: text.as_deref(),
            point: &slot.point,
            budget_bytes: r.budget_bytes,
            max_tokens: spec.max_tokens,
            run_dir: &run_dir,
            trunk_share_bytes: self.engines.trunk_share(
                &engine.name,
                self.model,
                r.budget_bytes,
                &slot.point,
                ids.len() + spec.max_tokens,
            ),
        };
        // Another engine's own files (a GGUF, a packed trunk) are made cold too, and
        // both layouts' files when the spec has two; the run's own are watched.
        let (model, mut files) = self.layout_files(&slot.point);
        files.extend(self.engines.cold_files(&engine.name, &ext_ctx));
        let mut evict = files.clone();
        evict.extend(
            self.packed
                .iter()
                .flat_map(|p| p.shard_files.iter().cloned()),
        );
        evict.extend(self.shard_files.iter().cloned());
        evict.sort();
        evict.dedup();
        let cold = make_cold(&evict)?;
        row.model_files = cold.files;
        row.resident_before_bytes = cold.resident_bytes;
        row.cold_verified = cold.verified();
        let cg = self.run_cgroup(&engine, slot, r.budget_bytes, &mut row)?;
        let prompt = &spec.prompts[slot.point.prompt_index];
        let ext = self
            .engines
            .command(&engine.name, &ext_ctx)
            .map_err(crate::args::as_usage)?;
        let clients = slot.point.concurrency as usize;
        if clients > 1 && engine.is_memdial {
            return self.run_served(slot, r, row, (model, &files), cg, clients);
        }
        let req = RunRequest {
            bin: &self.bin,
            model,
            point: &slot.point,
            budget_bytes: r.budget_bytes,
            prompt,
            max_tokens: spec.max_tokens,
            max_context: spec.max_context,
            extra_args: &spec.extra_args,
            perturb_logit: self
                .perturb
                .and_then(|(p, id)| (p == slot.point.index).then_some(id)),
            run_dir: &run_dir,
            timeout: self.timeout,
            cgroup: cg.as_ref(),
            watch_files: &files,
            external: ext.as_ref(),
        };
        row.started_utc = utc_now_rfc3339();
        let mut o = req.execute()?;
        self.engines
            .finish_run(&engine.name, &ext_ctx, &mut o, &mut row, cg.is_some());
        self.finish_row(&mut row, &o, cg, r.budget_bytes);
        let listed = slot
            .point
            .axes
            .iter()
            .any(|c| c.name == "concurrency" && c.in_key);
        crate::sweep::record::served::fill_concurrency(&mut row, listed);
        crate::sweep::record::served::fill_goodput(&mut row, self.spec.slo.as_ref());
        Ok(row)
    }

    /// A run of a point above concurrency 1 (`memdial serve` and its clients,
    /// [`super::clients`]) into `row`, after the cold cache and the cgroup are made.
    ///
    /// Errors: the server cannot be started or its record cannot be written.
    fn run_served(
        &self,
        slot: &RunSlot,
        r: &Resolved,
        mut row: Row,
        (model, files): (&Path, &[PathBuf]),
        cg: Option<RunCgroup>,
        clients: usize,
    ) -> Result<Row> {
        let n = self.prompt_ids.len();
        let prompts = (0..clients)
            .map(|i| {
                let j = (slot.point.prompt_index + i) % n;
                (j, &self.prompt_ids[j][..])
            })
            .collect();
        let served = super::clients::ServeRequest {
            bin: &self.bin,
            model,
            point: &slot.point,
            budget_bytes: r.budget_bytes,
            context: r.context,
            prompts,
            max_tokens: self.spec.max_tokens,
            run_dir: &self.out.join("runs").join(slot.dir_name()),
            timeout: self.timeout,
            cgroup: cg.as_ref(),
            watch_files: files,
        };
        row.started_utc = utc_now_rfc3339();
        let s = served.execute()?;
        self.finish_row(&mut row, &s.outcome, cg, r.budget_bytes);
        super::clients::fill_row(&mut row, &s, self.spec.slo.as_ref());
        Ok(row)
    }

    /// The row's wall time, exit code, cgroup figures (the cgroup is removed here) and
    /// status from the child's outcome.
    fn finish_row(&self, row: &mut Row, o: &RunOutcome, cg: Option<RunCgroup>, budget: u64) {
        row.wall_s = Some(o.wall_s);
        row.exit_code = o.exit_code;
        if let Some(c) = &cg {
            row.cgroup_enforced = true;
            row.cgroup_limit_bytes = Some(c.limit_bytes);
            row.cgroup_peak_bytes = c.peak_bytes();
            row.cgroup_oom_kills = c.oom_kills();
        }
        drop(cg);
        self.record_outcome(row, o, budget);
    }

    /// The model directory a memdial run of `p` reads and its shard files: the
    /// packed layout's for a `lossless` or `raw` point, else the model's.
    fn layout_files(&self, p: &Point) -> (&Path, Vec<PathBuf>) {
        let kind = p.layout;
        match super::packed::find(self.packed, kind) {
            Some(pk) => (pk.dir.as_path(), pk.shard_files.clone()),
            None => (self.model, self.shard_files.to_vec()),
        }
    }

    /// The memory cgroup the run goes in (`None`: not enforced, the reason in
    /// `row.cgroup_reason`). Errors: `--cgroup` is required and none can be made.
    fn run_cgroup(
        &self,
        engine: &RunEngine,
        slot: &RunSlot,
        budget_bytes: u64,
        row: &mut Row,
    ) -> Result<Option<RunCgroup>> {
        row.cgroup_reason = Some(self.no_cg_reason.clone());
        let cg = match &self.cg_mode {
            Some(_) if !engine.wants_cgroup => {
                row.cgroup_reason = Some(format!(
                    "engine {} holds its budget by its own flags (budget = \"flag\")",
                    engine.name
                ));
                None
            }
            Some(m) => match memdial::util::budget::cgroup_limit(budget_bytes, self.slack)
                .map_err(anyhow::Error::from)
                .and_then(|limit| RunCgroup::create(m, &slot.dir_name(), limit))
            {
                Ok(c) => {
                    row.cgroup_reason = None;
                    Some(c)
                }
                Err(e) if self.require_cgroup => {
                    return Err(e.context("--cgroup: cannot create a memory cgroup"))
                }
                Err(e) => {
                    eprintln!(
                        "warning: cannot create a memory cgroup ({e:#}); this run is not enforced"
                    );
                    row.cgroup_reason = Some(format!("{e:#}"));
                    None
                }
            },
            None => None,
        };
        Ok(cg)
    }

    /// Sets the row's status and error from the child's outcome, then its metrics
    /// and memory figures.
    fn record_outcome(&self, row: &mut Row, o: &RunOutcome, budget_bytes: u64) {
        let (spec, slack) = (self.spec, self.slack);
        let oom_killed = row.cgroup_oom_kills.unwrap_or(0) > 0
            || (row.cgroup_enforced && o.mem.cgroup_oom_kills.unwrap_or(0) > 0);
        let why = || {
            if oom_killed {
                format!(
                    "{}{}",
                    cgroup::oom_hint(budget_bytes, slack),
                    if o.stderr_tail.is_empty() {
                        String::new()
                    } else {
                        format!(" (stderr: {})", o.stderr_tail)
                    }
                )
            } else if o.exit_by_harness {
                o.stderr_tail.clone()
            } else {
                // The engine's own status and words, never "no metrics file written".
                let how = match (o.exit_code, o.signal) {
                    (Some(c), _) => format!("exited {c}"),
                    (None, Some(sig)) => format!("killed by signal {sig}"),
                    _ => "failed".into(),
                };
                match o.stderr_tail.as_str() {
                    "" => format!("{how}, nothing on stderr"),
                    t => format!("{how}: {t}"),
                }
            }
        };
        row.status = if o.timed_out {
            row.error = Some(format!("timed out after {:.0} s", spec.timeout_s));
            RunStatus::Timeout
        } else if o.exit_code == Some(0) {
            match &o.metrics {
                Some(m) => match row.fill_metrics(m).map(|()| row.prove()) {
                    Ok(Ok(())) => RunStatus::Ok,
                    Ok(Err(why)) => {
                        row.error = Some(why);
                        RunStatus::Failed
                    }
                    Err(e) => {
                        row.error = Some(format!("{e:#}"));
                        RunStatus::Failed
                    }
                },
                None => {
                    row.error = o.metrics_error.clone();
                    RunStatus::Failed
                }
            }
        } else if o.exit_code == Some(2) {
            row.error = Some(why());
            RunStatus::Refused
        } else {
            row.error = Some(why());
            RunStatus::Failed
        };
        row.fill_memory(&o.mem, slack);
        // What the run measured it suffered counts with what the sentinel saw around it.
        let noise = o
            .noise
            .with_run_queue_wait(row.metrics.run_queue_wait_fraction);
        row.fill_noise(&noise, &spec.noise);
    }
}
