//! Exact speculative decoding: several tokens per pass over the weights, the same
//! ids as plain decoding.
//!
//! A draft proposes up to `K` next ids without reading a weight ([`Draft`]: prompt
//! lookup over the ids so far, or the ids of an earlier run). One forward verifies
//! them: `[last, d1 … dK]` at positions `pos …` with every row's logits
//! (`LogitsMode::All`, the chunked forward that is bit-identical to one-token
//! forwards). Row `i` is sampled with the sampler in the state plain decoding has
//! at that token (the sampler advances once per emitted token, never for a row
//! after the first mismatch), and `d(i+1)` is accepted iff it equals the sample; the
//! first mismatch's sample is emitted as the correction (all accepted: row `K`'s
//! sample too). Then the state is rewound to the emitted rows
//! ([`crate::model::State::rewind_to`]). Every emitted id is therefore the id plain
//! decoding samples from the same logits with the same sampler state.
//! See docs/speculation.md.

#![warn(missing_docs)]

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Result};

use crate::engine::arena::Scratch;
use crate::engine::generate::{perturb, prefill, GenerateOutput, GenerateParams, Prefilled};
use crate::engine::sampler::Sampler;
use crate::format::config::ModelConfig;
use crate::model::{LogitsMode, Model, State};
use crate::util::error::UsageError;

/// Bytes a speculative run with drafts of up to `k` ids holds beyond a plain run's
/// arena for the same `chunk`, `threads` and `max_context`
/// ([`Scratch::planned_bytes`]): the `k` more logit rows and the row-block buffer of
/// [`Scratch::for_speculation`], and the restore point of a forward of `k + 1` rows
/// ([`crate::model::rewind::Rewind::planned_bytes`]). 0 for `k` 0.
pub fn speculation_bytes(
    cfg: &ModelConfig,
    chunk: usize,
    threads: usize,
    max_context: usize,
    k: usize,
) -> u64 {
    if k == 0 {
        return 0;
    }
    let spec = Scratch::planned_speculation_bytes(cfg, chunk, threads, max_context, k);
    let plain = Scratch::planned_bytes(cfg, chunk, threads, max_context);
    spec.saturating_sub(plain) + crate::model::rewind::Rewind::planned_bytes(cfg, k + 1)
}

/// Longest n-gram [`Draft::Ngram`] matches (it tries `NGRAM_MAX` down to 1).
pub const NGRAM_MAX: usize = 3;

/// Largest draft length `K` accepted.
pub const MAX_DRAFT: usize = 64;

/// Where drafts come from (`memdial run --speculate`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Speculate {
    /// Plain decoding, one forward per token.
    Off,
    /// Prompt lookup: `ngram:K`.
    Ngram {
        /// Draft length.
        k: usize,
    },
    /// The ids of an earlier run: `replay:FILE:K` (the file as `--output ids` prints them).
    Replay {
        /// The ids file.
        path: PathBuf,
        /// Draft length.
        k: usize,
    },
}

impl Speculate {
    /// Parses `off`, `ngram:K` or `replay:FILE:K` (`K` after the last `:`, 1 ≤ K ≤
    /// [`MAX_DRAFT`]). Errors: any other form, a `K` that is not such a number, an
    /// empty file name (usage errors naming the value).
    pub fn parse(s: &str) -> Result<Speculate> {
        let bad = |why: &str| -> anyhow::Error {
            UsageError::Invalid(format!(
                "--speculate {s:?}: {why} (expected off, ngram:K or replay:FILE:K with 1 ≤ K ≤ {MAX_DRAFT})"
            ))
            .into()
        };
        if s == "off" {
            return Ok(Speculate::Off);
        }
        let (head, k) = s.rsplit_once(':').ok_or_else(|| bad("no draft length"))?;
        let k: usize = k
            .parse()
            .map_err(|_| bad(&format!("draft length {k:?} is not a number")))?;
        if k == 0 || k > MAX_DRAFT {
            return Err(bad(&format!("draft length {k} is out of range")));
        }
        if head == "ngram" {
            return Ok(Speculate::Ngram { k });
        }
        match head.split_once(':') {
            Some(("replay", path)) if !path.is_empty() => Ok(Speculate::Replay {
                path: PathBuf::from(path),
                k,
            }),
            Some(("replay", _)) => Err(bad("no ids file")),
            _ => Err(bad("unknown draft source")),
        }
    }

    /// The draft length `K` (0 for `off`).
    pub fn k(&self) -> usize {
        match self {
            Speculate::Off => 0,
            Speculate::Ngram { k } | Speculate::Replay { k, .. } => *k,
        }
    }

    /// The value as written (`off`, `ngram:4`, `replay:FILE:4`).
    pub fn as_string(&self) -> String {
        match self {
            Speculate::Off => "off".into(),
            Speculate::Ngram { k } => format!("ngram:{k}"),
            Speculate::Replay { path, k } => format!("replay:{}:{k}", path.display()),
        }
    }

    /// The drafter: `None` for `off`; replay reads its file. Errors: the file cannot be
    /// read or holds something other than comma-separated ids below `vocab_size`.
    pub fn drafter(&self, vocab_size: usize) -> Result<Option<Draft>> {
        Ok(match self {
            Speculate::Off => None,
            Speculate::Ngram { k } => Some(Draft::Ngram { k: *k }),
            Speculate::Replay { path, k } => Some(Draft::Replay {
                ids: read_ids(path, vocab_size)?,
                k: *k,
            }),
        })
    }
}

/// Reads ids as `memdial run --output ids` prints them (comma-separated, whitespace
/// ignored). Errors: unreadable file, a non-number, an id ≥ `vocab_size`, no ids.
pub fn read_ids(path: &Path, vocab_size: usize) -> Result<Vec<u32>> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        UsageError::Invalid(format!(
            "--speculate replay: cannot read {}: {e}",
            path.display()
        ))
    })?;
    let mut ids = Vec::new();
    for (i, f) in text.split(',').enumerate() {
        let f = f.trim();
        if f.is_empty() && text.trim().is_empty() {
            break;
        }
        let id: u32 = f.parse().map_err(|_| {
            UsageError::Invalid(format!(
                "--speculate replay: {}: entry {i} ({f:?}) is not a token id",
                path.display()
            ))
        })?;
        if id as usize >= vocab_size {
            return Err(UsageError::Invalid(format!(
                "--speculate replay: {}: id {id} is out of range (vocab_size {vocab_size})",
                path.display()
            ))
            .into());
        }
        ids.push(id);
    }
    if ids.is_empty() {
        return Err(UsageError::Invalid(format!(
            "--speculate replay: {} holds no ids",
            path.display()
        ))
        .into());
    }
    Ok(ids)
}

/// A draft source that reads no weights.
#[derive(Debug, Clone)]
pub enum Draft {
    /// Prompt lookup (as llama.cpp's n-gram / prompt-lookup drafting): for n from
    /// [`NGRAM_MAX`] down to 1, the most recent earlier occurrence of the last n ids
    /// of prompt + generated ids; propose the ids that followed it, up to `k`.
    Ngram {
        /// Draft length.
        k: usize,
    },
    /// The ids of an earlier run: after `j` generated ids propose `ids[j .. j + k]`.
    Replay {
        /// The earlier run's generated ids.
        ids: Vec<u32>,
        /// Draft length.
        k: usize,
    },
}

impl Draft {
    /// The draft length `K`.
    pub fn k(&self) -> usize {
        match self {
            Draft::Ngram { k } | Draft::Replay { k, .. } => *k,
        }
    }

    /// Up to `max` (≤ `K`) proposed next ids after `history` (prompt + generated ids),
    /// `generated` of which were generated; possibly none.
    pub fn propose(&self, history: &[u32], generated: usize, max: usize) -> Vec<u32> {
        let max = max.min(self.k());
        match self {
            Draft::Replay { ids, .. } => ids.iter().skip(generated).take(max).copied().collect(),
            Draft::Ngram { .. } => ngram_lookup(history, max),
        }
    }
}

/// Prompt lookup over `h`: the ids following the most recent earlier occurrence of
/// `h`'s last n ids (n = [`NGRAM_MAX`] … 1, longest first), up to `max`.
pub fn ngram_lookup(h: &[u32], max: usize) -> Vec<u32> {
    if max == 0 {
        return Vec::new();
    }
    for n in (1..=NGRAM_MAX.min(h.len().saturating_sub(1))).rev() {
        let tail = &h[h.len() - n..];
        // Starts of earlier occurrences, most recent first (the tail itself excluded).
        for s in (0..h.len() - n).rev() {
            if &h[s..s + n] == tail {
                let from = s + n;
                return h[from..(from + max).min(h.len())].to_vec();
            }
        }
    }
    Vec::new()
}

/// Counters of a speculative run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SpecStats {
    /// Decode forwards (verification passes; each emits ≥ 1 token).
    pub forwards: u64,
    /// Draft ids fed to the verification passes.
    pub drafted_tokens: u64,
    /// Draft ids accepted (emitted as drafted).
    pub accepted_tokens: u64,
}

impl SpecStats {
    /// Accepted drafts per forward (`accepted_tokens / forwards`; `None` without forwards).
    pub fn mean_accepted_length(&self) -> Option<f64> {
        (self.forwards > 0).then(|| self.accepted_tokens as f64 / self.forwards as f64)
    }
}

/// [`crate::engine::generate::generate`] with speculation: prefill as there, then
/// verification passes of the drafts of `draft` (see the module docs), each forward
/// emitting the accepted drafts and one sampled id. The output ids (and, with
/// `keep_logits`, the logits) are those of plain decoding; `decode_s` holds one
/// entry per token after the first, each forward's time split evenly over the
/// tokens it emitted. Drafts are cut to the tokens left (`max_tokens`) and to the
/// context room. Errors: as `generate` (a context overflow where plain decoding
/// would overflow).
pub fn generate_speculative(
    model: &Model,
    state: &mut State,
    prompt: &[u32],
    params: &GenerateParams,
    draft: &Draft,
    on_token: &mut dyn FnMut(u32),
) -> Result<(GenerateOutput, SpecStats)> {
    let cfg = model.config();
    let vocab = cfg.vocab_size;
    let mut sampler = Sampler::new(params.sampler);
    let t0 = Instant::now();
    let Prefilled {
        logits: mut all,
        first: mut tok,
        prefill_s,
    } = prefill(model, state, prompt, params, &mut sampler)?;
    let ttft_s = t0.elapsed().as_secs_f64();
    let mut history = prompt.to_vec();
    history.push(tok);
    let mut out = vec![tok];
    on_token(tok);
    let mut decode_s = Vec::new();
    let mut stats = SpecStats::default();
    let mut stopped = params.stop_ids.contains(&tok);
    let mut fed = Vec::with_capacity(draft.k() + 1);
    let mut clock = crate::engine::step_clock::StepClock::new(model.par());
    while !stopped && out.len() < params.max_tokens {
        clock.start();
        let t = Instant::now();
        // A pass emits at most drafts + 1 ids and needs drafts + 1 positions.
        let left = params.max_tokens - out.len();
        let room = state.max_context.saturating_sub(state.pos);
        let max = draft.k().min(left - 1).min(room.saturating_sub(1));
        let d = draft.propose(&history, out.len(), max);
        fed.clear();
        fed.push(tok);
        fed.extend_from_slice(&d);
        state.arm_rewind(cfg, draft.k() + 1);
        let rows = match model.forward_logits(state, &fed, LogitsMode::All) {
            Ok(l) => l,
            Err(e) => {
                state.disarm_rewind();
                return Err(e);
            }
        };
        stats.forwards += 1;
        stats.drafted_tokens += d.len() as u64;
        let mut emitted = 0usize;
        for i in 0..fed.len() {
            let l = &mut rows[i * vocab..(i + 1) * vocab];
            perturb(l, params.perturb_logit);
            let s = sampler.sample(l);
            if let Some(a) = all.as_mut() {
                a.extend_from_slice(l);
            }
            emitted += 1;
            tok = s;
            out.push(s);
            history.push(s);
            on_token(s);
            stopped = params.stop_ids.contains(&s);
            let accepted = d.get(i) == Some(&s);
            if accepted {
                stats.accepted_tokens += 1;
            }
            if !accepted || stopped || out.len() >= params.max_tokens {
                break;
            }
        }
        if emitted < fed.len() {
            state.rewind_to(cfg, emitted)?;
            model.note_rewind(state.pos);
        } else {
            state.disarm_rewind();
        }
        let per = t.elapsed().as_secs_f64() / emitted as f64;
        decode_s.extend(std::iter::repeat_n(per, emitted));
        clock.stop_split(emitted);
    }
    if out.len() > params.max_tokens {
        bail!("internal: emitted more than max_tokens");
    }
    Ok((
        GenerateOutput {
            prompt_ids: prompt.to_vec(),
            output_ids: out,
            logits: all,
            prefill_s,
            ttft_s,
            decode_s,
            stopped,
            sched: clock.finish(),
        },
        stats,
    ))
}
