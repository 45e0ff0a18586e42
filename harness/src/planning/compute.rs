//! The compute side of a prediction: seconds per token from a resident run, and
//! where the embedding rows a replay reads sit.

use anyhow::Result;
use memdial::engine::metrics::MetricsFile;
use memdial::store::plan::Plan;
use memdial::store::sim::EmbeddingRows;

use crate::args::usage;

/// Compute seconds per token: `given` (`--compute-s-per-token`), else the median
/// decode s/token of `resident`, a `memdial run --metrics-json` file of a run without
/// `--budget`; `None` when neither is given.
///
/// Errors (usage): a negative or non-finite `given`; an unreadable file, a streamed
/// run's, or one without `decode_s_per_token_median`.
pub fn compute_time(given: Option<f64>, resident: Option<&std::path::Path>) -> Result<Option<f64>> {
    if let Some(s) = given {
        if !(s.is_finite() && s >= 0.0) {
            return Err(usage(format!("compute time {s} s/token is not ≥ 0")));
        }
        return Ok(Some(s));
    }
    let Some(p) = resident else {
        return Ok(None);
    };
    let text = std::fs::read_to_string(p)
        .map_err(|e| usage(format!("cannot read {}: {e}", p.display())))?;
    let f: MetricsFile = serde_json::from_str(&text)
        .map_err(|e| usage(format!("{} is not a metrics JSON: {e}", p.display())))?;
    if let Some(b) = f.budget_bytes {
        return Err(usage(format!(
            "{} is a streamed run (budget {b}); --resident-metrics needs a run without --budget",
            p.display()
        )));
    }
    let m = f.metrics.decode_s_per_token_median.ok_or_else(|| {
        usage(format!(
            "{} has no decode_s_per_token_median (a run of at least 2 tokens)",
            p.display()
        ))
    })?;
    Ok(Some(m))
}

/// Whether the time model predicts s/token under `io`: `direct` only (it has no
/// page-cache model; `buffered` and `mmap` keep their bytes and say "unpredicted").
pub fn predicted_io(io: memdial::io::IoMode) -> bool {
    io == memdial::io::IoMode::Direct
}

/// The share of a resident run's decode compute that runs after the router (the time
/// model's `s`): its `expert_compute_s_per_token` (recorded with `--profile-ops`) ÷ its
/// median decode s/token, clamped to [0, 1]; 0 without `resident` or without the field.
///
/// Errors (usage): an unreadable file, or one that is not a metrics JSON.
pub fn expert_share(resident: Option<&std::path::Path>) -> Result<f64> {
    let Some(p) = resident else {
        return Ok(0.0);
    };
    let text = std::fs::read_to_string(p)
        .map_err(|e| usage(format!("cannot read {}: {e}", p.display())))?;
    let f: MetricsFile = serde_json::from_str(&text)
        .map_err(|e| usage(format!("{} is not a metrics JSON: {e}", p.display())))?;
    let m = &f.metrics;
    Ok(
        match (m.expert_compute_s_per_token, m.decode_s_per_token_median) {
            (Some(e), Some(c)) if c > 0.0 => (e / c).clamp(0.0, 1.0),
            _ => 0.0,
        },
    )
}

/// Where `plan`'s embedding table sits in `ck`, for the replay's row reads.
///
/// Errors: the checkpoint lacks the table.
pub fn embedding_rows(
    cfg: &memdial::format::config::ModelConfig,
    ck: &memdial::format::checkpoint::Checkpoint,
    plan: &Plan,
) -> Result<EmbeddingRows> {
    let emb_name = format!("{}{}", cfg.weight_prefix, plan.embedding_key);
    let loc = ck
        .get(&emb_name)
        .ok_or_else(|| anyhow::anyhow!("tensor {emb_name} is missing"))?;
    Ok(EmbeddingRows {
        offset: loc.offset,
        row_bytes: loc.len / cfg.vocab_size.max(1) as u64,
    })
}
