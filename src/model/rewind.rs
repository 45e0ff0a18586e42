//! Rewinding a sequence after a multi-token forward: the restore point a
//! speculative verification pass takes so that only its accepted rows stay in the
//! state.
//!
//! While a [`Rewind`] is armed on a [`State`], the forward records per layer what it
//! needs to undo the call without reading a weight again:
//! - KDA: the layer's recurrent and conv state before the call (one copy), the
//!   rows' projected inputs before the short convolution (`q | k | v | a | b`,
//!   `[n, 4P + H]`) and the layer's conv weights, `dt_bias` and `A_log`;
//! - MLA: the latent cache's length before the call.
//!
//! [`State::rewind_to`](crate::model::State::rewind_to) then puts the KDA states back and replays only the
//! recurrence (short conv + gated delta rule) of the first `keep` rows, with the
//! same functions in the same order as the forward, so the state is bit-identical to
//! a forward of those `keep` tokens alone; MLA caches are truncated.

use anyhow::{bail, Result};

use super::kda::{decay_into, delta_rule_step, l2norm_scaled, short_conv_step_into, KdaWeights};
use super::norm::sigmoid;
use super::state::{KdaState, LayerState, State};
use crate::engine::arena::Kda;
use crate::format::config::{AttnKind, ModelConfig};

/// What one layer needs to be rewound.
#[derive(Debug, Clone)]
enum Saved {
    /// A KDA layer: state before the call, projected inputs of the call's rows
    /// `[n, 4P + H]` (`q | k | v` before the conv, `a`, `b`), and its small weights.
    Kda {
        before: KdaState,
        rows: Vec<f32>,
        conv_w: Vec<f32>,
        dt_bias: Vec<f32>,
        a_log: Vec<f32>,
    },
    /// An MLA layer: cached positions before the call.
    Mla(usize),
}

/// A restore point for one forward of up to `max_rows` tokens (see the module docs).
#[derive(Debug, Clone)]
pub struct Rewind {
    armed: bool,
    /// `state.pos` when armed.
    pos: usize,
    /// Tokens the recorded forward ran.
    rows: usize,
    max_rows: usize,
    layers: Vec<Saved>,
}

/// Floats of one KDA row's saved projections: `q, k, v, a: [P]` and `b: [H]`.
fn row_floats(cfg: &ModelConfig) -> usize {
    4 * cfg.kda_proj_dim() + cfg.kda.num_heads
}

impl Rewind {
    /// A restore point for forwards of up to `max_rows` tokens of `cfg` (buffers
    /// allocated now: [`Rewind::planned_bytes`]).
    pub fn new(cfg: &ModelConfig, max_rows: usize) -> Rewind {
        let h = cfg.kda.num_heads;
        let k = cfg.kda.head_dim;
        let p = h * k;
        let w = cfg.kda.short_conv_kernel_size;
        let layers = cfg
            .attn_kinds
            .iter()
            .map(|kind| match kind {
                AttnKind::Kda => Saved::Kda {
                    before: KdaState {
                        conv: vec![0.0; (w - 1) * 3 * p],
                        s: vec![0.0; h * k * k],
                    },
                    rows: Vec::with_capacity(max_rows * row_floats(cfg)),
                    conv_w: Vec::with_capacity(3 * p * w),
                    dt_bias: Vec::with_capacity(p),
                    a_log: Vec::with_capacity(h),
                },
                // gpt-oss is refused at load (`Model::open_speculative`).
                AttnKind::Mla | AttnKind::Gqa => Saved::Mla(0),
            })
            .collect();
        Rewind {
            armed: false,
            pos: 0,
            rows: 0,
            max_rows,
            layers,
        }
    }

    /// Bytes a [`Rewind`] for `max_rows` rows of `cfg` holds, per KDA layer: one copy
    /// of the layer's state (`(W−1)·3P + H·K²` f32), the rows' projections
    /// (`max_rows · (4P + H)` f32) and the layer's conv weights, `dt_bias`, `A_log`
    /// (`3P·W + P + H` f32). MLA layers hold a length only.
    pub fn planned_bytes(cfg: &ModelConfig, max_rows: usize) -> u64 {
        let h = cfg.kda.num_heads;
        let k = cfg.kda.head_dim;
        let p = h * k;
        let w = cfg.kda.short_conv_kernel_size;
        let per = (w.saturating_sub(1)) * 3 * p
            + h * k * k
            + max_rows * row_floats(cfg)
            + 3 * p * w
            + p
            + h;
        let (kda_layers, _) = cfg.layer_counts();
        (kda_layers * per * 4) as u64
    }

    /// Whether a forward is being recorded.
    pub fn armed(&self) -> bool {
        self.armed
    }

    /// Starts recording the next forward on a state at position `pos`.
    fn arm(&mut self, pos: usize) {
        self.armed = true;
        self.pos = pos;
        self.rows = 0;
    }

    /// Forward hook, before layer `layer`'s recurrence: saves the KDA state `st`, the
    /// rows `run` of the arena's projections (`sc`, before the conv overwrites them)
    /// and the layer's small weights.
    pub(super) fn save_kda(
        &mut self,
        cfg: &ModelConfig,
        layer: usize,
        st: &KdaState,
        w: &KdaWeights,
        sc: &Kda,
        run: std::ops::Range<usize>,
    ) {
        if !self.armed {
            return;
        }
        let (p, h) = (cfg.kda_proj_dim(), cfg.kda.num_heads);
        self.rows = run.len();
        if let Some(Saved::Kda {
            before,
            rows,
            conv_w,
            dt_bias,
            a_log,
        }) = self.layers.get_mut(layer)
        {
            before.conv.copy_from_slice(&st.conv);
            before.s.copy_from_slice(&st.s);
            rows.clear();
            for t in run {
                let r = t * p..(t + 1) * p;
                rows.extend_from_slice(&sc.q[r.clone()]);
                rows.extend_from_slice(&sc.k[r.clone()]);
                rows.extend_from_slice(&sc.v[r.clone()]);
                rows.extend_from_slice(&sc.a[r]);
                rows.extend_from_slice(&sc.b[t * h..(t + 1) * h]);
            }
            conv_w.clear();
            conv_w.extend_from_slice(&w.conv);
            dt_bias.clear();
            dt_bias.extend_from_slice(&w.dt_bias);
            a_log.clear();
            a_log.extend_from_slice(&w.a_log);
        }
    }

    /// Forward hook, before layer `layer`'s attention: saves the MLA cache length.
    pub(super) fn save_mla(&mut self, layer: usize, len: usize, rows: usize) {
        if !self.armed {
            return;
        }
        self.rows = rows;
        if let Some(Saved::Mla(l)) = self.layers.get_mut(layer) {
            *l = len;
        }
    }
}

impl State {
    /// Arms a restore point for the next forward of up to `max_rows` tokens (its
    /// buffers are allocated on first use and kept). Errors: a forward over more
    /// rows is refused by [`State::rewind_to`] afterwards, not here.
    pub fn arm_rewind(&mut self, cfg: &ModelConfig, max_rows: usize) {
        let pos = self.pos;
        let rw = self
            .rewind
            .get_or_insert_with(|| Rewind::new(cfg, max_rows));
        if rw.max_rows < max_rows || rw.layers.len() != cfg.num_hidden_layers {
            *rw = Rewind::new(cfg, max_rows);
        }
        rw.arm(pos);
    }

    /// Disarms the restore point without changing the state (the whole forward is kept).
    pub fn disarm_rewind(&mut self) {
        if let Some(rw) = self.rewind.as_mut() {
            rw.armed = false;
        }
    }

    /// Rewinds the state to the first `keep` tokens of the forward recorded since
    /// [`State::arm_rewind`] (`pos` = armed position + `keep`), replaying the KDA
    /// recurrence of those rows and truncating the MLA caches; then disarms.
    /// Errors: nothing armed, no forward recorded, or `keep` more than its tokens.
    pub fn rewind_to(&mut self, cfg: &ModelConfig, keep: usize) -> Result<()> {
        let Some(rw) = self.rewind.as_mut().filter(|r| r.armed) else {
            bail!("no restore point armed");
        };
        rw.armed = false;
        if self.pos != rw.pos + rw.rows {
            bail!(
                "the state moved from {} to {} since the restore point (a forward of {} rows)",
                rw.pos,
                self.pos,
                rw.rows
            );
        }
        if keep > rw.rows {
            bail!("cannot keep {keep} of a forward of {} tokens", rw.rows);
        }
        let ld = cfg.mla.latent_dim();
        for (layer, saved) in self.layers.iter_mut().zip(&rw.layers) {
            match (layer, saved) {
                (
                    LayerState::Kda(st),
                    Saved::Kda {
                        before,
                        rows,
                        conv_w,
                        dt_bias,
                        a_log,
                    },
                ) => {
                    st.conv.copy_from_slice(&before.conv);
                    st.s.copy_from_slice(&before.s);
                    replay_kda(cfg, st, rows, keep, conv_w, dt_bias, a_log);
                }
                (LayerState::Mla(c), Saved::Mla(len)) => {
                    c.len = len + keep;
                    c.latents.truncate(c.len * ld);
                }
                _ => bail!("restore point was built for a different model"),
            }
        }
        self.pos = rw.pos + keep;
        Ok(())
    }
}

/// The short conv and the gated delta rule of the first `keep` saved rows on `st`
/// (the steps of `kda::kda_recur` and its head step, which are independent per head
/// and per channel: running them here in token order changes no bit).
fn replay_kda(
    cfg: &ModelConfig,
    st: &mut KdaState,
    rows: &[f32],
    keep: usize,
    conv_w: &[f32],
    dt_bias: &[f32],
    a_log: &[f32],
) {
    let h = cfg.kda.num_heads;
    let k = cfg.kda.head_dim;
    let p = h * k;
    let cw = cfg.kda.short_conv_kernel_size;
    let lb = cfg.kda.gate_lower_bound;
    let scale = (k as f32).powf(-0.5);
    let rf = row_floats(cfg);
    let mut c = vec![0f32; 3 * p];
    let (mut qh, mut kh, mut alpha, mut y) =
        (vec![0f32; k], vec![0f32; k], vec![0f32; k], vec![0f32; k]);
    for row in rows.chunks(rf).take(keep) {
        short_conv_step_into(&mut st.conv, conv_w, &row[..3 * p], cw, &mut c);
        let a = &row[3 * p..4 * p];
        let b = &row[4 * p..];
        for hh in 0..h {
            let r = hh * k..(hh + 1) * k;
            qh.copy_from_slice(&c[r.clone()]);
            kh.copy_from_slice(&c[p + hh * k..p + (hh + 1) * k]);
            l2norm_scaled(&mut qh, 1e-6, scale);
            l2norm_scaled(&mut kh, 1e-6, 1.0);
            decay_into(&a[r.clone()], &dt_bias[r], a_log[hh], lb, &mut alpha);
            let beta = sigmoid(b[hh]);
            let v = &c[2 * p + hh * k..2 * p + (hh + 1) * k];
            let s = &mut st.s[hh * k * k..(hh + 1) * k * k];
            delta_rule_step(s, &qh, &kh, v, &alpha, beta, &mut y);
        }
    }
}
