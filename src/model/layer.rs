//! One Kimi decoder layer (mlx `KimiK3DecoderLayer.__call__` with AttnRes,
//! `KimiDecoderLayer.__call__` without) as a sequence of named sub-layers:
//! attention input → attention (KDA or MLA) → residual → MLP input → MLP (dense or
//! MoE) → residual. Each layer kind's body is its own function; the inputs of both
//! sub-layers are formed by the one helper [`Stream::input_into`].

use anyhow::{bail, Context, Result};

use super::ctx::Ctx;
use super::residual::{w_eff_into, Input, Stream};
use super::{kda, mla, mlp, moe, norm, LayerState, Model, Seg};
use crate::engine::arena::{zeroed, Kda, Main, Mla, Mlp, Scratch};
use crate::format::config::{AttnKind, MlpKind};
use crate::util::profile::{self, Op};

/// The sub-layer whose input [`Model::sublayer_input`] forms.
#[derive(Clone, Copy)]
enum Sub {
    /// `input_layernorm`, AttnRes `self_attention_res`, into `xin`.
    Attention,
    /// `post_attention_layernorm`, AttnRes `mlp_res`, into `xin2`.
    Mlp,
}

impl Model {
    /// One decoder layer over the `n` tokens of the call on the arena `sc`: the
    /// residual stream is `sc.main.hidden`, `nb` counts the completed AttnRes blocks.
    pub(super) fn layer(
        &self,
        i: usize,
        segs: &mut [Seg<'_>],
        sc: &mut Scratch,
        n: usize,
        nb: &mut usize,
    ) -> Result<()> {
        let cfg = &self.cfg;
        let d = cfg.hidden_size;
        let Scratch {
            dims,
            main,
            kda: kda_sc,
            mla: mla_sc,
            mlp: mlp_sc,
            moe: moe_sc,
            router,
            kern,
            ..
        } = sc;
        let b = dims.blocks;
        let cx = &mut Ctx {
            cfg,
            par: &self.par,
            ws: kern,
        };

        let prof = profile::scope(Op::Norms);
        let l = Some(i);
        self.w
            .vec_into(l, "input_layernorm.weight", d, &mut main.ln_in)?;
        self.w
            .vec_into(l, "post_attention_layernorm.weight", d, &mut main.ln_post)?;
        self.sublayer_input(i, Sub::Attention, main, (b, *nb), n)?;
        let block_start = cfg
            .attn_res_block_size
            .is_some_and(|bs| i.is_multiple_of(bs));
        if block_start {
            close_block(main, d, (b, *nb), n, cfg.rms_norm_eps);
            *nb += 1;
        }
        drop(prof);

        let a = zeroed(&mut main.attn_out, n * d);
        let xin = &main.xin[..n * d];
        match cfg.attn_kinds[i] {
            AttnKind::Kda => self.kda_attention(cx, i, segs, xin, kda_sc, a),
            AttnKind::Mla => self.mla_attention(cx, i, segs, xin, mla_sc, a),
            AttnKind::Gqa => bail!("a gpt-oss layer in a Kimi model"),
        }?;
        add_residual(&mut main.hidden[..n * d], a, block_start);

        let prof = profile::scope(Op::Norms);
        self.sublayer_input(i, Sub::Mlp, main, (b, *nb), n)?;
        drop(prof);

        let m = zeroed(&mut main.mlp_out, n * d);
        let xin2 = &main.xin2[..n * d];
        match cfg.mlp_kinds[i] {
            MlpKind::Dense => self.dense_mlp(cx, i, xin2, mlp_sc, m),
            MlpKind::Moe => {
                let bufs = moe::MoeScratch {
                    moe: moe_sc,
                    router,
                    mlp: mlp_sc,
                };
                self.moe_mlp(cx, i, xin2, bufs, m)
            }
        }?;
        add_residual(&mut main.hidden[..n * d], m, false);
        Ok(())
    }

    /// The input of sub-layer `sub` of layer `i` for the `n` tokens (`xin` or `xin2`:
    /// its RMSNorm of the AttnRes mix over `blocks = (slots per token, completed)`, or
    /// of the residual without AttnRes); the norm weights are already in `main`.
    fn sublayer_input(
        &self,
        i: usize,
        sub: Sub,
        main: &mut Main,
        (b, nb): (usize, usize),
        n: usize,
    ) -> Result<()> {
        let d = self.cfg.hidden_size;
        let w_eff = if self.cfg.attn_res_block_size.is_some() {
            let prefix = match sub {
                Sub::Attention => "self_attention_res",
                Sub::Mlp => "mlp_res",
            };
            w_eff_into(
                &self.w,
                d,
                Some(i),
                prefix,
                &mut main.res_w,
                &mut main.res_tmp,
            )?;
            Some(&main.res_w[..])
        } else {
            None
        };
        let (ln, out) = match sub {
            Sub::Attention => (&main.ln_in, &mut main.xin),
            Sub::Mlp => (&main.ln_post, &mut main.xin2),
        };
        let stream = Stream {
            hidden: &main.hidden,
            blocks: &main.blocks,
            blocks_inv: &main.blocks_inv,
            d,
            b,
            nb,
        };
        let inp = Input {
            w_eff,
            ln,
            eps: self.cfg.rms_norm_eps,
        };
        stream.input_into(&inp, 0..n, &mut main.mix, zeroed(out, n * d));
        Ok(())
    }

    /// KDA attention of layer `i` over `xin: [n, D]` into `out: [n, D]`: the
    /// projections over all the call's tokens, the recurrence per sequence on its
    /// own state (saving its restore point first when one is armed), `o_proj`.
    fn kda_attention(
        &self,
        cx: &mut Ctx<'_>,
        i: usize,
        segs: &mut [Seg<'_>],
        xin: &[f32],
        sc: &mut Kda,
        out: &mut [f32],
    ) -> Result<()> {
        let n = xin.len() / self.cfg.hidden_size;
        let mut lent = kda::KdaWeights::lend(&self.w, cx.cfg, i, sc)?;
        let (w, sc) = lent.split();
        kda::kda_project(cx, w, xin, n, sc);
        for s in segs.iter_mut() {
            let run = s.start..s.start + s.tokens.len();
            if let LayerState::Kda(st) = &mut s.layers[i] {
                if let Some(rw) = s.rewind.as_deref_mut() {
                    rw.save_kda(cx.cfg, i, st, w, sc, run.clone());
                }
                kda::kda_recur(cx, w, n, run, st, sc);
            }
        }
        kda::kda_output(cx, w, n, sc, out);
        Ok(())
    }

    /// MLA attention of layer `i` over `xin: [n, D]` into `out: [n, D]`: the
    /// projections over all the call's tokens, attention per sequence over its own
    /// latent cache, `o_proj`.
    fn mla_attention(
        &self,
        cx: &mut Ctx<'_>,
        i: usize,
        segs: &mut [Seg<'_>],
        xin: &[f32],
        sc: &mut Mla,
        out: &mut [f32],
    ) -> Result<()> {
        let n = xin.len() / self.cfg.hidden_size;
        let mut lent = mla::MlaWeights::lend(&self.w, cx.cfg, i, sc)?;
        let (w, sc) = lent.split();
        mla::mla_project(cx, w, xin, n, sc);
        for s in segs.iter_mut() {
            let run = s.start..s.start + s.tokens.len();
            if let LayerState::Mla(cache) = &mut s.layers[i] {
                if let Some(rw) = s.rewind.as_deref_mut() {
                    rw.save_mla(i, cache.len, run.len());
                }
                mla::mla_attend(cx, w, run, cache, sc);
            }
        }
        mla::mla_output(cx, w, n, sc, out);
        Ok(())
    }

    /// Dense MLP of layer `i` over `xs: [n, D]` into `out: [n, D]`. Published dense
    /// layers live under `mlp.` (the store resolves the `block_sparse_moe.` alias to
    /// the schema name). One matrix at a time (a streaming store may hold one per
    /// trunk slot); the same products as [`mlp::GatedMlp::forward_into`].
    fn dense_mlp(
        &self,
        cx: &mut Ctx<'_>,
        i: usize,
        xs: &[f32],
        sc: &mut Mlp,
        out: &mut [f32],
    ) -> Result<()> {
        let _prof = profile::scope(Op::DenseMlp);
        let (l, d, f) = (Some(i), self.cfg.hidden_size, self.cfg.intermediate_size);
        let n = xs.len() / d;
        let g = zeroed(&mut sc.g, n * f);
        cx.mm(&self.mat(l, "mlp.gate_proj.weight", f, d)?, xs, n, g);
        let u = zeroed(&mut sc.u, n * f);
        cx.mm(&self.mat(l, "mlp.up_proj.weight", f, d)?, xs, n, u);
        mlp::gated_act_inplace(cx.par, self.cfg.activation, g, u);
        cx.mm(&self.mat(l, "mlp.down_proj.weight", d, f)?, g, n, out);
        Ok(())
    }

    /// MoE of layer `i` over `xs: [n, D]` into `out: [n, D]` ([`moe::moe_forward`]),
    /// its trunk's small vectors decoded into the arena's MoE buffers.
    fn moe_mlp(
        &self,
        cx: &mut Ctx<'_>,
        i: usize,
        xs: &[f32],
        bufs: moe::MoeScratch<'_>,
        out: &mut [f32],
    ) -> Result<()> {
        let cfg = &self.cfg;
        let moe = cfg.moe.as_ref().context("MoE layer without MoE config")?;
        let n = xs.len() / cfg.hidden_size;
        let moe::MoeScratch {
            moe: ms,
            router,
            mlp,
        } = bufs;
        let mut lent = moe::MoeWeights::lend(&self.w, cfg, moe, i, ms)?;
        let (trunk, ms) = lent.split();
        let l = moe::MoeLayer {
            layer: i,
            moe,
            w: &self.w,
            trunk,
        };
        let bufs = moe::MoeScratch {
            moe: ms,
            router,
            mlp,
        };
        moe::moe_forward(cx, l, xs, n, bufs, out)
    }
}

/// At an AttnRes block start: each token's partial sum `hidden[t]: [d]` becomes its
/// completed block `nb` of `b` slots (with its inverse RMS).
fn close_block(main: &mut Main, d: usize, (b, nb): (usize, usize), n: usize, eps: f32) {
    for t in 0..n {
        let p = &main.hidden[t * d..(t + 1) * d];
        main.blocks[(t * b + nb) * d..][..d].copy_from_slice(p);
        main.blocks_inv[t * b + nb] = norm::inv_rms(p, eps);
    }
}

/// The residual after a sub-layer: `hidden += out`, or `hidden = out` when the
/// sub-layer began an AttnRes block (the partial sum restarts from its output).
fn add_residual(hidden: &mut [f32], out: &[f32], restart: bool) {
    if restart {
        hidden.copy_from_slice(out);
    } else {
        for (h, v) in hidden.iter_mut().zip(out) {
            *h += v;
        }
    }
}
