//! Block Attention Residuals (Kimi K3, arXiv 2603.15031), exactly mlx-lm
//! `kimi_k3.py::KimiK3DecoderLayer.__call__` / `_attn_res_combine` / `ResidualBlocks`.
//!
//! The residual stream of one token is a list of completed block vectors `b_1..b_n`
//! plus a running partial sum `p`. Before each sub-layer the input is
//! `mix(B, p, w_eff) = Σ_j softmax(logit)_j · V_j` over `V = [b_1..b_n, p]`, with
//! `logit_j = (V_j · w_eff) · rsqrt(mean(V_j²) + eps)` and
//! `w_eff = norm.weight ⊙ proj.weight[0]` (the norm weight only enters the logit;
//! the mixed vectors are un-normalised). With no completed block, `mix = p`.

/// Completed block vectors of one token, each with its cached `rsqrt(mean(b²)+eps)`.
#[derive(Debug, Clone, Default)]
pub struct Blocks {
    /// `[n_blocks][D]`.
    pub raw: Vec<Vec<f32>>,
    /// `[n_blocks]`.
    pub inv_rms: Vec<f32>,
}

impl Blocks {
    /// Appends a completed block (mlx `ResidualBlocks.append`).
    pub fn append(&mut self, x: Vec<f32>, eps: f32) {
        self.inv_rms.push(super::norm::inv_rms(&x, eps));
        self.raw.push(x);
    }
    /// Number of completed blocks.
    pub fn len(&self) -> usize {
        self.raw.len()
    }
    /// True when no block is complete yet.
    pub fn is_empty(&self) -> bool {
        self.raw.is_empty()
    }
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// `w_eff = norm_w ⊙ proj_w` (`[D]` each; `proj_w` is the `[1, D]` projection flattened).
pub fn w_eff(norm_w: &[f32], proj_w: &[f32]) -> Vec<f32> {
    norm_w.iter().zip(proj_w).map(|(a, b)| a * b).collect()
}

/// The softmax mixing weights `[n_blocks + 1]` (last = the partial sum's) — mlx
/// `_attn_res_combine` logits with `softmax(precise=True)`.
pub fn mix_weights(blocks: &Blocks, partial: &[f32], w_eff: &[f32], eps: f32) -> Vec<f32> {
    let mut logits: Vec<f32> = blocks
        .raw
        .iter()
        .zip(&blocks.inv_rms)
        .map(|(b, r)| dot(b, w_eff) * r)
        .collect();
    logits.push(dot(partial, w_eff) * super::norm::inv_rms(partial, eps));
    let m = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let e: Vec<f32> = logits.iter().map(|l| (l - m).exp()).collect();
    let s: f32 = e.iter().sum();
    e.iter().map(|v| v / s).collect()
}

/// [`mix`] over blocks stored flat (the forward's arena): `raw: [n_blocks, D]`,
/// `inv_rms: [n_blocks]`, into `out: [D]`; `weights` is scratch for the
/// `n_blocks + 1` mixing weights. Same operations in the same order as [`mix`].
pub fn mix_into(
    raw: &[f32],
    inv_rms: &[f32],
    partial: &[f32],
    w_eff: &[f32],
    eps: f32,
    weights: &mut Vec<f32>,
    out: &mut [f32],
) {
    let d = partial.len();
    let n = inv_rms.len();
    if n == 0 {
        out.copy_from_slice(partial);
        return;
    }
    weights.clear();
    weights.extend(
        raw.chunks_exact(d)
            .zip(inv_rms)
            .map(|(b, r)| dot(b, w_eff) * r),
    );
    weights.push(dot(partial, w_eff) * super::norm::inv_rms(partial, eps));
    let m = weights.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    for l in weights.iter_mut() {
        *l = (*l - m).exp();
    }
    let s: f32 = weights.iter().sum();
    for e in weights.iter_mut() {
        *e /= s;
    }
    out.fill(0.0);
    for (j, b) in raw.chunks_exact(d).enumerate() {
        for (o, v) in out.iter_mut().zip(b) {
            *o += weights[j] * v;
        }
    }
    for (o, v) in out.iter_mut().zip(partial) {
        *o += weights[n] * v;
    }
}

/// `mix(B, p, w_eff)` → `[D]`; returns `p` unchanged when `B` is empty.
pub fn mix(blocks: &Blocks, partial: &[f32], w_eff: &[f32], eps: f32) -> Vec<f32> {
    if blocks.is_empty() {
        return partial.to_vec();
    }
    let p = mix_weights(blocks, partial, w_eff, eps);
    let n = blocks.len();
    let mut out = vec![0f32; partial.len()];
    for (j, b) in blocks.raw.iter().enumerate() {
        for (o, v) in out.iter_mut().zip(b) {
            *o += p[j] * v;
        }
    }
    for (o, v) in out.iter_mut().zip(partial) {
        *o += p[n] * v;
    }
    out
}
