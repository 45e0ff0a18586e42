//! gpt-oss (`model_type: "gpt_oss"`) settings read from `config.json`, as published
//! (openai/gpt-oss-20b / -120b: `rope_theta` + `rope_scaling`) and as transformers 5.x
//! writes it (`rope_parameters`). Defaults and semantics follow transformers
//! `models/gpt_oss/configuration_gpt_oss.py` (`GptOssConfig`) and
//! `modeling_rope_utils.py::_compute_yarn_parameters` (docs/model.md, gpt-oss).

use anyhow::{bail, Context, Result};
use serde::Deserialize;
use serde_json::Value;

use super::{
    eos_ids, Activation, AttnKind, EosSource, LinearAttnConfig, MlaConfig, MlpKind, ModelConfig,
};

/// How the routed experts are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GptOssExperts {
    /// The published layout (`quantization_config.quant_method = "mxfp4"`):
    /// `gate_up_proj_blocks` U8 `[E, 2I, D/32, 16]` + `gate_up_proj_scales` U8 `[E, 2I, D/32]`,
    /// `down_proj_blocks` U8 `[E, D, I/32, 16]` + `down_proj_scales` U8 `[E, D, I/32]`
    /// (per expert the `[out, in/2]` nibble matrix and `[out, in/32]` E8M0 scales).
    Mxfp4,
    /// The BF16 layout fine-tunes publish (transformers `GptOssExperts`):
    /// `gate_up_proj` `[E, D, 2I]` and `down_proj` `[E, I, D]` (`[in, out]` per expert).
    Dense,
}

/// YaRN RoPE (`rope_type: "yarn"`) or plain RoPE (`"default"`), per
/// transformers `_compute_yarn_parameters`.
#[derive(Debug, Clone, PartialEq)]
pub struct GptOssRope {
    /// `rope_theta` (gpt-oss: 150000).
    pub rope_theta: f64,
    /// `None`: plain RoPE. `Some`: the YaRN settings.
    pub yarn: Option<Yarn>,
}

/// YaRN settings (`rope_scaling` / `rope_parameters` keys).
#[derive(Debug, Clone, PartialEq)]
pub struct Yarn {
    /// `factor` (gpt-oss: 32).
    pub factor: f64,
    /// `beta_fast` (default 32).
    pub beta_fast: f64,
    /// `beta_slow` (default 1).
    pub beta_slow: f64,
    /// `original_max_position_embeddings` (gpt-oss: 4096).
    pub original_max_position_embeddings: f64,
    /// `truncate` (default true in transformers; gpt-oss publishes false).
    pub truncate: bool,
    /// `attention_factor`; `None`: `0.1·ln(factor) + 1` (1 for factor ≤ 1).
    pub attention_factor: Option<f64>,
}

/// The gpt-oss part of a [`ModelConfig`].
#[derive(Debug, Clone, PartialEq)]
pub struct GptOssConfig {
    /// `num_attention_heads`.
    pub num_attention_heads: usize,
    /// `num_key_value_heads` (divides `num_attention_heads`).
    pub num_key_value_heads: usize,
    /// `head_dim` (default `hidden_size / num_attention_heads`; even).
    pub head_dim: usize,
    /// `attention_bias` (default true): q/k/v/o projections carry biases.
    pub attention_bias: bool,
    /// `sliding_window` (default 128): a sliding layer's query at position `i` sees
    /// keys `j` with `i − W < j ≤ i` (transformers `sliding_window_overlay`).
    pub sliding_window: usize,
    /// Per layer (0-indexed): true for `"sliding_attention"`, false for `"full_attention"`.
    pub sliding: Vec<bool>,
    /// RoPE settings.
    pub rope: GptOssRope,
    /// `num_local_experts`.
    pub num_local_experts: usize,
    /// `num_experts_per_tok` (`experts_per_token` in the published file).
    pub num_experts_per_tok: usize,
    /// `intermediate_size` `I` of one expert.
    pub intermediate_size: usize,
    /// `swiglu_alpha` (default 1.702).
    pub swiglu_alpha: f32,
    /// `swiglu_limit` (default 7.0).
    pub swiglu_limit: f32,
    /// Expert storage layout.
    pub experts: GptOssExperts,
}

#[derive(Debug, Deserialize)]
struct Raw {
    vocab_size: usize,
    hidden_size: usize,
    num_hidden_layers: usize,
    num_attention_heads: usize,
    #[serde(default)]
    num_key_value_heads: Option<usize>,
    #[serde(default)]
    head_dim: Option<usize>,
    #[serde(default = "default_true")]
    attention_bias: bool,
    #[serde(default = "default_window")]
    sliding_window: Option<usize>,
    #[serde(default)]
    layer_types: Option<Vec<String>>,
    #[serde(default = "default_eps")]
    rms_norm_eps: f32,
    #[serde(default = "default_theta")]
    rope_theta: f64,
    #[serde(default)]
    rope_scaling: Option<Value>,
    #[serde(default)]
    rope_parameters: Option<Value>,
    #[serde(alias = "num_experts")]
    num_local_experts: usize,
    #[serde(default)]
    num_experts_per_tok: Option<usize>,
    /// The published file writes both spellings.
    #[serde(default)]
    experts_per_token: Option<usize>,
    intermediate_size: usize,
    #[serde(default = "default_alpha")]
    swiglu_alpha: f32,
    #[serde(default = "default_limit")]
    swiglu_limit: f32,
    #[serde(default)]
    tie_word_embeddings: bool,
    #[serde(default)]
    bos_token_id: Option<u32>,
    #[serde(default)]
    eos_token_id: Option<Value>,
    #[serde(default = "default_act")]
    hidden_act: String,
}

fn default_true() -> bool {
    true
}
fn default_window() -> Option<usize> {
    Some(128)
}
fn default_eps() -> f32 {
    1e-5
}
fn default_theta() -> f64 {
    150000.0
}
fn default_alpha() -> f32 {
    1.702
}
fn default_limit() -> f32 {
    7.0
}
fn default_act() -> String {
    "silu".into()
}

fn num(v: &Value, key: &str) -> Result<Option<f64>> {
    match v.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(x) => x
            .as_f64()
            .map(Some)
            .with_context(|| format!("rope {key} must be a number, got {x}")),
    }
}

/// The RoPE settings from `rope_parameters` (transformers 5.x: `rope_theta` inside)
/// or `rope_scaling` + `rope_theta` (published), transformers' defaults otherwise.
fn rope(raw: &Raw) -> Result<GptOssRope> {
    let params = raw.rope_parameters.as_ref().or(raw.rope_scaling.as_ref());
    let theta = match params {
        Some(p) => num(p, "rope_theta")?.unwrap_or(raw.rope_theta),
        None => raw.rope_theta,
    };
    let default_yarn = Yarn {
        factor: 32.0,
        beta_fast: 32.0,
        beta_slow: 1.0,
        original_max_position_embeddings: 4096.0,
        truncate: false,
        attention_factor: None,
    };
    let Some(p) = params else {
        // GptOssConfig's own default when neither key is written.
        return Ok(GptOssRope {
            rope_theta: theta,
            yarn: Some(default_yarn),
        });
    };
    let kind = p
        .get("rope_type")
        .or_else(|| p.get("type"))
        .and_then(Value::as_str)
        .unwrap_or("default");
    let yarn = match kind {
        "default" => None,
        "yarn" => {
            let factor = num(p, "factor")?.context("rope yarn needs `factor`")?;
            let omp = num(p, "original_max_position_embeddings")?
                .context("rope yarn needs `original_max_position_embeddings`")?;
            let truncate = match p.get("truncate") {
                None | Some(Value::Null) => true,
                Some(Value::Bool(b)) => *b,
                Some(x) => bail!("rope truncate must be a boolean, got {x}"),
            };
            // transformers: `get("beta_fast") or 32` (a 0 also falls back).
            let or = |x: Option<f64>, d: f64| x.filter(|v| *v != 0.0).unwrap_or(d);
            Some(Yarn {
                factor,
                beta_fast: or(num(p, "beta_fast")?, 32.0),
                beta_slow: or(num(p, "beta_slow")?, 1.0),
                original_max_position_embeddings: omp,
                truncate,
                attention_factor: num(p, "attention_factor")?,
            })
        }
        other => bail!("unsupported rope_type {other:?} for gpt_oss (default or yarn)"),
    };
    if !(theta.is_finite() && theta > 1.0) {
        bail!("rope_theta must be a finite number > 1, got {theta}");
    }
    Ok(GptOssRope {
        rope_theta: theta,
        yarn,
    })
}

/// Which of the `n` layers use the sliding window, from `layer_types` (GptOssConfig's
/// default without it: sliding first, alternating).
///
/// Errors: an entry other than `sliding_attention` / `full_attention`, or a list whose
/// length is not `n`.
fn sliding_layers(layer_types: Option<&[String]>, n: usize) -> Result<Vec<bool>> {
    let Some(lt) = layer_types else {
        return Ok((0..n).map(|i| (i + 1) % 2 == 1).collect());
    };
    if lt.len() != n {
        bail!(
            "layer_types has {} entries, num_hidden_layers is {n}",
            lt.len()
        );
    }
    lt.iter()
        .map(|t| match t.as_str() {
            "sliding_attention" => Ok(true),
            "full_attention" => Ok(false),
            other => bail!("unknown layer_types entry {other:?} for gpt_oss"),
        })
        .collect()
}

/// Parses a gpt-oss `config.json` (its root object) into a [`ModelConfig`]
/// whose [`ModelConfig::gpt_oss`] is set; `eos` replaces `config.json`'s stop ids
/// (from `generation_config.json`). Experts start in the [`GptOssExperts::Dense`]
/// layout; `quantization_config` switches them ([`ModelConfig::apply_quantization`]).
///
/// Errors name the key: a missing dimension, heads that do not divide, an odd
/// `head_dim`, a `layer_types` entry other than `sliding_attention` /
/// `full_attention` or of the wrong length, `num_experts_per_tok` outside
/// `1..=num_local_experts`, an unsupported `rope_type` or `hidden_act`.
pub(super) fn parse(root: &Value, eos: Option<Vec<u32>>) -> Result<ModelConfig> {
    let raw: Raw = serde_json::from_value(root.clone()).context("gpt_oss config")?;
    let n = raw.num_hidden_layers;
    if n == 0 || n > super::ranges::MAX_LAYERS {
        bail!(
            "num_hidden_layers {n} must be in 1..={}",
            super::ranges::MAX_LAYERS
        );
    }
    let h = raw.num_attention_heads;
    let kv = raw.num_key_value_heads.unwrap_or(h);
    if h == 0 || kv == 0 || !h.is_multiple_of(kv) {
        bail!("num_attention_heads {h} must be a positive multiple of num_key_value_heads {kv}");
    }
    let head_dim = match raw.head_dim {
        Some(d) => d,
        None => raw.hidden_size / h,
    };
    if head_dim == 0 || !head_dim.is_multiple_of(2) {
        bail!("head_dim {head_dim} must be even and > 0 (RoPE rotates half-split pairs)");
    }
    let sliding = sliding_layers(raw.layer_types.as_deref(), n)?;
    let window = raw.sliding_window.unwrap_or(0);
    if window == 0 && sliding.contains(&true) {
        bail!("sliding_window must be ≥ 1 when layer_types has sliding_attention layers");
    }
    let e = raw.num_local_experts;
    let k = raw
        .num_experts_per_tok
        .or(raw.experts_per_token)
        .unwrap_or(4);
    if k == 0 || k > e {
        bail!("num_experts_per_tok {k} must be in 1..=num_local_experts ({e})");
    }
    if raw.hidden_act != "silu" {
        bail!(
            "unsupported hidden_act {:?} for gpt_oss (the experts use the clamped SwiGLU)",
            raw.hidden_act
        );
    }
    for (key, v) in [
        ("swiglu_alpha", raw.swiglu_alpha),
        ("swiglu_limit", raw.swiglu_limit),
    ] {
        if !(v.is_finite() && v > 0.0) {
            bail!("{key} must be a finite number > 0, got {v}");
        }
    }
    let rope = rope(&raw)?;
    let eos_token_ids = match eos {
        Some(ids) => ids,
        None => eos_ids(raw.eos_token_id.as_ref())?,
    };
    let g = GptOssConfig {
        num_attention_heads: h,
        num_key_value_heads: kv,
        head_dim,
        attention_bias: raw.attention_bias,
        sliding_window: window,
        sliding,
        rope,
        num_local_experts: e,
        num_experts_per_tok: k,
        intermediate_size: raw.intermediate_size,
        swiglu_alpha: raw.swiglu_alpha,
        swiglu_limit: raw.swiglu_limit,
        experts: GptOssExperts::Dense,
    };
    let cfg = ModelConfig {
        model_type: "gpt_oss".into(),
        weight_prefix: String::new(),
        vocab_size: raw.vocab_size,
        hidden_size: raw.hidden_size,
        num_hidden_layers: n,
        intermediate_size: raw.intermediate_size,
        rms_norm_eps: raw.rms_norm_eps,
        // The Kimi attention settings are unused (no KDA / MLA layer).
        kda: LinearAttnConfig {
            kda_layers: vec![],
            full_attn_layers: vec![],
            head_dim: 0,
            num_heads: 0,
            short_conv_kernel_size: 1,
            gate_lower_bound: None,
            use_full_rank_gate: false,
        },
        mla: MlaConfig {
            num_heads: 0,
            q_lora_rank: None,
            kv_lora_rank: 0,
            qk_nope_head_dim: 0,
            qk_rope_head_dim: 0,
            v_head_dim: 0,
            use_output_gate: false,
        },
        moe: None,
        activation: Activation::Silu,
        attn_res_block_size: None,
        tie_word_embeddings: raw.tie_word_embeddings,
        bos_token_id: raw.bos_token_id,
        eos_token_ids,
        eos_token_ids_source: EosSource::ConfigJson,
        attn_kinds: vec![AttnKind::Gqa; n],
        mlp_kinds: vec![MlpKind::Moe; n],
        num_nextn_predict_layers: 0,
        gpt_oss: Some(g),
    };
    super::ranges::check_config(&cfg)?;
    Ok(cfg)
}

/// `quantization_config` of a gpt-oss checkpoint: `quant_method: "mxfp4"` switches the
/// experts to [`GptOssExperts::Mxfp4`]. `modules_to_not_convert` must leave the
/// experts converted (published: attention, router, embedding and `lm_head` stay BF16).
///
/// Errors: another `quant_method`, `modules_to_not_convert` naming the experts, or a
/// `hidden_size` / `intermediate_size` that is not a multiple of the MXFP4 block (32).
pub(super) fn apply_quantization(g: &mut GptOssConfig, hidden: usize, q: &Value) -> Result<()> {
    let method = q.get("quant_method").and_then(Value::as_str).unwrap_or("");
    if method != "mxfp4" {
        bail!("unsupported quantization_config quant_method {method:?} for gpt_oss (only mxfp4)");
    }
    if let Some(list) = q.get("modules_to_not_convert").and_then(Value::as_array) {
        if let Some(m) = list
            .iter()
            .filter_map(Value::as_str)
            .find(|m| m.contains("experts") || m.ends_with(".mlp") || *m == "model.layers.*.mlp")
        {
            bail!(
                "quantization_config.modules_to_not_convert lists {m:?}: BF16 experts in an \
                 mxfp4 checkpoint are not supported"
            );
        }
    }
    for (key, v) in [
        ("hidden_size", hidden),
        ("intermediate_size", g.intermediate_size),
    ] {
        if !v.is_multiple_of(32) {
            bail!("{key} {v} is not a multiple of 32, the MXFP4 block size of the experts");
        }
    }
    g.experts = GptOssExperts::Mxfp4;
    Ok(())
}

impl GptOssConfig {
    /// Query width `num_attention_heads · head_dim`.
    pub fn q_dim(&self) -> usize {
        self.num_attention_heads * self.head_dim
    }
    /// Key / value width `num_key_value_heads · head_dim`.
    pub fn kv_dim(&self) -> usize {
        self.num_key_value_heads * self.head_dim
    }
    /// Positions a layer's KV cache keeps: `sliding_window` for a sliding layer
    /// (a ring), `None` (every position) for a full one.
    pub fn window(&self, layer: usize) -> Option<usize> {
        self.sliding[layer].then_some(self.sliding_window)
    }
    /// Bytes of every layer's f32 key/value cache for `max_context` positions: per
    /// layer `min(window, max_context)` (sliding) or `max_context` (full) positions of
    /// `2 · kv_dim · 4` bytes.
    pub fn kv_cache_bytes(&self, max_context: usize) -> u64 {
        let per_pos = 2 * self.kv_dim() as u64 * 4;
        (0..self.sliding.len())
            .map(|i| self.window(i).unwrap_or(max_context).min(max_context) as u64 * per_pos)
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn published_20b_config() {
        // Keys and values of openai/gpt-oss-20b config.json (abridged layer_types).
        let mut lt = vec![];
        for _ in 0..12 {
            lt.push("sliding_attention");
            lt.push("full_attention");
        }
        let j = serde_json::json!({
            "architectures": ["GptOssForCausalLM"], "attention_bias": true,
            "attention_dropout": 0.0, "eos_token_id": 200002, "experts_per_token": 4,
            "head_dim": 64, "hidden_act": "silu", "hidden_size": 2880,
            "initial_context_length": 4096, "initializer_range": 0.02,
            "intermediate_size": 2880, "layer_types": lt, "max_position_embeddings": 131072,
            "model_type": "gpt_oss", "num_attention_heads": 64, "num_experts_per_tok": 4,
            "num_hidden_layers": 24, "num_key_value_heads": 8, "num_local_experts": 32,
            "output_router_logits": false, "pad_token_id": 199999,
            "quantization_config": {"modules_to_not_convert": ["model.layers.*.self_attn",
                "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"],
                "quant_method": "mxfp4"},
            "rms_norm_eps": 1e-05,
            "rope_scaling": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0,
                "original_max_position_embeddings": 4096, "rope_type": "yarn", "truncate": false},
            "rope_theta": 150000, "router_aux_loss_coef": 0.9, "sliding_window": 128,
            "swiglu_limit": 7.0, "tie_word_embeddings": false, "transformers_version": "4.55.0.dev0",
            "use_cache": true, "vocab_size": 201088
        });
        let mut cfg = ModelConfig::from_json_str(&j.to_string()).unwrap();
        cfg.apply_quantization(&j).unwrap();
        let g = cfg.gpt_oss.as_ref().unwrap();
        assert_eq!(
            (g.num_attention_heads, g.num_key_value_heads, g.head_dim),
            (64, 8, 64)
        );
        assert_eq!((g.num_local_experts, g.num_experts_per_tok), (32, 4));
        assert_eq!(g.experts, GptOssExperts::Mxfp4);
        assert_eq!(g.swiglu_alpha, 1.702);
        assert_eq!(g.window(0), Some(128));
        assert_eq!(g.window(1), None);
        let y = g.rope.yarn.as_ref().unwrap();
        assert_eq!(g.rope.rope_theta, 150000.0);
        assert_eq!((y.factor, y.truncate), (32.0, false));
        assert_eq!(cfg.eos_token_ids, vec![200002]);
    }

    #[test]
    fn rope_parameters_form_and_bad_layer_types() {
        let j = serde_json::json!({
            "model_type": "gpt_oss", "vocab_size": 10, "hidden_size": 64,
            "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
            "head_dim": 16, "num_local_experts": 4, "num_experts_per_tok": 2,
            "intermediate_size": 32,
            "rope_parameters": {"rope_type": "yarn", "rope_theta": 1000.0, "factor": 8.0,
                "original_max_position_embeddings": 64}
        });
        let cfg = ModelConfig::from_json_str(&j.to_string()).unwrap();
        let g = cfg.gpt_oss.unwrap();
        assert_eq!(g.rope.rope_theta, 1000.0);
        // truncate absent: transformers reads it as true.
        assert!(g.rope.yarn.unwrap().truncate);
        assert_eq!(g.sliding, vec![true, false]);
        let mut bad = j.clone();
        bad["layer_types"] = serde_json::json!(["sliding_attention", "linear_attention"]);
        let e = format!(
            "{:#}",
            ModelConfig::from_json_str(&bad.to_string()).unwrap_err()
        );
        assert!(e.contains("linear_attention"), "{e}");
    }
}
