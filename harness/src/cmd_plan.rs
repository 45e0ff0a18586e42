//! `memdial plan --model DIR --budget SIZE [--max-context N]`: the allocation of a budget.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use memdial::config::{AttnKind, ModelConfig};
use memdial::io::IoMode;
use memdial::loader::Checkpointed;
use memdial::store::plan::{parse_size, plan_unchecked, Plan, Prefetch};
use memdial::units::fmt_bytes;

use crate::args::{IoArg, PrefetchArg};

/// Arguments of `memdial plan`.
#[derive(clap::Args)]
pub struct PlanArgs {
    /// Checkpoint directory.
    #[arg(long)]
    pub model: PathBuf,
    /// Memory budget, e.g. 512MiB, 2GiB, 8GB (decimal units are powers of 1000).
    #[arg(long, value_parser = parse_size)]
    pub budget: u64,
    /// Positions the MLA latent cache must hold.
    #[arg(long, default_value_t = 4096)]
    pub max_context: usize,
    /// IO mode (direct adds alignment slack).
    #[arg(long, value_enum, default_value_t = IoArg(IoMode::Direct))]
    pub io: IoArg,
    /// Prefetch policy (prefetch needs more slots).
    #[arg(long, value_enum, default_value_t = PrefetchArg(Prefetch::None))]
    pub prefetch: PrefetchArg,
    /// Print the plan as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: &PlanArgs) -> Result<ExitCode> {
    let (budget, io, prefetch) = (a.budget, a.io.0, a.prefetch.0);
    let c = Checkpointed::read(&a.model)?;
    let (cfg, ck) = (&c.cfg, &c.ck);
    let p = plan_unchecked(cfg, ck, budget, io, prefetch, a.max_context)?;
    let below = budget < p.floor_bytes;
    if a.json {
        let mut v = serde_json::to_value(&p)?;
        v["below_floor"] = serde_json::Value::Bool(below);
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        print!("{}", describe(&p, cfg));
    }
    if below {
        // Same refusal as `memdial run` (a usage error: exit 2).
        memdial::store::plan::plan(cfg, ck, budget, io, prefetch, a.max_context)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Human-readable plan (what `memdial plan` prints).
fn describe(p: &Plan, cfg: &ModelConfig) -> String {
    let mut s = String::new();
    let line = |s: &mut String, k: &str, v: String| s.push_str(&format!("{k:<26}{v}\n"));
    line(
        &mut s,
        "budget",
        format!("{} ({} bytes)", fmt_bytes(p.budget_bytes), p.budget_bytes),
    );
    line(&mut s, "model", fmt_bytes(p.model_bytes));
    line(
        &mut s,
        "io / prefetch",
        format!("{} / {}", p.io.as_str(), p.prefetch.as_str()),
    );
    line(
        &mut s,
        "floor",
        format!("{} ({} bytes)", fmt_bytes(p.floor_bytes), p.floor_bytes),
    );
    line(
        &mut s,
        "pinned globals",
        format!(
            "{} (embeddings, lm_head, final norms)",
            fmt_bytes(p.pinned_global_bytes)
        ),
    );
    line(
        &mut s,
        "pinned per-layer small",
        format!(
            "{} (norms, routers, gate params, conv)",
            fmt_bytes(p.pinned_small_bytes)
        ),
    );
    let (kda, mla) = cfg.layer_counts();
    line(
        &mut s,
        "pinned trunk prefix",
        format!(
            "{} of {} layers ({} KDA + {} MLA in model), {}",
            p.pinned_layers,
            cfg.num_hidden_layers,
            kda,
            mla,
            fmt_bytes(p.pinned_trunk_bytes)
        ),
    );
    line(
        &mut s,
        "rotating trunk slots",
        format!("{} × {}", p.trunk_slots, fmt_bytes(p.slot_bytes)),
    );
    line(
        &mut s,
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
        &mut s,
        "state",
        format!(
            "{} (KDA states + MLA latents for {} positions)",
            fmt_bytes(p.state_bytes),
            p.max_context
        ),
    );
    line(
        &mut s,
        "activations",
        format!(
            "{} (the model's scratch arena for {}-token forwards)",
            fmt_bytes(p.activation_bytes),
            memdial::store::plan::planned_prefill_chunk(p.max_context)
        ),
    );
    line(&mut s, "unused", fmt_bytes(p.unused_bytes));
    line(
        &mut s,
        "trunk hit rate (pred.)",
        format!(
            "{:.1}% of {} streamed trunk bytes per token",
            100.0 * p.predicted_trunk_hit_rate,
            fmt_bytes(p.trunk_bytes_per_token)
        ),
    );
    line(
        &mut s,
        "expert hit rate (pred.)",
        format!(
            "{:.1}% if routing were uniform",
            100.0 * p.predicted_expert_hit_rate_uniform
        ),
    );
    if cfg.attn_kinds.contains(&AttnKind::Mla) {
        line(
            &mut s,
            "MLA cache / position",
            format!("{} bytes per MLA layer", cfg.mla_cache_bytes_per_position()),
        );
    }
    s
}
