//! Fixture generation with a progress bar, shared by `memdial fixture` and `memdial sweep`.

use anyhow::Result;
use indicatif::{ProgressBar, ProgressStyle};
use memdial::tools::fixture;

/// Generates a preset with an indicatif progress bar on stderr (hidden when stderr
/// is not a terminal). Used by `memdial sweep` for its default model.
pub fn generate_with_progress(
    preset: &str,
    seed: u64,
    out: &std::path::Path,
    force: bool,
) -> Result<memdial::tools::fixture::Generated> {
    generate_inner(preset, seed, out, force, None)
}

/// [`generate_with_progress`] with an optional routing override (`memdial fixture`).
pub fn generate_inner(
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
