//! Gated MLPs: dense MLP, shared experts and routed experts all compute
//! `down( act(gate x, up x) )` (Kimi names: `w1` = gate, `w3` = up, `w2` = down).

use anyhow::Result;

use super::ctx::Ctx;
use super::norm::{sigmoid, silu};
use super::weights::Mat;
use crate::engine::arena::{zeroed, Mlp};
use crate::format::config::Activation;
use crate::kernels::Par;

/// SiTU (Kimi K3), exactly mlx-lm `kimi_k3.py::_situ(x=up, gate=gate, beta, linear_beta)`:
/// `[β·tanh(g/β)·σ(g)] · [β_l·tanh(u/β_l)]`, where `g` is the gate (`w1`/`gate_proj`)
/// output and `u` the up (`w3`/`up_proj`) output; `linear_beta = None` leaves `u` as is.
pub fn situ(g: f32, u: f32, beta: f32, linear_beta: Option<f32>) -> f32 {
    let a = beta * (g / beta).tanh() * sigmoid(g);
    let x = match linear_beta {
        Some(lb) => lb * (u / lb).tanh(),
        None => u,
    };
    a * x
}

/// Applies the gated activation elementwise: `out[i] = act(g[i], u[i])`.
/// SiLU: `silu(g)·u` (mlx `swiglu(gate, x)`); SiTU: [`situ`].
pub fn gated_act(act: Activation, g: &[f32], u: &[f32]) -> Vec<f32> {
    match act {
        Activation::Silu => g.iter().zip(u).map(|(g, u)| silu(*g) * u).collect(),
        Activation::Situ { beta, linear_beta } => g
            .iter()
            .zip(u)
            .map(|(g, u)| situ(*g, *u, beta, linear_beta))
            .collect(),
    }
}

/// [`gated_act`] in place, `g[i] = act(g[i], u[i])`, the elements split
/// across `par`'s threads (the same bits whatever the split: [`Par::zip_map`]).
pub fn gated_act_inplace(par: &Par, act: Activation, g: &mut [f32], u: &[f32]) {
    match act {
        Activation::Silu => par.zip_map(g, u, &|g, u| silu(g) * u),
        Activation::Situ { beta, linear_beta } => {
            par.zip_map(g, u, &|g, u| situ(g, u, beta, linear_beta))
        }
    }
}

/// The three matrices of a gated MLP: `gate`/`up` `[F, D]`, `down` `[D, F]`.
pub struct GatedMlp {
    /// `gate_proj` / `w1` `[F, D]`.
    pub gate: Mat,
    /// `up_proj` / `w3` `[F, D]`.
    pub up: Mat,
    /// `down_proj` / `w2` `[D, F]`.
    pub down: Mat,
}

impl GatedMlp {
    /// `down(act(gate x, up x))` for `n` inputs `xs: [n, D]` → `[n, D]`.
    pub fn forward(&self, par: &Par, act: Activation, xs: &[f32], n: usize) -> Result<Vec<f32>> {
        let g = self.gate.mm(par, xs, n);
        let u = self.up.mm(par, xs, n);
        let h = gated_act(act, &g, &u);
        Ok(self.down.mm(par, &h, n))
    }

    /// [`GatedMlp::forward`] with the configuration's activation into `out: [n, D]`,
    /// with the intermediates in the arena's `g` / `u` buffers and the kernels'
    /// scratch in `cx` (bit-identical to `forward`).
    pub fn forward_into(
        &self,
        cx: &mut Ctx<'_>,
        xs: &[f32],
        n: usize,
        sc: &mut Mlp,
        out: &mut [f32],
    ) {
        let f = self.gate.rows();
        let g = zeroed(&mut sc.g, n * f);
        cx.mm(&self.gate, xs, n, g);
        let u = zeroed(&mut sc.u, n * f);
        cx.mm(&self.up, xs, n, u);
        gated_act_inplace(cx.par, cx.cfg.activation, g, u);
        cx.mm(&self.down, g, n, out);
    }
}
