//! Plans on paper: a checkpoint layout derived from a `config.json` alone, for
//! `memdial plan --config` ("what would this model cost on my machine" before
//! downloading it).
//!
//! Tensor names, dtypes and shapes come from [`crate::format::schema::expected_tensors`]
//! (the config and its `quantization_config`: MXFP4 routed experts are `weight_packed`
//! U8 `[out, in/2]` + `weight_scale` U8 `[out, in/32]`, everything else BF16, routers
//! F32). The layout is assumed: tensors packed back to back in schema order in
//! virtual shards of [`PAPER_SHARD_BYTES`], data starting at a 4 KiB-aligned offset.
//! Sizes are exact; read coalescing and alignment slack are those of that layout.
//! Since no checkpoint can contradict the config, every dimension is checked against
//! a sanity limit ([`check_limits`]).

use std::collections::HashMap;
use std::path::PathBuf;

use crate::format::checkpoint::Checkpoint;
use crate::format::config::ModelConfig;
use crate::format::schema::expected_tensors;
use crate::format::shard::{Shard, TensorLoc};
use crate::util::error::UsageError;

/// Virtual shard size of a paper checkpoint (published K3 shards are a few GB).
pub const PAPER_SHARD_BYTES: u64 = 5_000_000_000;

/// Sanity limits of a config planned without a checkpoint: `(what, value, limit)`
/// for every dimension; the first one over its limit is refused.
///
/// Errors: [`UsageError::Invalid`] naming the config key, its value and the limit.
pub fn check_limits(cfg: &ModelConfig) -> Result<(), UsageError> {
    let mut dims: Vec<(&str, usize, usize)> = vec![
        ("vocab_size", cfg.vocab_size, 4 << 20),
        ("hidden_size", cfg.hidden_size, 1 << 16),
        ("num_hidden_layers", cfg.num_hidden_layers, 1024),
        ("intermediate_size", cfg.intermediate_size, 1 << 20),
        ("linear_attn_config.num_heads", cfg.kda.num_heads, 1024),
        ("linear_attn_config.head_dim", cfg.kda.head_dim, 4096),
        (
            "linear_attn_config.short_conv_kernel_size",
            cfg.kda.short_conv_kernel_size,
            64,
        ),
        ("num_attention_heads", cfg.mla.num_heads, 1024),
        ("kv_lora_rank", cfg.mla.kv_lora_rank, 1 << 16),
        ("q_lora_rank", cfg.mla.q_lora_rank.unwrap_or(0), 1 << 16),
        ("qk_nope_head_dim", cfg.mla.qk_nope_head_dim, 4096),
        ("qk_rope_head_dim", cfg.mla.qk_rope_head_dim, 4096),
        ("v_head_dim", cfg.mla.v_head_dim, 4096),
    ];
    if let Some(m) = &cfg.moe {
        dims.extend([
            ("num_experts", m.num_experts, 1 << 16),
            ("num_experts_per_token", m.num_experts_per_token, 1024),
            ("num_shared_experts", m.num_shared_experts, 64),
            ("moe_intermediate_size", m.moe_intermediate_size, 1 << 20),
            (
                "routed_expert_hidden_size",
                m.routed_expert_hidden_size.unwrap_or(0),
                1 << 16,
            ),
        ]);
    }
    for (what, v, limit) in dims {
        if v > limit {
            return Err(UsageError::Invalid(format!(
                "config {what} = {v} is over the sanity limit {limit} for a plan without a checkpoint"
            )));
        }
    }
    for (what, v) in [
        ("vocab_size", cfg.vocab_size),
        ("hidden_size", cfg.hidden_size),
        ("num_hidden_layers", cfg.num_hidden_layers),
    ] {
        if v == 0 {
            return Err(UsageError::Invalid(format!(
                "config {what} is 0: nothing to plan"
            )));
        }
    }
    Ok(())
}

/// A checkpoint index for `cfg` with no files behind it: every tensor of
/// [`expected_tensors`] at its schema dtype and shape, packed in schema order into
/// virtual shards named `paper-NNNNN.safetensors` under `label`.
///
/// Errors: the limits of [`check_limits`]; a tensor table over 1 PB.
pub fn paper_checkpoint(cfg: &ModelConfig, label: &str) -> Result<Checkpoint, UsageError> {
    check_limits(cfg)?;
    let data_start = 4096u64;
    let mut shards: Vec<Shard> = Vec::new();
    let mut tensors = HashMap::new();
    let mut pos = data_start;
    let mut total = 0u64;
    let new_shard = |i: usize| Shard {
        path: PathBuf::from(label).join(format!("paper-{:05}.safetensors", i + 1)),
        size: data_start,
        data_start,
    };
    shards.push(new_shard(0));
    for s in expected_tensors(cfg) {
        let len = s.nbytes() as u64;
        total += len;
        if total > 1 << 50 {
            return Err(UsageError::Invalid(
                "the config implies over 1 PB of tensors: not a plannable model".into(),
            ));
        }
        if pos > data_start && pos + len > PAPER_SHARD_BYTES {
            shards.push(new_shard(shards.len()));
            pos = data_start;
        }
        let shard = shards.len() - 1;
        tensors.insert(
            s.name.clone(),
            TensorLoc {
                shard,
                offset: pos,
                len,
                dtype: s.dtype.as_str().to_string(),
                shape: s.shape.clone(),
            },
        );
        pos += len;
        shards[shard].size = pos;
    }
    Ok(Checkpoint {
        dir: PathBuf::from(label),
        shards,
        tensors,
        notes: Vec::new(),
        lossless: None,
    })
}
