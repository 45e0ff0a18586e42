//! `memdial plan --model DIR --budget SIZE [--max-context N]`: the allocation of a budget.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use memdial::checkpoint::Checkpoint;
use memdial::config::load_config;
use memdial::io::IoMode;
use memdial::store::plan::{describe, parse_size, plan_unchecked, Prefetch};

/// Arguments of `memdial plan`.
#[derive(clap::Args)]
pub struct PlanArgs {
    /// Checkpoint directory.
    #[arg(long)]
    pub model: PathBuf,
    /// Memory budget, e.g. 512MiB, 2GiB, 8GB (decimal units are powers of 1000).
    #[arg(long)]
    pub budget: String,
    /// Positions the MLA latent cache must hold.
    #[arg(long, default_value_t = 4096)]
    pub max_context: usize,
    /// IO mode: direct, buffered, mmap (direct adds alignment slack).
    #[arg(long, default_value = "direct")]
    pub io: String,
    /// Prefetch policy: none, next-layer, lookahead, oracle (prefetch needs more slots).
    #[arg(long, default_value = "none")]
    pub prefetch: String,
    /// Print the plan as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: &PlanArgs) -> Result<ExitCode> {
    let (budget, io, prefetch) = match (
        parse_size(&a.budget),
        IoMode::parse(&a.io),
        Prefetch::parse(&a.prefetch),
    ) {
        (Ok(b), Ok(i), Ok(p)) => (b, i, p),
        (b, i, p) => {
            for e in [b.err(), i.err(), p.err()].into_iter().flatten() {
                eprintln!("error: {e:#}");
            }
            return Ok(ExitCode::from(2));
        }
    };
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
        // Same refusal text as `memdial run`.
        let err =
            memdial::store::plan::plan(&cfg, &ck, budget, io, prefetch, a.max_context).unwrap_err();
        eprintln!("error: {err:#}");
        return Ok(ExitCode::from(2));
    }
    Ok(ExitCode::SUCCESS)
}
