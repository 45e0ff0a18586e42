//! What an IO benchmark replays: request patterns over the model's read groups.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use crate::engine::arena::Scratch;
use crate::format::checkpoint::Checkpoint;
use crate::format::config::load_config;
use crate::io::IoMode;
use crate::store::plan::{plan_unchecked, Prefetch, ReadGroup, Sequences};

/// Default seed of the random expert order.
pub const DEFAULT_SEED: u64 = 0x6d65_6d64_6961_6c31;

/// Request size of [`sequential_cold_read`](super::cells::sequential_cold_read), bytes.
pub const SEQUENTIAL_REQUEST_BYTES: u64 = 4 << 20;

/// Which of the engine's requests to replay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pattern {
    /// Whole streamed trunk layers, in layer order.
    Trunk,
    /// Every routed expert record once, in a seeded random order.
    Experts,
    /// As [`Pattern::Experts`], read as the streaming store reads a decode token's
    /// selection: `K` records queued at once (one MoE layer's top-k), all of them
    /// waited for before the next `K` are queued (`experts:K`).
    ExpertBatches(usize),
    /// The routed experts of a recorded trace (`memdial run --record-trace F`), in order.
    Trace(PathBuf),
}

impl Pattern {
    /// Parses `trunk`, `experts`, `experts:K` (K ≥ 1) or `trace:FILE`.
    pub fn parse(s: &str) -> Result<Self> {
        Ok(match s {
            "trunk" => Pattern::Trunk,
            "experts" => Pattern::Experts,
            _ => {
                if let Some(k) = s.strip_prefix("experts:") {
                    match k.parse::<usize>() {
                        Ok(k) if k >= 1 => return Ok(Pattern::ExpertBatches(k)),
                        _ => bail!("pattern {s:?}: K of experts:K must be a count ≥ 1"),
                    }
                }
                match s.strip_prefix("trace:") {
                    Some(f) if !f.is_empty() => Pattern::Trace(PathBuf::from(f)),
                    _ => bail!("unknown pattern {s:?} (trunk, experts, experts:K, trace:FILE)"),
                }
            }
        })
    }
    /// Name used in reports: `trunk`, `experts`, `trace:<file name>`.
    pub fn name(&self) -> String {
        match self {
            Pattern::Trunk => "trunk".into(),
            Pattern::Experts => "experts".into(),
            Pattern::ExpertBatches(k) => format!("experts:{k}"),
            Pattern::Trace(p) => format!(
                "trace:{}",
                p.file_name()
                    .map(|s| s.to_string_lossy().into_owned())
                    .unwrap_or_else(|| p.display().to_string())
            ),
        }
    }
}

/// Page-cache state a cell starts from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CacheState {
    /// Files evicted from the page cache (verified with mincore) before the timed reads.
    Cold,
    /// The requests' ranges read through the page cache once before the timed reads.
    Warm,
}

impl CacheState {
    /// Parses `cold|warm`.
    pub fn parse(s: &str) -> Result<Self> {
        Ok(match s {
            "cold" => CacheState::Cold,
            "warm" => CacheState::Warm,
            _ => bail!("unknown cache state {s:?} (cold, warm)"),
        })
    }
    /// `cold` or `warm`.
    pub fn as_str(self) -> &'static str {
        match self {
            CacheState::Cold => "cold",
            CacheState::Warm => "warm",
        }
    }
}

/// One contiguous byte range of one file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    /// Index into [`Workload::files`].
    pub file: usize,
    /// Byte offset in the file.
    pub offset: u64,
    /// Length in bytes.
    pub len: u64,
}

/// Requests to replay and the order to issue them in.
#[derive(Debug, Clone)]
pub struct Workload {
    /// Pattern name for reports (`trunk`, `experts`, `trace:…`, `file`).
    pub name: String,
    /// Files the spans refer to (every shard of the model).
    pub files: Vec<PathBuf>,
    /// Distinct requests; each is read as one unit (its spans one after another).
    pub requests: Vec<Vec<Span>>,
    /// Issue order (indices into `requests`; may repeat, e.g. a trace).
    pub sequence: Vec<usize>,
    /// True when consecutive requests are at increasing offsets (fio `rw=read`),
    /// false for random order (fio `rw=randread`).
    pub sequential: bool,
    /// Requests queued together and all waited for before the next ones are queued
    /// (0: none, the readers take requests as they finish; `experts:K`: K).
    pub batch: usize,
}

fn spans_of(g: &ReadGroup) -> Vec<Span> {
    g.ranges
        .iter()
        .map(|r| Span {
            file: r.shard,
            offset: r.start,
            len: r.end - r.start,
        })
        .collect()
}

/// (layer, expert) pairs of a trace file (`{"token":t,"layer":l,"experts":[…]}` per
/// line), in file order.
pub fn read_trace(path: &Path) -> Result<Vec<(usize, usize)>> {
    let out: Vec<(usize, usize)> = crate::store::trace::read(path)?
        .into_iter()
        .flat_map(|r| r.experts.into_iter().map(move |e| (r.layer, e)))
        .collect();
    if out.is_empty() {
        bail!("trace {} holds no expert ids", path.display());
    }
    Ok(out)
}

impl Workload {
    /// The engine's requests for `pattern` on the checkpoint in `model_dir`
    /// (the streaming store's read groups from the budget plan). `seed` fixes the
    /// random expert order.
    ///
    /// Errors: unreadable config or checkpoint; `experts`/`trace` on a model without
    /// routed experts; a trace naming an expert the model does not have.
    pub fn from_model(model_dir: &Path, pattern: &Pattern, seed: u64) -> Result<Self> {
        let cfg = load_config(model_dir)?;
        let ck = Checkpoint::open(model_dir)?;
        let plan = plan_unchecked(
            &cfg,
            &ck,
            u64::MAX / 4,
            IoMode::Buffered,
            Prefetch::None,
            Scratch::activations(&cfg, Sequences::single(1), 1),
        )?;
        let files: Vec<PathBuf> = ck.shards.iter().map(|s| s.path.clone()).collect();
        let (requests, sequence, sequential) = match pattern {
            Pattern::Trunk => {
                let reqs: Vec<Vec<Span>> = plan.groups.iter().map(|g| spans_of(&g.read)).collect();
                if reqs.is_empty() {
                    bail!("{}: the model has no streamed trunk", model_dir.display());
                }
                let seq = (0..reqs.len()).collect();
                (reqs, seq, true)
            }
            Pattern::Experts | Pattern::ExpertBatches(_) | Pattern::Trace(_) => {
                if plan.expert_groups.is_empty() {
                    bail!("{}: the model has no routed experts", model_dir.display());
                }
                let keys: Vec<(usize, usize)> = plan.expert_groups.keys().copied().collect();
                let reqs: Vec<Vec<Span>> = plan.expert_groups.values().map(spans_of).collect();
                let seq = match pattern {
                    Pattern::Trace(p) => read_trace(p)?
                        .into_iter()
                        .map(|k| {
                            keys.binary_search(&k).map_err(|_| {
                                anyhow::anyhow!(
                                    "trace {}: layer {} expert {} is not a routed expert of {}",
                                    p.display(),
                                    k.0,
                                    k.1,
                                    model_dir.display()
                                )
                            })
                        })
                        .collect::<Result<Vec<_>>>()?,
                    _ => {
                        let mut seq: Vec<usize> = (0..reqs.len()).collect();
                        let mut rng = crate::util::rng::SplitMix64::new(seed);
                        for i in (1..seq.len()).rev() {
                            let j = (rng.next_u64() % (i as u64 + 1)) as usize;
                            seq.swap(i, j);
                        }
                        seq
                    }
                };
                (reqs, seq, false)
            }
        };
        Ok(Workload {
            name: pattern.name(),
            files,
            requests,
            sequence,
            sequential,
            batch: match pattern {
                Pattern::ExpertBatches(k) => *k,
                _ => 0,
            },
        })
    }

    /// Sequential requests of `request_bytes` over the first `max_bytes` of `path`.
    pub fn sequential_file(path: &Path, request_bytes: u64, max_bytes: u64) -> Result<Self> {
        let size = std::fs::metadata(path)
            .with_context(|| format!("cannot stat {}", path.display()))?
            .len();
        let len = size.min(max_bytes);
        let rb = request_bytes.max(1);
        let requests: Vec<Vec<Span>> = (0..len.div_ceil(rb))
            .map(|i| {
                vec![Span {
                    file: 0,
                    offset: i * rb,
                    len: rb.min(len - i * rb),
                }]
            })
            .collect();
        if requests.is_empty() {
            bail!("{} is empty", path.display());
        }
        Ok(Workload {
            name: "file".into(),
            files: vec![path.to_path_buf()],
            sequence: (0..requests.len()).collect(),
            requests,
            sequential: true,
            batch: 0,
        })
    }

    /// Bytes of request `i` (sum of its spans).
    pub fn request_bytes(&self, i: usize) -> u64 {
        self.requests[i].iter().map(|s| s.len).sum()
    }

    /// The issue order of a cold cell: `sequence` with repeats removed (first
    /// occurrences, in order), so no byte is read twice.
    pub fn cold_sequence(&self) -> Vec<usize> {
        let mut seen = vec![false; self.requests.len()];
        self.sequence
            .iter()
            .copied()
            .filter(|&i| !std::mem::replace(&mut seen[i], true))
            .collect()
    }

    /// Bytes of one pass over the distinct requests of the sequence.
    pub fn pass_bytes(&self) -> u64 {
        self.cold_sequence()
            .iter()
            .map(|&i| self.request_bytes(i))
            .sum()
    }

    /// Median size of the distinct requests in the sequence, bytes.
    pub fn median_request_bytes(&self) -> u64 {
        let v: Vec<u64> = self
            .cold_sequence()
            .iter()
            .map(|&i| self.request_bytes(i))
            .collect();
        crate::util::stats::median_u64(&v)
    }

    /// Median number of contiguous ranges per distinct request (a request with
    /// several ranges is read with one `pread` per range, one after another).
    pub fn median_spans_per_request(&self) -> usize {
        let v: Vec<u64> = self
            .cold_sequence()
            .iter()
            .map(|&i| self.requests[i].len())
            .map(|n| n as u64)
            .collect();
        crate::util::stats::median_u64(&v) as usize
    }

    /// Bytes of one pass that fall in each file.
    pub fn pass_bytes_per_file(&self) -> Vec<u64> {
        let mut v = vec![0u64; self.files.len()];
        for i in self.cold_sequence() {
            for s in &self.requests[i] {
                v[s.file] += s.len;
            }
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_parse() {
        assert_eq!(Pattern::parse("trunk").unwrap(), Pattern::Trunk);
        assert_eq!(Pattern::parse("experts").unwrap(), Pattern::Experts);
        assert_eq!(
            Pattern::parse("trace:/a/t.jsonl").unwrap(),
            Pattern::Trace("/a/t.jsonl".into())
        );
        assert_eq!(
            Pattern::parse("trace:/a/t.jsonl").unwrap().name(),
            "trace:t.jsonl"
        );
        assert!(Pattern::parse("trace:").is_err());
        assert_eq!(
            Pattern::parse("experts:8").unwrap(),
            Pattern::ExpertBatches(8)
        );
        assert_eq!(Pattern::ExpertBatches(8).name(), "experts:8");
        assert!(Pattern::parse("experts:0").is_err());
        assert!(Pattern::parse("random").is_err());
    }

    #[test]
    fn cold_sequence_drops_repeats() {
        let w = Workload {
            name: "t".into(),
            files: vec![],
            requests: vec![
                vec![Span {
                    file: 0,
                    offset: 0,
                    len: 10
                }];
                3
            ],
            sequence: vec![2, 0, 2, 1, 0],
            sequential: false,
            batch: 0,
        };
        assert_eq!(w.cold_sequence(), vec![2, 0, 1]);
        assert_eq!(w.pass_bytes(), 30);
        assert_eq!(w.median_request_bytes(), 10);
    }
}
