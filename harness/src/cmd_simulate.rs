//! `memdial simulate --trace T (--model DIR | --config F | --preset NAME) --budgets …`:
//! replays a recorded routing trace against the store's plan at each budget, for
//! each expert-cache policy (the store's `lru` and `lfru`, a static hot set, Belady's
//! optimum), and prints bytes read per token by class, hit rates, look-ahead accuracy
//! and, given a device bandwidth and a compute time, predicted s/token. The model is
//! [`memdial::store::sim`] (docs/simulate.md).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::Result;
use plotters::coord::Shift;
use plotters::prelude::*;
use serde::Serialize;

use crate::args::usage;
use crate::planning::compute::{compute_time, embedding_rows, expert_share};
use crate::planning::rates::{iobench_rates, time_model, Rates};
use crate::planning::source::source_of;
use crate::store_flags::IoFlags;
use crate::sweep::start::StartMode;
use crate::sweep::write::chart_parts::{budget_panel, legend, pe, BudgetFrame, COLORS};
use memdial::engine::arena::Scratch;
use memdial::store::plan::{plan_unchecked, Plan, Prefetch, Sequences};
use memdial::store::sim::passes::Speculation;
use memdial::store::sim::pool::SimPolicy;
use memdial::store::sim::predict::{predict, DecodeBytes};
use memdial::store::sim::{replay, Replayable, SimOptions, SimReport};
use memdial::store::trace;
use memdial::util::budget::parse_size;

/// Arguments of `memdial simulate`.
#[derive(clap::Args)]
pub struct SimulateArgs {
    /// A trace recorded by `memdial run --record-trace` (format 2, docs/simulate.md).
    #[arg(long)]
    pub trace: PathBuf,
    /// Checkpoint directory (its real read sizes).
    #[arg(long, required_unless_present_any = ["config", "preset"], conflicts_with_all = ["config", "preset"])]
    pub model: Option<PathBuf>,
    /// A config.json, planned without weights.
    #[arg(long, conflicts_with = "preset")]
    pub config: Option<PathBuf>,
    /// A shipped config (k3, kimi-linear-48b) or a fixture preset (tiny-k3, mini,
    /// k3-slice, …), planned without weights.
    #[arg(long)]
    pub preset: Option<String>,
    /// One memory budget (e.g. 512MiB, 8GB).
    #[arg(long, value_parser = parse_size)]
    pub budget: Vec<u64>,
    /// Budgets: a comma list (`1GiB,2GiB,4GiB`) or `LO..HI:N`, N budgets spaced
    /// evenly on a log scale from LO to HI.
    #[arg(long)]
    pub budgets: Option<String>,
    /// IO mode of the plan (direct adds alignment to read sizes) and prefetch policy to
    /// replay (lookahead needs a trace with guesses).
    #[command(flatten)]
    pub policy: IoFlags,
    /// Expert-cache policies, comma-separated: lru, lfru (the store's), static (a hot
    /// set learned from the trace's first --hot-prefix-tokens), belady (the offline
    /// optimum).
    #[arg(long, default_value = "lru,lfru,static,belady")]
    pub cache: String,
    /// Cold or warm start (caches filled before the first forward, as `run --start warm`).
    #[arg(long, value_enum, default_value_t = StartMode::Cold)]
    pub start: StartMode,
    /// Positions the plan holds (default: the recording run's, else prompt + decode).
    #[arg(long)]
    pub max_context: Option<usize>,
    /// Kernel threads the plan's arena holds (default: the recording run's, else 1).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Static policy: learn the hot set from the routing of the first N tokens
    /// (default: the prompt).
    #[arg(long)]
    pub hot_prefix_tokens: Option<usize>,
    /// Device read bandwidth, GB/s (10⁹ bytes/s), for predicted s/token.
    #[arg(long, conflicts_with = "iobench")]
    pub device_gbps: Option<f64>,
    /// A `memdial iobench` report directory: its `trunk` qd 1 and `experts:K` cells give
    /// the read rates (K the top-k; other `experts:K` cells, rates by batch size).
    #[arg(long)]
    pub iobench: Option<PathBuf>,
    /// Compute seconds per decoded token (with every weight resident).
    #[arg(long, conflicts_with = "resident_metrics")]
    pub compute_s_per_token: Option<f64>,
    /// A `memdial run --metrics-json` file of a resident run (no --budget): its
    /// median decode s/token is the compute time.
    #[arg(long)]
    pub resident_metrics: Option<PathBuf>,
    /// Replay decode as exact speculation would run it (`ngram:K` / `replay:FILE:K`; only
    /// K matters): passes of K + 1 rows, the plan holding the restore point. Needs
    /// --mean-accepted-length and a trace of plain decoding (docs/speculation.md).
    #[arg(long, default_value = "off", value_parser = crate::args::speculate)]
    pub speculate: memdial::engine::speculate::Speculate,
    /// Drafts accepted per pass on average (0 ..= K), with --speculate.
    #[arg(long)]
    pub mean_accepted_length: Option<f64>,
    /// Standard output: a text table, CSV or JSON rows.
    #[arg(long, value_parser = ["text", "csv", "json"], default_value = "text")]
    pub output: String,
    /// Also write results.csv, results.json and simulate.svg/.png into this directory.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// One (budget, policy) row of the output.
#[derive(Debug, Clone, Serialize)]
pub struct SimRow {
    pub budget_bytes: u64,
    pub below_floor: bool,
    pub floor_bytes: u64,
    pub policy: String,
    pub io: String,
    pub prefetch: String,
    pub start: String,
    pub expert_cache_experts: usize,
    pub pinned_groups: usize,
    pub embedding_pinned: bool,
    pub decode_tokens: usize,
    /// Decode bytes read per token, and by class.
    pub bytes_per_token: Option<f64>,
    pub trunk_bytes_per_token: Option<f64>,
    pub expert_bytes_per_token: Option<f64>,
    pub embedding_bytes_per_token: Option<f64>,
    pub lm_head_bytes_per_token: Option<f64>,
    /// Whole run (prefill + decode), as `memdial run --metrics-json` counts them.
    pub trunk_hit_rate: Option<f64>,
    pub expert_hit_rate: Option<f64>,
    /// Decode tokens only.
    pub decode_expert_hit_rate: Option<f64>,
    pub lookahead_precision: Option<f64>,
    pub lookahead_recall: Option<f64>,
    pub prefill_bytes_read: Option<u64>,
    /// Bytes read after open (the engine's `bytes_read_total − bytes_read_load`).
    pub bytes_read_after_open: Option<u64>,
    pub prefill_expert_fetches: Option<u64>,
    pub warm_fill_bytes: Option<u64>,
    pub hot_set_bytes: Option<u64>,
    pub budget_overflows: Option<u64>,
    pub predicted_io_s_per_token: Option<f64>,
    pub predicted_s_per_token: Option<f64>,
}

const CSV_COLUMNS: [&str; 30] = [
    "budget_bytes",
    "below_floor",
    "floor_bytes",
    "policy",
    "io",
    "prefetch",
    "start",
    "expert_cache_experts",
    "pinned_groups",
    "embedding_pinned",
    "decode_tokens",
    "bytes_per_token",
    "trunk_bytes_per_token",
    "expert_bytes_per_token",
    "embedding_bytes_per_token",
    "lm_head_bytes_per_token",
    "trunk_hit_rate",
    "expert_hit_rate",
    "decode_expert_hit_rate",
    "lookahead_precision",
    "lookahead_recall",
    "prefill_bytes_read",
    "bytes_read_after_open",
    "prefill_expert_fetches",
    "warm_fill_bytes",
    "hot_set_bytes",
    "budget_overflows",
    "predicted_io_s_per_token",
    "predicted_s_per_token",
    "policy_is_bound",
];

/// The budgets of `--budget` and `--budgets`, ascending, each once.
///
/// Errors: a malformed list or range (usage error).
pub fn parse_budgets(single: &[u64], list: Option<&str>) -> Result<Vec<u64>> {
    let mut v: Vec<u64> = single.to_vec();
    if let Some(s) = list {
        let bad = |m: String| usage(format!("--budgets {s:?}: {m}"));
        if let Some((range, n)) = s.split_once(':') {
            let (lo, hi) = range
                .split_once("..")
                .ok_or_else(|| bad("expected LO..HI:N".into()))?;
            let lo = parse_size(lo.trim()).map_err(|e| bad(e.to_string()))?;
            let hi = parse_size(hi.trim()).map_err(|e| bad(e.to_string()))?;
            let n: usize = n
                .trim()
                .parse()
                .map_err(|_| bad(format!("{n:?} is not a count")))?;
            if n == 0 || lo == 0 || hi < lo {
                return Err(bad("need 0 < LO ≤ HI and N ≥ 1".into()));
            }
            for i in 0..n {
                let f = if n == 1 {
                    0.0
                } else {
                    i as f64 / (n - 1) as f64
                };
                let b = (lo as f64) * (hi as f64 / lo as f64).powf(f);
                v.push(b.round() as u64);
            }
        } else {
            for part in s.split(',').filter(|p| !p.trim().is_empty()) {
                v.push(parse_size(part.trim()).map_err(|e| bad(e.to_string()))?);
            }
        }
    }
    v.sort_unstable();
    v.dedup();
    if v.is_empty() {
        return Err(usage("give --budget SIZE or --budgets LIST"));
    }
    Ok(v)
}

/// Runs `memdial simulate`.
pub fn run(a: &SimulateArgs) -> Result<ExitCode> {
    let t0 = Instant::now();
    let policies = a
        .cache
        .split(',')
        .filter(|s| !s.trim().is_empty())
        .map(|s| SimPolicy::parse(s.trim()).map_err(anyhow::Error::from))
        .collect::<Result<Vec<_>>>()?;
    if policies.is_empty() {
        return Err(usage("--cache names no policy"));
    }
    let budgets = parse_budgets(&a.budget, a.budgets.as_deref())?;
    let compute = compute_time(a.compute_s_per_token, a.resident_metrics.as_deref())?;
    let share = expert_share(a.resident_metrics.as_deref())?;
    let compute = compute.map(|c| (c, share));
    let src = source_of(a.model.as_deref(), a.config.as_deref(), a.preset.as_deref())?;
    let (cfg, ck) = (&src.cfg, &src.ck);
    let bw = read_rates(a, cfg)?;
    if ck.lossless.is_some() {
        return Err(usage(
            "the simulator models safetensors layouts; a lossless pack reads coded blocks \
             (replay against the unpacked checkpoint and scale by the pack's ratio)",
        ));
    }
    let t = trace::read_full(&a.trace)?;
    let what = format!("trace {}", a.trace.display());
    let r = Replayable::new(&t, cfg, &what).map_err(|e| usage(format!("{e:#}")))?;
    let (io, prefetch) = (a.policy.io.0, a.policy.prefetch.0);
    if prefetch == Prefetch::Lookahead && !r.has_predictions() {
        return Err(usage(format!(
            "{what} has no look-ahead guesses (\"predicted\"): record it with \
             `memdial run --prefetch lookahead --record-trace`, or simulate another --prefetch"
        )));
    }
    let rec_plan = r.header.plan.as_ref();
    let max_context = a
        .max_context
        .or(rec_plan.map(|p| p.max_context))
        .unwrap_or(r.header.prompt_tokens + r.decode_tokens() + 1);
    let threads = a.threads.or(rec_plan.map(|p| p.threads)).unwrap_or(1);
    let mut act = Scratch::activations(cfg, Sequences::single(max_context), threads);
    let speculate = speculation(a)?;
    if let Some(s) = speculate {
        act.bytes += memdial::engine::speculate::speculation_bytes(
            cfg,
            act.step_tokens,
            act.threads,
            max_context,
            s.draft_tokens,
        );
    }
    let p0 = plan_unchecked(cfg, ck, 0, io, prefetch, act)?;
    let emb = embedding_rows(cfg, ck, &p0)?;
    let hot_prefix = a.hot_prefix_tokens.unwrap_or(r.header.prompt_tokens);
    let warm = a.start == StartMode::Warm;
    let mut rows = Vec::new();
    for &b in &budgets {
        let plan = p0.with_budget(cfg, b);
        for &pol in &policies {
            let opts = SimOptions {
                policy: pol,
                warm,
                hot_prefix_tokens: hot_prefix,
                speculate,
            };
            let rep = if b < plan.floor_bytes {
                None
            } else {
                Some(replay(&plan, cfg, &r, emb, &opts)?)
            };
            rows.push(row(&plan, a, pol, rep.as_ref(), bw.as_ref(), compute));
        }
    }
    let elapsed = t0.elapsed().as_secs_f64();
    match a.output.as_str() {
        "csv" => print!("{}", String::from_utf8(csv_bytes(&rows)?)?),
        "json" => println!("{}", serde_json::to_string_pretty(&rows)?),
        _ => {
            let what = match speculate {
                Some(s) => format!(
                    "{what}, decode replayed as speculation (K = {}, {} accepted per pass)",
                    s.draft_tokens, s.accepted
                ),
                None => what,
            };
            print!("{}", text_table(&rows, cfg, &src.paper, &what, elapsed))
        }
    }
    if let Some(dir) = &a.out {
        std::fs::create_dir_all(dir)
            .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", dir.display()))?;
        crate::export::write_table(dir, &rows, &csv_bytes(&rows)?)?;
        let title = format!(
            "simulated: {} · io {} · prefetch {} · {} start",
            a.trace.file_name().unwrap_or_default().to_string_lossy(),
            io.as_str(),
            prefetch.as_str(),
            a.start.as_str()
        );
        crate::export::write_chart(
            dir,
            "simulate",
            (1100, 520),
            &SimChart { rows: &rows, title },
        )?;
        eprintln!(
            "wrote {} (results.csv, results.json, simulate.svg, simulate.png)",
            dir.display()
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `--speculate` with `--mean-accepted-length` as the replay's passes; both or neither.
///
/// Errors (usage): one without the other; L outside 0 ..= K.
fn speculation(a: &SimulateArgs) -> Result<Option<Speculation>> {
    let k = a.speculate.k();
    match (k, a.mean_accepted_length) {
        (0, None) => Ok(None),
        (0, Some(_)) => Err(usage(
            "--mean-accepted-length needs --speculate ngram:K or replay:FILE:K",
        )),
        (_, None) => Err(usage(
            "--speculate needs --mean-accepted-length L (drafts accepted per pass, 0..=K): \
             a plain trace does not say how many drafts a run would accept",
        )),
        (k, Some(l)) if l.is_finite() && (0.0..=k as f64).contains(&l) => Ok(Some(Speculation {
            draft_tokens: k,
            accepted: l,
        })),
        (k, Some(l)) => Err(usage(format!(
            "--mean-accepted-length {l} is outside 0..={k} (the drafts per pass)"
        ))),
    }
}

fn per_token(v: u64, n: usize) -> Option<f64> {
    (n > 0).then(|| v as f64 / n as f64)
}

/// The trunk and expert read rates, GB/s, from `--device-gbps` or `--iobench` (`None`
/// without either); notes on stderr where they come from, and that s/token is
/// unpredicted under `buffered` / `mmap`.
///
/// Errors (usage): a non-positive `--device-gbps`; an iobench report without a cell.
fn read_rates(
    a: &SimulateArgs,
    cfg: &memdial::format::config::ModelConfig,
) -> Result<Option<Rates>> {
    let bw = match (a.device_gbps, &a.iobench) {
        (Some(g), _) if g.is_finite() && g > 0.0 => Some(Rates {
            trunk_gbps: g,
            expert_gbps: g,
            expert_batch_gbps: Vec::new(),
            source: "--device-gbps".into(),
        }),
        (Some(g), _) => return Err(usage(format!("--device-gbps {g} is not positive"))),
        (None, Some(dir)) => {
            let top_k = cfg.routed_experts().map_or(1, |(_, k)| k.max(1));
            let threads = crate::store_flags::DEFAULT_IO_THREADS;
            let r = iobench_rates(dir, a.policy.io.0, top_k, threads)?;
            eprintln!("read rates: {}", r.source);
            Some(r)
        }
        (None, None) => None,
    };
    if bw.is_some() && a.policy.prefetch.0 == Prefetch::Lookahead {
        eprintln!("s/token: lookahead's guessed reads are credited no overlap beyond next-layer's");
    }
    if bw.is_some() && !crate::planning::compute::predicted_io(a.policy.io.0) {
        eprintln!(
            "s/token: unpredicted under --io {} (the time model has no page cache)",
            a.policy.io.0.as_str()
        );
    }
    Ok(bw)
}

fn row(
    plan: &Plan,
    a: &SimulateArgs,
    pol: SimPolicy,
    rep: Option<&SimReport>,
    bw: Option<&Rates>,
    compute: Option<(f64, f64)>,
) -> SimRow {
    let n = rep.map_or(0, |r| r.decode_tokens);
    let d = rep.map(|r| &r.decode);
    let bpt = d.and_then(|d| per_token(d.bytes_read, n));
    let io_ok = crate::planning::compute::predicted_io(a.policy.io.0);
    let predicted = d
        .zip(bw.filter(|_| io_ok))
        .zip(compute)
        .and_then(|((d, r), (c, s))| {
            let m = time_model(r, c, s);
            DecodeBytes::per_token(d, n).and_then(|mut b| {
                b.streamed_compute_share = Some(memdial::store::rank::streamed_compute_share(plan));
                predict(&b, a.policy.prefetch.0, &m)
            })
        });
    let io_s = predicted.map(|p| p.io_s_per_token);
    SimRow {
        budget_bytes: plan.budget_bytes,
        below_floor: rep.is_none(),
        floor_bytes: plan.floor_bytes,
        policy: pol.as_str().into(),
        io: a.policy.io.0.as_str().into(),
        prefetch: a.policy.prefetch.0.as_str().into(),
        start: a.start.as_str().into(),
        expert_cache_experts: plan.expert_cache_experts,
        pinned_groups: plan.pinned_groups,
        embedding_pinned: plan.embedding_pinned,
        decode_tokens: n,
        bytes_per_token: bpt,
        trunk_bytes_per_token: d
            .and_then(|d| per_token(d.trunk_bytes_read - d.lm_head_bytes_read, n)),
        expert_bytes_per_token: d.and_then(|d| per_token(d.expert_bytes_read, n)),
        embedding_bytes_per_token: d.and_then(|d| per_token(d.embedding_bytes_read, n)),
        lm_head_bytes_per_token: d.and_then(|d| per_token(d.lm_head_bytes_read, n)),
        trunk_hit_rate: rep.map(|r| r.total.hits().trunk_hit_rate()),
        expert_hit_rate: rep.map(|r| r.total.hits().expert_hit_rate()),
        decode_expert_hit_rate: d.map(|d| d.hits().expert_hit_rate()),
        lookahead_precision: rep.and_then(|r| r.total.hits().lookahead_precision()),
        lookahead_recall: rep.and_then(|r| r.total.hits().lookahead_recall()),
        prefill_bytes_read: rep.map(|r| r.prefill.bytes_read),
        bytes_read_after_open: rep.map(|r| r.total.bytes_read),
        prefill_expert_fetches: rep.map(|r| r.prefill.prefill_expert_fetches),
        warm_fill_bytes: rep.map(|r| r.warm_fill_bytes),
        hot_set_bytes: rep.map(|r| r.hot_set_bytes),
        budget_overflows: rep.map(|r| r.total.budget_overflows),
        predicted_io_s_per_token: io_s,
        predicted_s_per_token: predicted.map(|p| p.s_per_token),
    }
}

fn csv_bytes(rows: &[SimRow]) -> Result<Vec<u8>> {
    let mut w = csv::Writer::from_writer(Vec::new());
    w.write_record(CSV_COLUMNS)?;
    let f = |v: Option<f64>| v.map(|x| format!("{x}")).unwrap_or_default();
    let u = |v: Option<u64>| v.map(|x| x.to_string()).unwrap_or_default();
    for r in rows {
        let bound = (r.policy == "belady").to_string();
        w.write_record([
            r.budget_bytes.to_string(),
            r.below_floor.to_string(),
            r.floor_bytes.to_string(),
            r.policy.clone(),
            r.io.clone(),
            r.prefetch.clone(),
            r.start.clone(),
            r.expert_cache_experts.to_string(),
            r.pinned_groups.to_string(),
            r.embedding_pinned.to_string(),
            r.decode_tokens.to_string(),
            f(r.bytes_per_token),
            f(r.trunk_bytes_per_token),
            f(r.expert_bytes_per_token),
            f(r.embedding_bytes_per_token),
            f(r.lm_head_bytes_per_token),
            f(r.trunk_hit_rate),
            f(r.expert_hit_rate),
            f(r.decode_expert_hit_rate),
            f(r.lookahead_precision),
            f(r.lookahead_recall),
            u(r.prefill_bytes_read),
            u(r.bytes_read_after_open),
            u(r.prefill_expert_fetches),
            u(r.warm_fill_bytes),
            u(r.hot_set_bytes),
            u(r.budget_overflows),
            f(r.predicted_io_s_per_token),
            f(r.predicted_s_per_token),
            bound,
        ])?;
    }
    Ok(w.into_inner()?)
}

fn text_table(
    rows: &[SimRow],
    cfg: &memdial::format::config::ModelConfig,
    paper: &Option<String>,
    what: &str,
    elapsed: f64,
) -> String {
    use memdial::util::units::fmt_bytes;
    // The decode tokens of the replays that ran (a budget below the floor replays none).
    let tokens = match rows.iter().find(|r| !r.below_floor) {
        Some(r) => format!("{} decode tokens", r.decode_tokens),
        None => "nothing replayed (every budget is below the floor)".to_string(),
    };
    let mut s = format!(
        "{what}: {tokens}, model {} ({} layers){}\n",
        cfg.model_type,
        cfg.num_hidden_layers,
        paper
            .as_ref()
            .map(|p| format!(", planned without weights from {p}"))
            .unwrap_or_default()
    );
    s += &format!(
        "{:>11} {:>7} {:>8} {:>11} {:>10} {:>10} {:>7} {:>7} {:>7} {:>10}\n",
        "budget",
        "policy",
        "experts",
        "B/token",
        "trunk",
        "experts",
        "trunk%",
        "exp%",
        "dec.%",
        "s/token"
    );
    let pct = |v: Option<f64>| v.map_or("-".into(), |x| format!("{:.1}", 100.0 * x));
    let by = |v: Option<f64>| v.map_or("-".into(), |x| fmt_bytes(x.round() as u64));
    for r in rows {
        if r.below_floor {
            s += &format!(
                "{:>11} {:>7} below the floor of {}\n",
                fmt_bytes(r.budget_bytes),
                r.policy,
                fmt_bytes(r.floor_bytes)
            );
            continue;
        }
        s += &format!(
            "{:>11} {:>7} {:>8} {:>11} {:>10} {:>10} {:>7} {:>7} {:>7} {:>10}\n",
            fmt_bytes(r.budget_bytes),
            r.policy,
            r.expert_cache_experts,
            by(r.bytes_per_token),
            by(r.trunk_bytes_per_token),
            by(r.expert_bytes_per_token),
            pct(r.trunk_hit_rate),
            pct(r.expert_hit_rate),
            pct(r.decode_expert_hit_rate),
            r.predicted_s_per_token
                .map_or("-".into(), |x| format!("{x:.4}"))
        );
    }
    s += &format!(
        "({} replays in {elapsed:.2} s; belady is the offline optimum, an upper bound no policy reaches)\n",
        rows.iter().filter(|r| !r.below_floor).count()
    );
    s
}

/// Expert hit rate (left) and predicted s/token (right, when known) against budget,
/// one line per policy.
struct SimChart<'a> {
    rows: &'a [SimRow],
    title: String,
}

impl crate::export::Chart for SimChart<'_> {
    fn draw<DB: DrawingBackend>(&self, root: DrawingArea<DB, Shift>) -> Result<()>
    where
        DB::ErrorType: 'static,
    {
        root.fill(&WHITE).map_err(pe)?;
        let root = root.titled(&self.title, ("sans-serif", 20)).map_err(pe)?;
        let ok: Vec<&SimRow> = self.rows.iter().filter(|r| !r.below_floor).collect();
        let xs: Vec<f64> = ok.iter().map(|r| r.budget_bytes as f64).collect();
        let (x0, x1) = match (
            xs.iter().copied().reduce(f64::min),
            xs.iter().copied().reduce(f64::max),
        ) {
            (Some(a), Some(b)) if b > a => (a / 1.1, b * 1.1),
            (Some(a), _) => (a / 2.0, a * 2.0),
            _ => (1.0, 2.0),
        };
        let mut policies: Vec<String> = ok.iter().map(|r| r.policy.clone()).collect();
        policies.dedup();
        policies.sort();
        policies.dedup();
        let has_s = ok.iter().any(|r| r.predicted_s_per_token.is_some());
        let panels = root.split_evenly((1, if has_s { 2 } else { 1 }));
        type Get = fn(&SimRow) -> Option<f64>;
        let metrics: [(&str, Get); 2] = [
            ("expert hit rate, decode (%)", |r| {
                r.decode_expert_hit_rate.map(|v| 100.0 * v)
            }),
            ("predicted s/token", |r| r.predicted_s_per_token),
        ];
        for (area, (desc, get)) in panels.iter().zip(metrics) {
            let ys: Vec<f64> = ok.iter().filter_map(|r| get(r)).collect();
            let y1 = ys.iter().copied().fold(0.0, f64::max).max(1e-9) * 1.08;
            let frame = BudgetFrame {
                y_desc: desc,
                ..BudgetFrame::SMALL
            };
            let mut chart = budget_panel(area, (x0, x1), 0.0..y1, &frame)?;
            for (i, p) in policies.iter().enumerate() {
                let c = COLORS[i % COLORS.len()];
                let line: Vec<(f64, f64)> = ok
                    .iter()
                    .filter(|r| &r.policy == p)
                    .filter_map(|r| get(r).map(|y| (r.budget_bytes as f64, y)))
                    .collect();
                chart
                    .draw_series(LineSeries::new(line, c.stroke_width(2)))
                    .map_err(pe)?
                    .label(p.clone())
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 22, y)], c.stroke_width(2))
                    });
            }
            legend(&mut chart, 13)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_lists_and_ranges() {
        assert_eq!(
            parse_budgets(&[], Some("2KiB,1KiB,2KiB")).unwrap(),
            vec![1024, 2048]
        );
        let v = parse_budgets(&[], Some("1KiB..16KiB:5")).unwrap();
        assert_eq!(v, vec![1024, 2048, 4096, 8192, 16384]);
        assert!(parse_budgets(&[], Some("1KiB..16KiB")).is_err());
        assert!(parse_budgets(&[], None).is_err());
    }
}
