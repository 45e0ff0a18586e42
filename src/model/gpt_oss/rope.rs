//! RoPE with YaRN for gpt-oss: transformers `_compute_yarn_parameters` (inverse
//! frequencies, attention factor) and `GptOssRotaryEmbedding` /
//! `_apply_rotary_emb` (half-split rotation, cos and sin scaled by the factor).

use crate::format::config::GptOssRope;

/// Inverse frequencies `[head_dim / 2]` and the factor cos and sin are scaled by.
#[derive(Debug, Clone, PartialEq)]
pub struct Rope {
    /// `inv_freq[j]` for the pair `(j, j + head_dim/2)`, f32 as transformers holds it.
    pub inv_freq: Vec<f32>,
    /// YaRN `attention_factor` (1 for plain RoPE).
    pub scale: f32,
}

impl Rope {
    /// The tables of `rope` for heads of `head_dim` (even) channels.
    ///
    /// YaRN: `pos_freqs[j] = θ^(2j/dim)`, extrapolation `1/pos_freqs`, interpolation
    /// `1/(factor·pos_freqs)`; the correction range `[low, high]` from `beta_fast` /
    /// `beta_slow` (`dim·ln(omp/(β·2π)) / (2·ln θ)`, floored / ceiled when `truncate`,
    /// clamped to `[0, dim−1]`); ramp `clamp((j − low)/(high − low), 0, 1)`;
    /// `inv_freq = interp·ramp + extrap·(1 − ramp)`; factor `0.1·ln(factor) + 1`.
    pub fn new(rope: &GptOssRope, head_dim: usize) -> Rope {
        let dim = head_dim;
        let base = rope.rope_theta;
        let half = dim / 2;
        // torch: base ** (arange(0, dim, 2).float() / dim) in f32.
        let pos_freqs: Vec<f32> = (0..half)
            .map(|j| (base as f32).powf((2 * j) as f32 / dim as f32))
            .collect();
        let Some(y) = &rope.yarn else {
            return Rope {
                inv_freq: pos_freqs.iter().map(|p| 1.0 / p).collect(),
                scale: 1.0,
            };
        };
        let corr = |rot: f64| {
            (dim as f64
                * (y.original_max_position_embeddings / (rot * 2.0 * std::f64::consts::PI)).ln())
                / (2.0 * base.ln())
        };
        let (mut low, mut high) = (corr(y.beta_fast), corr(y.beta_slow));
        if y.truncate {
            low = low.floor();
            high = high.ceil();
        }
        let low = low.max(0.0);
        let high = high.min(dim as f64 - 1.0);
        let (lo, mut hi) = (low as f32, high as f32);
        if lo == hi {
            hi += 0.001;
        }
        let factor = y.factor as f32;
        let inv_freq = pos_freqs
            .iter()
            .enumerate()
            .map(|(j, p)| {
                let ramp = ((j as f32 - lo) / (hi - lo)).clamp(0.0, 1.0);
                let extrap_factor = 1.0 - ramp;
                let extrap = 1.0 / p;
                let interp = 1.0 / (factor * p);
                interp * (1.0 - extrap_factor) + extrap * extrap_factor
            })
            .collect();
        let scale = match y.attention_factor {
            Some(a) => a as f32,
            None if y.factor <= 1.0 => 1.0,
            None => (0.1 * y.factor.ln() + 1.0) as f32,
        };
        Rope { inv_freq, scale }
    }

    /// Rotates every head of `x: [heads · head_dim]` for position `pos`:
    /// `(x₁, x₂) → (x₁·c − x₂·s, x₂·c + x₁·s)` with `c = cos(pos·f)·scale`,
    /// `s = sin(pos·f)·scale` (angle rounded to f32 first, as torch does).
    pub fn apply(&self, x: &mut [f32], pos: usize) {
        let half = self.inv_freq.len();
        for head in x.chunks_exact_mut(2 * half) {
            let (a, b) = head.split_at_mut(half);
            for ((x1, x2), f) in a.iter_mut().zip(b.iter_mut()).zip(&self.inv_freq) {
                let ang = pos as f32 * f;
                let (c, s) = (ang.cos() * self.scale, ang.sin() * self.scale);
                let (u, v) = (*x1, *x2);
                *x1 = u * c - v * s;
                *x2 = v * c + u * s;
            }
        }
    }
}
