//! Prefill then decode: the generation loop with per-token timings.

#![warn(missing_docs)]

use std::time::Instant;

use anyhow::{bail, Result};

use crate::engine::sampler::{Sampler, SamplerConfig};
use crate::engine::step_clock::{StepClock, StepFigures};
use crate::model::{LogitsMode, Model, State};

/// Generation settings.
#[derive(Debug, Clone)]
pub struct GenerateParams {
    /// Maximum number of new tokens (≥ 1).
    pub max_tokens: usize,
    /// Token selection (greedy when `temperature <= 0`).
    pub sampler: SamplerConfig,
    /// Token ids that end generation (the config's `eos_token_id`s); the stop token
    /// is included in the output ids.
    pub stop_ids: Vec<u32>,
    /// Keep the logits of every position for `GenerateOutput::logits`.
    pub keep_logits: bool,
    /// Prefill at most this many prompt tokens per forward call (bounds the
    /// per-call activation memory, e.g. AttnRes blocks `n·blocks·D` f32); 0 = the
    /// whole prompt at once. Results are bit-identical for any chunking.
    pub prefill_chunk: usize,
    /// Test-only: add +1000 to this token's logit before every sampling step, so the
    /// output differs (the sweep's FAIL path is tested with it). `None` normally.
    pub perturb_logit: Option<u32>,
}

pub(crate) fn perturb(logits: &mut [f32], id: Option<u32>) {
    if let Some(i) = id {
        if let Some(v) = logits.get_mut(i as usize) {
            *v += 1000.0;
        }
    }
}

/// Result of [`generate`].
#[derive(Debug, Clone)]
pub struct GenerateOutput {
    /// The prompt as fed.
    pub prompt_ids: Vec<u32>,
    /// Generated ids (including a final stop id, if any).
    pub output_ids: Vec<u32>,
    /// With `keep_logits`: `[rows, vocab]` row-major, `rows = prompt_len + output_len − 1`;
    /// row `i` is the distribution over the token at position `i + 1` (prompt rows are
    /// teacher-forced; row `prompt_len − 1 + j` produced `output_ids[j]`).
    pub logits: Option<Vec<f32>>,
    /// Seconds spent in the prefill forward (prompt → first logits).
    pub prefill_s: f64,
    /// Seconds from the start of prefill until the first token was chosen.
    pub ttft_s: f64,
    /// Seconds of each decode step (one forward + sampling), one per token after the first.
    pub decode_s: Vec<f64>,
    /// True when generation ended on a stop id.
    pub stopped: bool,
    /// Run-queue waits per decode step and the decode loop's CPU time
    /// ([`crate::engine::step_clock`]).
    pub sched: StepFigures,
}

/// SHA-256 (lower-case hex) of token ids encoded as u32 little-endian, concatenated:
/// the `output_ids_sha256` that `run` reports and the sweep compares across budgets.
pub fn ids_sha256(ids: &[u32]) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    for id in ids {
        h.update(id.to_le_bytes());
    }
    crate::util::digest::hex(&h.finalize())
}

impl GenerateOutput {
    /// [`ids_sha256`] of `output_ids`.
    pub fn output_ids_sha256(&self) -> String {
        ids_sha256(&self.output_ids)
    }
    /// Median of `decode_s` (0 when no decode step ran).
    pub fn decode_median_s(&self) -> f64 {
        crate::util::stats::median(&self.decode_s).unwrap_or(0.0)
    }
}

/// Prefills `prompt` into `state` in forwards of `params.prefill_chunk` tokens and
/// samples the first token with `sampler` ([`Prefilled`]).
/// Errors: an empty prompt, `max_tokens` 0, and the forward's errors.
pub fn prefill(
    model: &Model,
    state: &mut State,
    prompt: &[u32],
    params: &GenerateParams,
    sampler: &mut Sampler,
) -> Result<Prefilled> {
    if prompt.is_empty() {
        bail!("empty prompt");
    }
    if params.max_tokens == 0 {
        bail!("max_tokens must be ≥ 1");
    }
    let vocab = model.config().vocab_size;
    let t0 = Instant::now();
    let mode = if params.keep_logits {
        LogitsMode::All
    } else {
        LogitsMode::Last
    };
    let chunk = if params.prefill_chunk == 0 {
        prompt.len()
    } else {
        params.prefill_chunk
    };
    let mut pl = Vec::new();
    let n_chunks = prompt.len().div_ceil(chunk);
    for (i, c) in prompt.chunks(chunk).enumerate() {
        let m = if i + 1 == n_chunks || mode == LogitsMode::All {
            mode
        } else {
            LogitsMode::None
        };
        pl.extend(model.forward(state, c, m)?);
    }
    let prefill_s = t0.elapsed().as_secs_f64();
    let mut last = pl[pl.len() - vocab..].to_vec();
    perturb(&mut last, params.perturb_logit);
    let all = if params.keep_logits { Some(pl) } else { None };
    Ok(Prefilled {
        logits: all,
        first: sampler.sample(&last),
        prefill_s,
    })
}

/// What [`prefill`] returns.
#[derive(Debug, Clone)]
pub struct Prefilled {
    /// With `keep_logits`: the prompt rows' logits `[prompt_len, vocab]`; else `None`.
    pub logits: Option<Vec<f32>>,
    /// The first generated id.
    pub first: u32,
    /// Seconds in the prefill forwards.
    pub prefill_s: f64,
}

/// Prefills `prompt` into `state` (batched forwards of `prefill_chunk` tokens), then decodes up to
/// `max_tokens` tokens, one forward per token, calling `on_token` for each new
/// token as soon as it is chosen. Stops on a stop id or `max_tokens`.
pub fn generate(
    model: &Model,
    state: &mut State,
    prompt: &[u32],
    params: &GenerateParams,
    on_token: &mut dyn FnMut(u32),
) -> Result<GenerateOutput> {
    let mut sampler = Sampler::new(params.sampler);
    let t0 = Instant::now();
    let Prefilled {
        logits: mut all,
        first: mut tok,
        prefill_s,
    } = prefill(model, state, prompt, params, &mut sampler)?;
    let ttft_s = t0.elapsed().as_secs_f64();
    let mut out = vec![tok];
    on_token(tok);
    let mut decode_s = Vec::new();
    let mut clock = StepClock::new(model.par());
    let mut stopped = params.stop_ids.contains(&tok);
    while !stopped && out.len() < params.max_tokens {
        clock.start();
        let t = Instant::now();
        // The logits stay in the state's arena: a decode step allocates no activations.
        let l = model.forward_logits(state, &[tok], LogitsMode::Last)?;
        perturb(l, params.perturb_logit);
        tok = sampler.sample(l);
        decode_s.push(t.elapsed().as_secs_f64());
        clock.stop();
        if let Some(a) = all.as_mut() {
            a.extend_from_slice(l);
        }
        out.push(tok);
        on_token(tok);
        stopped = params.stop_ids.contains(&tok);
    }
    Ok(GenerateOutput {
        prompt_ids: prompt.to_vec(),
        output_ids: out,
        logits: all,
        prefill_s,
        ttft_s,
        decode_s,
        stopped,
        sched: clock.finish(),
    })
}
