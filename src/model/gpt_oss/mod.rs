//! gpt-oss (`model_type: "gpt_oss"`): one decoder layer of transformers
//! `GptOssDecoderLayer` / mlx-lm `models/gpt_oss.py` over the same
//! [`crate::store::WeightStore`], embedding, final norm and `lm_head` as the Kimi
//! models ([`crate::model::Model`] runs them; this module adds the layer).
//!
//! `h = x + o_proj(attn(rmsnorm(x)))`, `out = h + moe(rmsnorm(h))` (docs/model.md,
//! gpt-oss). All activations f32; weights upcast in the kernels. Every per-token
//! operation is the one of a decode step, so prefill and decode give identical
//! logits, and a batch's sequences the logits they get alone.
//!
//! Its buffers are the arena's `gqa` group ([`crate::engine::arena::Gqa`]).

pub mod attention;
pub mod moe;
pub mod rope;

use anyhow::{bail, Context, Result};

use super::norm::rms_norm_into;
use super::{LayerState, Model, Seg};
use crate::engine::arena::{zeroed, Gqa, Router, Scratch};
use crate::format::config::GptOssConfig;
use crate::kernels::Workspace;
use crate::util::profile::{self, Op};

/// RMSNorm of every row of `x: [n, d]` with weight `w: [d]` into `out: [n, d]`.
fn norm_rows(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    let d = w.len();
    for (xr, or) in x.chunks_exact(d).zip(out.chunks_exact_mut(d)) {
        rms_norm_into(xr, w, eps, or);
    }
}

impl Model {
    fn gpt_oss(&self) -> Result<&GptOssConfig> {
        self.cfg
            .gpt_oss
            .as_ref()
            .context("gpt-oss layer without gpt_oss settings")
    }

    /// gpt-oss decoder layer `i` over the `n` tokens of the call (residual stream
    /// `sc.main.hidden: [n, D]`).
    pub(super) fn gpt_oss_layer(
        &self,
        i: usize,
        segs: &mut [Seg<'_>],
        sc: &mut Scratch,
        n: usize,
    ) -> Result<()> {
        let d = self.cfg.hidden_size;
        let eps = self.cfg.rms_norm_eps;
        let l = Some(i);
        let Scratch {
            main,
            gqa,
            router,
            kern: ws,
            ..
        } = sc;
        let prof = profile::scope(Op::Norms);
        self.w
            .vec_into(l, "input_layernorm.weight", d, &mut main.ln_in)?;
        self.w
            .vec_into(l, "post_attention_layernorm.weight", d, &mut main.ln_post)?;
        let xin = zeroed(&mut main.xin, n * d);
        norm_rows(&main.hidden[..n * d], &main.ln_in, eps, xin);
        drop(prof);
        let a = zeroed(&mut main.attn_out, n * d);
        self.gpt_oss_attention(i, segs, gqa, ws, xin, a)?;
        for (h, v) in main.hidden[..n * d].iter_mut().zip(a.iter()) {
            *h += v;
        }
        let prof = profile::scope(Op::Norms);
        let xin2 = zeroed(&mut main.xin2, n * d);
        norm_rows(&main.hidden[..n * d], &main.ln_post, eps, xin2);
        drop(prof);
        let m = zeroed(&mut main.mlp_out, n * d);
        self.gpt_oss_moe(i, (gqa, router), ws, xin2, m)?;
        for (h, v) in main.hidden[..n * d].iter_mut().zip(m.iter()) {
            *h += v;
        }
        Ok(())
    }

    /// Router look-ahead of a gpt-oss model (decode only): layer `i + 1`'s router
    /// (`mlp.router.weight` + `.bias`, top-k) on the residual stream entering layer
    /// `i`, normalised with layer `i + 1`'s `post_attention_layernorm`; its top-k
    /// go to the store as guesses ([`crate::store::WeightStore::prefetch_experts`]).
    /// Only IO depends on the guess. The arena's MLP-input and `gqa` router buffers
    /// are free at this point.
    pub(super) fn gpt_oss_lookahead(&self, i: usize, sc: &mut Scratch) -> Result<()> {
        let j = i + 1;
        if j >= self.cfg.num_hidden_layers {
            return Ok(());
        }
        let g = self.gpt_oss()?;
        let (d, e) = (self.cfg.hidden_size, g.num_local_experts);
        let Scratch {
            main,
            gqa: b,
            kern: ws,
            ..
        } = sc;
        let l = Some(j);
        self.w
            .vec_into(l, "post_attention_layernorm.weight", d, &mut main.ln_post)?;
        let x = zeroed(&mut main.xin2, d);
        rms_norm_into(&main.hidden[..d], &main.ln_post, self.cfg.rms_norm_eps, x);
        let logits = zeroed(&mut b.logits, e);
        self.mat(l, "mlp.router.weight", e, d)?
            .mv_into(&self.par, ws, x, logits);
        self.w
            .vec_into(l, "mlp.router.bias", e, &mut b.router_bias)?;
        for (v, bias) in logits.iter_mut().zip(&b.router_bias) {
            *v += bias;
        }
        moe::route(logits, g.num_experts_per_tok, &mut b.order, &mut b.routes);
        b.order.clear();
        b.order.extend(b.routes.iter().map(|r| r.0));
        self.w.store.prefetch_experts(j, &b.order);
        Ok(())
    }

    /// Projection `self_attn.{name}_proj` (+ bias, decoded into `bias`) of the `n`
    /// tokens `x: [n, cols]` into `y: [n, rows]`.
    fn gpt_oss_proj(
        &self,
        (i, name): (usize, &str),
        ws: &mut Workspace,
        bias: &mut Vec<f32>,
        x: &[f32],
        y: &mut [f32],
        n: usize,
    ) -> Result<()> {
        let l = Some(i);
        let (rows, cols) = (y.len() / n, x.len() / n);
        self.mat(l, &format!("self_attn.{name}_proj.weight"), rows, cols)?
            .mm_into(&self.par, ws, x, n, y);
        if self.gpt_oss()?.attention_bias {
            self.w
                .vec_into(l, &format!("self_attn.{name}_proj.bias"), rows, bias)?;
            for row in y.chunks_exact_mut(rows) {
                for (v, b) in row.iter_mut().zip(bias.iter()) {
                    *v += b;
                }
            }
        }
        Ok(())
    }

    /// Attention of layer `i` over `xin: [n, D]` into `out: [n, D]`: projections over
    /// all tokens, then per sequence and token in order rotate, cache, attend; `o_proj`.
    fn gpt_oss_attention(
        &self,
        i: usize,
        segs: &mut [Seg<'_>],
        b: &mut Gqa,
        ws: &mut Workspace,
        xin: &[f32],
        out: &mut [f32],
    ) -> Result<()> {
        let _prof = profile::scope(Op::GqaAttend);
        let g = self.gpt_oss()?;
        let n = xin.len() / self.cfg.hidden_size;
        let (qd, kvd) = (g.q_dim(), g.kv_dim());
        let q = zeroed(&mut b.q, n * qd);
        self.gpt_oss_proj((i, "q"), ws, &mut b.bias, xin, q, n)?;
        let k = zeroed(&mut b.k, n * kvd);
        self.gpt_oss_proj((i, "k"), ws, &mut b.bias, xin, k, n)?;
        let v = zeroed(&mut b.v, n * kvd);
        self.gpt_oss_proj((i, "v"), ws, &mut b.bias, xin, v, n)?;
        self.w.vec_into(
            Some(i),
            "self_attn.sinks",
            g.num_attention_heads,
            &mut b.sinks,
        )?;
        let rope = self
            .rope
            .as_ref()
            .context("gpt-oss model without RoPE tables")?;
        let att = zeroed(&mut b.att, n * qd);
        for s in segs.iter_mut() {
            let LayerState::Kv(cache) = &mut s.layers[i] else {
                bail!("state of layer {i} is not a KV cache");
            };
            for j in 0..s.tokens.len() {
                let (t, pos) = (s.start + j, *s.pos + j);
                let (qt, kt) = (t * qd..(t + 1) * qd, t * kvd..(t + 1) * kvd);
                rope.apply(&mut q[qt.clone()], pos);
                rope.apply(&mut k[kt.clone()], pos);
                attention::store(cache, pos, &k[kt.clone()], &v[kt])?;
                let (sinks, scores) = (&b.sinks, &mut b.scores);
                attention::attend(g, cache, pos, &q[qt.clone()], sinks, scores, &mut att[qt]);
            }
        }
        self.gpt_oss_proj((i, "o"), ws, &mut b.bias, att, out, n)
    }

    /// The MoE of layer `i` over `x: [n, D]` into `out: [n, D]` (zeroed): router
    /// logits for all tokens, then per token its top-k experts (largest first), each
    /// fetched as its slices of the stacked tensors
    /// ([`crate::store::WeightStore::stacked_expert`]), their outputs weighted and
    /// summed in rank order. One token (or a store that does not group chunks)
    /// reports its selection ([`crate::store::WeightStore::experts_selected`]) and
    /// fetches its experts in rank order; a chunk fetches each distinct expert once
    /// ([`Model::gpt_oss_grouped`]). Either way a token's result is bit-identical.
    fn gpt_oss_moe(
        &self,
        i: usize,
        (b, router): (&mut Gqa, &mut Router),
        ws: &mut Workspace,
        x: &[f32],
        out: &mut [f32],
    ) -> Result<()> {
        let g = self.gpt_oss()?;
        let d = self.cfg.hidden_size;
        let n = x.len() / d;
        let l = Some(i);
        let par = &self.par;
        let prof = profile::scope(Op::Router);
        let e = g.num_local_experts;
        let logits = zeroed(&mut b.logits, n * e);
        self.mat(l, "mlp.router.weight", e, d)?
            .mm_into(par, ws, x, n, logits);
        self.w
            .vec_into(l, "mlp.router.bias", e, &mut b.router_bias)?;
        router.routes.clear();
        for t in 0..n {
            let lg = &mut logits[t * e..(t + 1) * e];
            for (v, bias) in lg.iter_mut().zip(&b.router_bias) {
                *v += bias;
            }
            moe::route(lg, g.num_experts_per_tok, &mut b.order, &mut b.routes);
            router.routes.extend_from_slice(&b.routes);
        }
        drop(prof);
        let k = g.num_experts_per_tok;
        if n > 1 && self.w.store.groups_chunk_experts() {
            return self.gpt_oss_grouped(i, (b, router), ws, x, out);
        }
        zeroed(&mut b.gate_up, 2 * g.intermediate_size);
        zeroed(&mut b.h, g.intermediate_size);
        zeroed(&mut b.y, d);
        for t in 0..n {
            let routing = &router.routes[t * k..(t + 1) * k];
            router.ids.clear();
            router.ids.extend(routing.iter().map(|r| r.0));
            self.w.store.experts_selected(i, &router.ids);
            let xt = &x[t * d..(t + 1) * d];
            let ot = &mut out[t * d..(t + 1) * d];
            for &(ex, wgt) in routing {
                let expert = self.gpt_oss_expert((i, ex), b)?;
                self.gpt_oss_expert_run(&expert, b, ws, xt)?;
                for (o, v) in ot.iter_mut().zip(b.y.iter()) {
                    *o += wgt * v;
                }
            }
        }
        Ok(())
    }

    /// Expert `ex` of layer `i`: its slices fetched from the store, its biases decoded
    /// into `b`'s bias buffers (valid until the next fetch).
    fn gpt_oss_expert(&self, (i, ex): (usize, usize), b: &mut Gqa) -> Result<moe::Expert> {
        let g = self.gpt_oss()?;
        let _prof = profile::scope(Op::ExpertFetch);
        let names = moe::stacked_names(g.experts);
        let parts = self
            .w
            .store
            .stacked_expert(i, ex, g.num_local_experts, names)?;
        let biases = (&mut b.gate_up_bias, &mut b.down_bias);
        let d = self.cfg.hidden_size;
        moe::Expert::from_parts(&self.w, g, d, (i, ex), &parts, biases)
    }

    /// `expert` (its biases in `b`, [`Model::gpt_oss_expert`]) on one token
    /// `x: [D]` into `b.y: [D]` (`b.gate_up`, `b.h`, `b.y` sized by the caller).
    fn gpt_oss_expert_run(
        &self,
        expert: &moe::Expert,
        b: &mut Gqa,
        ws: &mut Workspace,
        x: &[f32],
    ) -> Result<()> {
        let g = self.gpt_oss()?;
        let _prof = profile::scope(Op::ExpertMlp);
        let bias = (&b.gate_up_bias[..], &b.down_bias[..]);
        let bufs = (&mut b.gate_up[..], &mut b.h[..], &mut b.y[..]);
        expert.forward(&self.par, ws, g, bias, x, bufs);
        Ok(())
    }

    /// Expert-grouped chunk (prefill) of layer `i`: the chunk's routing
    /// (`router.routes: [n, k]`) indexed ([`crate::model::moe::index_chunk`]) and
    /// reported once ([`crate::store::WeightStore::chunk_experts_selected`]), each
    /// distinct expert fetched once in first-use order and run on the tokens that
    /// picked it, its outputs kept per `(token, rank)` slot (`b.slots: [n, k, D]`) and
    /// summed per token in rank order into `out: [n, D]` (zeroed), exactly as the
    /// token-by-token path sums them.
    fn gpt_oss_grouped(
        &self,
        i: usize,
        (b, router): (&mut Gqa, &mut Router),
        ws: &mut Workspace,
        x: &[f32],
        out: &mut [f32],
    ) -> Result<()> {
        let g = self.gpt_oss()?;
        let (d, k) = (self.cfg.hidden_size, g.num_experts_per_tok);
        let n = x.len() / d;
        crate::model::moe::index_chunk(router, k, g.num_local_experts);
        self.w
            .store
            .chunk_experts_selected(i, &router.tok_ids, k, &router.chunk_order);
        zeroed(&mut b.gate_up, 2 * g.intermediate_size);
        zeroed(&mut b.h, g.intermediate_size);
        zeroed(&mut b.y, d);
        zeroed(&mut b.slots, n * k * d);
        for (gi, &ex) in router.chunk_order.iter().enumerate() {
            let expert = self.gpt_oss_expert((i, ex), b)?;
            for &(t, r) in &router.users[router.starts[gi]..router.starts[gi + 1]] {
                self.gpt_oss_expert_run(&expert, b, ws, &x[t * d..(t + 1) * d])?;
                b.slots[(t * k + r) * d..][..d].copy_from_slice(&b.y);
            }
        }
        for (t, routing) in router.routes.chunks_exact(k).enumerate() {
            let ot = &mut out[t * d..(t + 1) * d];
            for (r, &(_, wgt)) in routing.iter().enumerate() {
                for (o, v) in ot.iter_mut().zip(&b.slots[(t * k + r) * d..][..d]) {
                    *o += wgt * v;
                }
            }
        }
        Ok(())
    }
}
