//! gpt-oss mixture of experts (transformers `GptOssMLP`: `GptOssTopKRouter` and
//! `GptOssExperts`): a biased linear router, top-k, softmax over the k logits;
//! each chosen expert `out = W_down·((up + 1)·glu(gate)) + b_down` with
//! `[gate, up]` interleaved in `W_gate_up·x + b_gate_up`, gate clamped above at
//! `swiglu_limit`, up clamped to `±swiglu_limit`, `glu(g) = g·σ(alpha·g)`.

use anyhow::{bail, Result};

use crate::format::config::{GptOssConfig, GptOssExperts};
use crate::kernels::{Par, Workspace};
use crate::model::norm::sigmoid;
use crate::model::weights::{decode_into, Elem, Mat, Weights};
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

/// Names (under the layer) of the tensors stacked over the experts, for a layout:
/// the weights (MXFP4: blocks and scales of `gate_up`, then of `down`; dense:
/// `gate_up`, `down`), then the two biases. [`Expert::from_parts`] takes an expert's
/// slices in this order.
pub fn stacked_names(layout: GptOssExperts) -> &'static [&'static str] {
    match layout {
        GptOssExperts::Mxfp4 => &[
            "mlp.experts.gate_up_proj_blocks",
            "mlp.experts.gate_up_proj_scales",
            "mlp.experts.down_proj_blocks",
            "mlp.experts.down_proj_scales",
            "mlp.experts.gate_up_proj_bias",
            "mlp.experts.down_proj_bias",
        ],
        GptOssExperts::Dense => &[
            "mlp.experts.gate_up_proj",
            "mlp.experts.down_proj",
            "mlp.experts.gate_up_proj_bias",
            "mlp.experts.down_proj_bias",
        ],
    }
}

/// One routed expert of a gpt-oss layer: its slices of the stacked tensors as
/// stored (no copy), its biases decoded.
pub struct Expert {
    layout: GptOssExperts,
    /// `[2I, D]` (MXFP4) or `[D, 2I]` (dense, `[in, out]`).
    gate_up: Mat,
    /// `[D, I]` (MXFP4) or `[I, D]` (dense).
    down: Mat,
}

impl Expert {
    /// Expert `e` of layer `layer` from its slices `parts` (in [`stacked_names`]
    /// order), decoding the biases into `gu_bias: [2I]` and `down_bias: [D]`.
    ///
    /// Errors: a slice of the wrong size (the tensor named), weights of two dtypes.
    pub fn from_parts(
        w: &Weights,
        g: &GptOssConfig,
        d: usize,
        (layer, e): (usize, usize),
        parts: &[Bytes],
        (gu_bias, down_bias): (&mut Vec<f32>, &mut Vec<f32>),
    ) -> Result<Expert> {
        let i = g.intermediate_size;
        let names = stacked_names(g.experts);
        let l = Some(layer);
        let part = |j: usize, len: usize| -> Result<Bytes> {
            let b = parts
                .get(j)
                .cloned()
                .unwrap_or_else(|| Bytes::from_vec(vec![]));
            if b.len() != len {
                bail!(
                    "expert {e} of tensor model.layers.{layer}.{}: {} bytes, expected {len}",
                    names[j],
                    b.len()
                );
            }
            Ok(b)
        };
        let nb = names.len();
        for (j, n, out) in [(nb - 2, 2 * i, gu_bias), (nb - 1, d, down_bias)] {
            let b = parts.get(j).map_or(0, |b| b.len());
            let elem = w.part_elem(l, names[j], b, n)?;
            decode_into(elem, &part(j, b)?, out);
        }
        Ok(match g.experts {
            GptOssExperts::Mxfp4 => Expert {
                layout: g.experts,
                gate_up: Mat::Mxfp4 {
                    packed: part(0, 2 * i * d / 2)?,
                    scale: part(1, 2 * i * d / 32)?,
                    rows: 2 * i,
                    cols: d,
                },
                down: Mat::Mxfp4 {
                    packed: part(2, d * i / 2)?,
                    scale: part(3, d * i / 32)?,
                    rows: d,
                    cols: i,
                },
            },
            GptOssExperts::Dense => {
                let n = d * 2 * i;
                let len0 = parts.first().map_or(0, |b| b.len());
                let elem = w.part_elem(l, names[0], len0, n)?;
                let es = if elem == Elem::Bf16 { 2 } else { 4 };
                let len1 = parts.get(1).map_or(0, |b| b.len());
                if w.part_elem(l, names[1], len1, i * d)? != elem {
                    bail!("layer {layer}: gate_up_proj and down_proj have different dtypes");
                }
                Expert {
                    layout: g.experts,
                    gate_up: Mat::Dense {
                        bytes: part(0, n * es)?,
                        elem,
                        rows: d,
                        cols: 2 * i,
                    },
                    down: Mat::Dense {
                        bytes: part(1, i * d * es)?,
                        elem,
                        rows: i,
                        cols: d,
                    },
                }
            }
        })
    }

    /// The expert's output `y: [D]` for input `x: [D]` (`bufs = (gu, h, y)`, with
    /// `gu: [2I]`, `h: [I]` scratch; `gu_bias: [2I]`, `down_bias: [D]` its decoded biases).
    ///
    /// MXFP4: the `[2I, D]` and `[D, I]` products of [`crate::kernels`] (fixed
    /// order, docs in `kernels/mxfp4.rs`). Dense layout `[D, 2I]` / `[I, D]`
    /// (`[in, out]`): the transposed product [`Mat::tmv_into`], accumulated over
    /// the input index in order (`y += x[r]·W[r, :]`), no copy at load.
    pub fn forward(
        &self,
        par: &Par,
        ws: &mut Workspace,
        g: &GptOssConfig,
        (gu_bias, down_bias): (&[f32], &[f32]),
        x: &[f32],
        (gu, h, y): ExpertBufs<'_>,
    ) {
        match self.layout {
            GptOssExperts::Mxfp4 => self.gate_up.mv_into(par, ws, x, gu),
            GptOssExperts::Dense => self.gate_up.tmv_into(x, gu),
        }
        for (v, b) in gu.iter_mut().zip(gu_bias) {
            *v += b;
        }
        swiglu(g, gu, h);
        match self.layout {
            GptOssExperts::Mxfp4 => self.down.mv_into(par, ws, h, y),
            GptOssExperts::Dense => self.down.tmv_into(h, y),
        }
        for (v, b) in y.iter_mut().zip(down_bias) {
            *v += b;
        }
    }
}

/// An expert's buffers `(gate_up: [2I], h: [I], y: [D])` ([`Expert::forward`]).
pub type ExpertBufs<'a> = (&'a mut [f32], &'a mut [f32], &'a mut [f32]);
