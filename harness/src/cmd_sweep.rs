//! `memdial sweep`: run a sweep spec against a model and write the report.
//!
//! Exit codes (from the sweep's [`crate::sweep::analysis::outcome::Outcome`]): 0
//! PASS; 1 FAIL (output mismatch, a failed or unproven run, a regression),
//! INCOMPLETE, NOTHING COMPARED or BASELINE UNDECIDED; 2 usage error or refused
//! input (a changed model or prompt on resume, a tampered run directory, a baseline
//! of another sweep).

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Result;
use memdial::format::checkpoint::Checkpoint;
use memdial::tools::identity::Identity as InputIdentity;
use memdial::util::budget::parse_size;

use crate::args::{as_usage, usage};
use crate::sweep::analysis::repeats;
use crate::sweep::engines::{self, registry::Registry};
use crate::sweep::layout::LayoutKind;
use crate::sweep::record::baseline;
use crate::sweep::record::baseline::Baseline;
use crate::sweep::record::row::Row;
use crate::sweep::record::rundir;
use crate::sweep::record::rundir::Meta;
use crate::sweep::run::cgroup::{self, Support};
use crate::sweep::run::execute::RunEnv;
use crate::sweep::run::packed::PackedLayout;
use crate::sweep::run::points::{Points, Selection};
use crate::sweep::run::runner::run_binary;
use crate::sweep::spec::{RunSlot, Shard, Spec, DEFAULT_SPEC};
use crate::sweep::write::report::write_all;

/// Default model directory (generated with the `mini` preset when missing).
pub const DEFAULT_MODEL: &str = "fixtures/models/mini";
/// Default spec file (the embedded copy is used when it does not exist).
pub const DEFAULT_SPEC_PATH: &str = "harness/sweeps/default.toml";

/// Arguments of `memdial sweep`.
#[derive(clap::Args, Debug, Default)]
pub struct SweepArgs {
    /// Model directory [default: fixtures/models/mini, generated if missing]. When
    /// memdial is not among the spec's engines: any file or directory the engines read
    /// (e.g. a GGUF), taken as its files (docs/engines.md, "Any model").
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
    /// What a baseline gate that cannot decide (too few repeats, unreadable baseline
    /// cells, no point in common) does to the outcome: `fail` (exit 1) or `pass`.
    #[arg(long, value_enum, default_value_t = Undecided::Fail)]
    pub baseline_undecided: Undecided,
    /// Also write a JUnit XML report to FILE: one test case per point and engine, and
    /// one for the verdict (for GitLab, Jenkins, Buildkite and GitHub test reporters).
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,
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
    /// The lossless layout of --model for the spec's `layout = [.., "lossless"]`
    /// points (a `memdial pack --lossless` output) [default: the model packed once
    /// into the cache, $MEMDIAL_CACHE_DIR or ~/.cache/memdial, keyed by its identity].
    #[arg(long, value_name = "DIR")]
    pub packed: Option<PathBuf>,
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

/// `--baseline-undecided`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Undecided {
    /// An undecided gate passes (the line still says it is undecided).
    Pass,
    /// An undecided gate fails the sweep.
    #[default]
    Fail,
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
        "{} is missing: generating the `mini` fixture (about 1 GiB, 10–30 s)",
        dir.display()
    );
    crate::fixture_progress::generate_with_progress("mini", 0, dir, false)?;
    Ok(())
}

/// Everything the sweep needs before it touches the run directory.
struct Inputs {
    spec: Spec,
    spec_text: String,
    shard: Option<Shard>,
    base: Option<Baseline>,
    probe_bytes: u64,
    model: PathBuf,
    content_hash: String,
    model_identity: InputIdentity,
    prompt_identities: BTreeMap<String, InputIdentity>,
    cg_support: Option<Support>,
    opaque: Option<engines::opaque::OpaqueModel>,
}

/// The identities of the model and of the spec's prompt files (see
/// [`memdial::tools::identity`]). Errors (usage): one cannot be read.
fn input_identities(
    spec: &Spec,
    model: &Path,
) -> Result<(InputIdentity, BTreeMap<String, InputIdentity>)> {
    let m = InputIdentity::of_path(model).map_err(|e| usage(format!("model: {e:#}")))?;
    let mut prompts = BTreeMap::new();
    for p in &spec.prompts {
        if let crate::sweep::spec::PromptSpec::File { file } = p {
            let id =
                InputIdentity::of_path(file).map_err(|e| usage(format!("prompt file: {e:#}")))?;
            prompts.insert(file.display().to_string(), id);
        }
    }
    Ok((m, prompts))
}

/// The model: `--model`, or the default (generated when missing). A file (a GGUF) or
/// a directory memdial's engine does not read is taken when memdial is not among the
/// spec's engines ([`engines::opaque`]).
fn model_dir(a: &SweepArgs, spec: &Spec) -> Result<PathBuf> {
    let model = match &a.model {
        Some(m) => {
            let taken = m.is_dir() || (m.is_file() && engines::opaque::wanted(spec, m));
            if !taken {
                return Err(usage(if m.is_file() {
                    format!(
                        "model {} is a file: memdial reads a checkpoint directory (other engines \
                         take a file such as a GGUF when memdial is not among the spec's engines)",
                        m.display()
                    )
                } else {
                    format!("model directory {} does not exist", m.display())
                }));
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
    Ok(std::fs::canonicalize(&model)?)
}

/// Step 0: the spec, shard, flags, model (with its content hash), cgroup support
/// and baseline.
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
    let model = model_dir(a, &spec)?;
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
    let (model_identity, prompt_identities) = input_identities(&spec, &model)?;
    let opaque = if engines::opaque::wanted(&spec, &model) {
        Some(engines::opaque::OpaqueModel::open(&model).map_err(as_usage)?)
    } else {
        None
    };
    // An opaque model's content is its files' identity.
    let content_hash = match &opaque {
        Some(_) => model_identity.digest.clone(),
        None => Checkpoint::open(&model)
            .and_then(|ck| memdial::format::checkpoint::model_content_hash(&ck))
            .map_err(|e| usage(format!("{e:#}")))?,
    };
    let base = match &a.baseline {
        Some(p) => {
            let me = baseline::Identity {
                spec_name: spec.name.as_deref(),
                spec_sha256: &spec.hash(),
                model_content_hash: &content_hash,
                model_identity: &model_identity,
                prompt_identities: &prompt_identities,
            };
            let (runs, unreadable) = baseline::load(p, &me).map_err(|e| usage(format!("{e:#}")))?;
            Some(Baseline {
                path: p.clone(),
                runs,
                unreadable,
                tolerance,
                undecided_passes: a.baseline_undecided == Undecided::Pass,
            })
        }
        None => None,
    };
    Ok(Inputs {
        spec,
        spec_text,
        shard,
        base,
        probe_bytes,
        model,
        content_hash,
        model_identity,
        prompt_identities,
        cg_support,
        opaque,
    })
}

/// The per-run memory-cgroup mode (stale cgroups of earlier sweeps removed) and
/// the reason runs are unenforced without one.
fn cgroup_mode(a: &SweepArgs, cg_support: &Option<Support>) -> (Option<cgroup::Mode>, String) {
    let mode = match cg_support {
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
    let reason = match cg_support {
        Some(Support::Unavailable(r)) => r.clone(),
        _ => "not requested (--no-cgroup)".to_string(),
    };
    (mode, reason)
}

mod todo;
use todo::{run_order_key, run_todo, LoopOpts};

/// The line that opens a sweep: points, runs to do and where they are written.
fn announce(inp: &Inputs, points: usize, sel: &Selection, todo: usize, slots: usize, out: &Path) {
    eprintln!(
        "sweep: {} points ({} in this run{}), {}{} runs to do ({} already finished) → {}",
        points,
        sel.by_index.len(),
        inp.shard
            .map(|s| format!(", shard {s}"))
            .unwrap_or_default(),
        if inp.spec.auto_repeats().is_some() {
            "at most "
        } else {
            ""
        },
        todo,
        slots - todo,
        out.display()
    );
}

fn sweep(a: &SweepArgs) -> Result<ExitCode> {
    let t_start = Instant::now();
    crate::sweep::write::ci::check_junit_path(a.junit.as_deref())?;
    let inp = read_inputs(a)?;
    let spec = &inp.spec;
    let mut engines = Registry::from_spec(spec).map_err(as_usage)?;
    if let Some(m) = &inp.opaque {
        engines.set_opaque(spec, m.clone());
    }
    engines.require_available()?;
    engines.set_model(&inp.model).map_err(as_usage)?;
    let prompt_ids = engines::runs::prompt_ids(spec, &inp.model, &engines)?;
    if let Some(m) = &inp.opaque {
        let fc = engines::floor::Ctx {
            model: &inp.model,
            files: &m.files,
            model_bytes: m.bytes,
            identity: &inp.model_identity.digest,
            prompt_ids: &prompt_ids,
            cg_mode: match &inp.cg_support {
                Some(Support::Available(m)) => Some(m),
                _ => None,
            },
            slack: spec.cgroup_slack,
            verbose: !a.check,
        };
        engines::floor::resolve(&mut engines, spec, &fc)?;
    }
    if let Some(out) = &a.out {
        // Before packing a layout (minutes on a large model) or writing anything.
        rundir::refuse_other_out(out, spec, &inp.spec_text, inp.shard, &inp.model)?;
    }
    let packed = packed_layouts(a, &inp)?;
    let points = Points::resolve(spec, &inp.model, &packed, &engines)?;
    let points_total = points.resolved.len();
    // A trace that does not fit the sweep is refused before anything runs.
    let predictions = crate::sweep::predict::prepare(spec, &inp.model, &prompt_ids, &points)?;
    let sel = points.select(spec, inp.shard, &engines);
    if let Some(p) = a.test_perturb_point {
        if p >= points_total {
            return Err(usage(format!(
                "--test-perturb-point {p}: the spec has {points_total} points"
            )));
        }
    }
    let slots: &[RunSlot] = &sel.slots;

    // --- run directory
    let out = rundir::choose_out(
        a.out.as_deref(),
        Path::new(crate::sweep::record::rundir::DEFAULT_REPORTS),
    );
    let _lock = rundir::lock(&out)?;
    let argv: Vec<String> = std::env::args().collect();
    crate::sweep::run::interrupt::install(&crate::sweep::run::interrupt::resume_command(
        &argv, &out,
    ));
    let stale = rundir::clean_stale(&out);
    if stale > 0 && !a.check {
        eprintln!("note: removed {stale} stale temporary file(s) of an interrupted sweep");
    }
    let (mut meta, mut rows) = open_run_dir(a, &inp, &points, &sel, &mut engines, &out)?;
    attach_predictions(&mut meta, predictions, &out)?;
    let (cg_mode, no_cg_reason) = cgroup_mode(a, &inp.cg_support);
    let env = RunEnv {
        spec,
        host: meta.host.clone(),
        bin: run_binary()?,
        model: &inp.model,
        out: &out,
        shard_files: &points.shard_files,
        cg_mode,
        no_cg_reason,
        require_cgroup: a.cgroup,
        slack: spec.cgroup_slack,
        timeout: Duration::from_secs_f64(spec.timeout_s),
        perturb: a.test_perturb_point.map(|p| (p, a.test_perturb_logit)),
        engines: &engines,
        prompt_ids: &prompt_ids,
        packed: &packed,
    };
    let todo = unrun_rows_and_todo(&env, &sel, &mut rows);
    let base = inp.base.as_ref();
    write_all(&out, &meta, &rows, base)?;
    if !a.check {
        announce(&inp, points_total, &sel, todo.len(), slots.len(), &out);
    }
    let (executed, stopped) = run_todo(
        &LoopOpts {
            check: a.check,
            stop_after: a.test_stop_after,
        },
        &env,
        &sel,
        &todo,
        &mut meta,
        &mut rows,
        base,
    )?;
    after_runs(&env, &inp, &meta, &rows);
    finish(
        a, &out, &meta, &rows, slots, base, executed, stopped, t_start,
    )
}

/// The steps after the runs, whose failures are warnings: the reference's logit
/// margins where other engines differ, and the lossy layouts' agreement.
fn after_runs(env: &RunEnv, inp: &Inputs, meta: &Meta, rows: &[Row]) {
    let (out, spec, prompt_ids) = (env.out, env.spec, env.prompt_ids);
    if !meta.engines.is_empty() {
        if let Err(e) = engines::margins::find(
            out,
            &env.bin,
            &inp.model,
            rows,
            &meta.engines,
            prompt_ids,
            &spec.extra_args,
        ) {
            eprintln!("warning: cannot dump the reference logits for the engines' margins: {e:#}");
        }
    }
    let lossy = crate::sweep::run::lossy::LossyInputs {
        out,
        bin: &env.bin,
        model: &inp.model,
        packed: env.packed,
        prompt_ids,
        limits: &spec.lossy,
    };
    if let Err(e) = crate::sweep::run::lossy::measure(&lossy, rows) {
        eprintln!("warning: cannot write the lossy layouts' agreement: {e:#}");
    }
}

/// Records the spec's trace's predictions in `sweep.json`, timed with the sweep's own
/// cold direct probe when the spec gives no bandwidth.
fn attach_predictions(
    meta: &mut Meta,
    p: Option<crate::sweep::record::predictions::Predictions>,
    out: &Path,
) -> Result<()> {
    if let Some(mut p) = p {
        p.set_probe(meta.host.direct_cold_gbps);
        // A resumed sweep keeps the read rates its earlier invocations measured.
        let earlier = meta.predictions.take().map(|e| e.rate_samples);
        if p.interleaved_rates {
            for s in earlier.into_iter().flatten() {
                p.add_rate_sample(s);
            }
        }
        meta.predictions = Some(p);
        meta.save(out)?;
    }
    Ok(())
}

/// The packed layouts the spec's `lossless` and `raw` points read (none without them).
/// Errors (usage): `--packed` without a `lossless` layout in the spec, or one that
/// is not a packed layout of the model; packing errors.
fn packed_layouts(a: &SweepArgs, inp: &Inputs) -> Result<Vec<PackedLayout>> {
    if a.packed.is_some() && !inp.spec.layout.0.contains(&LayoutKind::Lossless) {
        return Err(usage(
            "--packed is read by the spec's `lossless` layout: add layout = [\"safetensors\", \"lossless\"]",
        ));
    }
    let mut out = vec![];
    for &kind in inp.spec.layout.0.iter().filter(|k| k.is_packed()) {
        let given = a.packed.as_deref().filter(|_| kind == LayoutKind::Lossless);
        out.push(crate::sweep::run::packed::prepare(
            &inp.model, kind, given, a.check,
        )?);
    }
    Ok(out)
}

/// Opens (or resumes) the run directory `out`: its metadata completed and saved,
/// `spec.toml` and the `latest` link written, the engines prepared. Returns the
/// metadata and the rows already there.
fn open_run_dir(
    a: &SweepArgs,
    inp: &Inputs,
    points: &Points,
    sel: &Selection,
    engines: &mut Registry,
    out: &Path,
) -> Result<(Meta, Vec<Row>)> {
    let id = rundir::Identity {
        spec: &inp.spec,
        spec_text: &inp.spec_text,
        shard: inp.shard,
        model: &inp.model,
        model_bytes: points.model_bytes,
        points_total: points.resolved.len(),
        model_identity: &inp.model_identity,
        prompt_identities: &inp.prompt_identities,
    };
    let slots = &sel.slots;
    let (mut meta, rows) = rundir::open(out, &id, &points.shard_files, inp.probe_bytes)?;
    meta.results_schema = Some(crate::sweep::record::row::RESULTS_SCHEMA);
    meta.model_content_hash = Some(inp.content_hash.clone());
    meta.cgroup = match &inp.cg_support {
        None => "off (--no-cgroup: engine accounting only, page cache unchecked)".into(),
        Some(s) => s.describe(),
    };
    meta.runs_planned = slots.len() + sel.below.len() + sel.na.len();
    if inp.shard.is_some() {
        let all = points.select(&inp.spec, None, engines);
        meta.sweep_runs_planned = Some(all.slots.len() + all.below.len() + all.na.len());
    }
    engines.prepare(out, &inp.model, &inp.content_hash)?;
    meta.engines = engines.meta();
    meta.opaque_model = inp
        .opaque
        .as_ref()
        .map(|m| crate::sweep::record::engine_meta::OpaqueMeta::of(m, &engines.floors));
    // sweep.json first: a directory with it is resumable; one without it holds at
    // most the same spec.toml, which a new sweep accepts (see rundir::open).
    meta.save(out)?;
    if !out.join("spec.toml").exists() {
        crate::export::write_atomic(&out.join("spec.toml"), inp.spec_text.as_bytes())?;
    }
    if a.out.is_none() {
        crate::export::update_latest(
            Path::new(crate::sweep::record::rundir::DEFAULT_REPORTS),
            "latest",
            out,
        );
    }
    Ok((meta, rows))
}

/// Adds the rows of the points not run (below the floor, not applicable to their
/// engine) and returns the slots still to run: finished runs are kept, failed ones
/// are run again.
fn unrun_rows_and_todo<'a>(
    env: &RunEnv,
    sel: &'a Selection,
    rows: &mut Vec<Row>,
) -> Vec<&'a RunSlot> {
    for r in &sel.below {
        let row = env.below_floor_row(r);
        if !rows.iter().any(|x| x.run_id == row.run_id) {
            rows.push(row);
        }
    }
    for (r, why) in &sel.na {
        let row = env.not_applicable_row(r, why);
        if !rows.iter().any(|x| x.run_id == row.run_id) {
            rows.push(row);
        }
    }
    // Finished runs are kept; failed ones are run again.
    let finished: HashSet<String> = rows
        .iter()
        .filter(|r| r.status.is_settled())
        .map(|r| r.run_id.clone())
        .collect();
    let todo: Vec<&RunSlot> = sel
        .slots
        .iter()
        .filter(|s| !finished.contains(&s.run_id()))
        .collect();
    rows.sort_by_key(run_order_key);
    todo
}

/// Last step: the final report, the verdict line and the exit code.
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
    // Every slot of this invocation has a row unless it stopped early; `runs_planned`
    // (and so the outcome) counts them all.
    debug_assert!(
        stopped
            || slots
                .iter()
                .all(|s| rows.iter().any(|r| r.run_id == s.run_id())
                    || meta.repeats_auto.is_some_and(|a| repeats::reached(
                        rows,
                        s.point.index,
                        &a
                    )))
    );
    println!("{}", v.line);
    crate::sweep::write::ci::outputs(
        a.junit.as_deref(),
        &crate::sweep::write::ci::Finished {
            meta,
            rows,
            v: &v,
            baseline: cmp.as_ref(),
            line: &v.line,
            pass: v.pass,
        },
    )?;
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
    Ok(ExitCode::from(v.outcome.exit_code()))
}
