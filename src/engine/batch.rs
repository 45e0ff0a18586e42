//! Decoding many sequences together: one forward per step over every active
//! sequence's next tokens ([`Model::forward_batch`]), so each weight is read once
//! per step for all of them (the trunk once; on the streaming store each routed
//! expert once for the tokens that chose it).
//!
//! A [`Batch`] holds one shared activation arena ([`Scratch::for_batch`]) and,
//! per sequence, its own state ([`State::without_arena`]: KDA recurrent states,
//! MLA latent caches), sampler and ids. A sequence joins with its prompt
//! ([`Batch::add`]); each [`Batch::step`] feeds one token of every decoding
//! sequence and, in the step's remaining tokens, the next chunk of the prompts
//! still being prefilled (a prompt may take several steps); a finished sequence
//! stays until [`Batch::remove`] hands its ids back and frees its slot.
//!
//! Determinism: every per-token operation of a batched forward is the one of a
//! single-sequence forward (batched matmul ≡ matvec per row; attention per
//! sequence; chunking never changes a bit), and each sequence has its own
//! sampler, so its ids are byte-identical to [`crate::engine::generate::generate`] with
//! the same prompt and settings, whatever else runs beside it.
//!
//! Memory: plan the streaming store for the batch
//! ([`crate::store::plan::plan`] given [`Scratch::activations`], [`Model::open_batch`]): `max_batch`
//! states of `max_context` positions and the arena for
//! [`planned_step_tokens`]`(max_context, max_batch)` tokens with `max_batch`
//! rows of logits.
//!
//! Not per batch: router look-ahead prefetch runs for one-token forwards only
//! (a batch step of several tokens reads its experts grouped instead), and an
//! expert trace (`record_trace`, oracle prefetch) is keyed by one sequence's
//! positions.

#![warn(missing_docs)]

use anyhow::{bail, Result};

use crate::engine::arena::{planned_step_tokens, Scratch};
use crate::engine::generate::GenerateParams;
use crate::engine::sampler::Sampler;
use crate::model::{Model, SeqTokens, State};

/// A sequence of a [`Batch`] (unique within the batch for its lifetime).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SeqId(pub u64);

impl std::fmt::Display for SeqId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "seq-{}", self.0)
    }
}

/// Why a sequence stopped generating.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finish {
    /// It produced a stop id (included in its ids), as [`crate::engine::generate::generate`] stops.
    Stop,
    /// It produced `max_tokens` ids.
    Length,
    /// Its context is full (`max_context` positions): no further token can be
    /// fed. (A single-sequence [`crate::engine::generate::generate`] fails there with a
    /// context-overflow error after the same ids.)
    Context,
}

/// A token chosen in a [`Batch::step`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepToken {
    /// The sequence it belongs to.
    pub id: SeqId,
    /// The token id.
    pub token: u32,
    /// Set when this was the sequence's last token.
    pub finish: Option<Finish>,
}

/// What [`Batch::remove`] hands back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeqOutput {
    /// The prompt as given.
    pub prompt_ids: Vec<u32>,
    /// The generated ids (a final stop id included).
    pub output_ids: Vec<u32>,
    /// Why it stopped (`None` when removed while still running).
    pub finish: Option<Finish>,
    /// Prompt tokens fed by the time it was removed.
    pub prompt_fed: usize,
}

struct Seq {
    id: SeqId,
    state: State,
    prompt: Vec<u32>,
    /// Prompt tokens fed so far.
    fed: usize,
    params: GenerateParams,
    sampler: Sampler,
    output: Vec<u32>,
    finish: Option<Finish>,
    /// Tokens this step feeds (set while a step is planned).
    take: usize,
}

impl Seq {
    fn decoding(&self) -> bool {
        self.finish.is_none() && self.fed == self.prompt.len()
    }
}

/// Up to `max_batch` sequences decoded together (see the module docs).
pub struct Batch {
    scratch: Scratch,
    seqs: Vec<Seq>,
    /// States of removed sequences, reset, for the next ones.
    free: Vec<State>,
    max_batch: usize,
    max_context: usize,
    step_tokens: usize,
    next_id: u64,
}

impl Batch {
    /// An empty batch for `model` holding up to `max_batch` sequences of up to
    /// `max_context` positions each (prompt plus generated tokens), with the
    /// shared arena allocated ([`Scratch::for_batch`] on the model's kernel threads).
    ///
    /// Errors: `max_batch` or `max_context` 0.
    pub fn new(model: &Model, max_batch: usize, max_context: usize) -> Result<Batch> {
        if max_batch == 0 {
            bail!("a batch needs max_batch ≥ 1");
        }
        if max_context == 0 {
            bail!("a batch needs max_context ≥ 1");
        }
        Ok(Batch {
            scratch: Scratch::for_batch(
                model.config(),
                max_batch,
                model.par().threads(),
                max_context,
            ),
            seqs: Vec::with_capacity(max_batch),
            free: Vec::new(),
            max_batch,
            max_context,
            step_tokens: planned_step_tokens(max_context, max_batch),
            next_id: 0,
        })
    }

    /// Sequences the batch holds at most.
    pub fn max_batch(&self) -> usize {
        self.max_batch
    }

    /// Positions of one sequence at most.
    pub fn max_context(&self) -> usize {
        self.max_context
    }

    /// Tokens one step feeds at most, all sequences together
    /// ([`planned_step_tokens`]: the arena's size).
    pub fn step_tokens(&self) -> usize {
        self.step_tokens
    }

    /// Sequences held (running or finished and not yet removed).
    pub fn len(&self) -> usize {
        self.seqs.len()
    }

    /// Whether the batch holds no sequence.
    pub fn is_empty(&self) -> bool {
        self.seqs.is_empty()
    }

    /// Sequences still running (prefilling or decoding).
    pub fn active(&self) -> usize {
        self.seqs.iter().filter(|s| s.finish.is_none()).count()
    }

    /// Bytes of the shared arena now (the plan's `activation_bytes` until a
    /// forward outgrows it).
    pub fn scratch_bytes(&self) -> u64 {
        self.scratch.bytes()
    }

    /// Adds a sequence with `prompt` (token ids) and `params` (sampling, stop ids,
    /// `max_tokens`; `prefill_chunk` caps the prompt tokens fed per step, 0 = as
    /// many as the step has room for). Nothing is computed until [`Batch::step`].
    ///
    /// Errors: the batch already holds `max_batch` sequences (remove a finished
    /// one); an empty prompt; a token id ≥ vocab; a prompt longer than
    /// `max_context`; `max_tokens` 0; `keep_logits` (not kept in a batch).
    pub fn add(&mut self, model: &Model, prompt: &[u32], params: &GenerateParams) -> Result<SeqId> {
        if self.seqs.len() >= self.max_batch {
            bail!(
                "the batch is full ({} sequences, its max_batch); remove a finished one first",
                self.max_batch
            );
        }
        if prompt.is_empty() {
            bail!("empty prompt");
        }
        if params.max_tokens == 0 {
            bail!("max_tokens must be ≥ 1");
        }
        if params.keep_logits {
            bail!("keep_logits is not supported in a batch (logits are not kept per sequence)");
        }
        let vocab = model.config().vocab_size;
        if let Some(&bad) = prompt.iter().find(|&&t| t as usize >= vocab) {
            bail!("token id {bad} is out of range (vocab_size {vocab})");
        }
        if prompt.len() > self.max_context {
            bail!(
                "the prompt has {} tokens, more than max_context {}",
                prompt.len(),
                self.max_context
            );
        }
        let state = match self.free.pop() {
            Some(s) => s,
            None => State::without_arena(model.config(), self.max_context),
        };
        let id = SeqId(self.next_id);
        self.next_id += 1;
        self.seqs.push(Seq {
            id,
            state,
            prompt: prompt.to_vec(),
            fed: 0,
            params: params.clone(),
            sampler: Sampler::new(params.sampler),
            output: Vec::new(),
            finish: None,
            take: 0,
        });
        Ok(id)
    }

    /// One forward over every running sequence: one token of each decoding
    /// sequence (its last id), then — in the [`Batch::step_tokens`] left, in the
    /// order the sequences were added — the next prompt tokens of those still
    /// prefilling (at most `prefill_chunk` each). Samples the next id of every
    /// sequence whose prompt is now fed, and returns those ids in the order the
    /// sequences were added (empty when nothing runs).
    ///
    /// Errors: those of [`Model::forward_batch`] (a missing or misshapen tensor,
    /// IO failure, NaN/Inf logits); the sequences of the failed step are then
    /// unusable — remove them.
    pub fn step(&mut self, model: &Model) -> Result<Vec<StepToken>> {
        self.step_with(model, &mut |_, _, _| {})
    }

    /// [`Batch::step`], calling `on_logits(id, token, logits)` for every token
    /// chosen, with the `[vocab]` logits it was sampled from (e.g. for log-probabilities).
    ///
    /// Errors: as [`Batch::step`].
    pub fn step_with(
        &mut self,
        model: &Model,
        on_logits: &mut dyn FnMut(SeqId, u32, &[f32]),
    ) -> Result<Vec<StepToken>> {
        let mut left = self.step_tokens;
        for s in &mut self.seqs {
            s.take = 0;
            if s.decoding() {
                s.take = 1;
                left -= 1;
            }
        }
        for s in &mut self.seqs {
            if s.finish.is_none() && s.fed < s.prompt.len() && left > 0 {
                let chunk = match s.params.prefill_chunk {
                    0 => usize::MAX,
                    c => c,
                };
                s.take = (s.prompt.len() - s.fed).min(chunk).min(left);
                left -= s.take;
            }
        }
        let mut parts: Vec<SeqTokens<'_>> = self
            .seqs
            .iter_mut()
            .filter(|s| s.take > 0)
            .map(|s| {
                let tokens = if s.fed < s.prompt.len() {
                    &s.prompt[s.fed..s.fed + s.take]
                } else {
                    std::slice::from_ref(s.output.last().expect("a decoding sequence has an id"))
                };
                SeqTokens {
                    state: &mut s.state,
                    tokens,
                    logits: s.fed + s.take >= s.prompt.len(),
                }
            })
            .collect();
        if parts.is_empty() {
            return Ok(Vec::new());
        }
        let vocab = model.config().vocab_size;
        let logits = model.forward_batch(&mut self.scratch, &mut parts)?;
        drop(parts);
        let mut out = Vec::new();
        let mut row = 0;
        for s in self.seqs.iter_mut().filter(|s| s.take > 0) {
            s.fed = (s.fed + s.take).min(s.prompt.len());
            let prefilling = s.output.is_empty() && s.fed < s.prompt.len();
            if prefilling {
                continue;
            }
            let l = &mut logits[row * vocab..(row + 1) * vocab];
            row += 1;
            if let Some(i) = s.params.perturb_logit {
                if let Some(v) = l.get_mut(i as usize) {
                    *v += 1000.0;
                }
            }
            let tok = s.sampler.sample(l);
            on_logits(s.id, tok, l);
            s.output.push(tok);
            s.finish = if s.params.stop_ids.contains(&tok) {
                Some(Finish::Stop)
            } else if s.output.len() >= s.params.max_tokens {
                Some(Finish::Length)
            } else if s.state.pos >= self.max_context {
                Some(Finish::Context)
            } else {
                None
            };
            out.push(StepToken {
                id: s.id,
                token: tok,
                finish: s.finish,
            });
        }
        Ok(out)
    }

    /// The ids generated so far by sequence `id` (`None`: not in the batch).
    pub fn output(&self, id: SeqId) -> Option<&[u32]> {
        self.seq(id).map(|s| &s.output[..])
    }

    /// Why sequence `id` finished (`Some(None)`: still running; `None`: not in the batch).
    pub fn finish(&self, id: SeqId) -> Option<Option<Finish>> {
        self.seq(id).map(|s| s.finish)
    }

    /// Removes sequence `id` (finished or not), freeing its slot; its state is
    /// kept for the next sequence added. `None` when it is not in the batch.
    pub fn remove(&mut self, id: SeqId) -> Option<SeqOutput> {
        let i = self.seqs.iter().position(|s| s.id == id)?;
        let mut s = self.seqs.remove(i);
        s.state.reset();
        self.free.push(s.state);
        Some(SeqOutput {
            prompt_ids: s.prompt,
            output_ids: s.output,
            finish: s.finish,
            prompt_fed: s.fed,
        })
    }

    fn seq(&self, id: SeqId) -> Option<&Seq> {
        self.seqs.iter().find(|s| s.id == id)
    }
}
