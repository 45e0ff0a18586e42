//! Kimi Delta Attention (KDA), token-recurrent form.
//!
//! Per token `t` and head `h` (docs/model.md §2; mlx-lm `kimi_linear.py::
//! KimiDeltaAttention`, `kimi_k3.py::KimiK3DeltaAttention`, `gated_delta.py`;
//! fla `ops/kda/naive.py::naive_recurrent_kda`):
//! 1. `u = [W_q x | W_k x | W_v x]`, depthwise causal conv of width W over the last W
//!    inputs per channel (cross-correlation: `w[c, W−1]` multiplies the current
//!    token), then SiLU (mlx `ShortConv1d`);
//! 2. `q ← q / sqrt(Σq² + 1e-6) · K^−½`, `k ← k / sqrt(Σk² + 1e-6)` per head
//!    (mlx `normalize_qk`, computed there as `K^−1·rms_norm(q, 1e-6/K)` and
//!    `K^−½·rms_norm(k, 1e-6/K)`, which is the same function);
//! 3. decay `α = exp(g)` per key channel, `a = f_b(f_a x)`:
//!    softplus form `α = exp(−exp(A_log[h])·softplus(a + dt_bias))` (mlx `compute_g`),
//!    lower-bound form `α = exp(lb·σ(exp(A_log[h])·(a + dt_bias)))` (mlx
//!    `compute_lower_bound_g`, K3 `gate_lower_bound = −5`);
//! 4. `β = σ(b_proj x)[h]`;
//! 5. gated delta rule on `S_h [V, K]`: `S ← S·diag(α)`, `e = v − S k`,
//!    `S ← S + β e kᵀ`, `o = S q` (mlx `_gated_delta_step_ops`);
//! 6. `y_h = o_norm.w ⊙ o_h / sqrt(mean(o_h²) + rms_norm_eps) ⊙ σ(gate_h)`, gate =
//!    `g_proj x` (K3 full rank) or `g_b(g_a x)`; `out = o_proj(concat_h y_h)`.

use anyhow::Result;

use super::ctx::Ctx;
use super::lend::{Lent, Recycle};
use super::norm::{rms_norm_inplace, sigmoid, silu, softplus};
use super::state::KdaState;
use super::weights::{Mat, Weights};
use crate::engine::arena::{zeroed, Dims, Kda};
use crate::format::config::ModelConfig;
use crate::kernels::{dense::PAR_MIN_ELEMS, par::OutPtr, Par, Workspace};
use crate::util::profile::{self, Op};

/// Output gate of a KDA layer.
pub enum OutGate {
    /// K3 `g_proj` `[P, D]`.
    Full(Mat),
    /// Kimi-Linear `g_a_proj` `[K, D]` then `g_b_proj` `[P, K]`.
    LowRank(Mat, Mat),
}

/// Weights of one KDA layer (matrices in stored form, small vectors in f32).
pub struct KdaWeights {
    /// `q_proj` `[P, D]`.
    pub q: Mat,
    /// `k_proj` `[P, D]`.
    pub k: Mat,
    /// `v_proj` `[P, D]`.
    pub v: Mat,
    /// Conv weights `[3P, W]` (q | k | v channels; stored `[P, 1, W]` each).
    pub conv: Vec<f32>,
    /// Forget-gate down projection `f_a_proj` `[K, D]`.
    pub f_a: Mat,
    /// Forget-gate up projection `f_b_proj` `[P, K]`.
    pub f_b: Mat,
    /// `[P]`.
    pub dt_bias: Vec<f32>,
    /// Per-head `A_log` `[H]` (first H stored entries).
    pub a_log: Vec<f32>,
    /// β logits `b_proj` `[H, D]`.
    pub b: Mat,
    /// Output gate.
    pub gate: OutGate,
    /// `[K]`, shared by all heads.
    pub o_norm: Vec<f32>,
    /// `o_proj` `[D, P]`.
    pub o: Mat,
}

impl KdaWeights {
    /// Fetches layer `layer`'s KDA weights through the store, checking every size.
    pub fn load(w: &Weights, cfg: &ModelConfig, layer: usize) -> Result<Self> {
        Self::load_from(w, cfg, layer, &mut Kda::default())
    }

    /// [`KdaWeights::load`] decoding the small vectors into the arena's buffers,
    /// which the returned guard gives back to `sc` when dropped.
    pub fn lend<'a>(
        w: &Weights,
        cfg: &ModelConfig,
        layer: usize,
        sc: &'a mut Kda,
    ) -> Result<Lent<'a, Self>> {
        Ok(Lent::new(Self::load_from(w, cfg, layer, sc)?, sc))
    }

    /// Loads with the vectors moved out of `sc` (see [`KdaWeights::lend`]).
    fn load_from(w: &Weights, cfg: &ModelConfig, layer: usize, sc: &mut Kda) -> Result<Self> {
        let l = Some(layer);
        let d = cfg.hidden_size;
        let h = cfg.kda.num_heads;
        let k = cfg.kda.head_dim;
        let p = h * k;
        let cw = cfg.kda.short_conv_kernel_size;
        let mut conv = std::mem::take(&mut sc.conv_w);
        conv.clear();
        for x in ["q", "k", "v"] {
            w.vec_append(
                l,
                &format!("self_attn.{x}_conv1d.weight"),
                p * cw,
                &mut conv,
            )?;
        }
        let mut dt_bias = std::mem::take(&mut sc.dt_bias);
        w.vec_into(l, "self_attn.dt_bias", p, &mut dt_bias)?;
        let mut a_log = std::mem::take(&mut sc.a_log);
        w.vec_prefix_into(l, "self_attn.A_log", h, &mut a_log)?;
        let mut o_norm = std::mem::take(&mut sc.o_norm);
        w.vec_into(l, "self_attn.o_norm.weight", k, &mut o_norm)?;
        Ok(KdaWeights {
            q: w.mat(l, "self_attn.q_proj.weight", p, d)?,
            k: w.mat(l, "self_attn.k_proj.weight", p, d)?,
            v: w.mat(l, "self_attn.v_proj.weight", p, d)?,
            conv,
            f_a: w.mat(l, "self_attn.f_a_proj.weight", k, d)?,
            f_b: w.mat(l, "self_attn.f_b_proj.weight", p, k)?,
            dt_bias,
            a_log,
            b: w.mat(l, "self_attn.b_proj.weight", h, d)?,
            gate: if cfg.kda.use_full_rank_gate {
                OutGate::Full(w.mat(l, "self_attn.g_proj.weight", p, d)?)
            } else {
                OutGate::LowRank(
                    w.mat(l, "self_attn.g_a_proj.weight", k, d)?,
                    w.mat(l, "self_attn.g_b_proj.weight", p, k)?,
                )
            },
            o_norm,
            o: w.mat(l, "self_attn.o_proj.weight", d, p)?,
        })
    }
}

impl Recycle for KdaWeights {
    type Arena = Kda;

    /// Gives the decoded vectors back to the arena (see [`KdaWeights::lend`]).
    fn recycle(self, sc: &mut Kda) {
        sc.conv_w = self.conv;
        sc.dt_bias = self.dt_bias;
        sc.a_log = self.a_log;
        sc.o_norm = self.o_norm;
    }
}

/// One step of the depthwise causal conv + SiLU over `c = u.len()` channels.
/// `conv_state: [W−1, c]` (row 0 oldest) is shifted to include `u`;
/// `w: [c, W]`. Returns `SiLU(Σ_i w[ch, i]·window_i[ch])`.
pub fn short_conv_step(conv_state: &mut [f32], w: &[f32], u: &[f32], width: usize) -> Vec<f32> {
    let mut out = vec![0f32; u.len()];
    short_conv_step_into(conv_state, w, u, width, &mut out);
    out
}

/// [`short_conv_step`] into `out: [c]`.
pub fn short_conv_step_into(
    conv_state: &mut [f32],
    w: &[f32],
    u: &[f32],
    width: usize,
    out: &mut [f32],
) {
    let c = u.len();
    let hist = width - 1;
    for ch in 0..c {
        let wr = &w[ch * width..(ch + 1) * width];
        let mut acc = 0f32;
        for i in 0..hist {
            acc += wr[i] * conv_state[i * c + ch];
        }
        acc += wr[hist] * u[ch];
        out[ch] = silu(acc);
    }
    if hist > 0 {
        conv_state.copy_within(c.., 0);
        conv_state[(hist - 1) * c..].copy_from_slice(u);
    }
}

/// L2-normalises `x` (one head, `[K]`) in place: `x / sqrt(Σx² + eps)`, then × `scale`.
pub fn l2norm_scaled(x: &mut [f32], eps: f32, scale: f32) {
    let ss: f32 = x.iter().map(|v| v * v).sum();
    let r = 1.0 / (ss + eps).sqrt() * scale;
    for v in x.iter_mut() {
        *v *= r;
    }
}

/// Per-key-channel decay `α = exp(g)` `[K]` of head `h` from `a = f_b(f_a x)` `[K]`
/// (this head's slice), `dt_bias` slice `[K]` and `A_log[h]`; see the module docs
/// for the two forms (`lower_bound = None` → softplus form).
pub fn decay(a: &[f32], dt_bias: &[f32], a_log_h: f32, lower_bound: Option<f32>) -> Vec<f32> {
    let mut out = vec![0f32; a.len()];
    decay_into(a, dt_bias, a_log_h, lower_bound, &mut out);
    out
}

/// [`decay`] into `out: [K]`.
pub fn decay_into(
    a: &[f32],
    dt_bias: &[f32],
    a_log_h: f32,
    lower_bound: Option<f32>,
    out: &mut [f32],
) {
    let a_scale = a_log_h.exp();
    for ((o, a), dt) in out.iter_mut().zip(a).zip(dt_bias) {
        *o = match lower_bound {
            None => (-a_scale * softplus(a + dt)).exp(),
            Some(lb) => (lb * sigmoid(a_scale * (a + dt))).exp(),
        };
    }
}

/// One gated delta-rule step for one head (mlx `_gated_delta_step_ops`).
///
/// `s: [V, K]` state (updated), `q, k: [K]` (already normalised), `v: [V]`,
/// `alpha: [K]` decay per key channel, `beta` scalar; writes `y: [V]`:
/// `S[j,d] *= α[d]`; `e[j] = v[j] − Σ_d S[j,d]k[d]`; `S[j,d] += β e[j] k[d]`;
/// `y[j] = Σ_d S[j,d] q[d]`.
pub fn delta_rule_step(
    s: &mut [f32],
    q: &[f32],
    k: &[f32],
    v: &[f32],
    alpha: &[f32],
    beta: f32,
    y: &mut [f32],
) {
    let kd = k.len();
    for (j, yj) in y.iter_mut().enumerate() {
        let row = &mut s[j * kd..(j + 1) * kd];
        let mut kv = 0f32;
        for d in 0..kd {
            row[d] *= alpha[d];
            kv += row[d] * k[d];
        }
        let delta = (v[j] - kv) * beta;
        let mut o = 0f32;
        for d in 0..kd {
            row[d] += k[d] * delta;
            o += row[d] * q[d];
        }
        *yj = o;
    }
}

/// KDA sub-layer over `n` consecutive tokens `xs: [n, D]` (the attention input, after
/// `input_layernorm`), advancing `st`. Returns `[n, D]`. Tokens are processed in order;
/// the result for each token is bit-identical whatever `n` is.
pub fn kda_forward(
    par: &Par,
    cfg: &ModelConfig,
    w: &KdaWeights,
    xs: &[f32],
    n: usize,
    st: &mut KdaState,
) -> Vec<f32> {
    let mut sc = Kda::new(&Dims::new(cfg, n));
    let mut out = vec![0f32; n * cfg.hidden_size];
    let cx = &mut Ctx {
        cfg,
        par,
        ws: &mut Workspace::default(),
    };
    kda_forward_into(cx, w, &xs[..n * cfg.hidden_size], st, &mut sc, &mut out);
    out
}

/// [`kda_forward`] of the `n = xs.len() / D` tokens into `out: [n, D]` with every
/// intermediate in the arena `sc` and the kernels' scratch in `cx`: [`kda_project`],
/// [`kda_recur`] over all `n` tokens, [`kda_output`].
pub fn kda_forward_into(
    cx: &mut Ctx<'_>,
    w: &KdaWeights,
    xs: &[f32],
    st: &mut KdaState,
    sc: &mut Kda,
    out: &mut [f32],
) {
    let n = xs.len() / cx.cfg.hidden_size;
    kda_project(cx, w, xs, n, sc);
    kda_recur(cx, w, n, 0..n, st, sc);
    kda_output(cx, w, n, sc, out);
}

/// The projections of `n` tokens `xs: [n, D]` into the arena (`q, k, v, a, g: [n, P]`,
/// `b: [n, H]`) and the head outputs `y: [n, P]` zeroed. The tokens may belong to
/// different sequences: each token's projections are the same products whatever
/// `n` is (batched matmul ≡ matvec per row).
pub fn kda_project(cx: &mut Ctx<'_>, w: &KdaWeights, xs: &[f32], n: usize, sc: &mut Kda) {
    let cfg = cx.cfg;
    let h = cfg.kda.num_heads;
    let k = cfg.kda.head_dim;
    let p = h * k;
    let _prof = profile::scope(Op::KdaProj);
    let qs = zeroed(&mut sc.q, n * p);
    cx.mm(&w.q, xs, n, qs);
    let ks = zeroed(&mut sc.k, n * p);
    cx.mm(&w.k, xs, n, ks);
    let vs = zeroed(&mut sc.v, n * p);
    cx.mm(&w.v, xs, n, vs);
    let fa = zeroed(&mut sc.fa, n * k);
    cx.mm(&w.f_a, xs, n, fa);
    let a_all = zeroed(&mut sc.a, n * p);
    cx.mm(&w.f_b, fa, n, a_all);
    let b_all = zeroed(&mut sc.b, n * h);
    cx.mm(&w.b, xs, n, b_all);
    let g_all = zeroed(&mut sc.g, n * p);
    match &w.gate {
        OutGate::Full(g) => cx.mm(g, xs, n, g_all),
        OutGate::LowRank(ga, gb) => {
            let t = zeroed(&mut sc.fa, n * k);
            cx.mm(ga, xs, n, t);
            cx.mm(gb, t, n, g_all);
        }
    }
    zeroed(&mut sc.y, n * p);
}

/// The short convolution and the gated delta rule of tokens `tokens` (a
/// consecutive run of one sequence, within the `n` projected by [`kda_project`]),
/// in order, on that sequence's state `st`; writes their rows of the arena's `y`.
pub fn kda_recur(
    cx: &Ctx<'_>,
    w: &KdaWeights,
    n: usize,
    tokens: std::ops::Range<usize>,
    st: &mut KdaState,
    sc: &mut Kda,
) {
    let (cfg, par) = (cx.cfg, cx.par);
    let h = cfg.kda.num_heads;
    let k = cfg.kda.head_dim;
    let p = h * k;
    let cw = cfg.kda.short_conv_kernel_size;
    let eps = cfg.rms_norm_eps;
    let lb = cfg.kda.gate_lower_bound;
    let scale = (k as f32).powf(-0.5);
    let _prof = profile::scope(Op::KdaRecur);
    let Kda {
        q: qs,
        k: ks,
        v: vs,
        a: a_all,
        b: b_all,
        g: g_all,
        y: ys,
        u,
        uc,
        qh,
        kh,
        alpha,
        ..
    } = sc;
    let (qs, ks, vs) = (&mut qs[..n * p], &mut ks[..n * p], &mut vs[..n * p]);
    // The short convolution, token by token (one state for all channels), written
    // back over the projections.
    let u = zeroed(u, 3 * p);
    let c = zeroed(uc, 3 * p);
    for t in tokens.clone() {
        let row = t * p..(t + 1) * p;
        u[..p].copy_from_slice(&qs[row.clone()]);
        u[p..2 * p].copy_from_slice(&ks[row.clone()]);
        u[2 * p..].copy_from_slice(&vs[row.clone()]);
        short_conv_step_into(&mut st.conv, &w.conv, u, cw, c);
        qs[row.clone()].copy_from_slice(&c[..p]);
        ks[row.clone()].copy_from_slice(&c[p..2 * p]);
        vs[row].copy_from_slice(&c[2 * p..]);
    }
    // The heads are independent: each runs the run's tokens in order on its own
    // state, so splitting heads across threads changes no bit.
    let ys = &mut ys[..n * p];
    let step = HeadStep {
        k,
        p,
        h,
        eps,
        lb,
        scale,
        w,
        qs,
        ks,
        vs,
        a_all,
        b_all,
        g_all,
    };
    let m = tokens.len();
    if k <= PAR_HEAD_DIM {
        let (s_out, y_out) = (OutPtr::new(&mut st.s), OutPtr::new(ys));
        par.for_ranges(h, 1, m * h * k * k * 4, PAR_MIN_ELEMS, &|heads| {
            let mut buf = [0f32; 3 * PAR_HEAD_DIM];
            let (qh, rest) = buf.split_at_mut(PAR_HEAD_DIM);
            let (kh, alpha) = rest.split_at_mut(PAR_HEAD_DIM);
            for hh in heads {
                // SAFETY: head hh's state and output columns belong to this range only.
                let s = unsafe { s_out.slice(hh * k * k..(hh + 1) * k * k) };
                for t in tokens.clone() {
                    // SAFETY: as above (head hh's columns of token t).
                    let y = unsafe { y_out.slice(t * p + hh * k..t * p + (hh + 1) * k) };
                    let tmp = (&mut qh[..k], &mut kh[..k], &mut alpha[..k]);
                    step.run(hh, t, s, tmp, y);
                }
            }
        });
    } else {
        let qh = zeroed(qh, k);
        let kh = zeroed(kh, k);
        let alpha = zeroed(alpha, k);
        for hh in 0..h {
            let s = &mut st.s[hh * k * k..(hh + 1) * k * k];
            for t in tokens.clone() {
                let y = &mut ys[t * p + hh * k..t * p + (hh + 1) * k];
                step.run(hh, t, s, (&mut *qh, &mut *kh, &mut *alpha), y);
            }
        }
    }
}

/// `o_proj` of the `n` tokens' head outputs (the arena's `y: [n, P]`) into `out: [n, D]`.
pub fn kda_output(cx: &mut Ctx<'_>, w: &KdaWeights, n: usize, sc: &Kda, out: &mut [f32]) {
    let _prof = profile::scope(Op::KdaOut);
    cx.mm(&w.o, &sc.y, n, out);
}

/// One head step's scratch `(qh, kh, alpha)`, `[K]` each.
type HeadTmp<'a> = (&'a mut [f32], &'a mut [f32], &'a mut [f32]);

/// Largest head dimension whose recurrence scratch (3 × `[K]`) the threads keep
/// on their stacks; larger heads run on the calling thread with the arena's.
const PAR_HEAD_DIM: usize = 256;

/// What one head's recurrence step reads: the chunk's convolved projections
/// `qs, ks, vs: [n, H·K]`, the decay input `a: [n, H·K]`, `β` logits `b: [n, H]`,
/// output-gate logits `g: [n, H·K]`, and the layer's weights and constants.
struct HeadStep<'a> {
    k: usize,
    p: usize,
    h: usize,
    eps: f32,
    lb: Option<f32>,
    scale: f32,
    w: &'a KdaWeights,
    qs: &'a [f32],
    ks: &'a [f32],
    vs: &'a [f32],
    a_all: &'a [f32],
    b_all: &'a [f32],
    g_all: &'a [f32],
}

impl HeadStep<'_> {
    /// Head `hh` at token `t`: normalise q and k, decay, the delta rule on its state
    /// `s: [K, K]`, the output norm and gate into `y: [K]` (scratch `qh, kh, alpha: [K]`).
    fn run(&self, hh: usize, t: usize, s: &mut [f32], tmp: HeadTmp<'_>, y: &mut [f32]) {
        let (qh, kh, alpha) = tmp;
        let (k, p) = (self.k, self.p);
        let r = t * p + hh * k..t * p + (hh + 1) * k;
        let hr = hh * k..(hh + 1) * k;
        qh.copy_from_slice(&self.qs[r.clone()]);
        kh.copy_from_slice(&self.ks[r.clone()]);
        l2norm_scaled(qh, 1e-6, self.scale);
        l2norm_scaled(kh, 1e-6, 1.0);
        let w = self.w;
        decay_into(
            &self.a_all[r.clone()],
            &w.dt_bias[hr.clone()],
            w.a_log[hh],
            self.lb,
            alpha,
        );
        let beta = sigmoid(self.b_all[t * self.h + hh]);
        delta_rule_step(s, qh, kh, &self.vs[r.clone()], alpha, beta, y);
        rms_norm_inplace(y, &w.o_norm, self.eps);
        for (yv, gv) in y.iter_mut().zip(&self.g_all[r]) {
            *yv *= sigmoid(*gv);
        }
    }
}
