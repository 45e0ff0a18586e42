//! The residual stream as the sub-layers read it, and the one helper that forms a
//! sub-layer's input from it: the Block AttnRes mix ([`super::attn_res`]) of the
//! token's completed blocks and partial sum, or the plain residual, then the
//! sub-layer's RMSNorm. The attention input, the MLP input and the final norm before
//! `lm_head` all go through [`Stream::input_into`].

use anyhow::Result;

use super::attn_res;
use super::norm::{rms_norm_inplace, rms_norm_into};
use super::weights::Weights;

/// The call's residual stream: per token `t` the running sum (with AttnRes: the
/// partial sum of the current block) `hidden[t]: [D]` and, with AttnRes, its first
/// `nb` completed blocks `blocks[t, ..nb]` (`b` block slots of `D` per token) with
/// their `rsqrt(mean(b²)+eps)` in `blocks_inv[t, ..nb]`.
pub struct Stream<'a> {
    /// `[n, D]`.
    pub hidden: &'a [f32],
    /// `[n, b, D]` (AttnRes; empty without).
    pub blocks: &'a [f32],
    /// `[n, b]` (AttnRes; empty without).
    pub blocks_inv: &'a [f32],
    /// `hidden_size`.
    pub d: usize,
    /// Block slots per token.
    pub b: usize,
    /// Completed blocks.
    pub nb: usize,
}

/// How a sub-layer's input is formed: the weight `ln: [D]` of its RMSNorm (eps
/// `eps`) and, with AttnRes, the mix's `w_eff: [D]` ([`w_eff_into`]).
pub struct Input<'a> {
    /// AttnRes `w_eff` (`None`: the plain residual).
    pub w_eff: Option<&'a [f32]>,
    /// The RMSNorm weight.
    pub ln: &'a [f32],
    /// The RMSNorm eps (`rms_norm_eps`).
    pub eps: f32,
}

impl Stream<'_> {
    /// Row `j` of `out: [rows.len(), D]` = `RMSNorm_ln(mix(t))` for the `j`-th token
    /// `t` of `rows`, where `mix(t)` is the AttnRes mix of token `t`'s completed blocks
    /// and partial sum with `w_eff` ([`attn_res::mix_into`]; `mix` is its scratch) or,
    /// without AttnRes, `hidden[t]` itself.
    pub fn input_into(
        &self,
        inp: &Input<'_>,
        rows: impl Iterator<Item = usize>,
        mix: &mut Vec<f32>,
        out: &mut [f32],
    ) {
        let (d, b, nb) = (self.d, self.b, self.nb);
        for (j, t) in rows.enumerate() {
            let p = &self.hidden[t * d..(t + 1) * d];
            let x = &mut out[j * d..(j + 1) * d];
            match inp.w_eff {
                Some(w_eff) => {
                    attn_res::mix_into(
                        &self.blocks[t * b * d..(t * b + nb) * d],
                        &self.blocks_inv[t * b..t * b + nb],
                        p,
                        w_eff,
                        inp.eps,
                        mix,
                        x,
                    );
                    rms_norm_inplace(x, inp.ln, inp.eps);
                }
                None => rms_norm_into(p, inp.ln, inp.eps, x),
            }
        }
    }
}

/// AttnRes `w_eff = {prefix}_norm.weight ⊙ {prefix}_proj.weight` `[d]` of `layer`
/// (`None`: the model's own tensors) into `out` (`tmp` holds the projection weight).
///
/// # Errors
/// A missing or misshapen tensor (named).
pub fn w_eff_into(
    w: &Weights,
    d: usize,
    layer: Option<usize>,
    prefix: &str,
    out: &mut Vec<f32>,
    tmp: &mut Vec<f32>,
) -> Result<()> {
    w.vec_into(layer, &format!("{prefix}_norm.weight"), d, out)?;
    w.vec_into(layer, &format!("{prefix}_proj.weight"), d, tmp)?;
    for (a, b) in out.iter_mut().zip(tmp.iter()) {
        *a *= b;
    }
    Ok(())
}
