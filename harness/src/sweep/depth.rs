//! The `depth` axis: `memdial run --depth N` per point (docs/run.md#depth), decode
//! timed after N deterministic context tokens (llama-bench's `-d` / `n_depth`).
//!
//! - `0` (the default, and every sweep before the axis): the prompt alone;
//! - `N`: the run prefills N context ids ([`memdial::engine::depth::context_ids`])
//!   before the prompt; its context is N + prompt + `max_tokens` positions.
//!
//! The depth changes the ids, so the verdict compares runs within a depth: it groups
//! by (prompt, depth, max_tokens, engine). A budget relative to the floor resolves
//! against the floor of the spec's deepest point (the MLA latent cache grows with the
//! context; a KDA state does not), so every depth of one budget runs at the same
//! bytes; each point keeps its own floor for the below-floor check. Only memdial
//! takes a depth: other engines' points of depth above 0 are `n/a` (the llama.cpp
//! adapter drives `llama-ids`, not llama-bench), and served points (`concurrency`
//! above 1) are refused with it.

use anyhow::{bail, Result};

use super::axes::Axis;

/// The `depth` axis (spec key `depth = [0, 512]`).
pub struct Depth;

impl Axis for Depth {
    const NAME: &'static str = "depth";
    type Value = u32;
    fn default_value() -> u32 {
        0
    }
}

/// Why engine `memdial == false` cannot run the point: its depth is above 0.
pub fn not_applicable(memdial: bool, d: u32) -> Option<String> {
    (!memdial && d > 0).then(|| format!("depth = {d}: only memdial takes a depth context"))
}

/// Errors: a depth beyond `limit` positions (the spec's bound), a spec `max_context`
/// that cannot hold the deepest context and `max_tokens` (every run of that depth would
/// be refused), or a spec serving concurrent clients (`concurrency` above 1) at a depth.
pub fn check(
    values: &[u32],
    concurrency: &[u32],
    limit: usize,
    (max_context, max_tokens): (Option<usize>, usize),
) -> Result<()> {
    if let Some(d) = values.iter().find(|&&d| d as usize >= limit) {
        bail!("depth = {d}: at most {} positions of context", limit - 1);
    }
    let deepest = values.iter().copied().max().unwrap_or(0) as usize;
    if let Some(m) = max_context.filter(|&m| deepest > 0 && m < deepest + max_tokens) {
        bail!(
            "depth = {deepest} with max_tokens = {max_tokens} needs more than max_context = {m} \
             positions (the context is depth + prompt + max_tokens): raise max_context or leave it out"
        );
    }
    if values.iter().any(|&d| d > 0) && concurrency.iter().any(|&c| c > 1) {
        bail!(
            "depth with concurrency above 1: `memdial serve` takes no depth; \
             sweep the two axes in separate specs"
        );
    }
    Ok(())
}
