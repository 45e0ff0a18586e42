//! RMSNorm variants (f32 throughout).
//!
//! `RMSNorm(x) = w ⊙ x / sqrt(mean(x²) + eps)` — mlx `nn.RMSNorm` / `mx.fast.rms_norm`,
//! transformers `KimiLinearRMSNorm` (docs/model.md §1).

/// `1 / sqrt(mean(x²) + eps)` for `x: [n]`.
pub fn inv_rms(x: &[f32], eps: f32) -> f32 {
    let ss: f32 = x.iter().map(|v| v * v).sum();
    1.0 / (ss / x.len() as f32 + eps).sqrt()
}

/// `w ⊙ x / sqrt(mean(x²) + eps)`; `x, w: [n]` → `[n]`.
pub fn rms_norm(x: &[f32], w: &[f32], eps: f32) -> Vec<f32> {
    debug_assert_eq!(x.len(), w.len());
    let r = inv_rms(x, eps);
    x.iter().zip(w).map(|(v, w)| v * r * w).collect()
}

/// [`rms_norm`] of `x` into `out` (same operations, same bits).
pub fn rms_norm_into(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    debug_assert_eq!(x.len(), out.len());
    let r = inv_rms(x, eps);
    for ((o, v), w) in out.iter_mut().zip(x).zip(w) {
        *o = v * r * w;
    }
}

/// In-place [`rms_norm`] of `x: [n]`.
pub fn rms_norm_inplace(x: &mut [f32], w: &[f32], eps: f32) {
    let r = inv_rms(x, eps);
    for (v, w) in x.iter_mut().zip(w) {
        *v = *v * r * w;
    }
}

/// Logistic sigmoid `1 / (1 + e^−x)`.
#[inline]
pub fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

/// `softplus(x) = log(1 + e^x)`, computed as mlx `nn.softplus` (`logaddexp(x, 0)`):
/// `max(x,0) + log1p(e^−|x|)`.
#[inline]
pub fn softplus(x: f32) -> f32 {
    x.max(0.0) + (-x.abs()).exp().ln_1p()
}

/// `x · σ(x)`.
#[inline]
pub fn silu(x: f32) -> f32 {
    x * sigmoid(x)
}
