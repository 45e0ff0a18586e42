//! `memdial plan --model DIR --budget SIZE [--max-context N]`: the allocation of a budget.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use memdial::checkpoint::Checkpoint;
use memdial::config::load_config;
use memdial::io::IoMode;
use memdial::store::plan::{describe, parse_size, plan_unchecked, Prefetch};

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
    let cfg = load_config(&a.model)?;
    let ck = Checkpoint::open(&a.model)?;
    let p = plan_unchecked(&cfg, &ck, budget, io, prefetch, a.max_context)?;
    let below = budget < p.floor_bytes;
    if a.json {
        let mut v = serde_json::to_value(&p)?;
        v["below_floor"] = serde_json::Value::Bool(below);
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        print!("{}", describe(&p, &cfg));
    }
    if below {
        // Same refusal as `memdial run` (a usage error: exit 2).
        memdial::store::plan::plan(&cfg, &ck, budget, io, prefetch, a.max_context)?;
    }
    Ok(ExitCode::SUCCESS)
}
