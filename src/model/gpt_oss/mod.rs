//! gpt-oss (`model_type: "gpt_oss"`): one decoder layer of transformers
//! `GptOssDecoderLayer` / mlx-lm `models/gpt_oss.py` over the same
//! [`crate::store::WeightStore`], embedding, final norm and `lm_head` as the Kimi
//! models ([`crate::model::Model`] runs them; this module adds the layer).
//!
//! `h = x + o_proj(attn(rmsnorm(x)))`, `out = h + moe(rmsnorm(h))` (docs/model.md,
//! gpt-oss). All activations f32; weights upcast in the kernels. Every per-token
//! operation is the one of a decode step, so prefill and decode give identical
//! logits, and a batch's sequences the logits they get alone.

pub mod attention;
pub mod moe;
pub mod rope;

use anyhow::{Context, Result};

use super::norm::rms_norm_into;
use super::{LayerState, Model, Seg};
use crate::engine::arena::{zeroed, Scratch};
use crate::util::profile::{self, Op};

impl Model {
    /// gpt-oss decoder layer `i` over the `n` tokens of the call (residual stream
    /// `sc.main.hidden: [n, D]`).
    pub(super) fn gpt_oss_layer(
        &self,
        i: usize,
        segs: &mut [Seg<'_>],
        sc: &mut Scratch,
        n: usize,
    ) -> Result<()> {
        let cfg = &self.cfg;
        let g = cfg
            .gpt_oss
            .as_ref()
            .context("gpt-oss layer without gpt_oss settings")?;
        let d = cfg.hidden_size;
        let eps = cfg.rms_norm_eps;
        let par = &self.par;
        let l = Some(i);
        let Scratch { main, kern: ws, .. } = sc;
        let prof = profile::scope(Op::Norms);
        self.w
            .vec_into(l, "input_layernorm.weight", d, &mut main.ln_in)?;
        self.w
            .vec_into(l, "post_attention_layernorm.weight", d, &mut main.ln_post)?;
        let xin = zeroed(&mut main.xin, n * d);
        for t in 0..n {
            rms_norm_into(
                &main.hidden[t * d..(t + 1) * d],
                &main.ln_in,
                eps,
                &mut xin[t * d..(t + 1) * d],
            );
        }
        drop(prof);

        // Attention: projections over all tokens, then per token rotate, cache, attend.
        let prof = profile::scope(Op::GqaAttend);
        let (qd, kvd) = (g.q_dim(), g.kv_dim());
        let proj =
            |name: &str, rows: usize, cols: usize, x: &[f32], ws: &mut _| -> Result<Vec<f32>> {
                let mut y = vec![0f32; n * rows];
                self.mat(l, &format!("self_attn.{name}_proj.weight"), rows, cols)?
                    .mm_into(par, ws, x, n, &mut y);
                if g.attention_bias {
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
            };
        let mut q = proj("q", qd, d, xin, ws)?;
        let mut k = proj("k", kvd, d, xin, ws)?;
        let v = proj("v", kvd, d, xin, ws)?;
        let sinks = self.w.vec(l, "self_attn.sinks", g.num_attention_heads)?;
        let rope = rope::Rope::new(&g.rope, g.head_dim);
        let mut att = vec![0f32; n * qd];
        let mut scores = Vec::new();
        for s in segs.iter_mut() {
            let LayerState::Kv(cache) = &mut s.layers[i] else {
                anyhow::bail!("state of layer {i} is not a KV cache");
            };
            for j in 0..s.tokens.len() {
                let t = s.start + j;
                let pos = *s.pos + j;
                rope.apply(&mut q[t * qd..(t + 1) * qd], pos);
                rope.apply(&mut k[t * kvd..(t + 1) * kvd], pos);
                attention::store(
                    cache,
                    pos,
                    &k[t * kvd..(t + 1) * kvd],
                    &v[t * kvd..(t + 1) * kvd],
                )?;
                attention::attend(
                    g,
                    cache,
                    pos,
                    &q[t * qd..(t + 1) * qd],
                    &sinks,
                    &mut scores,
                    &mut att[t * qd..(t + 1) * qd],
                );
            }
        }
        let a = proj("o", d, qd, &att, ws)?;
        for (h, v) in main.hidden[..n * d].iter_mut().zip(&a) {
            *h += v;
        }
        drop(prof);

        // MoE.
        let prof = profile::scope(Op::Norms);
        let xin2 = zeroed(&mut main.xin2, n * d);
        for t in 0..n {
            rms_norm_into(
                &main.hidden[t * d..(t + 1) * d],
                &main.ln_post,
                eps,
                &mut xin2[t * d..(t + 1) * d],
            );
        }
        drop(prof);
        let prof = profile::scope(Op::Router);
        let e = g.num_local_experts;
        let mut logits = vec![0f32; n * e];
        self.mat(l, "mlp.router.weight", e, d)?
            .mm_into(par, ws, xin2, n, &mut logits);
        let rb = self.w.vec(l, "mlp.router.bias", e)?;
        drop(prof);
        let prof = profile::scope(Op::ExpertFetch);
        let experts = moe::Experts::load(&self.w, g, d, i)?;
        drop(prof);
        let _prof = profile::scope(Op::ExpertMlp);
        let mut routes = Vec::new();
        let mut gu = vec![0f32; 2 * g.intermediate_size];
        let mut hbuf = vec![0f32; g.intermediate_size];
        let mut y = vec![0f32; d];
        let m = zeroed(&mut main.mlp_out, n * d);
        for t in 0..n {
            let lg = &mut logits[t * e..(t + 1) * e];
            for (v, b) in lg.iter_mut().zip(&rb) {
                *v += b;
            }
            moe::route(lg, g.num_experts_per_tok, &mut routes);
            let x = &xin2[t * d..(t + 1) * d];
            let out = &mut m[t * d..(t + 1) * d];
            for &(ex, wgt) in &routes {
                experts.forward(par, ws, g, ex, x, &mut gu, &mut hbuf, &mut y);
                for (o, v) in out.iter_mut().zip(&y) {
                    *o += wgt * v;
                }
            }
        }
        for (h, v) in main.hidden[..n * d].iter_mut().zip(m.iter()) {
            *h += v;
        }
        Ok(())
    }
}
