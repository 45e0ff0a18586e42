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
//! The layer's own buffers (q/k/v, attention output, router logits, one expert's
//! intermediate) are allocated per call, outside the arena ([`crate::engine::arena`]).

pub mod attention;
pub mod moe;
pub mod rope;

use anyhow::{bail, Context, Result};

use super::norm::rms_norm_into;
use super::{LayerState, Model, Seg};
use crate::engine::arena::{zeroed, Scratch};
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
        let Scratch { main, kern: ws, .. } = sc;
        let prof = profile::scope(Op::Norms);
        self.w
            .vec_into(l, "input_layernorm.weight", d, &mut main.ln_in)?;
        self.w
            .vec_into(l, "post_attention_layernorm.weight", d, &mut main.ln_post)?;
        let xin = zeroed(&mut main.xin, n * d);
        norm_rows(&main.hidden[..n * d], &main.ln_in, eps, xin);
        drop(prof);
        let a = self.gpt_oss_attention(i, segs, ws, xin, n)?;
        for (h, v) in main.hidden[..n * d].iter_mut().zip(&a) {
            *h += v;
        }
        let prof = profile::scope(Op::Norms);
        let xin2 = zeroed(&mut main.xin2, n * d);
        norm_rows(&main.hidden[..n * d], &main.ln_post, eps, xin2);
        drop(prof);
        let m = zeroed(&mut main.mlp_out, n * d);
        self.gpt_oss_moe(i, ws, xin2, n, m)?;
        for (h, v) in main.hidden[..n * d].iter_mut().zip(m.iter()) {
            *h += v;
        }
        Ok(())
    }

    /// `rows`-wide projection `self_attn.{name}_proj` (+ bias) of `x: [n, cols]`.
    fn gpt_oss_proj(
        &self,
        i: usize,
        ws: &mut Workspace,
        name: &str,
        rows: usize,
        x: &[f32],
        n: usize,
    ) -> Result<Vec<f32>> {
        let l = Some(i);
        let cols = x.len() / n;
        let mut y = vec![0f32; n * rows];
        self.mat(l, &format!("self_attn.{name}_proj.weight"), rows, cols)?
            .mm_into(&self.par, ws, x, n, &mut y);
        if self.gpt_oss()?.attention_bias {
            let b = self
                .w
                .vec(l, &format!("self_attn.{name}_proj.bias"), rows)?;
            for row in y.chunks_exact_mut(rows) {
                for (v, b) in row.iter_mut().zip(&b) {
                    *v += b;
                }
            }
        }
        Ok(y)
    }

    /// Attention of layer `i` over `xin: [n, D]`: projections over all tokens, then
    /// per sequence and token in order rotate, cache, attend; returns `o_proj` `[n, D]`.
    fn gpt_oss_attention(
        &self,
        i: usize,
        segs: &mut [Seg<'_>],
        ws: &mut Workspace,
        xin: &[f32],
        n: usize,
    ) -> Result<Vec<f32>> {
        let _prof = profile::scope(Op::GqaAttend);
        let g = self.gpt_oss()?;
        let d = self.cfg.hidden_size;
        let (qd, kvd) = (g.q_dim(), g.kv_dim());
        let mut q = self.gpt_oss_proj(i, ws, "q", qd, xin, n)?;
        let mut k = self.gpt_oss_proj(i, ws, "k", kvd, xin, n)?;
        let v = self.gpt_oss_proj(i, ws, "v", kvd, xin, n)?;
        let sinks = self
            .w
            .vec(Some(i), "self_attn.sinks", g.num_attention_heads)?;
        let rope = rope::Rope::new(&g.rope, g.head_dim);
        let mut att = vec![0f32; n * qd];
        let mut scores = Vec::new();
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
                attention::attend(
                    g,
                    cache,
                    pos,
                    &q[qt.clone()],
                    &sinks,
                    &mut scores,
                    &mut att[qt],
                );
            }
        }
        self.gpt_oss_proj(i, ws, "o", d, &att, n)
    }

    /// The MoE of layer `i` over `x: [n, D]` into `out: [n, D]` (zeroed): router
    /// logits for all tokens, then per token its top-k experts in rank order, their
    /// outputs weighted and summed in that order.
    fn gpt_oss_moe(
        &self,
        i: usize,
        ws: &mut Workspace,
        x: &[f32],
        n: usize,
        out: &mut [f32],
    ) -> Result<()> {
        let g = self.gpt_oss()?;
        let d = self.cfg.hidden_size;
        let l = Some(i);
        let par = &self.par;
        let prof = profile::scope(Op::Router);
        let e = g.num_local_experts;
        let mut logits = vec![0f32; n * e];
        self.mat(l, "mlp.router.weight", e, d)?
            .mm_into(par, ws, x, n, &mut logits);
        let rb = self.w.vec(l, "mlp.router.bias", e)?;
        drop(prof);
        let prof = profile::scope(Op::ExpertFetch);
        let experts = moe::Experts::load(&self.w, g, d, i)?;
        drop(prof);
        let _prof = profile::scope(Op::ExpertMlp);
        let mut routes = Vec::new();
        let mut gu = vec![0f32; 2 * g.intermediate_size];
        let mut h = vec![0f32; g.intermediate_size];
        let mut y = vec![0f32; d];
        for t in 0..n {
            let lg = &mut logits[t * e..(t + 1) * e];
            for (v, b) in lg.iter_mut().zip(&rb) {
                *v += b;
            }
            moe::route(lg, g.num_experts_per_tok, &mut routes);
            let xt = &x[t * d..(t + 1) * d];
            let ot = &mut out[t * d..(t + 1) * d];
            for &(ex, wgt) in &routes {
                experts.forward(par, ws, g, ex, xt, &mut gu, &mut h, &mut y);
                for (o, v) in ot.iter_mut().zip(&y) {
                    *o += wgt * v;
                }
            }
        }
        Ok(())
    }
}
