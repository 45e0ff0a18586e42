//! Per-sequence inference state: KDA recurrent + conv states and MLA latent caches.

use anyhow::{bail, Result};

use crate::config::{AttnKind, ModelConfig};

/// State of one KDA layer (all f32, zero-initialised).
#[derive(Debug, Clone)]
pub struct KdaState {
    /// Last `W−1` pre-conv projection inputs, time-major `[W−1, 3P]` (row 0 oldest),
    /// channels ordered `q (P) | k (P) | v (P)`.
    pub conv: Vec<f32>,
    /// Recurrent state `[H, V, K]` (mlx layout: `S[h, j, d]` multiplies key channel `d`
    /// into value channel `j`; docs/architecture.md §2 writes the transpose `[K, V]`).
    pub s: Vec<f32>,
}

/// Latent cache of one MLA layer: per position `[c (kv_lora_rank) | k_pe (qk_rope_head_dim)]`,
/// `c` already normalised by `kv_a_layernorm`, `k_pe` un-rotated (NoPE).
#[derive(Debug, Clone, Default)]
pub struct MlaCache {
    /// `[len, latent_dim]`.
    pub latents: Vec<f32>,
    /// Positions cached.
    pub len: usize,
}

/// State of one decoder layer.
#[derive(Debug, Clone)]
pub enum LayerState {
    /// A KDA layer's recurrent + conv state.
    Kda(KdaState),
    /// An MLA layer's latent cache.
    Mla(MlaCache),
}

/// Everything a sequence carries between forward calls.
#[derive(Debug, Clone)]
pub struct State {
    /// Number of tokens processed so far (= next position).
    pub pos: usize,
    /// Maximum number of positions (MLA caches refuse to grow past it).
    pub max_context: usize,
    /// One state per decoder layer.
    pub layers: Vec<LayerState>,
    latent_dim: usize,
}

impl State {
    /// Fresh state for `cfg` with room for `max_context` positions.
    pub fn new(cfg: &ModelConfig, max_context: usize) -> State {
        let h = cfg.kda.num_heads;
        let k = cfg.kda.head_dim;
        let p = h * k;
        let w = cfg.kda.short_conv_kernel_size;
        let layers = cfg
            .attn_kinds
            .iter()
            .map(|kind| match kind {
                AttnKind::Kda => LayerState::Kda(KdaState {
                    conv: vec![0.0; (w - 1) * 3 * p],
                    s: vec![0.0; h * k * k],
                }),
                AttnKind::Mla => LayerState::Mla(MlaCache::default()),
            })
            .collect();
        State {
            pos: 0,
            max_context,
            layers,
            latent_dim: cfg.mla.latent_dim(),
        }
    }

    /// Clears every layer state back to zeros / empty caches (keeps allocations).
    pub fn reset(&mut self) {
        self.pos = 0;
        for l in &mut self.layers {
            match l {
                LayerState::Kda(s) => {
                    s.conv.iter_mut().for_each(|v| *v = 0.0);
                    s.s.iter_mut().for_each(|v| *v = 0.0);
                }
                LayerState::Mla(c) => {
                    c.latents.clear();
                    c.len = 0;
                }
            }
        }
    }

    /// Errors if `n` more positions would exceed `max_context`.
    pub fn check_room(&self, n: usize) -> Result<()> {
        if self.pos + n > self.max_context {
            bail!(
                "context overflow: {} positions processed + {n} new > max_context {}",
                self.pos,
                self.max_context
            );
        }
        Ok(())
    }

    /// Bytes held by the state (f32 KDA states + MLA latents currently cached).
    pub fn bytes(&self) -> usize {
        self.layers
            .iter()
            .map(|l| match l {
                LayerState::Kda(s) => (s.conv.len() + s.s.len()) * 4,
                LayerState::Mla(c) => c.len * self.latent_dim * 4,
            })
            .sum()
    }
}
