//! `memdial fixture --preset NAME --out DIR [--seed N] [--routing SPEC]`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::Result;
use memdial::tools::fixture::{self, PRESET_NAMES};
use memdial::util::error::UsageError;

/// Arguments of `memdial fixture`.
#[derive(clap::Args)]
pub struct FixtureArgs {
    /// Preset: tiny-k3, tiny-linear, mini, mini-routed, k3-slice, gpt-oss-tiny.
    #[arg(long)]
    pub preset: String,
    /// Output checkpoint directory (must not exist unless --force).
    #[arg(long)]
    pub out: PathBuf,
    /// Seed of the weight generator (same preset + seed = same bytes).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Replace an existing directory (atomically, after the new one is complete).
    #[arg(long)]
    pub force: bool,
    /// Shape the weights so the model's own routing looks like a trained model's:
    /// `key=value` pairs (clusters, noise, gain, align, skew, attn, update; docs/simulate.md)
    /// over the preset's shaping, or over mini-routed's for presets without one.
    #[arg(long, value_name = "SPEC")]
    pub routing: Option<String>,
}

pub fn run(a: &FixtureArgs) -> Result<ExitCode> {
    let Some(p) = fixture::preset(&a.preset) else {
        return Err(UsageError::unknown("preset", &a.preset, &PRESET_NAMES).into());
    };
    let routing = match &a.routing {
        Some(spec) => Some(
            p.routing
                .unwrap_or(fixture::presets::MINI_ROUTED)
                .with_overrides(spec)
                .map_err(|e| UsageError::Invalid(format!("--routing: {e}")))?,
        ),
        None => None,
    };
    let t0 = Instant::now();
    let g = crate::fixture_progress::generate_inner(&a.preset, a.seed, &a.out, a.force, routing)?;
    println!(
        "wrote {} ({} tensors, {} shards, {:.1} MB of tensor data) in {:.1} s",
        g.dir.display(),
        g.tensors,
        g.shards,
        g.tensor_bytes as f64 / 1e6,
        t0.elapsed().as_secs_f64()
    );
    Ok(ExitCode::SUCCESS)
}
