//! Limits checked before work: values that would size a table, spawn threads or
//! overflow an integer are refused with a clear error before anything is built
//! from them.
//!
//! - [`crate::format::config::ranges`]: `config.json` values that are in range on their
//!   own (`rms_norm_eps`, token ids, layer counts and lists), run at load by
//!   [`crate::format::config::ModelConfig::from_json_str`];
//! - [`check_dimensions`]: config dimensions against the checkpoint's tensor count,
//!   before the expected-tensor table ([`crate::format::schema::expected_tensors`]) is built,
//!   so `num_experts: 1000000` is an error in microseconds, not gigabytes;
//! - [`crate::store::trace::check`]: a replayed expert trace's layers and expert ids
//!   (in the store layer, which owns traces);
//! - [`MAX_THREADS`]: the most kernel or IO threads a run may ask for;
//! - [`crate::engine::loader::check_run_memory`]: a run's state and activation arena
//!   against the memory the machine has available, before they are allocated (in the
//!   engine layer, which owns the arena).

use anyhow::{bail, Result};

use crate::format::checkpoint::Checkpoint;
use crate::format::config::{MlpKind, ModelConfig};

/// Most kernel threads (and, separately, IO threads) a run may ask for. Far above
/// any CPU this engine targets (the kernels split rows; more threads than cores
/// only add contention) and far below the thread limits where spawning fails.
pub const MAX_THREADS: usize = 1024;

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
