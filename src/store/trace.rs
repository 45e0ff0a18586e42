//! Expert traces: what a run routed, one JSON object per line, in the versioned
//! format of `docs/simulate.md` (so other engines can write it).
//!
//! Format 2 (written by `memdial run --record-trace`):
//!
//! - line 1, the header ([`TraceHeader`]): `{"format": "memdial-trace", "version": 2,
//!   "model": {…shape…}, "top_k", "prefill_chunk", "prompt_tokens", "plan": {…}}`;
//! - one forward line per forward pass ([`ForwardRecord`]): `{"forward": pos0,
//!   "ids": [token ids of the pass], "logits": rows}`, before the pass's routing;
//! - one routing line per (token, MoE layer) ([`TraceRecord`]): `{"token": t,
//!   "layer": l, "experts": [e, …]}` in router rank order, with `"predicted": [e, …]`
//!   when a look-ahead predictor guessed that layer's experts beforehand.
//!
//! Format 1 (before the header existed) is routing lines only; [`read`] still reads
//! it (oracle prefetch, the IO benchmark's `trace:` pattern), [`read_full`] reports it
//! as `header: None` so a replay can refuse it with a clear error.

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;

use anyhow::{Context, Result};
use sha2::{Digest, Sha256};

use crate::format::config::{MlpKind, ModelConfig};
use crate::store::plan::Plan;
use crate::util::error::UsageError;
use serde::{Deserialize, Serialize};

/// The header's `format` value.
pub const FORMAT: &str = "memdial-trace";
/// The format version this build writes (and the newest it reads).
pub const VERSION: u64 = 2;

/// One routing line of a trace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceRecord {
    /// Position of the token in the sequence (prompt tokens first).
    pub token: usize,
    /// Layer index.
    pub layer: usize,
    /// Routed experts the router selected, in rank order.
    pub experts: Vec<usize>,
    /// Experts a look-ahead predictor guessed for this (token, layer) before the
    /// router ran (absent: no guess was made).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub predicted: Option<Vec<usize>>,
}

/// One forward pass: the tokens it ran (positions `forward ..`) and how many logit
/// rows it computed (0 for a prefill chunk that is not the last; `lm_head` is read
/// only when this is > 0).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForwardRecord {
    /// Position of the pass's first token.
    pub forward: usize,
    /// Token ids of the pass, in order (the embedding rows it reads).
    pub ids: Vec<usize>,
    /// Logit rows computed.
    pub logits: usize,
}

/// The model shape a trace was recorded on (HF config names).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceModel {
    pub model_type: String,
    pub num_hidden_layers: usize,
    pub hidden_size: usize,
    pub vocab_size: usize,
    /// Routed experts per MoE layer (`n_routed_experts`).
    pub num_experts: usize,
    /// The MoE layers, ascending.
    pub moe_layers: Vec<usize>,
}

impl TraceModel {
    /// The shape of `cfg`.
    pub fn of(cfg: &ModelConfig) -> Self {
        TraceModel {
            model_type: cfg.model_type.clone(),
            num_hidden_layers: cfg.num_hidden_layers,
            hidden_size: cfg.hidden_size,
            vocab_size: cfg.vocab_size,
            num_experts: cfg.routed_experts().map_or(0, |(e, _)| e),
            moe_layers: (0..cfg.num_hidden_layers)
                .filter(|&l| cfg.mlp_kinds[l] == MlpKind::Moe)
                .collect(),
        }
    }
}

/// The plan a trace was recorded under (informative: a replay plans its own budgets).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TracePlan {
    pub budget_bytes: u64,
    pub io: String,
    pub prefetch: String,
    pub cache: String,
    /// `cold` or `warm`.
    pub start: String,
    pub max_context: usize,
    pub threads: usize,
    /// [`plan_identity`] of the plan.
    pub identity: String,
}

/// Line 1 of a format-2 trace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceHeader {
    /// Always [`FORMAT`].
    pub format: String,
    /// Format version ([`VERSION`]).
    pub version: u64,
    pub model: TraceModel,
    /// Experts the router selects per token (`num_experts_per_tok`).
    pub top_k: usize,
    /// Prompt tokens per prefill forward.
    pub prefill_chunk: usize,
    pub prompt_tokens: usize,
    /// The engine that wrote it (`memdial 0.x`, or another engine's name).
    #[serde(default)]
    pub engine: String,
    /// The plan of the recording run (`null` from an engine without one).
    #[serde(default)]
    pub plan: Option<TracePlan>,
}

/// A whole trace: header (format 2; `None` for a format-1 file), forwards and routing,
/// each in file order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Trace {
    pub header: Option<TraceHeader>,
    pub forwards: Vec<ForwardRecord>,
    pub records: Vec<TraceRecord>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Line {
    Header(Box<TraceHeader>),
    Forward(ForwardRecord),
    Route(TraceRecord),
}

/// A short identity of the layout and allocation of `p`: sha256 (first 16 hex digits)
/// of its IO mode, prefetch, budget and every trunk group and expert read size and
/// what is pinned. Two plans with the same identity read the same bytes for the same
/// routing.
pub fn plan_identity(p: &Plan) -> String {
    let mut h = Sha256::new();
    let mut put = |s: String| h.update(s.as_bytes());
    put(format!(
        "{}|{}|{}|{}|{}|{}|{}|{}|",
        p.io.as_str(),
        p.prefetch.as_str(),
        p.budget_bytes,
        p.pinned_groups,
        p.trunk_slots,
        p.expert_cache_experts,
        p.embedding_pinned,
        p.embedding_row_buffer_bytes
    ));
    for g in &p.groups {
        put(format!("{}:{}:{};", g.layer, g.what, g.read.buffer_bytes));
    }
    for ((l, e), g) in &p.expert_groups {
        put(format!("{l}/{e}:{};", g.buffer_bytes));
    }
    crate::util::digest::hex(&h.finalize())[..16].to_string()
}

/// Reads every line of `path` (blank lines skipped), format 1 or 2.
///
/// Errors: unreadable file; a line that is neither a header, a forward nor a routing
/// line (file and line named); a header of another format or a newer version; a
/// header that is not line 1.
pub fn read_full(path: &Path) -> Result<Trace> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read trace {}", path.display()))?;
    let mut t = Trace::default();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let at = || format!("{}:{}", path.display(), i + 1);
        let parsed: Line = serde_json::from_str(line).map_err(|_| {
            let hint = match serde_json::from_str::<serde_json::Value>(line) {
                Ok(v) if v.get("format").is_some() || v.get("version").is_some() => {
                    " (a header line, but its fields do not parse: see docs/simulate.md)"
                }
                Ok(_) => "",
                Err(_) => " (not JSON)",
            };
            UsageError::Invalid(format!(
                "{}: expected a trace line ({{\"token\", \"layer\", \"experts\"}}, \
                 {{\"forward\", \"ids\", \"logits\"}} or the header) with integer values{hint}",
                at()
            ))
        })?;
        match parsed {
            Line::Header(h) => {
                if h.format != FORMAT {
                    return Err(UsageError::Invalid(format!(
                        "{}: format {:?} is not a memdial trace ({FORMAT:?})",
                        at(),
                        h.format
                    ))
                    .into());
                }
                if h.version > VERSION || h.version < 2 {
                    return Err(UsageError::Invalid(format!(
                        "{}: trace format version {} is not supported (this memdial reads 1 \
                         and 2; version {} needs a newer memdial)",
                        at(),
                        h.version,
                        h.version
                    ))
                    .into());
                }
                if t.header.is_some() || !t.forwards.is_empty() || !t.records.is_empty() {
                    return Err(UsageError::Invalid(format!(
                        "{}: a trace header must be the first line",
                        at()
                    ))
                    .into());
                }
                t.header = Some(*h);
            }
            Line::Forward(f) => t.forwards.push(f),
            Line::Route(r) => t.records.push(r),
        }
    }
    Ok(t)
}

/// Reads the routing lines of `path`, in file order (format 1 or 2; header and
/// forward lines skipped).
///
/// Errors: as [`read_full`].
pub fn read(path: &Path) -> Result<Vec<TraceRecord>> {
    Ok(read_full(path)?.records)
}

/// Checks a replayed expert trace against the model: every record's layer is a
/// MoE layer below `num_hidden_layers` and every expert id (chosen or predicted)
/// below `num_experts`.
///
/// Errors: [`UsageError::Invalid`] naming the file, the record (1-based, blank lines
/// not counted) and the value.
pub fn check(records: &[TraceRecord], cfg: &ModelConfig, path: &Path) -> Result<()> {
    let experts = cfg.routed_experts().map_or(0, |(e, _)| e);
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
        let predicted = r.predicted.iter().flatten();
        if let Some(e) = r.experts.iter().chain(predicted).find(|&&e| e >= experts) {
            return Err(UsageError::Invalid(format!(
                "{}: expert id {e} is out of range (num_experts {experts})",
                at()
            ))
            .into());
        }
    }
    Ok(())
}

/// Writes a trace to `path`: the header (when given), then each forward line
/// followed by the routing lines of its tokens (records in the order given).
pub fn write_full(path: &Path, t: &Trace) -> Result<()> {
    let mut f = std::io::BufWriter::new(
        std::fs::File::create(path)
            .with_context(|| format!("cannot create trace {}", path.display()))?,
    );
    if let Some(h) = &t.header {
        serde_json::to_writer(&mut f, h)?;
        f.write_all(b"\n")?;
    }
    let mut recs = t.records.iter().peekable();
    for fw in &t.forwards {
        serde_json::to_writer(&mut f, fw)?;
        f.write_all(b"\n")?;
        let end = fw.forward + fw.ids.len();
        while let Some(r) = recs.next_if(|r| r.token < end) {
            serde_json::to_writer(&mut f, r)?;
            f.write_all(b"\n")?;
        }
    }
    for r in recs {
        serde_json::to_writer(&mut f, r)?;
        f.write_all(b"\n")?;
    }
    f.flush()
        .with_context(|| format!("cannot write trace {}", path.display()))
}

/// Writes routing lines only (format 1, no header), one JSON object per line.
pub fn write(path: &Path, records: &[TraceRecord]) -> Result<()> {
    write_full(
        path,
        &Trace {
            records: records.to_vec(),
            ..Trace::default()
        },
    )
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

    fn rec(token: usize, layer: usize, experts: Vec<usize>) -> TraceRecord {
        TraceRecord {
            token,
            layer,
            experts,
            predicted: None,
        }
    }

    #[test]
    fn round_trip_keeps_the_line_format() {
        let d = std::env::temp_dir().join(format!("memdial-trace-{}", std::process::id()));
        let recs = vec![rec(3, 1, vec![5, 2])];
        write(&d, &recs).unwrap();
        let text = std::fs::read_to_string(&d).unwrap();
        assert_eq!(text, "{\"token\":3,\"layer\":1,\"experts\":[5,2]}\n");
        assert_eq!(read(&d).unwrap(), recs);
        std::fs::write(&d, "{\"layer\":1}\n").unwrap();
        assert!(format!("{:#}", read(&d).unwrap_err()).contains(":1:"));
        std::fs::remove_file(&d).unwrap();
    }

    #[test]
    fn format_2_round_trips_and_interleaves_forwards() {
        let d = std::env::temp_dir().join(format!("memdial-trace2-{}", std::process::id()));
        let mut r1 = rec(2, 1, vec![0, 3]);
        r1.predicted = Some(vec![3, 1]);
        let t = Trace {
            header: Some(TraceHeader {
                format: FORMAT.into(),
                version: VERSION,
                model: TraceModel {
                    model_type: "kimi_k3".into(),
                    num_hidden_layers: 2,
                    hidden_size: 8,
                    vocab_size: 16,
                    num_experts: 4,
                    moe_layers: vec![1],
                },
                top_k: 2,
                prefill_chunk: 2,
                prompt_tokens: 2,
                engine: "hand".into(),
                plan: None,
            }),
            forwards: vec![
                ForwardRecord {
                    forward: 0,
                    ids: vec![7, 7],
                    logits: 1,
                },
                ForwardRecord {
                    forward: 2,
                    ids: vec![9],
                    logits: 1,
                },
            ],
            records: vec![rec(0, 1, vec![0, 1]), rec(1, 1, vec![1, 2]), r1],
        };
        write_full(&d, &t).unwrap();
        let text = std::fs::read_to_string(&d).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("{\"format\":\"memdial-trace\",\"version\":2,"));
        assert_eq!(lines[1], "{\"forward\":0,\"ids\":[7,7],\"logits\":1}");
        assert_eq!(lines[4], "{\"forward\":2,\"ids\":[9],\"logits\":1}");
        assert_eq!(
            lines[5],
            "{\"token\":2,\"layer\":1,\"experts\":[0,3],\"predicted\":[3,1]}"
        );
        assert_eq!(read_full(&d).unwrap(), t);
        assert_eq!(read(&d).unwrap(), t.records);
        // A newer version is refused by name.
        std::fs::write(&d, text.replacen("\"version\":2", "\"version\":3", 1)).unwrap();
        let e = format!("{:#}", read_full(&d).unwrap_err());
        assert!(e.contains("version 3") && e.contains(":1:"), "{e}");
        std::fs::remove_file(&d).unwrap();
    }
}
