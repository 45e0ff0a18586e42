//! Per-sequence inference state: KDA recurrent + conv states, MLA latent caches and
//! gpt-oss key/value caches.

use anyhow::{bail, Result};

use crate::engine::arena::{planned_prefill_chunk, Scratch};
use crate::format::config::{AttnKind, ModelConfig};

/// State of one KDA layer (all f32, zero-initialised).
#[derive(Debug, Clone)]
pub struct KdaState {
    /// Last `W−1` pre-conv projection inputs, time-major `[W−1, 3P]` (row 0 oldest),
    /// channels ordered `q (P) | k (P) | v (P)`.
    pub conv: Vec<f32>,
    /// Recurrent state `[H, V, K]` (mlx layout: `S[h, j, d]` multiplies key channel `d`
    /// into value channel `j`; docs/model.md §2 writes the transpose `[K, V]`).
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

/// Key/value cache of one gpt-oss attention layer (f32, keys after RoPE).
///
/// A full layer keeps every position (`slots` = positions cached); a sliding layer
/// keeps the last `window` positions in a ring, position `p` in slot `p % window`.
#[derive(Debug, Clone, Default)]
pub struct KvCache {
    /// Keys `[slots, num_key_value_heads · head_dim]`.
    pub k: Vec<f32>,
    /// Values `[slots, num_key_value_heads · head_dim]`.
    pub v: Vec<f32>,
    /// Ring length of a sliding layer; `None` for a full layer.
    pub window: Option<usize>,
}

impl KvCache {
    /// The slot position `pos` is stored in.
    pub fn slot(&self, pos: usize) -> usize {
        match self.window {
            Some(w) => pos % w,
            None => pos,
        }
    }
}

/// State of one decoder layer.
#[derive(Debug, Clone)]
pub enum LayerState {
    /// A KDA layer's recurrent + conv state.
    Kda(KdaState),
    /// An MLA layer's latent cache.
    Mla(MlaCache),
    /// A gpt-oss attention layer's key/value cache.
    Kv(KvCache),
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
    /// Every scratch buffer of the forward pass ([`crate::engine::arena`]), sized for
    /// forwards of up to `scratch.dims.chunk` tokens.
    pub scratch: Scratch,
    /// The restore point of a speculative verification forward, once armed
    /// ([`State::arm_rewind`]; `None` until then).
    pub rewind: Option<super::rewind::Rewind>,
    latent_dim: usize,
}

impl State {
    /// Fresh state for `cfg` with room for `max_context` positions, and an arena
    /// for the plan's prefill chunk ([`planned_prefill_chunk`]`(max_context)`) on
    /// `threads` kernel threads.
    pub fn new(cfg: &ModelConfig, max_context: usize, threads: usize) -> State {
        State::with_chunk(
            cfg,
            max_context,
            planned_prefill_chunk(max_context),
            threads,
        )
    }

    /// Fresh state with room for `max_context` positions (the MLA latent caches
    /// reserved for all of them) and an arena for forwards of up to `chunk` tokens
    /// on `threads` kernel threads.
    pub fn with_chunk(
        cfg: &ModelConfig,
        max_context: usize,
        chunk: usize,
        threads: usize,
    ) -> State {
        State {
            scratch: Scratch::new(cfg, chunk, threads, max_context),
            ..State::without_arena(cfg, max_context)
        }
    }

    /// Fresh state with room for `max_context` positions and no arena of its own:
    /// a sequence of a batch, whose forwards run on the batch's shared arena
    /// ([`crate::model::Model::forward_batch`]). [`State::bytes`] is its whole
    /// footprint (a single-sequence forward on it still works, growing an arena).
    pub fn without_arena(cfg: &ModelConfig, max_context: usize) -> State {
        let ld = cfg.mla.latent_dim();
        let h = cfg.kda.num_heads;
        let k = cfg.kda.head_dim;
        let p = h * k;
        let w = cfg.kda.short_conv_kernel_size;
        let layers = cfg
            .attn_kinds
            .iter()
            .enumerate()
            .map(|(i, kind)| match kind {
                AttnKind::Kda => LayerState::Kda(KdaState {
                    conv: vec![0.0; (w - 1) * 3 * p],
                    s: vec![0.0; h * k * k],
                }),
                AttnKind::Mla => {
                    // Reserved up front (virtual until written); a reservation the
                    // allocator refuses leaves the cache to grow as it fills.
                    let mut latents = Vec::new();
                    let _ = latents.try_reserve_exact(max_context.saturating_mul(ld));
                    LayerState::Mla(MlaCache { latents, len: 0 })
                }
                AttnKind::Gqa => {
                    let g = cfg
                        .gpt_oss
                        .as_ref()
                        .expect("gpt-oss layers need gpt_oss settings");
                    let window = g.window(i);
                    let slots = window.unwrap_or(max_context).min(max_context);
                    let mut k = Vec::new();
                    let _ = k.try_reserve_exact(slots.saturating_mul(g.kv_dim()));
                    let mut v = Vec::new();
                    let _ = v.try_reserve_exact(slots.saturating_mul(g.kv_dim()));
                    LayerState::Kv(KvCache { k, v, window })
                }
            })
            .collect();
        State {
            pos: 0,
            max_context,
            layers,
            scratch: Scratch::unallocated(cfg, max_context),
            rewind: None,
            latent_dim: ld,
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
                LayerState::Kv(c) => {
                    c.k.clear();
                    c.v.clear();
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

    /// Bytes of the forward's scratch arena now (the plan's activation figure while
    /// no call has outgrown it; [`Scratch::bytes`]).
    pub fn scratch_bytes(&self) -> u64 {
        self.scratch.bytes()
    }

    /// Bytes held by the state (f32 KDA states + MLA latents currently cached).
    pub fn bytes(&self) -> usize {
        self.layers
            .iter()
            .map(|l| match l {
                LayerState::Kda(s) => (s.conv.len() + s.s.len()) * 4,
                LayerState::Mla(c) => c.len * self.latent_dim * 4,
                LayerState::Kv(c) => (c.k.len() + c.v.len()) * 4,
            })
            .sum()
    }
}
