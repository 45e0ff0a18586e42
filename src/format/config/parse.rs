//! `config.json` as written: the raw serde form of a text config ([`RawText`],
//! Hugging Face keys and their defaults) and its conversion into a validated
//! [`ModelConfig`] (layer kinds, MLA / MoE settings, activation).

use anyhow::{bail, Result};
use serde::Deserialize;

use super::*;

/// Raw text config as found in `config.json` (or its `text_config`).
#[derive(Debug, Clone, Deserialize)]
pub(super) struct RawText {
    #[serde(default)]
    pub(super) model_type: Option<String>,
    pub(super) vocab_size: usize,
    pub(super) hidden_size: usize,
    pub(super) num_hidden_layers: usize,
    pub(super) num_attention_heads: usize,
    #[serde(default)]
    pub(super) intermediate_size: Option<usize>,
    #[serde(default = "default_eps")]
    pub(super) rms_norm_eps: f32,
    #[serde(default)]
    pub(super) linear_attn_config: Option<LinearAttnConfig>,
    /// transformers' flattened KDA keys (used when `linear_attn_config` is absent).
    #[serde(default)]
    pub(super) linear_head_dim: Option<usize>,
    #[serde(default)]
    pub(super) linear_num_heads: Option<usize>,
    #[serde(default)]
    pub(super) linear_conv_kernel_dim: Option<usize>,
    #[serde(default)]
    pub(super) layer_types: Option<Vec<String>>,
    #[serde(default)]
    pub(super) mlp_layer_types: Option<Vec<String>>,
    #[serde(default = "default_act")]
    pub(super) hidden_act: String,
    #[serde(default)]
    pub(super) activation_situ_beta: Option<f32>,
    #[serde(default)]
    pub(super) activation_situ_linear_beta: Option<f32>,
    #[serde(default)]
    pub(super) attn_res_block_size: Option<usize>,
    #[serde(default)]
    pub(super) q_lora_rank: Option<usize>,
    pub(super) kv_lora_rank: usize,
    #[serde(default)]
    pub(super) qk_nope_head_dim: Option<usize>,
    #[serde(default)]
    pub(super) qk_rope_head_dim: Option<usize>,
    #[serde(default)]
    pub(super) v_head_dim: Option<usize>,
    #[serde(default = "default_true")]
    pub(super) mla_use_nope: bool,
    #[serde(default)]
    pub(super) mla_use_output_gate: bool,
    #[serde(default, alias = "num_local_experts", alias = "n_routed_experts")]
    pub(super) num_experts: Option<usize>,
    #[serde(default = "default_one", alias = "num_experts_per_tok")]
    pub(super) num_experts_per_token: usize,
    #[serde(default, alias = "n_shared_experts")]
    pub(super) num_shared_experts: usize,
    #[serde(default)]
    pub(super) moe_intermediate_size: Option<usize>,
    #[serde(default = "default_sigmoid")]
    pub(super) moe_router_activation_func: String,
    #[serde(default = "default_true", alias = "norm_topk_prob")]
    pub(super) moe_renormalize: bool,
    #[serde(default = "default_one_f")]
    pub(super) routed_scaling_factor: f32,
    #[serde(default)]
    pub(super) first_k_dense_replace: usize,
    #[serde(default = "default_one")]
    pub(super) moe_layer_freq: usize,
    #[serde(default = "default_one", alias = "n_group")]
    pub(super) num_expert_group: usize,
    #[serde(default = "default_one")]
    pub(super) topk_group: usize,
    #[serde(default)]
    pub(super) routed_expert_hidden_size: Option<usize>,
    #[serde(default)]
    pub(super) latent_moe_use_norm: bool,
    #[serde(default)]
    pub(super) tie_word_embeddings: bool,
    /// DeepSeek-V3 multi-token-prediction layers stored after the decoder layers.
    #[serde(default)]
    pub(super) num_nextn_predict_layers: usize,
    #[serde(default)]
    pub(super) bos_token_id: Option<u32>,
    #[serde(default)]
    pub(super) eos_token_id: Option<Value>,
}

fn default_eps() -> f32 {
    1e-5
}
fn default_act() -> String {
    "silu".into()
}
fn default_true() -> bool {
    true
}
fn default_one() -> usize {
    1
}
fn default_one_f() -> f32 {
    1.0
}
fn default_sigmoid() -> String {
    "sigmoid".into()
}

impl ModelConfig {
    pub(super) fn from_raw(
        model_type: String,
        weight_prefix: String,
        raw: RawText,
        eos_override: Option<Vec<u32>>,
    ) -> Result<Self> {
        let n = raw.num_hidden_layers;
        if n == 0 || n > super::ranges::MAX_LAYERS {
            bail!(
                "num_hidden_layers must be in 1..={}, got {n}",
                super::ranges::MAX_LAYERS
            );
        }
        let kda = match (
            &raw.linear_attn_config,
            raw.linear_head_dim,
            raw.linear_num_heads,
        ) {
            (Some(c), _, _) => c.clone(),
            // transformers' saved form: flattened keys + layer_types.
            (None, Some(head_dim), Some(num_heads)) => LinearAttnConfig {
                kda_layers: vec![],
                full_attn_layers: vec![],
                head_dim,
                num_heads,
                short_conv_kernel_size: raw.linear_conv_kernel_dim.unwrap_or(4),
                gate_lower_bound: None,
                use_full_rank_gate: false,
            },
            _ => bail!("missing linear_attn_config (KDA head_dim / num_heads)"),
        };
        if kda.head_dim == 0 || kda.num_heads == 0 || kda.short_conv_kernel_size == 0 {
            bail!("linear_attn_config: head_dim, num_heads and short_conv_kernel_size must be > 0");
        }
        let attn_kinds = if let Some(lt) = &raw.layer_types {
            if lt.len() != n {
                bail!(
                    "layer_types has {} entries, num_hidden_layers is {n}",
                    lt.len()
                );
            }
            lt.iter()
                .map(|t| match t.as_str() {
                    "linear_attention" | "kda" | "linear" => Ok(AttnKind::Kda),
                    "full_attention" | "mla" | "full" => Ok(AttnKind::Mla),
                    other => bail!("unknown layer_types entry {other:?}"),
                })
                .collect::<Result<Vec<_>>>()?
        } else {
            // The lists decide the layer kinds only here (layer_types wins when given).
            super::ranges::check_layer_lists(&kda, n)?;
            let mut kinds = Vec::with_capacity(n);
            for i in 1..=n {
                let is_kda = kda.kda_layers.contains(&i);
                let is_full = kda.full_attn_layers.contains(&i);
                match (is_kda, is_full) {
                    (true, false) => kinds.push(AttnKind::Kda),
                    (false, true) => kinds.push(AttnKind::Mla),
                    (true, true) => {
                        bail!("layer {i} (1-indexed) is in both kda_layers and full_attn_layers")
                    }
                    (false, false) => {
                        bail!("layer {i} (1-indexed) is in neither kda_layers nor full_attn_layers")
                    }
                }
            }
            kinds
        };
        let moe = match raw.num_experts {
            Some(e) if e > 0 => {
                if raw.moe_router_activation_func != "sigmoid" {
                    bail!(
                        "unsupported moe_router_activation_func {:?} (only sigmoid)",
                        raw.moe_router_activation_func
                    );
                }
                let k = raw.num_experts_per_token;
                check_moe_layout(e, k, raw.num_expert_group, raw.topk_group)?;
                Some(MoeConfig {
                    num_experts: e,
                    num_experts_per_token: k,
                    num_shared_experts: raw.num_shared_experts,
                    moe_intermediate_size: raw
                        .moe_intermediate_size
                        .context("num_experts set but moe_intermediate_size missing")?,
                    renormalize: raw.moe_renormalize,
                    routed_scaling_factor: raw.routed_scaling_factor,
                    num_expert_group: raw.num_expert_group,
                    topk_group: raw.topk_group,
                    routed_expert_hidden_size: raw.routed_expert_hidden_size,
                    latent_moe_use_norm: raw.latent_moe_use_norm,
                    expert_format: ExpertFormat::Bf16,
                })
            }
            _ => None,
        };
        let mlp_kinds = if let Some(mt) = &raw.mlp_layer_types {
            if mt.len() != n {
                bail!(
                    "mlp_layer_types has {} entries, num_hidden_layers is {n}",
                    mt.len()
                );
            }
            mt.iter()
                .map(|t| match t.as_str() {
                    "dense" => Ok(MlpKind::Dense),
                    "sparse" | "moe" => Ok(MlpKind::Moe),
                    other => bail!("unknown mlp_layer_types entry {other:?}"),
                })
                .collect::<Result<Vec<_>>>()?
        } else {
            (0..n)
                .map(|i| {
                    if moe.is_some()
                        && i >= raw.first_k_dense_replace
                        && i % raw.moe_layer_freq.max(1) == 0
                    {
                        MlpKind::Moe
                    } else {
                        MlpKind::Dense
                    }
                })
                .collect()
        };
        if mlp_kinds.contains(&MlpKind::Moe) && moe.is_none() {
            bail!("mlp_layer_types lists sparse layers but num_experts is not set");
        }
        let activation = match raw.hidden_act.as_str() {
            "silu" | "swish" => Activation::Silu,
            "situ" => Activation::Situ {
                beta: raw.activation_situ_beta.unwrap_or(1.0),
                linear_beta: raw.activation_situ_linear_beta,
            },
            other => bail!("unsupported hidden_act {other:?} (silu or situ)"),
        };
        if !raw.mla_use_nope && attn_kinds.contains(&AttnKind::Mla) {
            bail!("mla_use_nope=false (RoPE MLA) is not supported: Kimi Linear and K3 are NoPE");
        }
        let mla = MlaConfig {
            num_heads: raw.num_attention_heads,
            q_lora_rank: raw.q_lora_rank,
            kv_lora_rank: raw.kv_lora_rank,
            qk_nope_head_dim: raw.qk_nope_head_dim.unwrap_or(128),
            qk_rope_head_dim: raw.qk_rope_head_dim.unwrap_or(64),
            v_head_dim: raw.v_head_dim.unwrap_or(128),
            use_output_gate: raw.mla_use_output_gate,
        };
        let needs_dense = mlp_kinds.contains(&MlpKind::Dense);
        let intermediate_size = match raw.intermediate_size {
            Some(v) => v,
            None if !needs_dense => 0,
            None => bail!("intermediate_size missing but the model has dense MLP layers"),
        };
        if let Some(b) = raw.attn_res_block_size {
            if b == 0 {
                bail!("attn_res_block_size must be > 0");
            }
        }
        let eos_token_ids = match eos_override {
            Some(ids) => ids,
            None => eos_ids(raw.eos_token_id.as_ref())?,
        };
        let cfg = ModelConfig {
            model_type,
            weight_prefix,
            vocab_size: raw.vocab_size,
            hidden_size: raw.hidden_size,
            num_hidden_layers: n,
            intermediate_size,
            rms_norm_eps: raw.rms_norm_eps,
            kda,
            mla,
            moe,
            activation,
            attn_res_block_size: raw.attn_res_block_size,
            tie_word_embeddings: raw.tie_word_embeddings,
            bos_token_id: raw.bos_token_id,
            eos_token_ids,
            eos_token_ids_source: EosSource::ConfigJson,
            attn_kinds,
            mlp_kinds,
            num_nextn_predict_layers: raw.num_nextn_predict_layers,
            gpt_oss: None,
        };
        super::ranges::check_config(&cfg)?;
        Ok(cfg)
    }
}
