//! Limits checked before work: values that would size a table, spawn threads or
//! overflow an integer are refused with a clear error before anything is built
//! from them.
//!
//! - [`check_config`]: `config.json` values that are in range on their own
//!   (`rms_norm_eps`, token ids), run at load by
//!   [`crate::format::config::ModelConfig::from_json_str`];
//! - [`check_dimensions`]: config dimensions against the checkpoint's tensor count,
//!   before the expected-tensor table ([`crate::format::schema::expected_tensors`]) is built,
//!   so `num_experts: 1000000` is an error in microseconds, not gigabytes;
//! - [`crate::store::trace::check`]: a replayed expert trace's layers and expert ids
//!   (in the store layer, which owns traces);
//! - [`MAX_THREADS`]: the most kernel or IO threads a run may ask for;
//! - [`check_run_memory`]: a run's state and activation arena against the memory the
//!   machine has available, before they are allocated.

use anyhow::{bail, Result};

use crate::format::checkpoint::Checkpoint;
use crate::format::config::{MlpKind, ModelConfig};

/// Most kernel threads (and, separately, IO threads) a run may ask for. Far above
/// any CPU this engine targets (the kernels split rows; more threads than cores
/// only add contention) and far below the thread limits where spawning fails.
pub const MAX_THREADS: usize = 1024;

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
pub fn check_layer_lists(kda: &crate::format::config::LinearAttnConfig, n: usize) -> Result<()> {
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

/// Checks that the checkpoint can hold the tensors the config's dimensions imply,
/// before the tensor table is built from them: every decoder layer has at least
/// its two norms, every routed expert of every MoE layer at least three matrices
/// (`w1`, `w2`, `w3`; MXFP4 stores two tensors each), plus the embedding. A config
/// implying more tensors than the checkpoint holds is refused, naming the key, the
/// count it implies and (for experts) the largest expert id the checkpoint has.
///
/// This is a bound, not the full validation ([`crate::format::inspect::validate`]), which
/// runs on the table afterwards and names every missing or misshapen tensor.
pub fn check_dimensions(cfg: &ModelConfig, ck: &Checkpoint) -> Result<()> {
    let have = ck.tensors.len() as u128;
    let dir = ck.dir.display();
    let layers = cfg.num_hidden_layers as u128;
    if 2 * layers + 1 > have {
        bail!(
            "config.json: num_hidden_layers {layers} implies at least {} tensors (two norms per layer and the embedding), but the checkpoint in {dir} holds {have}",
            2 * layers + 1
        );
    }
    if let Some(m) = &cfg.moe {
        let moe_layers = cfg.mlp_kinds.iter().filter(|k| **k == MlpKind::Moe).count() as u128;
        let need = moe_layers * m.num_experts as u128 * 3;
        if need > have {
            let largest = ck
                .tensors
                .keys()
                .filter_map(|n| {
                    let rest = &n[n.find(".experts.")? + ".experts.".len()..];
                    rest.split('.').next()?.parse::<u64>().ok()
                })
                .max();
            bail!(
                "config.json: num_experts {} × {moe_layers} MoE layers implies at least {need} routed-expert tensors, but the checkpoint in {dir} holds {have} tensors in all ({})",
                m.num_experts,
                match largest {
                    Some(e) => format!("its largest expert id is {e}"),
                    None => "none of them a routed expert".into(),
                }
            );
        }
    }
    Ok(())
}

/// Checks that a run's per-sequence memory fits in `available` bytes before it is
/// allocated: the state for `max_context` positions
/// ([`crate::store::plan::state_estimate`]: KDA states, MLA latent caches) plus the
/// activation arena for forwards of up to `chunk` tokens on `threads` threads
/// ([`crate::store::plan::activation_bytes`], which grows with `max_context` through
/// the MLA attention scores). `available` is normally
/// [`crate::util::sysmem::mem_available`]; `None` (unknown) passes.
///
/// Returns the bytes needed. Errors ([`crate::util::error::UsageError::Invalid`]) name the
/// bytes of each part and the bytes available, and say the context is too long
/// (the caller adds the flag that sets it).
pub fn check_run_memory(
    cfg: &ModelConfig,
    chunk: usize,
    threads: usize,
    max_context: usize,
    available: Option<u64>,
) -> std::result::Result<u64, crate::util::error::UsageError> {
    use crate::util::units::fmt_bytes;
    let state = crate::store::plan::state_estimate(cfg, max_context);
    let act = crate::store::plan::activation_bytes(cfg, chunk, threads, max_context);
    let need = state.saturating_add(act);
    match available {
        Some(avail) if need > avail => Err(crate::util::error::UsageError::Invalid(format!(
            "a context of {max_context} positions needs {} ({need} bytes: MLA latent caches and \
             KDA states {state} bytes, activations {act} bytes), more than the {} ({avail} bytes) \
             this machine has available (MemAvailable); use a shorter context",
            fmt_bytes(need),
            fmt_bytes(avail)
        ))),
        _ => Ok(need),
    }
}

#[cfg(test)]
mod run_memory_tests {
    use super::*;

    fn tiny_k3() -> ModelConfig {
        let j = crate::tools::fixture::preset("tiny-k3").unwrap().config;
        ModelConfig::from_json_str(&j.to_string()).unwrap()
    }

    #[test]
    fn a_context_beyond_available_memory_is_refused() {
        let cfg = tiny_k3();
        let ctx = 1_000_000_000usize;
        let need = check_run_memory(&cfg, 3, 2, ctx, None).unwrap();
        // Lower bound by hand: every MLA layer's f32 latents (kv_lora_rank +
        // qk_rope_head_dim per position) plus the MLA scores of the attention
        // workspace, one f32 per position for each head rounded up to 8.
        let (_, mla) = cfg.layer_counts();
        let latents = (mla * ctx * (cfg.mla.kv_lora_rank + cfg.mla.qk_rope_head_dim) * 4) as u64;
        let scores = (ctx * cfg.mla.num_heads.div_ceil(8) * 8 * 4) as u64;
        assert!(need >= latents + scores, "{need} < {latents} + {scores}");
        // The boundary: exactly the bytes needed pass, one fewer is refused.
        assert_eq!(check_run_memory(&cfg, 3, 2, ctx, Some(need)).unwrap(), need);
        let e = check_run_memory(&cfg, 3, 2, ctx, Some(need - 1))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(&format!("a context of {ctx} positions needs"))
                && e.contains(&format!("({need} bytes:"))
                && e.contains(&format!("({} bytes) this machine has available", need - 1)),
            "{e}"
        );
        // A short context fits in a few MiB.
        assert!(check_run_memory(&cfg, 3, 2, 64, Some(64 << 20)).is_ok());
    }
}
