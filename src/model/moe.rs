//! Routed mixture of experts (DeepSeek-V3 `noaux_tc` routing as in Kimi Linear / K3),
//! with K3's latent MoE and shared experts.
//!
//! mlx-lm `kimi_k3.py::KimiK3SparseMoE` / `_group_expert_select` (same routing in
//! `kimi_linear.py`), docs/model.md §4 (MoE routing) and §5 (Latent MoE):
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

use super::ctx::Ctx;
use super::lend::{Lent, Recycle};
use super::mlp::GatedMlp;
use super::norm::{rms_norm_inplace, sigmoid};
use super::weights::{Mat, Weights};
use crate::engine::arena::{zeroed, Mlp, Moe, Router};
use crate::format::config::{ModelConfig, MoeConfig};
use crate::util::profile::{self, Op};

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
/// [`crate::format::config::check_moe_layout`] (at least 2 experts per group when grouped,
/// `k ≤ topk_group · E/num_expert_group`).
pub fn route(logits: &[f32], bias: &[f32], moe: &MoeConfig) -> Routing {
    let mut r = Router::default();
    route_into(logits, bias, moe, &mut r);
    r.routes
}

/// [`route`] appending the token's `(expert, weight)` pairs to `r.routes`, with the
/// router's scratch in `r` (no allocation within the arena's sizes). The rankings
/// are total orders (ties by id), so the unstable sorts used here give the same
/// order as a stable sort.
pub fn route_into(logits: &[f32], bias: &[f32], moe: &MoeConfig, r: &mut Router) {
    let e = logits.len();
    r.s.clear();
    r.s.extend(logits.iter().map(|l| sigmoid(*l)));
    r.sel.clear();
    r.sel.extend(r.s.iter().zip(bias).map(|(a, b)| a + b));
    let ng = moe.num_expert_group;
    if ng > 1 {
        let gs = e / ng;
        r.granks.clear();
        for g in 0..ng {
            r.gvals.clear();
            r.gvals.extend_from_slice(&r.sel[g * gs..(g + 1) * gs]);
            r.gvals.sort_unstable_by(|a, b| b.total_cmp(a));
            r.granks.push((r.gvals.iter().take(2).sum::<f32>(), g));
        }
        r.granks.sort_unstable_by(|a, b| rank_cmp(*a, *b));
        for &(_, g) in &r.granks[moe.topk_group.min(ng)..] {
            r.sel[g * gs..(g + 1) * gs]
                .iter_mut()
                .for_each(|v| *v = f32::NEG_INFINITY);
        }
    }
    r.order.clear();
    r.order.extend(r.sel.iter().copied().zip(0..e));
    r.order.sort_unstable_by(|a, b| rank_cmp(*a, *b));
    let k = moe.num_experts_per_token.min(e);
    let start = r.routes.len();
    let s = &r.s;
    r.routes
        .extend(r.order[..k].iter().map(|&(_, i)| (i, s[i])));
    let out = &mut r.routes[start..];
    if k > 1 && moe.renormalize {
        let denom: f32 = out.iter().map(|x| x.1).sum::<f32>() + 1e-20;
        out.iter_mut().for_each(|x| x.1 /= denom);
    }
    out.iter_mut()
        .for_each(|x| x.1 *= moe.routed_scaling_factor);
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
        Self::load_from(w, cfg, moe, layer, &mut Moe::default())
    }

    /// [`MoeWeights::load`] decoding the bias and latent norm into the arena's
    /// buffers, which the returned guard gives back to `sc` when dropped.
    pub fn lend<'a>(
        w: &Weights,
        cfg: &ModelConfig,
        moe: &MoeConfig,
        layer: usize,
        sc: &'a mut Moe,
    ) -> Result<Lent<'a, Self>> {
        Ok(Lent::new(Self::load_from(w, cfg, moe, layer, sc)?, sc))
    }

    /// Loads with the vectors moved out of `sc` (see [`MoeWeights::lend`]).
    fn load_from(
        w: &Weights,
        cfg: &ModelConfig,
        moe: &MoeConfig,
        layer: usize,
        sc: &mut Moe,
    ) -> Result<Self> {
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
                    let mut v = std::mem::take(&mut sc.latent_norm);
                    w.vec_into(l, "block_sparse_moe.routed_expert_norm.weight", lat, &mut v)?;
                    Some(v)
                } else {
                    None
                },
            ),
            None => (None, None),
        };
        let mut bias = std::mem::take(&mut sc.bias);
        w.vec_into(
            l,
            "block_sparse_moe.gate.e_score_correction_bias",
            e,
            &mut bias,
        )?;
        Ok(MoeWeights {
            gate: w.mat(l, "block_sparse_moe.gate.weight", e, d)?,
            bias,
            shared,
            latent,
            latent_norm,
        })
    }
}

impl Recycle for MoeWeights {
    type Arena = Moe;

    /// Gives the decoded vectors back to the arena (see [`MoeWeights::lend`]).
    fn recycle(self, sc: &mut Moe) {
        sc.bias = self.bias;
        if let Some(v) = self.latent_norm {
            sc.latent_norm = v;
        }
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

/// The arena buffers [`moe_forward`] works in.
pub struct MoeScratch<'a> {
    /// MoE buffers.
    pub moe: &'a mut Moe,
    /// Router buffers.
    pub router: &'a mut Router,
    /// Gated-MLP intermediates (experts and shared experts).
    pub mlp: &'a mut Mlp,
}

/// One MoE layer as [`moe_forward`] dispatches it: its settings, where its routed
/// experts are read from, and its trunk weights.
#[derive(Clone, Copy)]
pub struct MoeLayer<'a> {
    /// The layer's index (the store's expert and hint keys).
    pub layer: usize,
    /// The MoE settings.
    pub moe: &'a MoeConfig,
    /// The weight accessor the routed experts are fetched through.
    pub w: &'a Weights,
    /// Router, shared experts and latent projections.
    pub trunk: &'a MoeWeights,
}

impl MoeLayer<'_> {
    /// Routed expert `e` ([`load_expert`] on the layer's expert width).
    fn expert(&self, cfg: &ModelConfig, e: usize) -> Result<GatedMlp> {
        let ed = self.moe.expert_dim(cfg.hidden_size);
        load_expert(self.w, self.layer, e, ed, self.moe.moe_intermediate_size)
    }
}

/// What the expert dispatch of one chunk reads: the layer, the tokens' expert
/// inputs `zs: [n, ed]` and the routing width `k` (routes per token).
struct Dispatch<'a> {
    l: MoeLayer<'a>,
    zs: &'a [f32],
    k: usize,
}

/// MoE sub-layer over `n` tokens `xs: [n, D]` (after `post_attention_layernorm`),
/// into `out: [n, D]`. Each token is routed; one token (decode) reports its selection
/// to the store ([`WeightStore::experts_selected`](crate::store::WeightStore::experts_selected))
/// and runs its experts one by one; a chunk of tokens (prefill) runs each distinct
/// expert once over all the tokens that picked it (`grouped_experts`). Either
/// way each token's expert outputs are summed in its router-rank order, so a
/// token's result is bit-identical whatever the chunk size.
pub fn moe_forward(
    cx: &mut Ctx<'_>,
    l: MoeLayer<'_>,
    xs: &[f32],
    n: usize,
    sc: MoeScratch<'_>,
    out: &mut [f32],
) -> Result<()> {
    let cfg = cx.cfg;
    let (moe, mw) = (l.moe, l.trunk);
    let d = cfg.hidden_size;
    let e = moe.num_experts;
    let ed = moe.expert_dim(d);
    let MoeScratch {
        moe: ms,
        router,
        mlp,
    } = sc;
    let prof = profile::scope(Op::Router);

    let logits = zeroed(&mut ms.logits, n * e);
    cx.mm(&mw.gate, xs, n, logits);
    let zs: &[f32] = match &mw.latent {
        Some((down, _)) => {
            let z = zeroed(&mut ms.z, n * ed);
            cx.mm(down, xs, n, z);
            z
        }
        None => xs,
    };
    router.routes.clear();
    for t in 0..n {
        route_into(&logits[t * e..(t + 1) * e], &mw.bias, moe, router);
    }
    let k = router.routes.len() / n;
    drop(prof);
    let ys = zeroed(&mut ms.ys, n * ed);
    let dis = Dispatch { l, zs, k };
    if n == 1 || !l.w.store.groups_chunk_experts() {
        per_token_experts(cx, &dis, router, mlp, &mut ms.eo, ys)?;
    } else {
        let bufs = (&mut ms.zg, &mut ms.eo, &mut ms.slots);
        grouped_experts(cx, &dis, router, mlp, bufs, ys)?;
    }
    let _prof = profile::scope(Op::SharedLatent);
    if let Some(nw) = &mw.latent_norm {
        for y in ys.chunks_exact_mut(ed) {
            rms_norm_inplace(y, nw, cfg.rms_norm_eps);
        }
    }
    match &mw.latent {
        Some((_, up)) => cx.mm(up, ys, n, out),
        None => out.copy_from_slice(ys),
    }
    if let Some(sh) = &mw.shared {
        let s = zeroed(&mut ms.shared, n * d);
        sh.forward_into(cx, xs, n, mlp, s);
        for (o, v) in out.iter_mut().zip(s.iter()) {
            *o += v;
        }
    }
    Ok(())
}

/// Token by token (decode): report the selection, fetch each expert, accumulate
/// `y += w·Expert(z)` in router-rank order into `ys: [n, ed]` (zeros on entry).
/// The routes are `router.routes: [n, k]` flat; `router.ids` is scratch.
fn per_token_experts(
    cx: &mut Ctx<'_>,
    dis: &Dispatch<'_>,
    router: &mut Router,
    mlp: &mut Mlp,
    eo: &mut Vec<f32>,
    ys: &mut [f32],
) -> Result<()> {
    let Dispatch { l, zs, k } = *dis;
    let ed = l.moe.expert_dim(cx.cfg.hidden_size);
    let Router { routes, ids, .. } = router;
    for (t, routing) in routes.chunks_exact(k.max(1)).enumerate() {
        ids.clear();
        ids.extend(routing.iter().map(|r| r.0));
        l.w.store.experts_selected(l.layer, ids);
        let z = &zs[t * ed..(t + 1) * ed];
        let y = &mut ys[t * ed..(t + 1) * ed];
        for &(eid, wt) in routing {
            let fetch = profile::scope(Op::ExpertFetch);
            let ex = l.expert(cx.cfg, eid)?;
            drop(fetch);
            let _prof = profile::scope(Op::ExpertMlp);
            let o = zeroed(eo, ed);
            ex.forward_into(cx, z, 1, mlp, o);
            for (yv, ov) in y.iter_mut().zip(o.iter()) {
                *yv += wt * ov;
            }
        }
    }
    Ok(())
}

/// Distinct experts of a chunk's routings in first-use order (token order, then
/// router rank), each with the `(token, rank)` slots that picked it.
pub fn expert_groups(routings: &[Routing]) -> Vec<(usize, Vec<(usize, usize)>)> {
    let flat: Vec<(usize, f32)> = routings.iter().flatten().copied().collect();
    let k = routings.iter().map(|r| r.len()).max().unwrap_or(0);
    expert_groups_flat(&flat, k)
}

/// [`expert_groups`] of routings stored flat `[n, k]`.
fn expert_groups_flat(routes: &[(usize, f32)], k: usize) -> Vec<(usize, Vec<(usize, usize)>)> {
    let mut groups: Vec<(usize, Vec<(usize, usize)>)> = Vec::new();
    let mut index = std::collections::HashMap::new();
    for (t, r) in routes.chunks_exact(k.max(1)).enumerate() {
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

/// Indexes a chunk's routing `routes: [n, k]` in the router's arena buffers:
/// `tok_ids` (the ids per token), `chunk_order` (distinct experts in first-use
/// order: token order, then router rank) and, per expert of that order, its
/// `(token, rank)` slots `users[starts[g]..starts[g + 1]]` in scan order — the
/// groups of [`expert_groups`], without allocating (a counting sort).
pub fn index_chunk(r: &mut Router, k: usize, num_experts: usize) {
    const NONE: usize = usize::MAX;
    let Router {
        routes,
        tok_ids,
        chunk_order,
        users,
        starts,
        group_of,
        ..
    } = r;
    if group_of.len() != num_experts {
        group_of.clear();
        group_of.resize(num_experts, NONE);
    }
    tok_ids.clear();
    chunk_order.clear();
    starts.clear();
    starts.push(0);
    for &(e, _) in routes.iter() {
        tok_ids.push(e);
        if group_of[e] == NONE {
            group_of[e] = chunk_order.len();
            chunk_order.push(e);
            starts.push(0);
        }
        starts[group_of[e] + 1] += 1;
    }
    for g in 0..chunk_order.len() {
        starts[g + 1] += starts[g];
    }
    users.clear();
    users.resize(routes.len(), (0, 0));
    // starts[g] is group g's write cursor; afterwards it is group g's end.
    for (i, &(e, _)) in routes.iter().enumerate() {
        let g = group_of[e];
        users[starts[g]] = (i / k.max(1), i % k.max(1));
        starts[g] += 1;
    }
    for g in (1..starts.len()).rev() {
        starts[g] = starts[g - 1];
    }
    starts[0] = 0;
    for &e in chunk_order.iter() {
        group_of[e] = NONE;
    }
}

/// The arena's buffers of [`grouped_experts`]: one expert's gathered inputs `zg`,
/// its outputs `eo` and the per-`(token, rank)` output slots.
type GroupBufs<'a> = (&'a mut Vec<f32>, &'a mut Vec<f32>, &'a mut Vec<f32>);

/// Expert-grouped chunk (prefill): tells the store the chunk's routing
/// ([`WeightStore::chunk_experts_selected`](crate::store::WeightStore::chunk_experts_selected)),
/// then fetches each distinct expert once, in first-use order, and runs it as a
/// matmul over the tokens that picked it (bit-identical to one matvec per token).
/// Outputs are kept per `(token, rank)` slot (`n·k·ed` f32, the arena's `slots`)
/// and summed per token in router-rank order afterwards into `ys` (zeros on
/// entry), exactly as [`per_token_experts`] sums them. The routing index is the
/// router's arena buffers ([`index_chunk`]).
fn grouped_experts(
    cx: &mut Ctx<'_>,
    dis: &Dispatch<'_>,
    router: &mut Router,
    mlp: &mut Mlp,
    (zg, eo, slots): GroupBufs<'_>,
    ys: &mut [f32],
) -> Result<()> {
    let Dispatch { l, zs, k } = *dis;
    let ed = l.moe.expert_dim(cx.cfg.hidden_size);
    index_chunk(router, k, l.moe.num_experts);
    let routes = &router.routes;
    let n = routes.len() / k.max(1);
    l.w.store
        .chunk_experts_selected(l.layer, &router.tok_ids, k, &router.chunk_order);
    let slots = zeroed(slots, n * k * ed);
    for (g, eid) in router.chunk_order.iter().enumerate() {
        let users = &router.users[router.starts[g]..router.starts[g + 1]];
        let fetch = profile::scope(Op::ExpertFetch);
        let ex = l.expert(cx.cfg, *eid)?;
        drop(fetch);
        let _prof = profile::scope(Op::ExpertMlp);
        zg.clear();
        for &(t, _) in users {
            zg.extend_from_slice(&zs[t * ed..(t + 1) * ed]);
        }
        let o = zeroed(eo, users.len() * ed);
        ex.forward_into(cx, zg, users.len(), mlp, o);
        for (j, &(t, r)) in users.iter().enumerate() {
            slots[(t * k + r) * ed..][..ed].copy_from_slice(&o[j * ed..(j + 1) * ed]);
        }
    }
    for (t, routing) in routes.chunks_exact(k.max(1)).enumerate() {
        let y = &mut ys[t * ed..(t + 1) * ed];
        for (r, &(_, wt)) in routing.iter().enumerate() {
            for (yv, ov) in y.iter_mut().zip(&slots[(t * k + r) * ed..][..ed]) {
                *yv += wt * ov;
            }
        }
    }
    Ok(())
}
