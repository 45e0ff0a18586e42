//! `memdial plan (--model DIR | --config FILE | --preset NAME) [--budget SIZE]`: the
//! allocation of a budget, what each pinned byte saves, and the bytes (and, with a
//! device bandwidth, the IO lower bound of seconds) per token at a ladder of budgets.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use memdial::engine::arena::Scratch;
use memdial::format::config::{AttnKind, ModelConfig};
use memdial::store::plan::{plan_unchecked, Plan, Prefetch, Sequences};
use memdial::store::rank::{
    decode_bytes_uniform, predict_speculation, ranking, SpeculationPrediction,
};
use memdial::store::sim::predict::{predict, DecodeBytes, TimeModel};
use memdial::util::budget::parse_size;
use memdial::util::error::UsageError;
use memdial::util::units::fmt_bytes;

use crate::planning::floor_for;
use crate::planning::rates::{iobench_gbps, iobench_rates, Rates};
use crate::planning::source::source_of;
use crate::store_flags::IoFlags;

/// Arguments of `memdial plan`.
#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("source").required(true).args(["model", "config", "preset"])))]
pub struct PlanArgs {
    /// Checkpoint directory.
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// A config.json to plan without weights (sizes derived from the config).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// A shipped config of a published model: k3 | kimi-linear-48b | gpt-oss-20b | gpt-oss-120b.
    #[arg(long, value_parser = ["k3", "kimi-linear-48b", "gpt-oss-20b", "gpt-oss-120b"])]
    pub preset: Option<String>,
    /// Memory budget, e.g. 512MiB, 2GiB, 8GB (decimal units are powers of 1000); default: the floor.
    #[arg(long, value_parser = parse_size)]
    pub budget: Option<u64>,
    /// Positions the MLA latent cache must hold (per sequence) [default: 4096].
    /// `memdial run` sizes it for prompt + --max-tokens unless given --max-context,
    /// so compare floors with the same --max-context.
    #[arg(long)]
    pub max_context: Option<usize>,
    /// Sequences decoded together at most: the plan holds a state of --max-context
    /// positions for each and a shared activation arena for the batch.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=65536))]
    pub max_batch: u64,
    /// The run's `--speculate` (`off`, `ngram:K`, `replay:FILE:K`; only K matters here):
    /// the plan also holds the restore point and the K more logit rows of a
    /// verification pass (docs/speculation.md). Single sequences only.
    #[arg(long, default_value = "off", value_parser = crate::args::speculate)]
    pub speculate: memdial::engine::speculate::Speculate,
    /// Drafts accepted per verification pass on average (a run's `mean_accepted_length`,
    /// 0 ..= K): predict bytes per generated token under `--speculate` (every pass drafts
    /// K, uniform routing; docs/speculation.md). Needs `--speculate` with K ≥ 1.
    #[arg(long, requires = "speculate")]
    pub mean_accepted_length: Option<f64>,
    /// Kernel threads of the run (the activation arena holds a kernel workspace region per thread).
    #[arg(long, default_value_t = 1, value_parser = crate::args::thread_count)]
    pub threads: usize,
    /// IO mode (direct adds alignment slack) and prefetch policy (prefetch needs more slots).
    #[command(flatten)]
    pub policy: IoFlags,
    /// Device read bandwidth in GB/s (10⁹ bytes/s): print the IO lower bound of s/token.
    #[arg(long, conflicts_with = "iobench")]
    pub device_gbps: Option<f64>,
    /// A `memdial iobench` report directory: its cold `trunk` qd 1 and `experts:K` qd 4
    /// cells give the trunk and expert read rates (else its best cold cell both).
    #[arg(long)]
    pub iobench: Option<PathBuf>,
    /// Compute seconds per decoded token with every weight resident (a resident run's
    /// median; default 0: the prediction is then the IO time the policy cannot hide).
    #[arg(long)]
    pub compute_s_per_token: Option<f64>,
    /// Print the plan as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: &PlanArgs) -> Result<ExitCode> {
    let (io, prefetch) = (a.policy.io.0, a.policy.prefetch.0);
    let src = source_of(a.model.as_deref(), a.config.as_deref(), a.preset.as_deref())?;
    let (cfg, ck) = (&src.cfg, &src.ck);
    let seqs = Sequences {
        max_context: a.max_context.unwrap_or(DEFAULT_MAX_CONTEXT),
        max_batch: a.max_batch as usize,
    };
    let mut act = Scratch::activations(cfg, seqs, a.threads);
    let plain0 = plan_unchecked(cfg, ck, 0, io, prefetch, act)?;
    let k = a.speculate.k();
    if k > 0 && a.max_batch > 1 {
        return Err(crate::args::usage(
            "--speculate plans a single sequence: give it without --max-batch",
        ));
    }
    act.bytes += memdial::engine::speculate::speculation_bytes(
        cfg,
        act.step_tokens,
        act.threads,
        seqs.max_context,
        k,
    );
    let p0 = plan_unchecked(cfg, ck, 0, io, prefetch, act)?;
    let budget = a.budget.unwrap_or(p0.floor_bytes);
    let p = p0.with_budget(cfg, budget);
    let below = budget < p.floor_bytes;
    if below && !a.json {
        // The refusal first and alone, as `memdial run` gives it (a usage error: exit 2);
        // `--json` still prints the plan with `below_floor` for scripts.
        memdial::store::plan::plan(cfg, ck, budget, io, prefetch, act)
            .context("planning the budget")?;
    }
    let bw = match (a.device_gbps, &a.iobench) {
        (Some(g), _) if g.is_finite() && g > 0.0 => Some((g, "--device-gbps".to_string())),
        (Some(g), _) => {
            return Err(
                UsageError::Invalid(format!("device bandwidth {g} GB/s is not positive")).into(),
            )
        }
        (None, Some(dir)) => Some(iobench_gbps(dir, io)?),
        (None, None) => None,
    };
    let timing = time_model(a, cfg)?;
    let spec = a
        .mean_accepted_length
        .map(|l| predict_speculation(&p, &plain0.with_budget(cfg, budget), cfg, k, l))
        .transpose()?;
    let ladder = ladder(cfg, &p, spec.map(|s| (&plain0, k, s.mean_accepted_length)))?;
    if a.json {
        let mut v = serde_json::to_value(&p)?;
        v["below_floor"] = serde_json::Value::Bool(below);
        v["paper"] = serde_json::to_value(&src.paper)?;
        v["max_context_default"] = serde_json::Value::Bool(a.max_context.is_none());
        v["ranking"] = serde_json::to_value(ranking(&p, cfg))?;
        v["speculation"] = serde_json::to_value(spec)?;
        v["ladder"] = serde_json::Value::Array(
            ladder
                .iter()
                .map(|r| {
                    serde_json::json!({
                        "budget_bytes": r.budget, "bytes_per_token": r.plain,
                        "io_s_per_token": bw.as_ref().map(|(g, _)| r.plain as f64 / (g * 1e9)),
                        "speculative_bytes_per_token": r.speculative,
                        "speculative_io_s_per_token": r.speculative
                            .and_then(|b| bw.as_ref().map(|(g, _)| b as f64 / (g * 1e9))),
                        "predicted_s_per_token": timing.as_ref()
                            .and_then(|t| predict(&r.bytes, prefetch, &t.model))
                            .map(|x| x.s_per_token),
                    })
                })
                .collect(),
        );
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        if let Some(what) = &src.paper {
            println!(
                "source                    {what}: config only, no weights read; tensor sizes and dtypes \
                 derived from config.json + quantization_config, layout assumed packed in schema order"
            );
        }
        print!("{}", describe(&p, cfg, a.max_context.is_none()));
        if let Some(sp) = &spec {
            print!("{}", describe_speculation(sp, cfg));
        }
        print!("{}", describe_ranking(&p, cfg));
        print!("{}", describe_ladder(&ladder, bw.as_ref()));
        if let Some(t) = &timing {
            print!("{}", describe_timed(&ladder, t, prefetch));
        }
    }
    if below {
        // Same refusal as `memdial run` (a usage error: exit 2).
        memdial::store::plan::plan(cfg, ck, budget, io, prefetch, act)
            .context("planning the budget")?;
    }
    Ok(ExitCode::SUCCESS)
}

/// One budget of the ladder: bytes read per decoded token plain, and per generated
/// token under speculation when an acceptance length was given.
struct Rung {
    budget: u64,
    plain: u64,
    /// The plain bytes split for the time model.
    bytes: DecodeBytes,
    speculative: Option<u64>,
}

/// Budgets floor, 2×, 4×, … floor up to the first that pins everything, with the
/// predicted bytes read per token at each; the requested budget included. `spec`:
/// the plan without the restore point, K and L of `--speculate` and
/// `--mean-accepted-length`.
fn ladder(cfg: &ModelConfig, p: &Plan, spec: Option<(&Plan, usize, f64)>) -> Result<Vec<Rung>> {
    let mut budgets = vec![p.floor_bytes];
    let all = p.floor_bytes + p.model_bytes;
    while *budgets.last().unwrap() < all {
        budgets.push((budgets.last().unwrap() * 2).min(all));
    }
    if p.budget_bytes >= p.floor_bytes && !budgets.contains(&p.budget_bytes) {
        budgets.push(p.budget_bytes);
        budgets.sort();
    }
    budgets
        .into_iter()
        .map(|b| {
            let q = p.with_budget(cfg, b);
            Ok(match spec {
                Some((plain, k, l)) => {
                    let plain = plain.with_budget(cfg, b);
                    Rung {
                        budget: b,
                        plain: plain.predicted_bytes_per_token,
                        bytes: decode_bytes_uniform(&plain, cfg, 1),
                        speculative: Some(
                            predict_speculation(&q, &plain, cfg, k, l)?.bytes_per_token,
                        ),
                    }
                }
                None => Rung {
                    budget: b,
                    plain: q.predicted_bytes_per_token,
                    bytes: decode_bytes_uniform(&q, cfg, 1),
                    speculative: None,
                },
            })
        })
        .collect()
}

/// The time model `plan` predicts s/token with, and where its figures come from.
struct Timing {
    model: TimeModel,
    source: String,
}

/// The two read rates of `--iobench` (or the one of `--device-gbps`) and
/// `--compute-s-per-token` (default 0); `None` without a rate.
///
/// Errors (usage): a compute time that is not finite and ≥ 0; an unreadable report.
fn time_model(a: &PlanArgs, cfg: &ModelConfig) -> Result<Option<Timing>> {
    let c = a.compute_s_per_token.unwrap_or(0.0);
    if !(c.is_finite() && c >= 0.0) {
        return Err(UsageError::Invalid(format!("--compute-s-per-token {c} is not ≥ 0")).into());
    }
    let compute = match a.compute_s_per_token {
        Some(c) => format!("compute {c:.4} s/token (--compute-s-per-token)"),
        None => "no compute (--compute-s-per-token not given)".into(),
    };
    let rates = match (a.device_gbps, &a.iobench) {
        (Some(g), _) => Rates {
            trunk_gbps: g,
            expert_gbps: g,
            expert_batch_gbps: Vec::new(),
            source: format!("every read at {g:.3} GB/s (--device-gbps)"),
        },
        (None, Some(dir)) => {
            let top_k = cfg.routed_experts().map_or(1, |(_, k)| k.max(1));
            let threads = crate::store_flags::DEFAULT_IO_THREADS;
            iobench_rates(dir, a.policy.io.0, top_k, threads)?
        }
        (None, None) => return Ok(None),
    };
    Ok(Some(Timing {
        // Each layer's expected misses at their batch size's rate, when measured.
        model: crate::planning::rates::time_model(&rates, c, 0.0),
        source: format!("{}; {compute}", rates.source),
    }))
}

/// The ladder timed by the time model (docs/simulate.md, "Predicted s/token").
fn describe_timed(ladder: &[Rung], t: &Timing, prefetch: Prefetch) -> String {
    let mut s = format!(
        "\npredicted s/token (the time model, {} prefetch, uniform routing; {}):\n",
        prefetch.as_str(),
        t.source
    );
    for r in ladder {
        if let Some(x) = predict(&r.bytes, prefetch, &t.model) {
            s.push_str(&format!(
                "  budget {:>12}  {:>9.3} s/token  (IO {:.3} s, of it waited {:.3} s)\n",
                fmt_bytes(r.budget),
                x.s_per_token,
                x.io_s_per_token,
                x.stall_s_per_token
            ));
        }
    }
    s
}

/// The speculation prediction's lines (`--mean-accepted-length`).
fn describe_speculation(sp: &SpeculationPrediction, cfg: &ModelConfig) -> String {
    let mut s = String::new();
    let experts = cfg.routed_experts().map_or(0, |(e, _)| e);
    line(
        &mut s,
        "speculation (pred.)",
        format!(
            "K = {} drafts per pass, {:.2} accepted per pass (every pass drafts K; uniform routing)",
            sp.draft_tokens, sp.mean_accepted_length
        ),
    );
    line(
        &mut s,
        "  per pass",
        format!(
            "{} rows read {} ({:.1} of {experts} experts per MoE layer)",
            sp.draft_tokens + 1,
            fmt_bytes(sp.bytes_per_forward),
            sp.experts_per_layer
        ),
    );
    line(
        &mut s,
        "  per generated token",
        format!(
            "{} ({:.3}× plain decoding's)",
            fmt_bytes(sp.bytes_per_token),
            sp.ratio_to_plain
        ),
    );
    s
}

fn describe_ranking(p: &Plan, cfg: &ModelConfig) -> String {
    let mut s = String::from(
        "\nwhat a pinned byte saves (bytes read per token saved per byte pinned; pinned in this order,\n\
         ties in layer order so the pinned groups are a prefix):\n",
    );
    s.push_str(&format!(
        "  {:<50} {:>7} {:>8} {:>12} {:>10}\n",
        "candidate", "count", "pinned", "size each", "saves/B"
    ));
    for c in ranking(p, cfg) {
        s.push_str(&format!(
            "  {:<50} {:>7} {:>8} {:>12} {:>10.3e}\n",
            c.what,
            c.count,
            c.pinned,
            fmt_bytes(c.bytes_each),
            c.saves_per_byte
        ));
    }
    s
}

fn describe_ladder(ladder: &[Rung], bw: Option<&(f64, String)>) -> String {
    let mut s = String::from("\npredicted bytes read per decoded token (uniform routing)");
    if let Some((g, what)) = bw {
        s.push_str(&format!(" and the IO lower bound at {g:.2} GB/s ({what})"));
    }
    if ladder.iter().any(|r| r.speculative.is_some()) {
        s.push_str("; plain, then per generated token under speculation");
    }
    s.push_str(":\n");
    for r in ladder {
        s.push_str(&format!(
            "  budget {:>12}  {:>12}/token",
            fmt_bytes(r.budget),
            fmt_bytes(r.plain)
        ));
        if let Some((g, _)) = bw {
            s.push_str(&format!("  ≥ {:.3} s/token", r.plain as f64 / (g * 1e9)));
        }
        if let Some(b) = r.speculative {
            s.push_str(&format!("  speculating {:>12}/token", fmt_bytes(b)));
            if let Some((g, _)) = bw {
                s.push_str(&format!("  ≥ {:.3} s/token", b as f64 / (g * 1e9)));
            }
        }
        s.push('\n');
    }
    s
}

/// One `key  value` line of `memdial plan`'s output.
fn line(s: &mut String, k: &str, v: String) {
    s.push_str(&format!("{k:<26} {v}\n"));
}

/// Positions `memdial plan` sizes the MLA cache for without `--max-context`.
pub const DEFAULT_MAX_CONTEXT: usize = 4096;

/// Human-readable plan (what `memdial plan` prints): the budget and what is pinned,
/// the buffers that stream, then the predictions. `default_context`: the positions
/// are plan's default, not `--max-context` (the floor line says so).
fn describe(p: &Plan, cfg: &ModelConfig, default_context: bool) -> String {
    let mut s = String::new();
    describe_pinned(&mut s, p, cfg, default_context);
    describe_streamed(&mut s, p, cfg);
    describe_predicted(&mut s, p, cfg);
    s
}

/// The budget, the floor and what the plan pins.
fn describe_pinned(s: &mut String, p: &Plan, cfg: &ModelConfig, default_context: bool) {
    line(
        s,
        "budget",
        format!("{} ({} bytes)", fmt_bytes(p.budget_bytes), p.budget_bytes),
    );
    line(s, "model", fmt_bytes(p.model_bytes));
    line(
        s,
        "io / prefetch",
        format!("{} / {}", p.io.as_str(), p.prefetch.as_str()),
    );
    line(
        s,
        "floor",
        format!(
            "{} ({} bytes) for {}{}",
            fmt_bytes(p.floor_bytes),
            p.floor_bytes,
            floor_for(p.io, p.prefetch, p.threads, p.max_context, p.max_batch),
            if default_context {
                " (plan's default context; `memdial run` plans prompt + --max-tokens \
                 positions unless given --max-context: pass the same --max-context to compare)"
            } else {
                ""
            }
        ),
    );
    line(
        s,
        "pinned globals",
        format!(
            "{} (final norms{})",
            fmt_bytes(p.pinned_global_bytes),
            if p.embedding_pinned {
                ", embedding table"
            } else {
                ""
            }
        ),
    );
    line(
        s,
        "pinned per-layer small",
        format!(
            "{} (norms, gate params, conv{})",
            fmt_bytes(p.pinned_small_bytes),
            if memdial::store::plan::routers_pinned(p.prefetch) {
                ", routers"
            } else {
                ""
            }
        ),
    );
    let (kda, mla) = cfg.layer_counts();
    line(
        s,
        "pinned trunk prefix",
        format!(
            "{} of {} groups, {} of {} layers whole ({} KDA + {} MLA in model), {}",
            p.pinned_groups,
            p.groups.len(),
            p.pinned_layers,
            cfg.num_hidden_layers,
            kda,
            mla,
            fmt_bytes(p.pinned_trunk_bytes)
        ),
    );
}

/// The buffers that stream (trunk slots, lm_head, expert cache, embedding rows),
/// the state, the activations and what is left unused.
fn describe_streamed(s: &mut String, p: &Plan, cfg: &ModelConfig) {
    let largest = p
        .groups
        .iter()
        .rev()
        .max_by_key(|g| g.read.buffer_bytes)
        .map(|g| {
            if g.layer < cfg.num_hidden_layers {
                format!("layer {} {}", g.layer, g.what)
            } else {
                g.what.clone()
            }
        })
        .unwrap_or_default();
    line(
        s,
        "rotating trunk slots",
        format!(
            "{} × {} (largest group: {largest})",
            p.trunk_slots,
            fmt_bytes(p.slot_bytes)
        ),
    );
    line(
        s,
        "lm_head",
        format!(
            "{} row block(s), streamed with the trunk groups",
            p.lm_head_blocks
        ),
    );
    line(
        s,
        "expert cache",
        format!(
            "{} experts of {} × {} = {}",
            p.expert_cache_experts,
            p.total_experts,
            fmt_bytes(p.expert_buffer_bytes),
            fmt_bytes(p.expert_cache_bytes)
        ),
    );
    line(
        s,
        "embedding rows",
        if p.embedding_pinned {
            format!("table pinned ({})", fmt_bytes(p.embedding_bytes))
        } else {
            format!(
                "on demand: {} reserved (a prefill chunk of {}-byte row reads; table {} not pinned)",
                fmt_bytes(p.embedding_rows_bytes),
                p.embedding_row_buffer_bytes,
                fmt_bytes(p.embedding_bytes)
            )
        },
    );
    let held = if cfg.gpt_oss.is_some() {
        "key/value caches"
    } else {
        "KDA states + MLA latents"
    };
    line(
        s,
        "state",
        if p.max_batch > 1 {
            format!(
                "{} ({} sequences × {}: {held} for {} positions each)",
                fmt_bytes(p.state_bytes),
                p.max_batch,
                fmt_bytes(p.state_bytes_per_sequence),
                p.max_context
            )
        } else {
            format!(
                "{} ({held} for {} positions)",
                fmt_bytes(p.state_bytes),
                p.max_context
            )
        },
    );
    line(
        s,
        "activations",
        format!(
            "{} (the model's scratch arena for {}-token forwards on {} kernel thread(s){})",
            fmt_bytes(p.activation_bytes),
            p.step_tokens(),
            p.threads,
            if p.max_batch > 1 {
                format!(", shared by {} sequences", p.max_batch)
            } else {
                String::new()
            }
        ),
    );
    if p.staging_bytes > 0 {
        line(
            s,
            "staging",
            format!(
                "{} (lossless pack: coded blocks are read here, then decoded into the slots)",
                fmt_bytes(p.staging_bytes)
            ),
        );
    }
    line(s, "unused", fmt_bytes(p.unused_bytes));
}

/// The predicted hit rates and bytes per token.
fn describe_predicted(s: &mut String, p: &Plan, cfg: &ModelConfig) {
    line(
        s,
        "trunk hit rate (pred.)",
        format!(
            "{:.1}% of {} streamed trunk bytes per token (lm_head included)",
            100.0 * p.predicted_trunk_hit_rate,
            fmt_bytes(p.trunk_bytes_per_token)
        ),
    );
    line(
        s,
        "expert hit rate (pred.)",
        format!(
            "{:.1}% if routing were uniform",
            100.0 * p.predicted_expert_hit_rate_uniform
        ),
    );
    line(
        s,
        "bytes read / token (pred.)",
        fmt_bytes(p.predicted_bytes_per_token),
    );
    if cfg.attn_kinds.contains(&AttnKind::Mla) {
        line(
            s,
            "MLA cache / position",
            format!("{} bytes per MLA layer", cfg.mla_cache_bytes_per_position()),
        );
    }
}
