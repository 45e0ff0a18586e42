//! gpt-oss mixture of experts (transformers `GptOssMLP`: `GptOssTopKRouter` and
//! `GptOssExperts`): a biased linear router, top-k, softmax over the k logits;
//! each chosen expert `out = W_down·((up + 1)·glu(gate)) + b_down` with
//! `[gate, up]` interleaved in `W_gate_up·x + b_gate_up`, gate clamped above at
//! `swiglu_limit`, up clamped to `±swiglu_limit`, `glu(g) = g·σ(alpha·g)`.

use anyhow::{bail, Result};

use crate::format::config::{GptOssConfig, GptOssExperts};
use crate::kernels::{Par, Workspace};
use crate::model::norm::sigmoid;
use crate::model::weights::{Elem, Mat, Weights};
use crate::store::Bytes;

/// The top-`k` experts of router logits `[E]` (largest first, ties to the lower id)
/// with their weights, the softmax of their logits; into `out` (cleared). `ids` is scratch.
pub fn route(logits: &[f32], k: usize, ids: &mut Vec<usize>, out: &mut Vec<(usize, f32)>) {
    out.clear();
    ids.clear();
    ids.extend(0..logits.len());
    ids.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]).then(a.cmp(&b)));
    let m = logits[ids[0]];
    let mut sum = 0f32;
    for &e in &ids[..k] {
        let x = (logits[e] - m).exp();
        out.push((e, x));
        sum += x;
    }
    for r in out.iter_mut() {
        r.1 /= sum;
    }
}

/// The clamped SwiGLU of interleaved `gate_up: [2I]` into `h: [I]`:
/// `h[j] = (clamp(u, −l, l) + 1) · g·σ(α·g)` with `g = min(gate_up[2j], l)`,
/// `u = gate_up[2j+1]`.
pub fn swiglu(g: &GptOssConfig, gate_up: &[f32], h: &mut [f32]) {
    let (a, l) = (g.swiglu_alpha, g.swiglu_limit);
    for (o, p) in h.iter_mut().zip(gate_up.chunks_exact(2)) {
        let gate = p[0].min(l);
        let up = p[1].clamp(-l, l);
        *o = (up + 1.0) * (gate * sigmoid(gate * a));
    }
}

/// One layer's stacked expert weights as stored, and their biases decoded.
pub struct Experts<'b> {
    layout: GptOssExperts,
    gate_up: Bytes,
    down: Bytes,
    /// MXFP4 scales (empty for the dense layout).
    gate_up_scales: Bytes,
    down_scales: Bytes,
    elem: Elem,
    /// `[E, 2I]` and `[E, D]`.
    gate_up_bias: &'b [f32],
    down_bias: &'b [f32],
}

impl<'b> Experts<'b> {
    /// Reads layer `layer`'s `mlp.experts.*` tensors, decoding the biases into
    /// `gu_bias: [E, 2I]` and `down_bias: [E, D]` (arena buffers).
    ///
    /// Errors: a missing or misshapen tensor (named).
    pub fn load(
        w: &Weights,
        g: &GptOssConfig,
        d: usize,
        layer: usize,
        (gu_bias, down_bias): (&'b mut Vec<f32>, &'b mut Vec<f32>),
    ) -> Result<Experts<'b>> {
        let (e, i) = (g.num_local_experts, g.intermediate_size);
        let l = Some(layer);
        let raw = |name: &str, len: usize| -> Result<Bytes> {
            let b = w.store.tensor(l, name)?;
            if b.len() != len {
                bail!(
                    "tensor model.layers.{layer}.{name}: {} bytes, expected {len}",
                    b.len()
                );
            }
            Ok(b)
        };
        w.vec_into(l, "mlp.experts.gate_up_proj_bias", e * 2 * i, gu_bias)?;
        w.vec_into(l, "mlp.experts.down_proj_bias", e * d, down_bias)?;
        let (gate_up_bias, down_bias) = (&gu_bias[..], &down_bias[..]);
        Ok(match g.experts {
            GptOssExperts::Mxfp4 => Experts {
                layout: g.experts,
                gate_up: raw("mlp.experts.gate_up_proj_blocks", e * 2 * i * d / 2)?,
                gate_up_scales: raw("mlp.experts.gate_up_proj_scales", e * 2 * i * d / 32)?,
                down: raw("mlp.experts.down_proj_blocks", e * d * i / 2)?,
                down_scales: raw("mlp.experts.down_proj_scales", e * d * i / 32)?,
                elem: Elem::Bf16,
                gate_up_bias,
                down_bias,
            },
            GptOssExperts::Dense => {
                let gu = w.mat(l, "mlp.experts.gate_up_proj", e * d, 2 * i)?;
                let dn = w.mat(l, "mlp.experts.down_proj", e * i, d)?;
                let (
                    Mat::Dense {
                        bytes: gu, elem, ..
                    },
                    Mat::Dense {
                        bytes: dn,
                        elem: e2,
                        ..
                    },
                ) = (gu, dn)
                else {
                    unreachable!("Weights::mat returns dense matrices")
                };
                if elem != e2 {
                    bail!("layer {layer}: gate_up_proj and down_proj have different dtypes");
                }
                Experts {
                    layout: g.experts,
                    gate_up: gu,
                    down: dn,
                    gate_up_scales: Bytes::from_vec(vec![]),
                    down_scales: Bytes::from_vec(vec![]),
                    elem,
                    gate_up_bias,
                    down_bias,
                }
            }
        })
    }

    /// Expert `e`'s output `y: [D]` for input `x: [D]` (`gu: [2I]`, `h: [I]` scratch).
    ///
    /// MXFP4: the `[2I, D]` and `[D, I]` products of [`crate::kernels`] (fixed
    /// order, docs in `kernels/mxfp4.rs`). Dense layout `[D, 2I]` / `[I, D]`
    /// (`[in, out]`): the transposed product [`Mat::tmv_into`], accumulated over
    /// the input index in order (`y += x[r]·W[r, :]`), no copy at load.
    #[allow(clippy::too_many_arguments)]
    pub fn forward(
        &self,
        par: &Par,
        ws: &mut Workspace,
        g: &GptOssConfig,
        e: usize,
        x: &[f32],
        gu: &mut [f32],
        h: &mut [f32],
        y: &mut [f32],
    ) {
        let d = x.len();
        let i2 = 2 * g.intermediate_size;
        let i = g.intermediate_size;
        match self.layout {
            GptOssExperts::Mxfp4 => {
                Mat::Mxfp4 {
                    packed: self.gate_up.slice(e * i2 * d / 2, i2 * d / 2),
                    scale: self.gate_up_scales.slice(e * i2 * d / 32, i2 * d / 32),
                    rows: i2,
                    cols: d,
                }
                .mv_into(par, ws, x, gu);
            }
            GptOssExperts::Dense => {
                let es = if self.elem == Elem::Bf16 { 2 } else { 4 };
                Mat::Dense {
                    bytes: self.gate_up.slice(e * d * i2 * es, d * i2 * es),
                    elem: self.elem,
                    rows: d,
                    cols: i2,
                }
                .tmv_into(x, gu);
            }
        }
        for (v, b) in gu.iter_mut().zip(&self.gate_up_bias[e * i2..(e + 1) * i2]) {
            *v += b;
        }
        swiglu(g, gu, h);
        match self.layout {
            GptOssExperts::Mxfp4 => {
                Mat::Mxfp4 {
                    packed: self.down.slice(e * d * i / 2, d * i / 2),
                    scale: self.down_scales.slice(e * d * i / 32, d * i / 32),
                    rows: d,
                    cols: i,
                }
                .mv_into(par, ws, h, y);
            }
            GptOssExperts::Dense => {
                let es = if self.elem == Elem::Bf16 { 2 } else { 4 };
                Mat::Dense {
                    bytes: self.down.slice(e * i * d * es, i * d * es),
                    elem: self.elem,
                    rows: i,
                    cols: d,
                }
                .tmv_into(h, y);
            }
        }
        for (v, b) in y.iter_mut().zip(&self.down_bias[e * d..(e + 1) * d]) {
            *v += b;
        }
    }
}
