//! The model: one forward path for `kimi_k3` and `kimi_linear`, features switched by
//! [`ModelConfig`] (KDA / MLA per layer, dense / MoE MLP, SiLU / SiTU, latent MoE,
//! gated MLA, Block AttnRes or the plain additive residual).
//!
//! Reference: mlx-lm `models/kimi_k3.py` (`KimiK3TextModel`, `KimiK3DecoderLayer`) and
//! `models/kimi_linear.py` (`KimiLinearModel`, `KimiDecoderLayer`); notes in
//! docs/architecture.md. All activations are f32; weights are read
//! through the [`WeightStore`] and upcast on the fly.
//!
//! Processing order: a call to [`Model::forward`] with `n` tokens runs layer by layer
//! (`begin_layer` … `end_layer` once per layer), and within a layer processes the
//! tokens in order. Every per-token operation is the same as when the tokens are
//! fed one by one, so batched prefill and token-by-token decode give bit-identical
//! logits (the batched products `matmul_*` are bit-identical to `matvec_*` per row).

#![warn(missing_docs)]

pub mod attn_res;
pub mod kda;
pub mod mla;
pub mod mlp;
pub mod moe;
pub mod norm;
pub mod state;
pub mod weights;

use std::collections::HashMap;
use std::sync::Arc;

use anyhow::{bail, Context, Result};

use crate::checkpoint::Checkpoint;
use crate::config::{AttnKind, MlpKind, ModelConfig};
use crate::ops::Par;
use crate::schema::Dtype;
use crate::store::WeightStore;

use attn_res::Blocks;
use norm::rms_norm;
pub use state::{KdaState, LayerState, MlaCache, State};
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

/// A loaded model: configuration, weight accessor and kernel thread handle.
pub struct Model {
    cfg: ModelConfig,
    w: Weights,
    par: Par,
    /// Debug: check the residual stream after every layer ([`Model::with_hidden_checks`]).
    check_hidden: bool,
}

impl Model {
    /// A model reading its weights from `store`. Shapes are checked when tensors are
    /// first read (errors name the tensor); validate the checkpoint beforehand with
    /// [`crate::inspect::validate`] to refuse bad checkpoints up front (as `Model::open` in
    /// [`crate::loader`] does).
    pub fn new(cfg: ModelConfig, store: Arc<dyn WeightStore>, par: Par) -> Result<Model> {
        if cfg.hidden_size == 0 || cfg.vocab_size == 0 {
            bail!("hidden_size and vocab_size must be > 0");
        }
        if cfg.attn_kinds.len() != cfg.num_hidden_layers
            || cfg.mlp_kinds.len() != cfg.num_hidden_layers
        {
            bail!("per-layer kind lists do not match num_hidden_layers");
        }
        if cfg.mlp_kinds.contains(&MlpKind::Moe) && cfg.moe.is_none() {
            bail!("config has MoE layers but no MoE settings");
        }
        Ok(Model {
            cfg,
            w: Weights {
                store,
                hints: HashMap::new(),
            },
            par,
            check_hidden: false,
        })
    }

    /// Debug option: after every layer, check the residual stream for NaN/Inf and fail
    /// naming the first layer that produced one ([`crate::integrity::check_hidden`]).
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

    /// A fresh per-sequence state with room for `max_context` positions.
    pub fn new_state(&self, max_context: usize) -> State {
        State::new(&self.cfg, max_context)
    }

    fn mat(&self, layer: Option<usize>, name: &str, rows: usize, cols: usize) -> Result<Mat> {
        self.w.mat(layer, name, rows, cols)
    }

    fn vec(&self, layer: Option<usize>, name: &str, n: usize) -> Result<Vec<f32>> {
        self.w.vec(layer, name, n)
    }

    /// AttnRes `w_eff = {prefix}_norm.weight ⊙ {prefix}_proj.weight` `[D]`.
    fn res_w_eff(&self, layer: Option<usize>, prefix: &str) -> Result<Vec<f32>> {
        let d = self.cfg.hidden_size;
        let nw = self.vec(layer, &format!("{prefix}_norm.weight"), d)?;
        let pw = self.vec(layer, &format!("{prefix}_proj.weight"), d)?;
        Ok(attn_res::w_eff(&nw, &pw))
    }

    /// Runs `tokens` (positions `state.pos ..`) through the model, advancing `state`.
    ///
    /// Returns logits per `mode`: `[vocab]` (Last), `[n, vocab]` (All) or empty.
    /// Errors: empty input, token id ≥ vocab, context overflow, missing or misshapen
    /// tensors (named), a NaN/Inf logit (naming the position; [`crate::integrity`]). After a tensor error the state is unusable (reset it).
    pub fn forward(&self, state: &mut State, tokens: &[u32], mode: LogitsMode) -> Result<Vec<f32>> {
        let cfg = &self.cfg;
        let n = tokens.len();
        if n == 0 {
            bail!("forward called with no tokens");
        }
        if let Some(&bad) = tokens.iter().find(|&&t| t as usize >= cfg.vocab_size) {
            bail!(
                "token id {bad} is out of range (vocab_size {})",
                cfg.vocab_size
            );
        }
        if state.layers.len() != cfg.num_hidden_layers {
            bail!("state was built for a different model");
        }
        state.check_room(n)?;
        let d = cfg.hidden_size;
        let eps = cfg.rms_norm_eps;
        let par = &self.par;

        // Residual stream per token: the running sum (plain residual) or the AttnRes partial sum.
        // Embedding rows of the call's tokens, read together (a streaming store may
        // read just these rows).
        let ids: Vec<usize> = tokens.iter().map(|&t| t as usize).collect();
        let mut hidden = self
            .w
            .rows(None, "model.embed_tokens.weight", cfg.vocab_size, d, &ids)?;
        let attn_res = cfg.attn_res_block_size;
        let mut blocks: Vec<Blocks> =
            vec![Blocks::default(); if attn_res.is_some() { n } else { 0 }];

        self.w.store.begin_token(state.pos);
        let lookahead = n == 1 && self.w.store.wants_lookahead();
        for i in 0..cfg.num_hidden_layers {
            self.w.store.begin_layer(i);
            if lookahead {
                self.lookahead(i, &hidden[..d])?;
            }
            let r = self.layer(i, state, &mut hidden, &mut blocks, n);
            self.w.store.end_layer(i);
            r.with_context(|| format!("layer {i}"))?;
            if self.check_hidden {
                crate::integrity::check_hidden(&hidden, d, i, state.pos)?;
            }
        }

        if mode == LogitsMode::None {
            state.pos += n;
            return Ok(Vec::new());
        }
        let rows: Vec<usize> = match mode {
            LogitsMode::Last => vec![n - 1],
            _ => (0..n).collect(),
        };
        let w_out = match attn_res {
            Some(_) => Some(self.res_w_eff(None, "model.output_attn_res")?),
            None => None,
        };
        let norm_w = self.vec(None, "model.norm.weight", d)?;
        let head = if cfg.tie_word_embeddings {
            "model.embed_tokens.weight"
        } else {
            "lm_head.weight"
        };
        let mut xs = Vec::with_capacity(rows.len() * d);
        for &t in &rows {
            let p = &hidden[t * d..(t + 1) * d];
            let h = match &w_out {
                Some(we) => attn_res::mix(&blocks[t], p, we, eps),
                None => p.to_vec(),
            };
            xs.extend(rms_norm(&h, &norm_w, eps));
        }
        // lm_head in the store's row blocks: each logit is the same fixed-order dot
        // product as with the whole matrix (kernels/dense.rs), so logits are identical.
        let (nr, vocab) = (rows.len(), cfg.vocab_size);
        let mut logits = vec![0f32; nr * vocab];
        for r in self.w.row_blocks(None, head, vocab) {
            let block = self.w.mat_rows(None, head, vocab, d, r.clone())?;
            let ys = block.mm(par, &xs, nr);
            let bn = r.len();
            for t in 0..nr {
                logits[t * vocab + r.start..t * vocab + r.end]
                    .copy_from_slice(&ys[t * bn..(t + 1) * bn]);
            }
        }
        crate::integrity::check_logits(&logits, cfg.vocab_size, &rows, state.pos)?;
        state.pos += n;
        Ok(logits)
    }

    /// Router look-ahead (decode only): runs the router of the next MoE layer after
    /// `i` on the residual stream entering layer `i` (normalised with that layer's
    /// `post_attention_layernorm`) and tells the store which experts it will likely
    /// need. Only IO depends on the guess; compute always uses the true routing.
    fn lookahead(&self, i: usize, h: &[f32]) -> Result<()> {
        let cfg = &self.cfg;
        let Some(moe) = cfg.moe.as_ref() else {
            return Ok(());
        };
        let Some(j) = (i + 1..cfg.num_hidden_layers).find(|&j| cfg.mlp_kinds[j] == MlpKind::Moe)
        else {
            return Ok(());
        };
        let d = cfg.hidden_size;
        let post_ln = self.vec(Some(j), "post_attention_layernorm.weight", d)?;
        let x = rms_norm(h, &post_ln, cfg.rms_norm_eps);
        let gate = self.mat(Some(j), "block_sparse_moe.gate.weight", moe.num_experts, d)?;
        let bias = self.vec(
            Some(j),
            "block_sparse_moe.gate.e_score_correction_bias",
            moe.num_experts,
        )?;
        let logits = gate.mv(&self.par, &x);
        let guesses: Vec<usize> = moe::route(&logits, &bias, moe)
            .into_iter()
            .map(|(e, _)| e)
            .collect();
        self.w.store.prefetch_experts(j, &guesses);
        Ok(())
    }

    /// One decoder layer over the `n` tokens of the call (mlx `KimiK3DecoderLayer.__call__`
    /// with AttnRes, `KimiDecoderLayer.__call__` without).
    fn layer(
        &self,
        i: usize,
        state: &mut State,
        hidden: &mut [f32],
        blocks: &mut [Blocks],
        n: usize,
    ) -> Result<()> {
        let cfg = &self.cfg;
        let d = cfg.hidden_size;
        let eps = cfg.rms_norm_eps;
        let par = &self.par;
        let l = Some(i);
        let in_ln = self.vec(l, "input_layernorm.weight", d)?;
        let post_ln = self.vec(l, "post_attention_layernorm.weight", d)?;

        // Attention input.
        let mut block_start = false;
        let mut xin = Vec::with_capacity(n * d);
        match cfg.attn_res_block_size {
            Some(bs) => {
                let w_attn = self.res_w_eff(l, "self_attention_res")?;
                block_start = i.is_multiple_of(bs);
                for t in 0..n {
                    let p = &hidden[t * d..(t + 1) * d];
                    let h = attn_res::mix(&blocks[t], p, &w_attn, eps);
                    if block_start {
                        blocks[t].append(p.to_vec(), eps);
                    }
                    xin.extend(rms_norm(&h, &in_ln, eps));
                }
            }
            None => {
                for t in 0..n {
                    xin.extend(rms_norm(&hidden[t * d..(t + 1) * d], &in_ln, eps));
                }
            }
        }

        let a = match (cfg.attn_kinds[i], &mut state.layers[i]) {
            (AttnKind::Kda, LayerState::Kda(st)) => {
                let w = kda::KdaWeights::load(&self.w, cfg, i)?;
                kda::kda_forward(par, cfg, &w, &xin, n, st)
            }
            (AttnKind::Mla, LayerState::Mla(cache)) => {
                let w = mla::MlaWeights::load(&self.w, cfg, i)?;
                mla::mla_forward(par, cfg, &w, &xin, n, cache)
            }
            _ => bail!("state layer kind does not match the config"),
        };

        // Residual after attention, then MLP input.
        if block_start {
            hidden.copy_from_slice(&a);
        } else {
            for (h, v) in hidden.iter_mut().zip(&a) {
                *h += v;
            }
        }
        let mut xin2 = Vec::with_capacity(n * d);
        match cfg.attn_res_block_size {
            Some(_) => {
                let w_mlp = self.res_w_eff(l, "mlp_res")?;
                for t in 0..n {
                    let h = attn_res::mix(&blocks[t], &hidden[t * d..(t + 1) * d], &w_mlp, eps);
                    xin2.extend(rms_norm(&h, &post_ln, eps));
                }
            }
            None => {
                for t in 0..n {
                    xin2.extend(rms_norm(&hidden[t * d..(t + 1) * d], &post_ln, eps));
                }
            }
        }

        let m = match cfg.mlp_kinds[i] {
            MlpKind::Dense => {
                let f = cfg.intermediate_size;
                // Published dense layers live under `mlp.`; the store resolves the
                // `block_sparse_moe.` alias to the schema name. One matrix at a time
                // (a streaming store may hold one per trunk slot); the same products
                // as `GatedMlp::forward`.
                let g = self.mat(l, "mlp.gate_proj.weight", f, d)?.mm(par, &xin2, n);
                let u = self.mat(l, "mlp.up_proj.weight", f, d)?.mm(par, &xin2, n);
                let h = mlp::gated_act(cfg.activation, &g, &u);
                drop((g, u));
                self.mat(l, "mlp.down_proj.weight", d, f)?.mm(par, &h, n)
            }
            MlpKind::Moe => {
                let moe = cfg.moe.as_ref().context("MoE layer without MoE config")?;
                let mw = moe::MoeWeights::load(&self.w, cfg, moe, i)?;
                moe::moe_forward(par, cfg, moe, &self.w, &mw, i, &xin2, n)?
            }
        };
        for (h, v) in hidden.iter_mut().zip(&m) {
            *h += v;
        }
        Ok(())
    }
}
