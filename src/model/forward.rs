//! The pass over the layers: embedding, the decoder layers in order (a Kimi layer,
//! [`super::layer`], or a gpt-oss layer, [`super::gpt_oss`]), the final norm and
//! `lm_head`, and the router look-ahead of a decode step.

use anyhow::{Context, Result};

use super::norm::rms_norm_into;
use super::residual::{w_eff_into, Input, Stream};
use super::{moe, Model, Seg};
use crate::engine::arena::{zeroed, Scratch};
use crate::format::config::MlpKind;
use crate::util::profile::{self, Op};

impl Model {
    /// The forward of `n` tokens, the concatenation of `segs`' tokens, on the arena
    /// `sc` (inputs already checked). Logits: every token's (`all_rows`, one
    /// sequence only) or the last token's of each segment asking for them.
    pub(super) fn forward_segs<'s>(
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
            let (w, t) = (&mut main.res_w, &mut main.res_tmp);
            w_eff_into(&self.w, d, None, "model.output_attn_res", w, t)?;
        }
        self.w
            .vec_into(None, "model.norm.weight", d, &mut main.ln_post)?;
        let head = if cfg.tie_word_embeddings {
            "model.embed_tokens.weight"
        } else {
            "lm_head.weight"
        };
        let nrows = rows.len();
        let stream = Stream {
            hidden: &main.hidden,
            blocks: &main.blocks,
            blocks_inv: &main.blocks_inv,
            d,
            b: sc.dims.blocks,
            nb,
        };
        let inp = Input {
            w_eff: attn_res.map(|_| &main.res_w[..]),
            ln: &main.ln_post,
            eps,
        };
        let xs = zeroed(&mut main.xin, nrows * d);
        stream.input_into(&inp, rows.iter().copied(), &mut main.mix, xs);
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
}
