//! Routed mixture of experts (DeepSeek-V3 `noaux_tc` routing as in Kimi Linear / K3),
//! with K3's latent MoE and shared experts.
//!
//! mlx-lm `kimi_k3.py::KimiK3SparseMoE` / `_group_expert_select` (same routing in
//! `kimi_linear.py`), docs/architecture.md "MoE routing" and "Latent MoE":
//! ```text
//! s  = σ(W_gate x) (f32) ;  s' = s + e_score_correction_bias       (bias: selection only)
//! n_group > 1: group score = sum of the top-2 s' of each group; the n_group − topk_group
//!              lowest groups get s' := −∞ (excluded entirely, as DeepSeek-V3
//!              `inference/model.py` `Gate.forward` and vLLM `grouped_topk` do; mlx-lm
//!              masks with 0.0, which lets dropped groups win once every kept s' < 0,
//!              see fixtures/oracle/README.md)
//! I  = top-k of s' (ties → lower expert id; order = router rank)
//! w_i = s_i ; if k > 1 and moe_renormalize: w_i /= Σ w + 1e-20 ; w_i *= routed_scaling_factor
//! latent MoE: z = routed_expert_down_proj x ; y = Σ_{i∈I, rank order} w_i·Expert_i(z)
//!             y = routed_expert_norm(y) (if latent_moe_use_norm, eps rms_norm_eps) ; y = routed_expert_up_proj y
//! out = y + SharedMLP(x)     (shared intermediate = moe_intermediate_size · num_shared_experts)
//! ```

use std::cmp::Ordering;

use anyhow::{Context, Result};

use super::mlp::GatedMlp;
use super::norm::{rms_norm_inplace, sigmoid};
use super::weights::{Mat, Weights};
use crate::config::{Activation, ModelConfig, MoeConfig};
use crate::ops::Par;

/// Routing decision for one token: `(expert id, weight)` in router-rank order.
pub type Routing = Vec<(usize, f32)>;

/// Orders `(score, id)` pairs by descending score, ties by ascending id (total order).
fn rank_cmp(a: (f32, usize), b: (f32, usize)) -> Ordering {
    b.0.total_cmp(&a.0).then(a.1.cmp(&b.1))
}

/// The router (DeepSeek-V3 `noaux_tc`, mlx `_group_expert_select`): `logits: [E]`
/// (= `W_gate x`), `bias: [E]`; returns `num_experts_per_token` `(expert, weight)` pairs.
/// Deterministic: stable ranking with `total_cmp`, ties broken towards the lower
/// expert (or group) id. Dropped groups are masked with −∞, so a uniform shift of
/// `bias` never changes the selection. Needs a layout accepted by
/// [`crate::config::check_moe_layout`] (at least 2 experts per group when grouped,
/// `k ≤ topk_group · E/num_expert_group`).
pub fn route(logits: &[f32], bias: &[f32], moe: &MoeConfig) -> Routing {
    let e = logits.len();
    let s: Vec<f32> = logits.iter().map(|l| sigmoid(*l)).collect();
    let mut sel: Vec<f32> = s.iter().zip(bias).map(|(a, b)| a + b).collect();
    let ng = moe.num_expert_group;
    if ng > 1 {
        let gs = e / ng;
        let mut groups: Vec<(f32, usize)> = (0..ng)
            .map(|g| {
                let mut v: Vec<f32> = sel[g * gs..(g + 1) * gs].to_vec();
                v.sort_by(|a, b| b.total_cmp(a));
                (v.iter().take(2).sum::<f32>(), g)
            })
            .collect();
        groups.sort_by(|a, b| rank_cmp(*a, *b));
        for &(_, g) in &groups[moe.topk_group.min(ng)..] {
            sel[g * gs..(g + 1) * gs]
                .iter_mut()
                .for_each(|v| *v = f32::NEG_INFINITY);
        }
    }
    let mut order: Vec<(f32, usize)> = sel.iter().copied().zip(0..e).collect();
    order.sort_by(|a, b| rank_cmp(*a, *b));
    let k = moe.num_experts_per_token.min(e);
    let mut out: Routing = order[..k].iter().map(|&(_, i)| (i, s[i])).collect();
    if k > 1 && moe.renormalize {
        let denom: f32 = out.iter().map(|x| x.1).sum::<f32>() + 1e-20;
        out.iter_mut().for_each(|x| x.1 /= denom);
    }
    out.iter_mut()
        .for_each(|x| x.1 *= moe.routed_scaling_factor);
    out
}

/// Trunk weights of one MoE layer (routed experts are fetched per token).
pub struct MoeWeights {
    /// Router `gate.weight` `[E, D]` (F32 or BF16).
    pub gate: Mat,
    /// `e_score_correction_bias` `[E]`.
    pub bias: Vec<f32>,
    /// Shared experts (intermediate `moe_intermediate_size · num_shared_experts`).
    pub shared: Option<GatedMlp>,
    /// Latent projections `routed_expert_down_proj` `[L, D]`, `routed_expert_up_proj` `[D, L]`.
    pub latent: Option<(Mat, Mat)>,
    /// `routed_expert_norm` `[L]`.
    pub latent_norm: Option<Vec<f32>>,
}

impl MoeWeights {
    /// Fetches layer `layer`'s router, shared experts and latent projections.
    pub fn load(w: &Weights, cfg: &ModelConfig, moe: &MoeConfig, layer: usize) -> Result<Self> {
        let l = Some(layer);
        let d = cfg.hidden_size;
        let e = moe.num_experts;
        let shared = if moe.num_shared_experts > 0 {
            let f = moe.moe_intermediate_size * moe.num_shared_experts;
            Some(GatedMlp {
                gate: w.mat(l, "block_sparse_moe.shared_experts.gate_proj.weight", f, d)?,
                up: w.mat(l, "block_sparse_moe.shared_experts.up_proj.weight", f, d)?,
                down: w.mat(l, "block_sparse_moe.shared_experts.down_proj.weight", d, f)?,
            })
        } else {
            None
        };
        let (latent, latent_norm) = match moe.routed_expert_hidden_size {
            Some(lat) => (
                Some((
                    w.mat(l, "block_sparse_moe.routed_expert_down_proj.weight", lat, d)?,
                    w.mat(l, "block_sparse_moe.routed_expert_up_proj.weight", d, lat)?,
                )),
                if moe.latent_moe_use_norm {
                    Some(w.vec(l, "block_sparse_moe.routed_expert_norm.weight", lat)?)
                } else {
                    None
                },
            ),
            None => (None, None),
        };
        Ok(MoeWeights {
            gate: w.mat(l, "block_sparse_moe.gate.weight", e, d)?,
            bias: w.vec(l, "block_sparse_moe.gate.e_score_correction_bias", e)?,
            shared,
            latent,
            latent_norm,
        })
    }
}

/// Routed expert `e` of `layer` as a [`GatedMlp`] on the expert width `ed`.
pub fn load_expert(w: &Weights, layer: usize, e: usize, ed: usize, fi: usize) -> Result<GatedMlp> {
    let ew = w
        .store
        .expert(layer, e)
        .with_context(|| format!("reading layer {layer} routed expert {e}"))?;
    Ok(GatedMlp {
        gate: w.expert_mat(layer, e, "w1", ew.w1, fi, ed)?,
        up: w.expert_mat(layer, e, "w3", ew.w3, fi, ed)?,
        down: w.expert_mat(layer, e, "w2", ew.w2, ed, fi)?,
    })
}

/// MoE sub-layer over `n` tokens `xs: [n, D]` (after `post_attention_layernorm`).
/// Returns `[n, D]`. Each token is routed; one token (decode) reports its selection
/// to the store ([`WeightStore::experts_selected`](crate::store::WeightStore::experts_selected))
/// and runs its experts one by one; a chunk of tokens (prefill) runs each distinct
/// expert once over all the tokens that picked it ([`grouped_experts`]). Either
/// way each token's expert outputs are summed in its router-rank order, so a
/// token's result is bit-identical whatever the chunk size.
#[allow(clippy::too_many_arguments)]
pub fn moe_forward(
    par: &Par,
    cfg: &ModelConfig,
    moe: &MoeConfig,
    w: &Weights,
    mw: &MoeWeights,
    layer: usize,
    xs: &[f32],
    n: usize,
) -> Result<Vec<f32>> {
    let d = cfg.hidden_size;
    let e = moe.num_experts;
    let ed = moe.expert_dim(d);
    let act: Activation = cfg.activation;

    let logits = mw.gate.mm(par, xs, n);
    let zs = match &mw.latent {
        Some((down, _)) => down.mm(par, xs, n),
        None => xs.to_vec(),
    };
    let routings: Vec<Routing> = (0..n)
        .map(|t| route(&logits[t * e..(t + 1) * e], &mw.bias, moe))
        .collect();
    let mut ys = if n == 1 || !w.store.groups_chunk_experts() {
        per_token_experts(par, cfg, moe, w, layer, &routings, &zs)?
    } else {
        grouped_experts(par, cfg, moe, w, layer, &routings, &zs)?
    };
    if let Some(nw) = &mw.latent_norm {
        for y in ys.chunks_exact_mut(ed) {
            rms_norm_inplace(y, nw, cfg.rms_norm_eps);
        }
    }
    let mut out = match &mw.latent {
        Some((_, up)) => up.mm(par, &ys, n),
        None => ys,
    };
    if let Some(sh) = &mw.shared {
        let s = sh.forward(par, act, xs, n)?;
        for (o, v) in out.iter_mut().zip(&s) {
            *o += v;
        }
    }
    Ok(out)
}

/// Token by token (decode): report the selection, fetch each expert, accumulate
/// `y += w·Expert(z)` in router-rank order. Returns `[n, ed]`.
fn per_token_experts(
    par: &Par,
    cfg: &ModelConfig,
    moe: &MoeConfig,
    w: &Weights,
    layer: usize,
    routings: &[Routing],
    zs: &[f32],
) -> Result<Vec<f32>> {
    let ed = moe.expert_dim(cfg.hidden_size);
    let fi = moe.moe_intermediate_size;
    let mut ys = vec![0f32; routings.len() * ed];
    for (t, routing) in routings.iter().enumerate() {
        let ids: Vec<usize> = routing.iter().map(|r| r.0).collect();
        w.store.experts_selected(layer, &ids);
        let z = &zs[t * ed..(t + 1) * ed];
        let y = &mut ys[t * ed..(t + 1) * ed];
        for &(eid, wt) in routing {
            let ex = load_expert(w, layer, eid, ed, fi)?;
            let o = ex.forward(par, cfg.activation, z, 1)?;
            for (yv, ov) in y.iter_mut().zip(&o) {
                *yv += wt * ov;
            }
        }
    }
    Ok(ys)
}

/// Distinct experts of a chunk's routings in first-use order (token order, then
/// router rank), each with the `(token, rank)` slots that picked it.
pub fn expert_groups(routings: &[Routing]) -> Vec<(usize, Vec<(usize, usize)>)> {
    let mut groups: Vec<(usize, Vec<(usize, usize)>)> = Vec::new();
    let mut index = std::collections::HashMap::new();
    for (t, r) in routings.iter().enumerate() {
        for (k, &(e, _)) in r.iter().enumerate() {
            let g = *index.entry(e).or_insert_with(|| {
                groups.push((e, Vec::new()));
                groups.len() - 1
            });
            groups[g].1.push((t, k));
        }
    }
    groups
}

/// Expert-grouped chunk (prefill): tells the store the chunk's routing
/// ([`WeightStore::chunk_experts_selected`](crate::store::WeightStore::chunk_experts_selected)),
/// then fetches each distinct expert once, in first-use order, and runs it as a
/// matmul over the tokens that picked it (bit-identical to one matvec per token).
/// Outputs are kept per `(token, rank)` slot (`n·k·ed` f32) and summed per token
/// in router-rank order afterwards, exactly as [`per_token_experts`] sums them.
fn grouped_experts(
    par: &Par,
    cfg: &ModelConfig,
    moe: &MoeConfig,
    w: &Weights,
    layer: usize,
    routings: &[Routing],
    zs: &[f32],
) -> Result<Vec<f32>> {
    let ed = moe.expert_dim(cfg.hidden_size);
    let fi = moe.moe_intermediate_size;
    let n = routings.len();
    let k = routings.iter().map(|r| r.len()).max().unwrap_or(0);
    let groups = expert_groups(routings);
    let ids: Vec<Vec<usize>> = routings
        .iter()
        .map(|r| r.iter().map(|x| x.0).collect())
        .collect();
    let order: Vec<usize> = groups.iter().map(|g| g.0).collect();
    w.store.chunk_experts_selected(layer, &ids, &order);
    let mut slots = vec![0f32; n * k * ed];
    for (eid, users) in &groups {
        let ex = load_expert(w, layer, *eid, ed, fi)?;
        let mut z = Vec::with_capacity(users.len() * ed);
        for &(t, _) in users {
            z.extend_from_slice(&zs[t * ed..(t + 1) * ed]);
        }
        let o = ex.forward(par, cfg.activation, &z, users.len())?;
        for (j, &(t, r)) in users.iter().enumerate() {
            slots[(t * k + r) * ed..][..ed].copy_from_slice(&o[j * ed..(j + 1) * ed]);
        }
    }
    let mut ys = vec![0f32; n * ed];
    for (t, routing) in routings.iter().enumerate() {
        let y = &mut ys[t * ed..(t + 1) * ed];
        for (r, &(_, wt)) in routing.iter().enumerate() {
            for (yv, ov) in y.iter_mut().zip(&slots[(t * k + r) * ed..][..ed]) {
                *yv += wt * ov;
            }
        }
    }
    Ok(ys)
}
