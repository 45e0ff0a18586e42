//! Range checks of `config.json` values that need no checkpoint, run while the config
//! is parsed (the checks against a checkpoint are [`crate::format::limits`]).

use anyhow::{bail, Result};

use super::{LinearAttnConfig, ModelConfig};

/// Most decoder layers a config may declare (K3 has 93). Checked before the
/// per-layer kind tables are built from `num_hidden_layers`.
pub const MAX_LAYERS: usize = 1 << 16;

/// Range checks of a parsed config that need no checkpoint:
/// - `rms_norm_eps` finite and > 0 (RMSNorm divides by `sqrt(mean(x²) + eps)`;
///   eps ≤ 0 lets a zero row divide by zero and turn every logit NaN);
/// - `bos_token_id` and every `eos_token_id` below `vocab_size`.
///
/// Errors name the key and its value.
pub fn check_config(cfg: &ModelConfig) -> Result<()> {
    let eps = cfg.rms_norm_eps;
    if !(eps.is_finite() && eps > 0.0) {
        bail!("rms_norm_eps must be a finite number > 0, got {eps}");
    }
    let v = cfg.vocab_size;
    if let Some(b) = cfg.bos_token_id.filter(|&b| b as usize >= v) {
        bail!("bos_token_id {b} is out of range (vocab_size {v})");
    }
    if let Some(e) = cfg.eos_token_ids.iter().find(|&&e| e as usize >= v) {
        bail!("eos_token_id {e} is out of range (vocab_size {v})");
    }
    Ok(())
}

/// Checks that every `linear_attn_config.kda_layers` / `full_attn_layers` entry is
/// in `1..=n` (`n` = `num_hidden_layers`; the lists are 1-indexed,
/// docs/model.md §9). Called where the lists decide the layer kinds (a config
/// with `layer_types` takes the kinds from there and ignores the lists).
///
/// Errors name the list and the entry.
pub fn check_layer_lists(kda: &LinearAttnConfig, n: usize) -> Result<()> {
    for (key, list) in [
        ("kda_layers", &kda.kda_layers),
        ("full_attn_layers", &kda.full_attn_layers),
    ] {
        if let Some(bad) = list.iter().find(|&&l| l == 0 || l > n) {
            bail!(
                "linear_attn_config.{key} entry {bad} is outside 1..={n} (num_hidden_layers {n}; the list is 1-indexed)"
            );
        }
    }
    Ok(())
}
