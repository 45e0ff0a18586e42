//! Expert traces: the router's choices per (token, layer), one JSON object per line
//! (`{"token": t, "layer": l, "experts": [e, …]}`, experts in router rank order).
//!
//! Written by the streaming store (`record_trace`), replayed by oracle prefetch,
//! and read by the IO benchmark's `trace:` pattern.

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;

use anyhow::{Context, Result};

use crate::format::config::{MlpKind, ModelConfig};
use crate::util::error::UsageError;
use serde::{Deserialize, Serialize};

/// One line of a trace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceRecord {
    /// Position of the token in the sequence (prompt tokens first).
    pub token: usize,
    /// Layer index.
    pub layer: usize,
    /// Routed experts the router selected, in rank order.
    pub experts: Vec<usize>,
}

/// Reads every record of `path`, in file order (blank lines skipped).
///
/// Errors: unreadable file; a line that is not a `{"token", "layer", "experts"}`
/// object of non-negative integers (file and line named).
pub fn read(path: &Path) -> Result<Vec<TraceRecord>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read trace {}", path.display()))?;
    text.lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(i, line)| {
            serde_json::from_str(line).with_context(|| {
                format!(
                    "{}:{}: expected {{\"token\", \"layer\", \"experts\"}} with integer values",
                    path.display(),
                    i + 1
                )
            })
        })
        .collect()
}

/// Checks a replayed expert trace against the model: every record's layer is a
/// MoE layer below `num_hidden_layers` and every expert id below `num_experts`.
///
/// Errors: [`UsageError::Invalid`] naming the file, the record (1-based, blank lines
/// not counted) and the value.
pub fn check(records: &[TraceRecord], cfg: &ModelConfig, path: &Path) -> Result<()> {
    let experts = cfg.moe.as_ref().map_or(0, |m| m.num_experts);
    for (i, r) in records.iter().enumerate() {
        let at = || format!("trace {} record {}", path.display(), i + 1);
        if cfg.mlp_kinds.get(r.layer) != Some(&MlpKind::Moe) {
            return Err(UsageError::Invalid(format!(
                "{}: layer {} is not a MoE layer of this model ({} layers)",
                at(),
                r.layer,
                cfg.num_hidden_layers
            ))
            .into());
        }
        if let Some(e) = r.experts.iter().find(|&&e| e >= experts) {
            return Err(UsageError::Invalid(format!(
                "{}: expert id {e} is out of range (num_experts {experts})",
                at()
            ))
            .into());
        }
    }
    Ok(())
}

/// Writes `records` to `path`, one JSON object per line.
pub fn write(path: &Path, records: &[TraceRecord]) -> Result<()> {
    let mut f = std::io::BufWriter::new(
        std::fs::File::create(path)
            .with_context(|| format!("cannot create trace {}", path.display()))?,
    );
    for r in records {
        serde_json::to_writer(&mut f, r)?;
        f.write_all(b"\n")?;
    }
    f.flush()
        .with_context(|| format!("cannot write trace {}", path.display()))
}

/// The records keyed by (token, layer) (a later line for the same key wins).
pub fn by_token_layer(records: Vec<TraceRecord>) -> HashMap<(usize, usize), Vec<usize>> {
    records
        .into_iter()
        .map(|r| ((r.token, r.layer), r.experts))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_keeps_the_line_format() {
        let d = std::env::temp_dir().join(format!("memdial-trace-{}", std::process::id()));
        let recs = vec![TraceRecord {
            token: 3,
            layer: 1,
            experts: vec![5, 2],
        }];
        write(&d, &recs).unwrap();
        let text = std::fs::read_to_string(&d).unwrap();
        assert_eq!(text, "{\"token\":3,\"layer\":1,\"experts\":[5,2]}\n");
        assert_eq!(read(&d).unwrap(), recs);
        std::fs::write(&d, "{\"layer\":1}\n").unwrap();
        assert!(format!("{:#}", read(&d).unwrap_err()).contains(":1:"));
        std::fs::remove_file(&d).unwrap();
    }
}
