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
pub mod gpt_oss;
pub mod kda;
pub mod mla;
pub mod mlp;
pub mod moe;
pub mod norm;
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

use crate::engine::arena::{zeroed, Scratch};
use crate::util::profile::{self, Op};
use norm::{rms_norm_inplace, rms_norm_into};
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

    /// AttnRes `w_eff = {prefix}_norm.weight ⊙ {prefix}_proj.weight` `[D]` into
    /// `out` (`tmp` holds the projection weight).
    fn res_w_eff(
        &self,
        layer: Option<usize>,
        prefix: &str,
        out: &mut Vec<f32>,
        tmp: &mut Vec<f32>,
    ) -> Result<()> {
        let d = self.cfg.hidden_size;
        self.w
            .vec_into(layer, &format!("{prefix}_norm.weight"), d, out)?;
        self.w
            .vec_into(layer, &format!("{prefix}_proj.weight"), d, tmp)?;
        for (a, b) in out.iter_mut().zip(tmp.iter()) {
            *a *= b;
        }
        Ok(())
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

    /// The forward of `n` tokens, the concatenation of `segs`' tokens, on the arena
    /// `sc` (inputs already checked). Logits: every token's (`all_rows`, one
    /// sequence only) or the last token's of each segment asking for them.
    fn forward_segs<'s>(
        &self,
        sc: &'s mut Scratch,
        segs: &mut [Seg<'_>],
        n: usize,
        all_rows: bool,
    ) -> Result<&'s mut [f32]> {
        let cfg = &self.cfg;
        let d = cfg.hidden_size;
        let pos0 = *segs[0].pos;
        self.w.store.note_activation_bytes(sc.bytes());

        // Residual stream per token: the running sum (plain residual) or the AttnRes partial sum.
        let prof = profile::scope(Op::Embed);
        let hidden = zeroed(&mut sc.main.hidden, n * d);
        // Embedding rows of the call's tokens, read together (a streaming store may
        // read just these rows).
        let ids = &mut sc.main.ids;
        ids.clear();
        for s in segs.iter() {
            ids.extend(s.tokens.iter().map(|&t| t as usize));
        }
        self.w.rows_into(
            None,
            "model.embed_tokens.weight",
            cfg.vocab_size,
            d,
            ids,
            hidden,
        )?;
        drop(prof);
        let attn_res = cfg.attn_res_block_size;
        // Completed AttnRes blocks, the same count for every token of the call.
        let mut nb = 0usize;
        if attn_res.is_some() {
            let b = sc.dims.blocks;
            zeroed(&mut sc.main.blocks, n * b * d);
            zeroed(&mut sc.main.blocks_inv, n * b);
        }

        self.w.store.begin_token(pos0);
        let lookahead = n == 1 && self.w.store.wants_lookahead();
        #[allow(clippy::needless_range_loop)] // `i` is the layer id the store hints take
        for i in 0..cfg.num_hidden_layers {
            self.w.store.begin_layer(i);
            if lookahead {
                self.lookahead(i, sc)?;
            }
            let r = if cfg.gpt_oss.is_some() {
                self.gpt_oss_layer(i, segs, sc, n)
            } else {
                self.layer(i, segs, sc, n, &mut nb)
            };
            self.w.store.end_layer(i);
            r.with_context(|| format!("layer {i}"))?;
            if self.check_hidden {
                for s in segs.iter() {
                    let rows = s.start * d..(s.start + s.tokens.len()) * d;
                    crate::format::integrity::check_hidden(&sc.main.hidden[rows], d, i, *s.pos)?;
                }
            }
        }

        // The tokens whose logits are returned.
        let single: [usize; 1];
        let every: Vec<usize>;
        let mut listed = std::mem::take(&mut sc.main.logit_ids);
        listed.clear();
        let rows: &[usize] = if all_rows {
            every = (0..n).collect();
            &every
        } else if segs.len() == 1 {
            single = [n - 1];
            &single[..usize::from(segs[0].logits)]
        } else {
            listed.extend(
                segs.iter()
                    .filter(|s| s.logits)
                    .map(|s| s.start + s.tokens.len() - 1),
            );
            &listed
        };
        let r = self.lm_head(sc, rows, nb);
        let ok = r.and_then(|()| {
            let vocab = cfg.vocab_size;
            let logits = &sc.main.logits[..rows.len() * vocab];
            if segs.len() == 1 {
                return crate::format::integrity::check_logits(logits, vocab, rows, pos0);
            }
            for (j, s) in segs.iter().filter(|s| s.logits).enumerate() {
                let row = &logits[j * vocab..(j + 1) * vocab];
                crate::format::integrity::check_logits(row, vocab, &[s.tokens.len() - 1], *s.pos)?;
            }
            Ok(())
        });
        let m = rows.len();
        sc.main.logit_ids = listed;
        ok?;
        for s in segs.iter_mut() {
            *s.pos += s.tokens.len();
        }
        Ok(&mut sc.main.logits[..m * cfg.vocab_size])
    }

    /// The final norm and `lm_head` of the tokens `rows` (indices into the call's
    /// residual stream) into `sc.main.logits: [rows.len(), vocab]` (nothing for no rows).
    fn lm_head(&self, sc: &mut Scratch, rows: &[usize], nb: usize) -> Result<()> {
        if rows.is_empty() {
            sc.main.logits.clear();
            return Ok(());
        }
        let cfg = &self.cfg;
        let d = cfg.hidden_size;
        let eps = cfg.rms_norm_eps;
        let par = &self.par;
        let attn_res = cfg.attn_res_block_size;
        let _prof = profile::scope(Op::LmHead);
        let main = &mut sc.main;
        if attn_res.is_some() {
            self.res_w_eff(
                None,
                "model.output_attn_res",
                &mut main.res_w,
                &mut main.res_tmp,
            )?;
        }
        self.w
            .vec_into(None, "model.norm.weight", d, &mut main.ln_post)?;
        let head = if cfg.tie_word_embeddings {
            "model.embed_tokens.weight"
        } else {
            "lm_head.weight"
        };
        let nrows = rows.len();
        let xs = zeroed(&mut main.xin, nrows * d);
        let b = sc.dims.blocks;
        for (j, &t) in rows.iter().enumerate() {
            let p = &main.hidden[t * d..(t + 1) * d];
            let x = &mut xs[j * d..(j + 1) * d];
            match attn_res {
                Some(_) => {
                    attn_res::mix_into(
                        &main.blocks[t * b * d..(t * b + nb) * d],
                        &main.blocks_inv[t * b..t * b + nb],
                        p,
                        &main.res_w,
                        eps,
                        &mut main.mix,
                        x,
                    );
                    rms_norm_inplace(x, &main.ln_post, eps);
                }
                None => rms_norm_into(p, &main.ln_post, eps, x),
            }
        }
        let vocab = cfg.vocab_size;
        let logits = zeroed(&mut main.logits, nrows * vocab);
        // lm_head in the store's row blocks: each logit is the same fixed-order dot
        // product as with the whole matrix (kernels/dense.rs), so logits are identical.
        let blocks = self.w.row_blocks(None, head, vocab);
        let ws = &mut sc.kern;
        if blocks.len() == 1 {
            self.w
                .mat_rows(None, head, vocab, d, 0..vocab)?
                .mm_into(par, ws, xs, nrows, logits);
        } else if nrows == 1 {
            // One row: each block's logits are a contiguous slice of the row.
            for r in blocks {
                let block = self.w.mat_rows(None, head, vocab, d, r.clone())?;
                block.mm_into(par, ws, xs, 1, &mut logits[r]);
            }
        } else {
            // Several rows (a batch, or `LogitsMode::All` outside the plan: the
            // logits grow to `[n, vocab]` there): one block's rows at a time.
            let ys = &mut main.head_block;
            for r in blocks {
                let block = self.w.mat_rows(None, head, vocab, d, r.clone())?;
                let bn = r.len();
                let ys = zeroed(ys, nrows * bn);
                block.mm_into(par, ws, xs, nrows, ys);
                for t in 0..nrows {
                    logits[t * vocab + r.start..t * vocab + r.end]
                        .copy_from_slice(&ys[t * bn..(t + 1) * bn]);
                }
            }
        }
        Ok(())
    }

    /// Router look-ahead (decode only): runs the router of the next MoE layer after
    /// `i` on the residual stream entering layer `i` (normalised with that layer's
    /// `post_attention_layernorm`) and tells the store which experts it will likely
    /// need. Only IO depends on the guess; compute always uses the true routing.
    /// The residual stream entering layer `i` is `sc.main.hidden[..D]`; the
    /// arena's MLP-input, router and MoE buffers are free at this point.
    fn lookahead(&self, i: usize, sc: &mut Scratch) -> Result<()> {
        let cfg = &self.cfg;
        if cfg.gpt_oss.is_some() {
            return self.gpt_oss_lookahead(i, sc);
        }
        let Some(moe) = cfg.moe.as_ref() else {
            return Ok(());
        };
        let Some(j) = (i + 1..cfg.num_hidden_layers).find(|&j| cfg.mlp_kinds[j] == MlpKind::Moe)
        else {
            return Ok(());
        };
        let d = cfg.hidden_size;
        let main = &mut sc.main;
        self.w.vec_into(
            Some(j),
            "post_attention_layernorm.weight",
            d,
            &mut main.ln_post,
        )?;
        let x = zeroed(&mut main.xin2, d);
        rms_norm_into(&main.hidden[..d], &main.ln_post, cfg.rms_norm_eps, x);
        let gate = self.mat(Some(j), "block_sparse_moe.gate.weight", moe.num_experts, d)?;
        self.w.vec_into(
            Some(j),
            "block_sparse_moe.gate.e_score_correction_bias",
            moe.num_experts,
            &mut sc.moe.bias,
        )?;
        let logits = zeroed(&mut sc.moe.logits, moe.num_experts);
        gate.mv_into(&self.par, &mut sc.kern, x, logits);
        let r = &mut sc.router;
        r.routes.clear();
        moe::route_into(logits, &sc.moe.bias, moe, r);
        r.ids.clear();
        r.ids.extend(r.routes.iter().map(|(e, _)| *e));
        self.w.store.prefetch_experts(j, &r.ids);
        Ok(())
    }

    /// One decoder layer over the `n` tokens of the call (mlx `KimiK3DecoderLayer.__call__`
    /// with AttnRes, `KimiDecoderLayer.__call__` without), on the arena `sc`:
    /// the residual stream is `sc.main.hidden`, `nb` counts the completed AttnRes blocks.
    fn layer(
        &self,
        i: usize,
        segs: &mut [Seg<'_>],
        sc: &mut Scratch,
        n: usize,
        nb: &mut usize,
    ) -> Result<()> {
        let cfg = &self.cfg;
        let d = cfg.hidden_size;
        let eps = cfg.rms_norm_eps;
        let par = &self.par;
        let l = Some(i);
        let Scratch {
            dims,
            main,
            kda: kda_sc,
            mla: mla_sc,
            mlp: mlp_sc,
            moe: moe_sc,
            router,
            kern: ws,
            ..
        } = sc;
        let b = dims.blocks;
        let prof = profile::scope(Op::Norms);
        self.w
            .vec_into(l, "input_layernorm.weight", d, &mut main.ln_in)?;
        self.w
            .vec_into(l, "post_attention_layernorm.weight", d, &mut main.ln_post)?;

        // Attention input.
        let mut block_start = false;
        let xin = zeroed(&mut main.xin, n * d);
        match cfg.attn_res_block_size {
            Some(bs) => {
                self.res_w_eff(l, "self_attention_res", &mut main.res_w, &mut main.res_tmp)?;
                block_start = i.is_multiple_of(bs);
                for t in 0..n {
                    let p = &main.hidden[t * d..(t + 1) * d];
                    let x = &mut xin[t * d..(t + 1) * d];
                    attn_res::mix_into(
                        &main.blocks[t * b * d..(t * b + *nb) * d],
                        &main.blocks_inv[t * b..t * b + *nb],
                        p,
                        &main.res_w,
                        eps,
                        &mut main.mix,
                        x,
                    );
                    if block_start {
                        main.blocks[(t * b + *nb) * d..][..d].copy_from_slice(p);
                        main.blocks_inv[t * b + *nb] = norm::inv_rms(p, eps);
                    }
                    rms_norm_inplace(x, &main.ln_in, eps);
                }
                if block_start {
                    *nb += 1;
                }
            }
            None => {
                for t in 0..n {
                    rms_norm_into(
                        &main.hidden[t * d..(t + 1) * d],
                        &main.ln_in,
                        eps,
                        &mut xin[t * d..(t + 1) * d],
                    );
                }
            }
        }

        drop(prof);
        let a = zeroed(&mut main.attn_out, n * d);
        // Projections over all the call's tokens; the recurrence / cache per sequence.
        match cfg.attn_kinds[i] {
            AttnKind::Kda => {
                let w = kda::KdaWeights::load_from(&self.w, cfg, i, kda_sc)?;
                kda::kda_project(par, ws, cfg, &w, xin, n, kda_sc);
                for s in segs.iter_mut() {
                    let run = s.start..s.start + s.tokens.len();
                    if let LayerState::Kda(st) = &mut s.layers[i] {
                        if let Some(rw) = s.rewind.as_deref_mut() {
                            rw.save_kda(cfg, i, st, &w, kda_sc, run.clone());
                        }
                        kda::kda_recur(par, cfg, &w, n, run, st, kda_sc);
                    }
                }
                kda::kda_output(par, ws, &w, n, kda_sc, a);
                w.recycle(kda_sc);
            }
            AttnKind::Gqa => bail!("a gpt-oss layer in a Kimi model"),
            AttnKind::Mla => {
                let w = mla::MlaWeights::load_from(&self.w, cfg, i, mla_sc)?;
                mla::mla_project(par, ws, cfg, &w, xin, n, mla_sc);
                for s in segs.iter_mut() {
                    let run = s.start..s.start + s.tokens.len();
                    if let LayerState::Mla(cache) = &mut s.layers[i] {
                        if let Some(rw) = s.rewind.as_deref_mut() {
                            rw.save_mla(i, cache.len, run.len());
                        }
                        mla::mla_attend(par, ws, cfg, &w, run, cache, mla_sc);
                    }
                }
                mla::mla_output(par, ws, &w, n, mla_sc, a);
                w.recycle(mla_sc);
            }
        }

        // Residual after attention, then MLP input.
        let hidden = &mut main.hidden[..n * d];
        if block_start {
            hidden.copy_from_slice(a);
        } else {
            for (h, v) in hidden.iter_mut().zip(a.iter()) {
                *h += v;
            }
        }
        let prof = profile::scope(Op::Norms);
        let xin2 = zeroed(&mut main.xin2, n * d);
        match cfg.attn_res_block_size {
            Some(_) => {
                self.res_w_eff(l, "mlp_res", &mut main.res_w, &mut main.res_tmp)?;
                for t in 0..n {
                    let x = &mut xin2[t * d..(t + 1) * d];
                    attn_res::mix_into(
                        &main.blocks[t * b * d..(t * b + *nb) * d],
                        &main.blocks_inv[t * b..t * b + *nb],
                        &main.hidden[t * d..(t + 1) * d],
                        &main.res_w,
                        eps,
                        &mut main.mix,
                        x,
                    );
                    rms_norm_inplace(x, &main.ln_post, eps);
                }
            }
            None => {
                for t in 0..n {
                    rms_norm_into(
                        &main.hidden[t * d..(t + 1) * d],
                        &main.ln_post,
                        eps,
                        &mut xin2[t * d..(t + 1) * d],
                    );
                }
            }
        }

        drop(prof);
        let m = zeroed(&mut main.mlp_out, n * d);
        match cfg.mlp_kinds[i] {
            MlpKind::Dense => {
                let _prof = profile::scope(Op::DenseMlp);
                let f = cfg.intermediate_size;
                // Published dense layers live under `mlp.`; the store resolves the
                // `block_sparse_moe.` alias to the schema name.
                // One matrix at a time (a streaming store may hold one per trunk
                // slot); the same products as `GatedMlp::forward_into`.
                let g = zeroed(&mut mlp_sc.g, n * f);
                self.mat(l, "mlp.gate_proj.weight", f, d)?
                    .mm_into(par, ws, xin2, n, g);
                let u = zeroed(&mut mlp_sc.u, n * f);
                self.mat(l, "mlp.up_proj.weight", f, d)?
                    .mm_into(par, ws, xin2, n, u);
                mlp::gated_act_inplace(par, cfg.activation, g, u);
                self.mat(l, "mlp.down_proj.weight", d, f)?
                    .mm_into(par, ws, g, n, m);
            }
            MlpKind::Moe => {
                let moe = cfg.moe.as_ref().context("MoE layer without MoE config")?;
                let mw = moe::MoeWeights::load_from(&self.w, cfg, moe, i, moe_sc)?;
                let bufs = moe::MoeScratch {
                    moe: moe_sc,
                    router,
                    mlp: mlp_sc,
                    kern: ws,
                };
                moe::moe_forward(par, cfg, moe, &self.w, &mw, i, xin2, n, bufs, m)?;
                mw.recycle(moe_sc);
            }
        }
        for (h, v) in main.hidden[..n * d].iter_mut().zip(m.iter()) {
            *h += v;
        }
        Ok(())
    }
}
