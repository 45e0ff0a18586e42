//! `memdial fixture --preset NAME --out DIR [--seed N] [--routing SPEC]`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::Result;
use indicatif::{ProgressBar, ProgressStyle};
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
    let g = generate_inner(&a.preset, a.seed, &a.out, a.force, routing)?;
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

/// Generates a preset with an indicatif progress bar on stderr (hidden when stderr
/// is not a terminal). Shared by `memdial fixture` and `memdial sweep`.
pub fn generate_with_progress(
    preset: &str,
    seed: u64,
    out: &std::path::Path,
    force: bool,
) -> Result<memdial::tools::fixture::Generated> {
    generate_inner(preset, seed, out, force, None)
}

fn generate_inner(
    preset: &str,
    seed: u64,
    out: &std::path::Path,
    force: bool,
    routing: Option<fixture::Routing>,
) -> Result<memdial::tools::fixture::Generated> {
    let pb = ProgressBar::new(0);
    pb.set_style(
        ProgressStyle::with_template(
            "{msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
        )
        .expect("valid template")
        .progress_chars("=> "),
    );
    pb.set_message(format!("fixture {preset}"));
    let g = fixture::generate_shaped(
        preset,
        seed,
        out,
        force,
        Some(fixture::write_tokenizer),
        routing,
        &mut |d, t| {
            pb.set_length(t);
            pb.set_position(d);
        },
    )?;
    pb.finish_and_clear();
    Ok(g)
}
