//! `memdial sweep`: run a sweep spec against a model and write the report.
//!
//! Exit codes: 0 PASS (and no baseline regression), 1 output mismatch, a failed
//! run, a regression or an incomplete sweep, 2 usage error.

use std::collections::{BTreeMap, HashMap};
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use memdial::checkpoint::Checkpoint;
use memdial::io::IoMode;
use memdial::store::plan::{fmt_bytes, parse_size, plan_unchecked, Prefetch};

use crate::args::{as_usage, usage};
use crate::sweep::baseline;
use crate::sweep::cgroup::{self, Support};
use crate::sweep::host::Host;
use crate::sweep::report::{write_all, Baseline, Meta};
use crate::sweep::row::{self, Row};
use crate::sweep::runner::{base_row, run_binary, run_slot, RunCtx};
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
    /// Run each child in a memory cgroup limited to the budget, swap off (root; cgroup
    /// v2 or v1 auto-detected; reported as "not enforced" when unavailable).
    #[arg(long)]
    pub cgroup: bool,
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
    let model_bytes = ck.total_bytes();
    let files = ck.shards.iter().map(|s| s.path.clone()).collect();
    Ok((out, model_bytes, files))
}

fn run_order_key(r: &Row) -> (bool, u32, usize) {
    (!r.warmup, r.repeat, r.point_index)
}

/// Everything the sweep needs before it touches the run directory.
struct Inputs {
    spec: Spec,
    spec_text: String,
    shard: Option<Shard>,
    base: Option<Baseline>,
    probe_bytes: u64,
    model: PathBuf,
}

/// Step 1: the spec, shard, baseline and model (generated when the default is missing).
fn read_inputs(a: &SweepArgs) -> Result<Inputs> {
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
    let base = match &a.baseline {
        Some(p) => Some(Baseline {
            path: p.clone(),
            medians: baseline::load(p).map_err(as_usage)?,
            tolerance,
        }),
        None => None,
    };
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
    Ok(Inputs {
        spec,
        spec_text,
        shard,
        base,
        probe_bytes,
        model,
    })
}

/// `--out`, or a fresh `reports/<UTC time>` (with `-2`, `-3`, … on a clash).
fn choose_out(a: &SweepArgs) -> PathBuf {
    match &a.out {
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
    }
}

/// Step 2: the run directory's metadata and rows: resumed when `out` holds the same
/// sweep, new (with host facts and a bandwidth probe) when it is empty.
fn open_run_dir(
    inp: &Inputs,
    out: &Path,
    model_bytes: u64,
    points_total: usize,
    shard_files: &[PathBuf],
) -> Result<(Meta, Vec<Row>)> {
    std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let model_str = inp.model.display().to_string();
    let spec = &inp.spec;
    if out.join("sweep.json").exists() {
        let mut m = Meta::load(out).map_err(as_usage)?;
        if m.spec_sha256 != spec.hash() || m.shard != inp.shard || m.model_dir != model_str {
            return Err(usage(format!(
                "{} holds a different sweep (spec, shard or model differ); choose another --out",
                out.display()
            )));
        }
        let rows = row::load(out)?;
        m.command = command;
        return Ok((m, rows));
    }
    if std::fs::read_dir(out)?.next().is_some() {
        return Err(usage(format!(
            "{} exists, is not empty and holds no sweep",
            out.display()
        )));
    }
    let mut host = Host::collect(&inp.model);
    if let Some(big) = shard_files
        .iter()
        .max_by_key(|p| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0))
    {
        host.probe_bandwidth(big, inp.probe_bytes);
    }
    let meta = Meta {
        format: 1,
        spec_name: spec.name.clone(),
        spec_sha256: spec.hash(),
        model_dir: model_str,
        model_bytes,
        max_tokens: spec.max_tokens,
        created_utc: utc_now_rfc3339(),
        shard: inp.shard,
        merged_from: vec![],
        points_total,
        runs_planned: 0,
        host,
        cgroup: String::new(),
        memdial_version: env!("CARGO_PKG_VERSION").to_string(),
        command,
    };
    Ok((meta, vec![]))
}

/// `p3 25% direct/none lru 2t r0`: the progress label of a run.
fn run_label(slot: &RunSlot, budget_bytes: u64) -> String {
    format!(
        "p{} {} {}/{} {} {}t {}{}",
        slot.point.index,
        crate::sweep::spec::budget_label(&slot.point.budget_spec, budget_bytes),
        slot.point.io,
        slot.point.prefetch,
        slot.point.cache,
        slot.point.threads,
        if slot.warmup { "w" } else { "r" },
        slot.repeat
    )
}

fn progress_bar(a: &SweepArgs, runs: usize) -> ProgressBar {
    let pb = if a.check {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(runs as u64)
    };
    pb.set_style(
        ProgressStyle::with_template("{prefix} [{bar:24}] {pos}/{len} eta {eta} | {msg}")
            .expect("valid template")
            .progress_chars("=> "),
    );
    pb.set_prefix("sweep");
    pb
}

fn sweep(a: &SweepArgs) -> Result<ExitCode> {
    let t_start = Instant::now();
    let inp = read_inputs(a)?;
    let spec = &inp.spec;
    let (resolved, model_bytes, shard_files) = resolve_points(spec, &inp.model)?;
    let points_total = resolved.len();
    let selected: Vec<&Resolved> = resolved
        .iter()
        .filter(|r| inp.shard.map(|s| s.contains(r.point.index)).unwrap_or(true))
        .collect();
    if let Some(p) = a.test_perturb_point {
        if p >= points_total {
            return Err(usage(format!(
                "--test-perturb-point {p}: the spec has {points_total} points"
            )));
        }
    }
    let runnable: Vec<Point> = selected
        .iter()
        .filter(|r| r.budget_bytes >= r.floor_bytes)
        .map(|r| r.point.clone())
        .collect();
    let by_index: BTreeMap<usize, &Resolved> =
        selected.iter().map(|r| (r.point.index, *r)).collect();
    let slots: Vec<RunSlot> = spec.runs(&runnable);

    // --- run directory
    let out = choose_out(a);
    let (mut meta, mut rows) = open_run_dir(&inp, &out, model_bytes, points_total, &shard_files)?;
    let cg_support = a.cgroup.then(cgroup::detect);
    meta.cgroup = match &cg_support {
        None => "off (engine accounting only; run with --cgroup as root to enforce)".into(),
        Some(s) => s.describe(),
    };
    let below: Vec<&Resolved> = selected
        .iter()
        .copied()
        .filter(|r| r.budget_bytes < r.floor_bytes)
        .collect();
    meta.runs_planned = slots.len() + below.len();
    if !out.join("spec.toml").exists() {
        crate::sweep::util::write_atomic(&out.join("spec.toml"), inp.spec_text.as_bytes())?;
    }
    meta.save(&out)?;
    if a.out.is_none() {
        crate::export::update_latest(Path::new(DEFAULT_REPORTS), "latest", &out);
    }
    let cg_mode = match &cg_support {
        Some(Support::Available(m)) => Some(m.clone()),
        Some(Support::Unavailable(r)) => {
            if !a.check {
                eprintln!("note: --cgroup: not enforced: {r}");
            }
            None
        }
        None => None,
    };
    let host = meta.host.clone();
    for r in &below {
        let id = format!("{}#skip", r.point.key());
        if !rows.iter().any(|x| x.run_id == id) {
            let mut row = base_row(spec, &host, &r.point, r.budget_bytes, r.floor_bytes);
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
    // Finished runs are kept; failed ones are run again.
    let finished: std::collections::HashSet<String> = rows
        .iter()
        .filter(|r| r.status == "ok" || r.status == "below_floor")
        .map(|r| r.run_id.clone())
        .collect();
    let todo: Vec<&RunSlot> = slots
        .iter()
        .filter(|s| !finished.contains(&s.run_id()))
        .collect();
    rows.sort_by_key(run_order_key);
    write_all(&out, &meta, &rows, inp.base.as_ref())?;

    // --- the runs
    let bin = run_binary()?;
    let ctx = RunCtx {
        a,
        spec,
        host: &host,
        bin: &bin,
        model: &inp.model,
        out: &out,
        shard_files: &shard_files,
        cg_mode: cg_mode.as_ref(),
        slack: parse_size(&spec.cgroup_slack)?,
    };
    let tty = std::io::stderr().is_terminal();
    let pb = progress_bar(a, todo.len());
    if !a.check {
        eprintln!(
            "sweep: {} points ({} in this run{}), {} runs to do ({} already finished) → {}",
            points_total,
            selected.len(),
            inp.shard
                .map(|s| format!(", shard {s}"))
                .unwrap_or_default(),
            todo.len(),
            slots.len() - todo.len(),
            out.display()
        );
    }
    let mut last = String::from("–");
    let mut executed = 0usize;
    let mut stopped = false;
    for slot in todo {
        let r = by_index[&slot.point.index];
        let label = run_label(slot, r.budget_bytes);
        pb.set_message(format!("{label} | last {last}"));
        let row = run_slot(&ctx, slot, r.budget_bytes, r.floor_bytes)?;
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
        write_all(&out, &meta, &rows, inp.base.as_ref())?;
        pb.inc(1);
        executed += 1;
        if a.test_stop_after == Some(executed) {
            stopped = true;
            break;
        }
    }
    pb.finish_and_clear();
    finish(
        a,
        &out,
        &meta,
        &rows,
        &slots,
        inp.base.as_ref(),
        executed,
        stopped,
        t_start,
    )
}

/// Step 4: the final report, the verdict line and the exit code.
#[allow(clippy::too_many_arguments)]
fn finish(
    a: &SweepArgs,
    out: &Path,
    meta: &Meta,
    rows: &[Row],
    slots: &[RunSlot],
    base: Option<&Baseline>,
    executed: usize,
    stopped: bool,
    t_start: Instant,
) -> Result<ExitCode> {
    let (v, cmp) = write_all(out, meta, rows, base)?;
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
    println!("{line}");
    if !a.check {
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
