//! The metadata keys of a `kimi-k3` / `kimi-linear` GGUF, as llama.cpp's converter
//! writes them (`conversion/base.py` `TextModel.set_gguf_parameters`, then
//! `KimiK3Model` / `KimiLinearModel.set_gguf_parameters`; key strings from
//! `gguf-py/gguf/constants.py` `Keys`, read by `src/models/kimi-*.cpp`).

use anyhow::{bail, Result};
use serde_json::Value as Json;

use super::gguf::Value;
use super::kimi::{mla_layers, num, Dtype};

fn f(c: &Json, key: &str) -> Result<f32> {
    match c.get(key).and_then(Json::as_f64) {
        Some(x) => Ok(x as f32),
        None => bail!("config.json: `{key}` missing or not a number"),
    }
}

/// The `general.*` and `{arch}.*` keys of text config `c` (`name`: `general.name`).
/// Errors: a key the loader needs is missing from config.json, or a K3 setting
/// llama.cpp does not implement (router other than sigmoid, activation other than situ).
pub fn model_kvs(
    c: &Json,
    arch: &str,
    name: &str,
    dtype: Dtype,
    has_mxfp4: bool,
) -> Result<Vec<(String, Value)>> {
    let k3 = arch == "kimi-k3";
    let a = |k: &str| format!("{arch}.{k}");
    let u = |k: &str| -> Result<Value> { Ok(Value::U32(num(c, k)? as u32)) };
    // general.file_type: ALL_F32 = 0, MOSTLY_BF16 = 32, MOSTLY_MXFP4_MOE = 38 (LlamaFileType)
    let file_type = match (dtype, has_mxfp4) {
        (Dtype::F32, _) => 0,
        (Dtype::Native, true) => 38,
        (Dtype::Native, false) => 32,
    };
    let mut kv: Vec<(String, Value)> = vec![
        ("general.architecture".into(), Value::Str(arch.into())),
        ("general.type".into(), Value::Str("model".into())),
        ("general.name".into(), Value::Str(name.into())),
        ("general.file_type".into(), Value::U32(file_type)),
        ("general.quantization_version".into(), Value::U32(2)),
        (a("block_count"), u("num_hidden_layers")?),
        (a("context_length"), u("max_position_embeddings")?),
        (a("embedding_length"), u("hidden_size")?),
        (a("feed_forward_length"), u("intermediate_size")?),
        (a("attention.head_count"), u("num_attention_heads")?),
    ];
    // MLA is served as MQA with one KV head; KDA layers have none (llama.cpp marks a
    // recurrent layer by head_count_kv = 0).
    let mla = mla_layers(c)?;
    let n_layer = num(c, "num_hidden_layers")? as usize;
    kv.push((
        a("attention.head_count_kv"),
        Value::ArrI32((0..n_layer).map(|l| mla.contains(&l) as i32).collect()),
    ));
    if let Some(t) = c.get("rope_theta").and_then(Json::as_f64) {
        kv.push((a("rope.freq_base"), Value::F32(t as f32)));
    }
    kv.push((
        a("attention.layer_norm_rms_epsilon"),
        Value::F32(f(c, "rms_norm_eps")?),
    ));
    kv.push((a("expert_count"), u("num_experts")?));
    kv.push((a("expert_used_count"), u("num_experts_per_token")?));
    if c.get("topk_group").is_some() {
        kv.push((a("expert_group_used_count"), u("topk_group")?));
    }
    match c.get("moe_router_activation_func").and_then(Json::as_str) {
        // ExpertGatingFuncType: SOFTMAX = 1, SIGMOID = 2
        Some("sigmoid") => kv.push((a("expert_gating_func"), Value::U32(2))),
        Some("softmax") if !k3 => kv.push((a("expert_gating_func"), Value::U32(1))),
        other => {
            bail!("config.json: moe_router_activation_func {other:?} is not supported (sigmoid)")
        }
    }
    let head_dim = c.get("head_dim").and_then(Json::as_u64);
    kv.push((a("vocab_size"), u("vocab_size")?));
    let lin = c.get("linear_attn_config").cloned().unwrap_or_default();
    kv.push((a("ssm.conv_kernel"), u_of(&lin, "short_conv_kernel_size")?));
    kv.push((a("kda.head_dim"), u_of(&lin, "head_dim")?));
    if k3 {
        if let Some(lb) = lin.get("gate_lower_bound").and_then(Json::as_f64) {
            kv.push((a("kda.gate_lower_bound"), Value::F32(lb as f32)));
        }
    }
    if let Some(q) = c.get("q_lora_rank").and_then(Json::as_u64) {
        kv.push((a("attention.q_lora_rank"), Value::U32(q as u32)));
    }
    let kv_lora = num(c, "kv_lora_rank")?;
    let rope = num(c, "qk_rope_head_dim")?;
    let nope = num(c, "qk_nope_head_dim")?;
    let v = num(c, "v_head_dim")?;
    kv.push((a("attention.kv_lora_rank"), Value::U32(kv_lora as u32)));
    kv.push((a("rope.dimension_count"), Value::U32(rope as u32)));
    // the cache holds the compressed latent: key = kv_lora_rank + rope dims
    kv.push((
        a("attention.key_length"),
        Value::U32((kv_lora + rope) as u32),
    ));
    if k3 {
        kv.push((a("attention.value_length"), Value::U32(kv_lora as u32)));
    } else if let Some(h) = head_dim {
        // base.py writes head_dim as value_length; kimi-linear overwrites key_length only
        kv.push((a("attention.value_length"), Value::U32(h as u32)));
    }
    kv.push((
        a("attention.key_length_mla"),
        Value::U32((nope + rope) as u32),
    ));
    kv.push((a("attention.value_length_mla"), Value::U32(v as u32)));
    kv.push((a("expert_feed_forward_length"), u("moe_intermediate_size")?));
    kv.push((a("expert_shared_count"), u("num_shared_experts")?));
    kv.push((a("leading_dense_block_count"), u("first_k_dense_replace")?));
    kv.push((
        a("expert_weights_scale"),
        Value::F32(f(c, "routed_scaling_factor")?),
    ));
    if k3 {
        let norm = c
            .get("moe_renormalize")
            .and_then(Json::as_bool)
            .unwrap_or(false);
        kv.push((a("expert_weights_norm"), Value::Bool(norm)));
        if c.get("routed_expert_hidden_size").is_some() {
            kv.push((a("expert_latent_length"), u("routed_expert_hidden_size")?));
        }
        match c.get("hidden_act").and_then(Json::as_str) {
            Some("situ") => {}
            other => bail!("config.json: hidden_act {other:?}: llama.cpp's kimi-k3 runs situ only"),
        }
        kv.push((
            a("activation.situ_beta"),
            Value::F32(f(c, "activation_situ_beta")?),
        ));
        kv.push((
            a("activation.situ_linear_beta"),
            Value::F32(f(c, "activation_situ_linear_beta")?),
        ));
        kv.push((a("attn_res.block_size"), u("attn_res_block_size")?));
    }
    Ok(kv)
}

fn u_of(c: &Json, key: &str) -> Result<Value> {
    Ok(Value::U32(num(c, key).map_err(|_| {
        anyhow::anyhow!("config.json: `linear_attn_config.{key}` missing or not an integer")
    })? as u32))
}
