//! The model: one forward path for `kimi_k3` and `kimi_linear`, features switched by
//! [`ModelConfig`] (KDA / MLA per layer, dense / MoE MLP, SiLU / SiTU, latent MoE,
//! gated MLA, Block AttnRes or the plain additive residual).
//!
//! Reference: mlx-lm `models/kimi_k3.py` (`KimiK3TextModel`, `KimiK3DecoderLayer`) and
//! `models/kimi_linear.py` (`KimiLinearModel`, `KimiDecoderLayer`); notes in
//! docs/model.md. All activations are f32; weights are read
//! through the [`WeightStore`] and upcast on the fly.
//!
//! Processing order: a call to [`Model::forward`] with `n` tokens runs layer by layer
//! (`begin_layer` … `end_layer` once per layer), and within a layer processes the
//! tokens in order. Every per-token operation is the same as when the tokens are
//! fed one by one, so batched prefill and token-by-token decode give bit-identical
//! logits (the batched products `matmul_*` are bit-identical to `matvec_*` per row).

#![warn(missing_docs)]

pub mod attn_res;
pub mod ctx;
mod forward;
pub mod gpt_oss;
pub mod kda;
mod layer;
pub mod lend;
pub mod mla;
pub mod mlp;
pub mod moe;
pub mod norm;
pub mod residual;
pub mod rewind;
pub mod state;
pub mod weights;

use std::collections::HashMap;
use std::sync::Arc;

use anyhow::{bail, Context, Result};

use crate::format::checkpoint::Checkpoint;
use crate::format::config::{AttnKind, MlpKind, ModelConfig};
use crate::format::schema::Dtype;
use crate::kernels::Par;
use crate::store::WeightStore;

use crate::engine::arena::Scratch;
pub use state::{KdaState, KvCache, LayerState, MlaCache, State};
use weights::{Mat, Weights};

/// Which positions' logits [`Model::forward`] returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogitsMode {
    /// None (returns an empty vector; skips `lm_head`).
    None,
    /// The last position only: `[vocab]`.
    Last,
    /// Every position of the call: `[n, vocab]`.
    All,
}

/// One sequence's part of a [`Model::forward_batch`].
pub struct SeqTokens<'a> {
    /// The sequence's state (its KDA states and MLA caches; its own arena is not used).
    pub state: &'a mut State,
    /// Its next tokens (≥ 1), at positions `state.pos ..`.
    pub tokens: &'a [u32],
    /// Whether the forward returns the logits of its last token.
    pub logits: bool,
}

/// A sequence's tokens within one forward: its layer states and position, and
/// where its tokens start in the call's `[n, D]` activations.
struct Seg<'a> {
    layers: &'a mut Vec<LayerState>,
    pos: &'a mut usize,
    tokens: &'a [u32],
    start: usize,
    logits: bool,
    /// The sequence's armed restore point, which the layers fill ([`rewind`]).
    rewind: Option<&'a mut rewind::Rewind>,
}

/// A loaded model: configuration, weight accessor and kernel thread handle.
pub struct Model {
    cfg: ModelConfig,
    w: Weights,
    par: Par,
    /// Debug: check the residual stream after every layer ([`Model::with_hidden_checks`]).
    check_hidden: bool,
    /// gpt-oss RoPE tables (`None` for the Kimi models, which use NoPE).
    rope: Option<gpt_oss::rope::Rope>,
}

impl Model {
    /// A model reading its weights from `store`. Shapes are checked when tensors are
    /// first read (errors name the tensor); validate the checkpoint beforehand with
    /// [`crate::format::inspect::validate`] to refuse bad checkpoints up front (as `Model::open` in
    /// [`crate::engine::loader`] does).
    pub fn new(cfg: ModelConfig, store: Arc<dyn WeightStore>, par: Par) -> Result<Model> {
        if cfg.hidden_size == 0 || cfg.vocab_size == 0 {
            bail!("hidden_size and vocab_size must be > 0");
        }
        if cfg.attn_kinds.len() != cfg.num_hidden_layers
            || cfg.mlp_kinds.len() != cfg.num_hidden_layers
        {
            bail!("per-layer kind lists do not match num_hidden_layers");
        }
        if cfg.mlp_kinds.contains(&MlpKind::Moe) && cfg.moe.is_none() && cfg.gpt_oss.is_none() {
            bail!("config has MoE layers but no MoE settings");
        }
        let cfg_rope = cfg
            .gpt_oss
            .as_ref()
            .map(|g| gpt_oss::rope::Rope::new(&g.rope, g.head_dim));
        Ok(Model {
            cfg,
            w: Weights {
                store,
                hints: HashMap::new(),
            },
            par,
            check_hidden: false,
            rope: cfg_rope,
        })
    }

    /// Debug option: after every layer, check the residual stream for NaN/Inf and fail
    /// naming the first layer that produced one ([`crate::format::integrity::check_hidden`]).
    /// Costs one pass over `n × hidden_size` f32 per layer. The logits are always checked.
    pub fn with_hidden_checks(mut self, on: bool) -> Self {
        self.check_hidden = on;
        self
    }

    /// Sets per-tensor dtype hints (names without the weight prefix, e.g.
    /// `model.layers.0.self_attn.A_log`), used instead of byte-length inference.
    pub fn with_dtype_hints(mut self, hints: HashMap<String, Dtype>) -> Self {
        self.w.hints = hints;
        self
    }

    /// Dtype hints from a checkpoint's headers (prefix stripped as the store does).
    pub fn dtype_hints(cfg: &ModelConfig, ck: &Checkpoint) -> HashMap<String, Dtype> {
        ck.tensors
            .iter()
            .filter_map(|(name, loc)| {
                let key = name.strip_prefix(&cfg.weight_prefix).unwrap_or(name);
                Dtype::parse(&loc.dtype).map(|d| (key.to_string(), d))
            })
            .collect()
    }

    /// The configuration.
    pub fn config(&self) -> &ModelConfig {
        &self.cfg
    }

    /// The kernel thread handle.
    pub fn par(&self) -> &Par {
        &self.par
    }

    /// A fresh per-sequence state with room for `max_context` positions and a
    /// scratch arena for the plan's prefill chunk ([`State::new`]).
    pub fn new_state(&self, max_context: usize) -> State {
        State::new(&self.cfg, max_context, self.par.threads())
    }

    /// A fresh per-sequence state whose arena fits forwards of up to `chunk` tokens.
    pub fn new_state_with_chunk(&self, max_context: usize, chunk: usize) -> State {
        State::with_chunk(&self.cfg, max_context, chunk, self.par.threads())
    }

    /// Tells the store that `state` was rewound to `pos` positions
    /// ([`State::rewind_to`]), so its records of later positions are dropped.
    pub fn note_rewind(&self, pos: usize) {
        self.w.store.rewound(pos);
    }

    /// A fresh state for a speculative run with drafts of up to `k` ids: the arena of
    /// [`crate::engine::arena::Scratch::for_speculation`] for forwards of up to `chunk` tokens.
    pub fn new_state_for_speculation(&self, max_context: usize, chunk: usize, k: usize) -> State {
        let mut st = State::without_arena(&self.cfg, max_context);
        st.scratch = Scratch::for_speculation(&self.cfg, chunk, self.par.threads(), max_context, k);
        st
    }

    fn mat(&self, layer: Option<usize>, name: &str, rows: usize, cols: usize) -> Result<Mat> {
        self.w.mat(layer, name, rows, cols)
    }

    /// Runs `tokens` (positions `state.pos ..`) through the model, advancing `state`.
    ///
    /// Returns logits per `mode`: `[vocab]` (Last), `[n, vocab]` (All) or empty.
    /// Errors: empty input, token id ≥ vocab, context overflow, missing or misshapen
    /// tensors (named), a NaN/Inf logit (naming the position; [`crate::format::integrity`]). After a tensor error the state is unusable (reset it).
    pub fn forward(&self, state: &mut State, tokens: &[u32], mode: LogitsMode) -> Result<Vec<f32>> {
        Ok(self.forward_logits(state, tokens, mode)?.to_vec())
    }

    /// [`Model::forward`] returning the logits in place in the state's arena
    /// (valid until the next call): every buffer of the pass is the arena's
    /// ([`crate::engine::arena`]), so a decode step allocates no activation memory.
    pub fn forward_logits<'s>(
        &self,
        state: &'s mut State,
        tokens: &[u32],
        mode: LogitsMode,
    ) -> Result<&'s mut [f32]> {
        let n = tokens.len();
        if n == 0 {
            bail!("forward called with no tokens");
        }
        self.check_tokens(tokens)?;
        self.check_state(state)?;
        state.check_room(n)?;
        let State {
            layers,
            scratch,
            pos,
            rewind,
            ..
        } = state;
        let mut segs = [Seg {
            layers,
            pos,
            tokens,
            start: 0,
            logits: mode != LogitsMode::None,
            rewind: rewind.as_mut().filter(|r| r.armed()),
        }];
        self.forward_segs(scratch, &mut segs, n, mode == LogitsMode::All)
    }

    /// One forward over several sequences' tokens, reading each weight once:
    /// `seqs[j].tokens` (positions `seqs[j].state.pos ..` of sequence `j`) are
    /// concatenated into one `[n, D]` activation (`n` = the sum of their lengths),
    /// every matrix of the trunk multiplies all `n` tokens at once, and on a store
    /// that groups experts ([`WeightStore::groups_chunk_experts`], the streaming
    /// store) each routed expert is fetched once for the tokens that chose it;
    /// attention (KDA recurrence, MLA cache) runs per sequence on its own state.
    /// Every per-token operation is the one of a single-sequence forward (batched
    /// matmul ≡ matvec per row, router-rank order per token), so each sequence's
    /// logits are bit-identical to running it alone.
    ///
    /// `scratch` is the shared arena ([`crate::engine::arena::Scratch::for_batch`]; a
    /// forward of more tokens or logit rows than it was sized for grows it); the
    /// sequences' own arenas are not used. Returns `[m, vocab]` in `scratch` (valid
    /// until its next use): the logits of the last token of each sequence with
    /// `logits` set, in `seqs` order (`m` of them; empty when none asks).
    ///
    /// Errors: no sequences, a sequence without tokens, a token id ≥ vocab, a
    /// state of another model, a context overflow (naming the sequence's index in
    /// `seqs`); then nothing has changed. Missing or misshapen tensors and NaN/Inf
    /// logits as [`Model::forward`]; after those every state of the call is
    /// unusable (reset them).
    pub fn forward_batch<'s>(
        &self,
        scratch: &'s mut Scratch,
        seqs: &mut [SeqTokens<'_>],
    ) -> Result<&'s mut [f32]> {
        if seqs.is_empty() {
            bail!("batch forward called with no sequences");
        }
        let mut n = 0;
        for (j, s) in seqs.iter().enumerate() {
            let ctx = || format!("sequence {j} of the batch");
            if s.tokens.is_empty() {
                bail!("sequence {j} of the batch has no tokens");
            }
            self.check_tokens(s.tokens).with_context(ctx)?;
            self.check_state(s.state).with_context(ctx)?;
            s.state.check_room(s.tokens.len()).with_context(ctx)?;
            n += s.tokens.len();
        }
        let mut segs: Vec<Seg<'_>> = Vec::with_capacity(seqs.len());
        let mut start = 0;
        for s in seqs.iter_mut() {
            let st = &mut *s.state;
            segs.push(Seg {
                layers: &mut st.layers,
                pos: &mut st.pos,
                tokens: s.tokens,
                start,
                logits: s.logits,
                rewind: None,
            });
            start += s.tokens.len();
        }
        self.forward_segs(scratch, &mut segs, n, false)
    }

    fn check_tokens(&self, tokens: &[u32]) -> Result<()> {
        let vocab = self.cfg.vocab_size;
        if let Some(&bad) = tokens.iter().find(|&&t| t as usize >= vocab) {
            bail!("token id {bad} is out of range (vocab_size {vocab})");
        }
        Ok(())
    }

    fn check_state(&self, state: &State) -> Result<()> {
        let kinds_match = state.layers.len() == self.cfg.num_hidden_layers
            && state.layers.iter().zip(&self.cfg.attn_kinds).all(|(l, k)| {
                matches!(
                    (l, k),
                    (LayerState::Kda(_), AttnKind::Kda)
                        | (LayerState::Mla(_), AttnKind::Mla)
                        | (LayerState::Kv(_), AttnKind::Gqa)
                )
            });
        if !kinds_match {
            bail!("state was built for a different model");
        }
        Ok(())
    }
}
