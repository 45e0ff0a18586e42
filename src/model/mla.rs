//! Multi-head Latent Attention (DeepSeek-V3 style, NoPE as in Kimi Linear / K3),
//! absorbed form over a cache of one latent per position.
//!
//! mlx-lm `kimi_k3.py::KimiK3MLAAttention` / `kimi_linear.py::KimiMLAAttention`
//! (docs/model.md §3, §5):
//! ```text
//! q = q_b(RMSNorm₁ₑ₋₆(q_a x)) or q_proj x          → per head [q_nope (dn) | q_pe (dr)]
//! [c̃ | k_pe] = kv_a_proj_with_mqa x ;  c = RMSNorm(c̃)  (cache [c | k_pe], k_pe un-rotated)
//! q̂_h = W_UK,hᵀ q_nope,h            (W_UK,h = kv_b rows [h(dn+dv), h(dn+dv)+dn), [dn, r])
//! score_h(s) = τ·(q̂_h·c_s + q_pe,h·k_pe,s),  τ = (dn+dr)^−½,  causal softmax over s ≤ t
//! o_h = W_UV,h Σ_s p_s c_s           (W_UV,h = kv_b rows [h(dn+dv)+dn, (h+1)(dn+dv)), [dv, r])
//! out = o_proj( concat_h o_h ⊙ σ(g_proj x) )  (gate only with mla_use_output_gate)
//! ```
//! `kv_a_layernorm` eps: 1e-6 for `kimi_k3` (mlx `KimiK3MLAAttention`, transformers
//! default); mlx-lm `kimi_linear.py` builds it with `rms_norm_eps` — we follow mlx-lm
//! (the oracle) per model type, see [`kv_norm_eps`].

use anyhow::Result;

use super::ctx::Ctx;
use super::lend::{Lent, Recycle};
use super::norm::{rms_norm_inplace, rms_norm_into, sigmoid};
use super::state::MlaCache;
use super::weights::{Mat, Weights};
use crate::engine::arena::{zeroed, Dims, Mla};
use crate::format::config::ModelConfig;
use crate::kernels::{attend_latent_heads, attend_latent_ref, HeadQueries, Latents};
use crate::kernels::{Par, Workspace};
use crate::util::profile::{self, Op};

/// Query projection of an MLA layer.
pub enum QProj {
    /// `q_a_proj` `[q_lora, D]`, `q_a_layernorm` `[q_lora]` (eps 1e-6), `q_b_proj` `[H·(dn+dr), q_lora]`.
    Lora {
        /// `q_a_proj` `[q_lora, D]`.
        a: Mat,
        /// `q_a_layernorm` weight `[q_lora]`.
        norm: Vec<f32>,
        /// `q_b_proj` `[H·(dn+dr), q_lora]`.
        b: Mat,
    },
    /// `q_proj` `[H·(dn+dr), D]`.
    Full(Mat),
}

/// Weights of one MLA layer.
pub struct MlaWeights {
    /// Query projection.
    pub q: QProj,
    /// `kv_a_proj_with_mqa` `[r + dr, D]`.
    pub kv_a: Mat,
    /// `kv_a_layernorm` `[r]`.
    pub kv_norm: Vec<f32>,
    /// `kv_b_proj` `[H·(dn+dv), r]`.
    pub kv_b: Mat,
    /// `o_proj` `[D, H·dv]`.
    pub o: Mat,
    /// `g_proj` `[H·dv, D]` (K3 gated MLA).
    pub g: Option<Mat>,
}

/// eps of `q_a_layernorm`: 1e-6 (module default in mlx / transformers / Moonshot).
pub const Q_NORM_EPS: f32 = 1e-6;

/// eps of `kv_a_layernorm`: 1e-6 for `kimi_k3`; `rms_norm_eps` for `kimi_linear`, as
/// mlx-lm `kimi_linear.py` (transformers and the notes use 1e-6 there; the difference
/// is ≈ (eps₁−eps₂)/(2·mean(c̃²)) relative on `c`).
pub fn kv_norm_eps(cfg: &ModelConfig) -> f32 {
    if cfg.model_type == "kimi_linear" {
        cfg.rms_norm_eps
    } else {
        1e-6
    }
}

impl MlaWeights {
    /// Fetches layer `layer`'s MLA weights through the store, checking every size.
    pub fn load(w: &Weights, cfg: &ModelConfig, layer: usize) -> Result<Self> {
        Self::load_from(w, cfg, layer, &mut Mla::default())
    }

    /// [`MlaWeights::load`] decoding the norm weights into the arena's buffers,
    /// which the returned guard gives back to `sc` when dropped.
    pub fn lend<'a>(
        w: &Weights,
        cfg: &ModelConfig,
        layer: usize,
        sc: &'a mut Mla,
    ) -> Result<Lent<'a, Self>> {
        Ok(Lent::new(Self::load_from(w, cfg, layer, sc)?, sc))
    }

    /// Loads with the norm weights moved out of `sc` (see [`MlaWeights::lend`]).
    fn load_from(w: &Weights, cfg: &ModelConfig, layer: usize, sc: &mut Mla) -> Result<Self> {
        let l = Some(layer);
        let m = &cfg.mla;
        let d = cfg.hidden_size;
        let qd = m.num_heads * m.q_head_dim();
        let q = match m.q_lora_rank {
            Some(r) => {
                let mut norm = std::mem::take(&mut sc.q_norm);
                w.vec_into(l, "self_attn.q_a_layernorm.weight", r, &mut norm)?;
                QProj::Lora {
                    a: w.mat(l, "self_attn.q_a_proj.weight", r, d)?,
                    norm,
                    b: w.mat(l, "self_attn.q_b_proj.weight", qd, r)?,
                }
            }
            None => QProj::Full(w.mat(l, "self_attn.q_proj.weight", qd, d)?),
        };
        let mut kv_norm = std::mem::take(&mut sc.kv_norm);
        w.vec_into(
            l,
            "self_attn.kv_a_layernorm.weight",
            m.kv_lora_rank,
            &mut kv_norm,
        )?;
        Ok(MlaWeights {
            q,
            kv_a: w.mat(l, "self_attn.kv_a_proj_with_mqa.weight", m.latent_dim(), d)?,
            kv_norm,
            kv_b: w.mat(
                l,
                "self_attn.kv_b_proj.weight",
                m.num_heads * (m.qk_nope_head_dim + m.v_head_dim),
                m.kv_lora_rank,
            )?,
            o: w.mat(l, "self_attn.o_proj.weight", d, m.num_heads * m.v_head_dim)?,
            g: if m.use_output_gate {
                Some(w.mat(l, "self_attn.g_proj.weight", m.num_heads * m.v_head_dim, d)?)
            } else {
                None
            },
        })
    }
}

impl Recycle for MlaWeights {
    type Arena = Mla;

    /// Gives the decoded norm weights back to the arena (see [`MlaWeights::lend`]).
    fn recycle(self, sc: &mut Mla) {
        if let QProj::Lora { norm, .. } = self.q {
            sc.q_norm = norm;
        }
        sc.kv_norm = self.kv_norm;
    }
}

/// Attention of one head over the cache: `q̂: [r]`, `q_pe: [dr]`, returns the
/// attention-weighted latent `Σ_s p_s c_s` `[r]` (before `W_UV`). The reference
/// (one head at a time, the cache scanned per head); the forward pass uses
/// [`crate::kernels::attend_latent_heads`], bit-identical to this per head.
pub fn attend_latent(
    cache: &MlaCache,
    r: usize,
    dr: usize,
    qh: &[f32],
    q_pe: &[f32],
    tau: f32,
) -> Vec<f32> {
    let lat = Latents {
        data: &cache.latents,
        len: cache.len,
        r,
        dr,
    };
    attend_latent_ref(lat, qh, q_pe, tau)
}

/// MLA sub-layer over `n` consecutive tokens `xs: [n, D]` (after `input_layernorm`),
/// appending `n` latents to `cache`. Returns `[n, D]`; each token's result is
/// bit-identical whatever `n` is. Allocates its buffers (tests); the forward uses
/// [`mla_forward_into`].
pub fn mla_forward(
    par: &Par,
    cfg: &ModelConfig,
    w: &MlaWeights,
    xs: &[f32],
    n: usize,
    cache: &mut MlaCache,
) -> Vec<f32> {
    let mut sc = Mla::new(&Dims::new(cfg, n));
    let mut out = vec![0f32; n * cfg.hidden_size];
    let cx = &mut Ctx {
        cfg,
        par,
        ws: &mut Workspace::default(),
    };
    mla_forward_into(cx, w, &xs[..n * cfg.hidden_size], cache, &mut sc, &mut out);
    out
}

/// [`mla_forward`] of the `n = xs.len() / D` tokens into `out: [n, D]` with every
/// intermediate in the arena `sc` and the kernels' scratch (products, attention
/// scores) in `cx`: [`mla_project`], [`mla_attend`] over all `n` tokens, [`mla_output`].
pub fn mla_forward_into(
    cx: &mut Ctx<'_>,
    w: &MlaWeights,
    xs: &[f32],
    cache: &mut MlaCache,
    sc: &mut Mla,
    out: &mut [f32],
) {
    let n = xs.len() / cx.cfg.hidden_size;
    mla_project(cx, w, xs, n, sc);
    mla_attend(cx, w, 0..n, cache, sc);
    mla_output(cx, w, n, sc, out);
}

/// The projections of `n` tokens `xs: [n, D]` into the arena (queries
/// `q: [n, h·(dn+dr)]`, `kv_a_proj_with_mqa` outputs `kv: [n, r+dr]`, gate logits
/// `gate: [n, h·dv]`) and the head outputs `out: [n, h·dv]` zeroed. The tokens may
/// belong to different sequences (batched matmul ≡ matvec per row).
pub fn mla_project(cx: &mut Ctx<'_>, w: &MlaWeights, xs: &[f32], n: usize, sc: &mut Mla) {
    let m = &cx.cfg.mla;
    let (h, dn, dr, dv, r) = (
        m.num_heads,
        m.qk_nope_head_dim,
        m.qk_rope_head_dim,
        m.v_head_dim,
        m.kv_lora_rank,
    );
    let qhd = dn + dr;
    let ld = r + dr;
    let _prof = profile::scope(Op::MlaProj);
    let qs = zeroed(&mut sc.q, n * h * qhd);
    match &w.q {
        QProj::Full(q) => cx.mm(q, xs, n, qs),
        QProj::Lora { a, norm, b } => {
            let ql = a.rows();
            let qa = zeroed(&mut sc.qa, n * ql);
            cx.mm(a, xs, n, qa);
            for t in 0..n {
                rms_norm_inplace(&mut qa[t * ql..(t + 1) * ql], norm, Q_NORM_EPS);
            }
            cx.mm(b, qa, n, qs);
        }
    }
    let kvs = zeroed(&mut sc.kv, n * ld);
    cx.mm(&w.kv_a, xs, n, kvs);
    if let Some(g) = &w.g {
        let gs = zeroed(&mut sc.gate, n * h * dv);
        cx.mm(g, xs, n, gs);
    }
    zeroed(&mut sc.out, n * h * dv);
}

/// Attention of tokens `tokens` (a consecutive run of one sequence, within the
/// tokens projected by [`mla_project`]) in order over that sequence's latent
/// cache, appending their latents to `cache`; writes their rows of the arena's `out`.
pub fn mla_attend(
    cx: &mut Ctx<'_>,
    w: &MlaWeights,
    tokens: std::ops::Range<usize>,
    cache: &mut MlaCache,
    sc: &mut Mla,
) {
    let cfg = cx.cfg;
    let m = &cfg.mla;
    let (h, dn, dr, dv, r) = (
        m.num_heads,
        m.qk_nope_head_dim,
        m.qk_rope_head_dim,
        m.v_head_dim,
        m.kv_lora_rank,
    );
    let qhd = dn + dr;
    let tau = (qhd as f32).powf(-0.5);
    let ld = r + dr;
    let kv_eps = kv_norm_eps(cfg);
    let _prof = profile::scope(Op::MlaAttend);
    let Mla {
        q: qs,
        kv: kvs,
        gate,
        out: outs,
        q_abs,
        q_pe,
        ctx,
        lat,
        ..
    } = sc;
    let gates = w.g.as_ref().map(|_| &gate[..]);
    let q_abs = zeroed(q_abs, h * r);
    let q_pe = zeroed(q_pe, h * dr);
    let ctx = zeroed(ctx, h * r);
    let c = zeroed(lat, r);
    for t in tokens {
        let kv = &kvs[t * ld..(t + 1) * ld];
        rms_norm_into(&kv[..r], &w.kv_norm, kv_eps, c);
        cache.latents.extend_from_slice(c);
        cache.latents.extend_from_slice(&kv[r..]);
        cache.len += 1;
        let q = &qs[t * h * qhd..(t + 1) * h * qhd];
        for hh in 0..h {
            let qh = &q[hh * qhd..(hh + 1) * qhd];
            let base = hh * (dn + dv);
            w.kv_b
                .row_block(base, dn)
                .tmv_into(&qh[..dn], &mut q_abs[hh * r..(hh + 1) * r]);
            q_pe[hh * dr..(hh + 1) * dr].copy_from_slice(&qh[dn..]);
        }
        let lat = Latents {
            data: &cache.latents,
            len: cache.len,
            r,
            dr,
        };
        let q = HeadQueries {
            q_abs,
            q_pe,
            heads: h,
            tau,
        };
        attend_latent_heads(cx.par, cx.ws, lat, q, ctx);
        for hh in 0..h {
            let base = hh * (dn + dv);
            let o = &mut outs[(t * h + hh) * dv..(t * h + hh + 1) * dv];
            cx.mv(
                &w.kv_b.row_block(base + dn, dv),
                &ctx[hh * r..(hh + 1) * r],
                o,
            );
        }
        if let Some(g) = gates {
            let o = &mut outs[t * h * dv..(t + 1) * h * dv];
            for (ov, gv) in o.iter_mut().zip(&g[t * h * dv..(t + 1) * h * dv]) {
                *ov *= sigmoid(*gv);
            }
        }
    }
}

/// `o_proj` of the `n` tokens' head outputs (the arena's `out: [n, h·dv]`) into `out: [n, D]`.
pub fn mla_output(cx: &mut Ctx<'_>, w: &MlaWeights, n: usize, sc: &Mla, out: &mut [f32]) {
    let _prof = profile::scope(Op::MlaOut);
    cx.mm(&w.o, &sc.out, n, out);
}
