//! `memdial sweep`: run a sweep spec against a model and write the report.
//!
//! Exit codes: 0 PASS (and no baseline regression), 1 output mismatch, a failed
//! run, a regression or an incomplete sweep, 2 usage error.

use std::collections::{BTreeMap, HashMap};
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use memdial::checkpoint::Checkpoint;
use memdial::io::IoMode;
use memdial::store::plan::{fmt_bytes, parse_size, plan_unchecked, Prefetch};

use crate::args::{as_usage, usage};
use crate::sweep::baseline;
use crate::sweep::cgroup::{self, RunCgroup, Support};
use crate::sweep::coldcache::make_cold;
use crate::sweep::engines::{self, Registry};
use crate::sweep::host::Host;
use crate::sweep::report::{write_all, Baseline, Meta};
use crate::sweep::row::{self, Row};
use crate::sweep::runner::{run_binary, RunRequest};
use crate::sweep::spec::{
    BudgetExpr, Point, PromptSpec, RunSlot, Shard, Spec, DEFAULT_PLAN_CONTEXT, DEFAULT_SPEC,
};
use crate::sweep::util::{utc_now_dirname, utc_now_rfc3339};

/// Default model directory (generated with the `mini` preset when missing).
pub const DEFAULT_MODEL: &str = "fixtures/models/mini";
/// Default spec file (the embedded copy is used when it does not exist).
pub const DEFAULT_SPEC_PATH: &str = "harness/sweeps/default.toml";
/// Default parent of run directories.
pub const DEFAULT_REPORTS: &str = "reports";

/// Arguments of `memdial sweep`.
#[derive(clap::Args, Debug, Default)]
pub struct SweepArgs {
    /// Model directory [default: fixtures/models/mini, generated if missing].
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// Sweep spec (TOML) [default: harness/sweeps/default.toml, else the built-in copy].
    #[arg(long)]
    pub spec: Option<PathBuf>,
    /// Run directory [default: reports/<UTC time>/, and reports/latest points to it].
    /// A directory holding an unfinished sweep of the same spec is resumed: finished
    /// runs are kept, the rest are run.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// CI mode: print only a one-line verdict on stdout.
    #[arg(long)]
    pub check: bool,
    /// Baseline `results.csv` of an earlier sweep: fail when a point's median s/token
    /// is slower than the baseline's by more than --max-regression.
    #[arg(long)]
    pub baseline: Option<PathBuf>,
    /// Allowed slow-down against --baseline (e.g. 25% or 0.25).
    #[arg(long, default_value = "25%")]
    pub max_regression: String,
    /// Run only the deterministic slice i of n (points whose index mod n = i-1);
    /// combine the slices with `memdial report merge`.
    #[arg(long)]
    pub shard: Option<String>,
    /// Require memory-cgroup enforcement: exit 2 when no memory cgroup can be made.
    /// (By default every child runs in a memory cgroup limited to its budget plus the
    /// spec's `cgroup_slack`, swap off, whenever one can be made: cgroup v1 nested in
    /// our own memory cgroup, cgroup v2, or systemd-run; otherwise runs go on
    /// unenforced and `cgroup_reason` says why.)
    #[arg(long, conflicts_with = "no_cgroup")]
    pub cgroup: bool,
    /// Do not use memory cgroups (runs are unenforced; `over_budget` marks runs whose
    /// anon + page-cache memory exceeded budget + slack).
    #[arg(long)]
    pub no_cgroup: bool,
    /// Bytes read by each cold bandwidth probe (direct and buffered).
    #[arg(long, default_value = "256MiB")]
    pub bandwidth_probe: String,
    /// Test only: perturb one logit in every run of point N (its output then differs).
    #[arg(long, hide = true)]
    pub test_perturb_point: Option<usize>,
    /// Test only: the token id --test-perturb-point boosts.
    #[arg(long, hide = true, default_value_t = 7)]
    pub test_perturb_logit: u32,
    /// Test only: stop after N runs, as if interrupted.
    #[arg(long, hide = true)]
    pub test_stop_after: Option<usize>,
}

/// Runs `memdial sweep`.
pub fn run(a: &SweepArgs) -> Result<ExitCode> {
    sweep(a)
}

fn load_spec(a: &SweepArgs) -> Result<(Spec, String)> {
    match &a.spec {
        Some(p) => {
            let text = std::fs::read_to_string(p)
                .map_err(|e| usage(format!("cannot read spec {}: {e}", p.display())))?;
            let s = Spec::load(p).map_err(as_usage)?;
            Ok((s, text))
        }
        None if Path::new(DEFAULT_SPEC_PATH).exists() => {
            let p = Path::new(DEFAULT_SPEC_PATH);
            let text = std::fs::read_to_string(p)?;
            Ok((Spec::load(p).map_err(as_usage)?, text))
        }
        None => Ok((
            Spec::parse(DEFAULT_SPEC, Path::new(".")).map_err(as_usage)?,
            DEFAULT_SPEC.to_string(),
        )),
    }
}

/// Generates the default `mini` fixture with a progress bar.
fn generate_default_model(dir: &Path) -> Result<()> {
    eprintln!(
        "{} is missing: generating the `mini` fixture (about 1 GiB, ~30 s)",
        dir.display()
    );
    crate::cmd_fixture::generate_with_progress("mini", 0, dir, false)?;
    Ok(())
}

/// A point with its budget resolved against the plan.
struct Resolved {
    point: Point,
    budget_bytes: u64,
    floor_bytes: u64,
}

fn resolve_points(spec: &Spec, model: &Path) -> Result<(Vec<Resolved>, u64, Vec<PathBuf>)> {
    let ck = Checkpoint::open(model).map_err(as_usage)?;
    let cfg = memdial::config::load_config(model).map_err(as_usage)?;
    // The context the engine plans for: max(--max-context, prompt + max_tokens).
    let tok = memdial::tokenizer::Tokenizer::from_dir(model).ok();
    let contexts: Vec<usize> = spec
        .prompts
        .iter()
        .map(|p| {
            let n = match p {
                PromptSpec::Ids { ids } => Some(ids.len()),
                PromptSpec::Text(t) => tok.as_ref().map(|k| k.encode(t, true).len()),
                PromptSpec::File { file } => std::fs::read_to_string(file)
                    .ok()
                    .and_then(|t| tok.as_ref().map(|k| k.encode(&t, true).len())),
            };
            match n {
                Some(n) => spec.max_context.unwrap_or(0).max(n + spec.max_tokens),
                None => spec.max_context.unwrap_or(DEFAULT_PLAN_CONTEXT),
            }
        })
        .collect();
    let mut floors: HashMap<(String, String, usize), (u64, u64)> = HashMap::new();
    let mut out = vec![];
    for p in spec.points() {
        let ctx = contexts[p.prompt_index];
        let key = (p.io.clone(), p.prefetch.clone(), ctx);
        if !floors.contains_key(&key) {
            let plan = plan_unchecked(
                &cfg,
                &ck,
                u64::MAX / 4,
                IoMode::parse(&p.io)?,
                Prefetch::parse(&p.prefetch)?,
                ctx,
            )
            .with_context(|| format!("planning {} / {}", p.io, p.prefetch))?;
            floors.insert(key.clone(), (plan.floor_bytes, plan.model_bytes));
        }
        let (floor, model_bytes) = floors[&key];
        let budget = BudgetExpr::parse(&p.budget_spec)?.resolve(model_bytes, floor);
        out.push(Resolved {
            point: p,
            budget_bytes: budget,
            floor_bytes: floor,
        });
    }
    let model_bytes = memdial::inspect::model_bytes(&cfg, &ck);
    let files = ck.shards.iter().map(|s| s.path.clone()).collect();
    Ok((out, model_bytes, files))
}

fn run_order_key(r: &Row) -> (bool, u32, usize) {
    (!r.warmup, r.repeat, r.point_index)
}

fn sweep(a: &SweepArgs) -> Result<ExitCode> {
    let t_start = Instant::now();
    let (spec, spec_text) = load_spec(a)?;
    let shard = a
        .shard
        .as_deref()
        .map(Shard::parse)
        .transpose()
        .map_err(as_usage)?;
    let tolerance = baseline::parse_tolerance(&a.max_regression).map_err(as_usage)?;
    let probe_bytes =
        parse_size(&a.bandwidth_probe).map_err(|e| usage(format!("--bandwidth-probe: {e:#}")))?;
    let model = match &a.model {
        Some(m) => {
            if !m.is_dir() {
                return Err(usage(format!(
                    "model directory {} does not exist",
                    m.display()
                )));
            }
            m.clone()
        }
        None => {
            let m = PathBuf::from(DEFAULT_MODEL);
            if !m.join("config.json").exists() {
                generate_default_model(&m)?;
            }
            m
        }
    };
    let model = std::fs::canonicalize(&model)?;
    let cg_support = if a.no_cgroup {
        None
    } else {
        Some(cgroup::detect())
    };
    if let (true, Some(Support::Unavailable(r))) = (a.cgroup, &cg_support) {
        return Err(usage(format!(
            "--cgroup: the budget cannot be enforced on this machine: {r}"
        )));
    }
    let (resolved, model_bytes, shard_files) = resolve_points(&spec, &model)?;
    let content_hash = Checkpoint::open(&model)
        .and_then(|ck| memdial::checkpoint::model_content_hash(&ck))
        .map_err(|e| usage(format!("{e:#}")))?;
    let spec_hash = spec.hash();
    let mut engines = Registry::from_spec(&spec).map_err(as_usage)?;
    engines.require_available()?;
    let prompt_ids = engines::registry::prompt_ids(&spec, &model, engines.has_external())?;
    let base = match &a.baseline {
        Some(p) => {
            let me = baseline::Identity {
                spec_name: spec.name.as_deref(),
                spec_sha256: &spec_hash,
                model_content_hash: &content_hash,
            };
            Some(Baseline {
                path: p.clone(),
                runs: baseline::load(p, &me).map_err(|e| usage(format!("{e:#}")))?,
                tolerance,
            })
        }
        None => None,
    };
    let points_total = resolved.len();
    let selected: Vec<&Resolved> = resolved
        .iter()
        .filter(|r| shard.map(|s| s.contains(r.point.index)).unwrap_or(true))
        .collect();
    if let Some(p) = a.test_perturb_point {
        if p >= points_total {
            return Err(usage(format!(
                "--test-perturb-point {p}: the spec has {points_total} points"
            )));
        }
    }
    // Points an engine cannot run (resident-only under the model size, an IO mode it
    // lacks): recorded as `n/a`, neither run nor failed.
    let na: BTreeMap<usize, String> = selected
        .iter()
        .filter_map(|r| {
            let e = engines.get(&r.point.engine)?;
            engines
                .not_applicable(e, &spec, &r.point, r.budget_bytes, model_bytes)
                .map(|w| (r.point.index, w))
        })
        .collect();
    let runnable: Vec<Point> = selected
        .iter()
        .filter(|r| r.budget_bytes >= r.floor_bytes && !na.contains_key(&r.point.index))
        .map(|r| r.point.clone())
        .collect();
    let by_index: BTreeMap<usize, &Resolved> =
        selected.iter().map(|r| (r.point.index, *r)).collect();
    let slots: Vec<RunSlot> = spec.runs(&runnable);

    // --- run directory
    let default_out = a.out.is_none();
    let out = match &a.out {
        Some(o) => o.clone(),
        None => {
            let base = PathBuf::from(DEFAULT_REPORTS).join(utc_now_dirname());
            let mut o = base.clone();
            let mut n = 2;
            while o.exists() {
                o = PathBuf::from(format!("{}-{n}", base.display()));
                n += 1;
            }
            o
        }
    };
    std::fs::create_dir_all(&out).with_context(|| format!("cannot create {}", out.display()))?;
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let model_str = model.display().to_string();
    let mut rows: Vec<Row>;
    let meta = if out.join("sweep.json").exists() {
        let mut m = Meta::load(&out).map_err(as_usage)?;
        if m.spec_sha256 != spec.hash() || m.shard != shard || m.model_dir != model_str {
            return Err(usage(format!(
                "{} holds a different sweep (spec, shard or model differ); choose another --out",
                out.display()
            )));
        }
        rows = row::load(&out)?;
        m.command = command;
        m
    } else {
        if std::fs::read_dir(&out)?.next().is_some() {
            return Err(usage(format!(
                "{} exists, is not empty and holds no sweep",
                out.display()
            )));
        }
        rows = vec![];
        let mut host = Host::collect(&model);
        if let Some(big) = shard_files
            .iter()
            .max_by_key(|p| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0))
        {
            host.probe_bandwidth(big, probe_bytes);
        }
        Meta {
            format: 1,
            spec_name: spec.name.clone(),
            spec_sha256: spec.hash(),
            model_dir: model_str.clone(),
            model_bytes,
            max_tokens: spec.max_tokens,
            created_utc: utc_now_rfc3339(),
            shard,
            merged_from: vec![],
            points_total,
            runs_planned: 0,
            host,
            cgroup: String::new(),
            memdial_version: env!("CARGO_PKG_VERSION").to_string(),
            command,
            results_schema: None,
            model_content_hash: None,
            engines: vec![],
        }
    };
    let mut meta = meta;
    meta.results_schema = Some(row::RESULTS_SCHEMA);
    meta.model_content_hash = Some(content_hash.clone());
    meta.cgroup = match &cg_support {
        None => "off (--no-cgroup: engine accounting only, page cache unchecked)".into(),
        Some(s) => s.describe(),
    };
    let below: Vec<&Resolved> = selected
        .iter()
        .copied()
        .filter(|r| r.budget_bytes < r.floor_bytes && !na.contains_key(&r.point.index))
        .collect();
    meta.runs_planned = slots.len() + below.len() + na.len();
    engines.prepare(&out, &model, &content_hash)?;
    meta.engines = engines.meta();
    if !out.join("spec.toml").exists() {
        crate::sweep::util::write_atomic(&out.join("spec.toml"), spec_text.as_bytes())?;
    }
    meta.save(&out)?;
    if default_out {
        crate::export::update_latest(Path::new(DEFAULT_REPORTS), "latest", &out);
    }
    let cg_mode = match &cg_support {
        Some(Support::Available(m)) => {
            let n = cgroup::clean_stale(m);
            if n > 0 && !a.check {
                eprintln!("note: removed {n} stale memory cgroup(s) of earlier sweeps");
            }
            Some(m.clone())
        }
        Some(Support::Unavailable(r)) => {
            if !a.check {
                eprintln!("note: memory cgroup: not enforced: {r}");
            }
            None
        }
        None => None,
    };
    let no_cg_reason = match &cg_support {
        Some(Support::Unavailable(r)) => r.clone(),
        _ => "--no-cgroup".to_string(),
    };
    let slack = parse_size(&spec.cgroup_slack)?;
    let host = meta.host.clone();
    let base_row = |p: &Point, budget: u64, floor: u64| Row {
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
        engine: p.engine.clone(),
        ..Default::default()
    };
    for r in &below {
        let id = format!("{}#skip", r.point.key());
        if !rows.iter().any(|x| x.run_id == id) {
            let mut row = base_row(&r.point, r.budget_bytes, r.floor_bytes);
            row.run_id = id;
            row.status = "below_floor".into();
            row.error = Some(format!(
                "budget {} is below the floor {}",
                fmt_bytes(r.budget_bytes),
                fmt_bytes(r.floor_bytes)
            ));
            rows.push(row);
        }
    }
    for r in &selected {
        if let Some(why) = na.get(&r.point.index) {
            let id = format!("{}#na", r.point.key());
            if !rows.iter().any(|x| x.run_id == id) {
                let mut row = base_row(&r.point, r.budget_bytes, r.floor_bytes);
                row.run_id = id;
                row.status = "n/a".into();
                row.error = Some(why.clone());
                rows.push(row);
            }
        }
    }
    // Finished runs are kept; failed ones are run again.
    let finished: std::collections::HashSet<String> = rows
        .iter()
        .filter(|r| matches!(r.status.as_str(), "ok" | "below_floor" | "n/a"))
        .map(|r| r.run_id.clone())
        .collect();
    let todo: Vec<&RunSlot> = slots
        .iter()
        .filter(|s| !finished.contains(&s.run_id()))
        .collect();
    rows.sort_by_key(run_order_key);
    write_all(&out, &meta, &rows, base.as_ref())?;

    let bin = run_binary()?;
    let tty = std::io::stderr().is_terminal();
    let pb = if a.check {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(todo.len() as u64)
    };
    pb.set_style(
        ProgressStyle::with_template("{prefix} [{bar:24}] {pos}/{len} eta {eta} | {msg}")
            .expect("valid template")
            .progress_chars("=> "),
    );
    pb.set_prefix("sweep");
    if !a.check {
        eprintln!(
            "sweep: {} points ({} in this run{}), {} runs to do ({} already finished) → {}",
            points_total,
            selected.len(),
            shard.map(|s| format!(", shard {s}")).unwrap_or_default(),
            todo.len(),
            slots.len() - todo.len(),
            out.display()
        );
    }
    let timeout = Duration::from_secs_f64(spec.timeout_s);
    let mut last = String::from("–");
    let mut executed = 0usize;
    let mut stopped = false;
    for slot in todo {
        let r = by_index[&slot.point.index];
        let engine = engines
            .get(&slot.point.engine)
            .context("engine of the point")?;
        let label = format!(
            "p{}{} {} {}/{} {} {}t {}{}",
            slot.point.index,
            if meta.engines.is_empty() {
                String::new()
            } else {
                format!(" {}", engine.name)
            },
            crate::sweep::spec::budget_label(&slot.point.budget_spec, r.budget_bytes),
            slot.point.io,
            slot.point.prefetch,
            slot.point.cache,
            slot.point.threads,
            if slot.warmup { "w" } else { "r" },
            slot.repeat
        );
        pb.set_message(format!("{label} | last {last}"));
        let mut row = base_row(&slot.point, r.budget_bytes, r.floor_bytes);
        row.run_id = slot.run_id();
        row.repeat = slot.repeat;
        row.warmup = slot.warmup;
        let cold = make_cold(&shard_files)?;
        row.model_files = cold.files;
        row.resident_before_bytes = cold.resident_bytes;
        row.cold_verified = cold.verified();
        row.cgroup_reason = Some(no_cg_reason.clone());
        let cg = match &cg_mode {
            Some(_) if !engine.budget.wants_cgroup() => {
                row.cgroup_reason = Some(format!(
                    "engine {} holds its budget by its own flags (budget = \"flag\")",
                    engine.name
                ));
                None
            }
            Some(m) => {
                match RunCgroup::create(m, &slot.dir_name(), r.budget_bytes + slack) {
                    Ok(c) => {
                        row.cgroup_reason = None;
                        Some(c)
                    }
                    Err(e) if a.cgroup => {
                        return Err(e.context("--cgroup: cannot create a memory cgroup"))
                    }
                    Err(e) => {
                        eprintln!("warning: cannot create a memory cgroup ({e:#}); this run is not enforced");
                        row.cgroup_reason = Some(format!("{e:#}"));
                        None
                    }
                }
            }
            None => None,
        };
        let prompt = &spec.prompts[slot.point.prompt_index];
        let run_dir = out.join("runs").join(slot.dir_name());
        let ext_ctx = engines::RunCtx {
            model_dir: &model,
            prompt_ids: &prompt_ids[slot.point.prompt_index],
            point: &slot.point,
            budget_bytes: r.budget_bytes,
            max_tokens: spec.max_tokens,
            run_dir: &run_dir,
            trunk_share_bytes: engines::registry::trunk_share(
                engine,
                &model,
                r.budget_bytes,
                &slot.point,
                prompt_ids[slot.point.prompt_index].len() + spec.max_tokens,
            ),
        };
        let ext = if engine.is_memdial() {
            None
        } else {
            Some(engines.command(engine, &ext_ctx).map_err(as_usage)?)
        };
        let req = RunRequest {
            bin: &bin,
            model: &model,
            point: &slot.point,
            budget_bytes: r.budget_bytes,
            prompt,
            max_tokens: spec.max_tokens,
            max_context: spec.max_context,
            extra_args: &spec.extra_args,
            perturb_logit: (a.test_perturb_point == Some(slot.point.index))
                .then_some(a.test_perturb_logit),
            run_dir: &run_dir,
            timeout,
            cgroup: cg.as_ref(),
            watch_files: &shard_files,
            external: ext.as_ref(),
        };
        row.started_utc = utc_now_rfc3339();
        let mut o = req.execute()?;
        engines::registry::finish_run(&engines, engine, &ext_ctx, &mut o, &mut row, cg.is_some());
        row.wall_s = Some(o.wall_s);
        row.exit_code = o.exit_code;
        if let Some(c) = &cg {
            row.cgroup_enforced = true;
            row.cgroup_limit_bytes = Some(c.limit_bytes);
            row.cgroup_peak_bytes = c.peak_bytes();
            row.cgroup_oom_kills = c.oom_kills();
        }
        drop(cg);
        let oom_killed = row.cgroup_oom_kills.unwrap_or(0) > 0
            || (row.cgroup_enforced && o.mem.cgroup_oom_kills.unwrap_or(0) > 0);
        let why = || {
            if oom_killed {
                format!(
                    "{}{}",
                    cgroup::oom_hint(r.budget_bytes, slack),
                    if o.stderr_tail.is_empty() {
                        String::new()
                    } else {
                        format!(" (stderr: {})", o.stderr_tail)
                    }
                )
            } else if !o.stderr_tail.is_empty() {
                o.stderr_tail.clone()
            } else if let Some(sig) = o.signal {
                format!("killed by signal {sig}")
            } else {
                o.metrics_error.clone().unwrap_or_default()
            }
        };
        row.status = if o.timed_out {
            row.error = Some(format!("timed out after {:.0} s", spec.timeout_s));
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
        row.fill_memory(&o.mem, slack);
        last = match (row.status.as_str(), row.decode_s_per_token_median) {
            ("ok", Some(s)) => format!("{s:.4} s/token"),
            ("ok", None) => "ok".into(),
            (st, _) => st.to_string(),
        };
        if !tty && !a.check {
            eprintln!(
                "[{}/{}] {label}: {last}",
                executed + 1,
                pb.length().unwrap_or(0)
            );
        }
        rows.retain(|x| x.run_id != row.run_id);
        rows.push(row);
        rows.sort_by_key(run_order_key);
        write_all(&out, &meta, &rows, base.as_ref())?;
        pb.inc(1);
        executed += 1;
        if a.test_stop_after == Some(executed) {
            stopped = true;
            break;
        }
    }
    pb.finish_and_clear();
    if !meta.engines.is_empty() {
        if let Err(e) = engines::margins::find(
            &out,
            &bin,
            &model,
            &rows,
            &meta.engines,
            &prompt_ids,
            &spec.extra_args,
        ) {
            eprintln!("warning: cannot dump the reference logits for the engines' margins: {e:#}");
        }
    }
    let (v, cmp) = write_all(&out, &meta, &rows, base.as_ref())?;
    let finished_runs = rows.iter().filter(|r| r.status == "ok").count();
    let complete = slots
        .iter()
        .all(|s| rows.iter().any(|r| r.run_id == s.run_id()));
    let regressions = cmp.as_ref().map(|c| c.regressions().len()).unwrap_or(0);
    let mut line = v.one_line();
    if let Some(c) = &cmp {
        line += &format!(
            "; baseline: {regressions} of {} points slower by more than {:.0}%",
            c.compared.len(),
            c.tolerance * 100.0
        );
        if let Some(w) = c.regressions().first() {
            line += &format!(" (e.g. p{} {:+.0}%)", w.point_index, w.change * 100.0);
        }
    }
    if !complete {
        line += &format!("; incomplete: {} of {} runs", finished_runs, slots.len());
    }
    if a.check {
        println!("{line}");
    } else {
        println!("{line}");
        println!("report: {}", out.join("report.md").display());
        println!(
            "{} runs in {:.1} s{}",
            executed,
            t_start.elapsed().as_secs_f64(),
            if stopped {
                " (stopped early by --test-stop-after)"
            } else {
                ""
            }
        );
    }
    Ok(if v.pass && regressions == 0 && complete && !stopped {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
