//! Model configuration read from a checkpoint's `config.json`.
//!
//! Accepts the three forms seen in the wild:
//! - Moonshot's published **Kimi K3** form: `model_type: "kimi_k3"` with a nested
//!   `text_config` (`model_type: "kimi_linear"`) and weights under `language_model.`;
//! - the flat **Kimi Linear** form (Kimi-Linear-48B-A3B `config.json`);
//! - the form transformers' `KimiLinearConfig.save_pretrained` writes, which lists
//!   `layer_types` (`"linear_attention"` / `"full_attention"`) and `mlp_layer_types`
//!   (`"dense"` / `"sparse"`) instead of (or besides) `linear_attn_config` layer lists.
//!
//! Field names are exactly the Hugging Face config keys. Semantics follow
//! mlx-lm `models/kimi_k3.py` / `kimi_linear.py` and transformers
//! `models/kimi_linear/configuration_kimi_linear.py` (see
//! docs/model.md §1, §9 and docs/config-keys.md).

use std::path::Path;

use anyhow::{bail, Context, Result};
use serde::Deserialize;
use serde_json::Value;

pub mod gpt_oss;
mod parse;
pub mod ranges;
pub mod rvq;
pub use gpt_oss::{GptOssConfig, GptOssExperts, GptOssRope, Yarn};
use parse::RawText;

/// `linear_attn_config` block (Kimi Delta Attention settings).
#[derive(Debug, Clone, Deserialize)]
pub struct LinearAttnConfig {
    /// 1-indexed layer numbers that use KDA.
    #[serde(default)]
    pub kda_layers: Vec<usize>,
    /// 1-indexed layer numbers that use MLA (full attention).
    #[serde(default)]
    pub full_attn_layers: Vec<usize>,
    /// Per-head key/value width K = V (128 in published models).
    pub head_dim: usize,
    /// Number of KDA heads H.
    pub num_heads: usize,
    /// Depthwise causal conv width W (4 in published models).
    #[serde(default = "default_conv")]
    pub short_conv_kernel_size: usize,
    /// K3 lower-bound forget gate `g = lb·σ(exp(A_log)·(a+dt_bias))`; `None` = softplus gate.
    #[serde(default)]
    pub gate_lower_bound: Option<f32>,
    /// K3 full-rank output gate `g_proj` [P, D] instead of low-rank `g_a_proj`/`g_b_proj`.
    #[serde(default)]
    pub use_full_rank_gate: bool,
}

fn default_conv() -> usize {
    4
}

/// Attention kind of one decoder layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttnKind {
    /// Kimi Delta Attention (fixed-size recurrent state).
    Kda,
    /// Multi-head Latent Attention (one latent of `kv_lora_rank + qk_rope_head_dim` per position).
    Mla,
    /// gpt-oss grouped-query attention with sinks, full or sliding ([`GptOssConfig`]).
    Gqa,
}

/// The file a checkpoint's stop ids ([`ModelConfig::eos_token_ids`]) were read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EosSource {
    /// `config.json`'s `eos_token_id` (or none: neither file sets one).
    ConfigJson,
    /// `generation_config.json`'s `eos_token_id`, which takes priority.
    GenerationConfig,
}

impl EosSource {
    /// The file name.
    pub fn file_name(self) -> &'static str {
        match self {
            EosSource::ConfigJson => "config.json",
            EosSource::GenerationConfig => GENERATION_CONFIG,
        }
    }
}

/// The generation defaults file Hugging Face checkpoints ship next to `config.json`.
pub const GENERATION_CONFIG: &str = "generation_config.json";

/// Feed-forward kind of one decoder layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MlpKind {
    /// Dense gated MLP with `intermediate_size`.
    Dense,
    /// Routed mixture of experts (+ shared experts).
    Moe,
}

/// Gated activation used by every MLP and expert.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Activation {
    /// `silu(g) · u`.
    Silu,
    /// SiTU (Kimi K3): `[β·tanh(g/β)·σ(g)] · [β_l·tanh(u/β_l)]` (mlx-lm `kimi_k3.py::_situ`);
    /// `linear_beta = None` leaves `u` unchanged.
    Situ { beta: f32, linear_beta: Option<f32> },
}

/// Storage format of routed experts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExpertFormat {
    /// `experts.{e}.{w1,w2,w3}.weight` BF16 [out, in].
    Bf16,
    /// compressed-tensors `mxfp4-pack-quantized`: `weight_packed` U8 [out, in/2] + `weight_scale` U8 [out, in/32].
    Mxfp4,
    /// `memdial pack --rvq`: `rvq_codes` U8 [out, in/8, stages] per expert against per-layer
    /// codebooks ([`rvq`]); lossy.
    Rvq(rvq::RvqConfig),
}

/// MLA hyper-parameters (DeepSeek-V3 style, NoPE in Kimi).
#[derive(Debug, Clone, PartialEq)]
pub struct MlaConfig {
    pub num_heads: usize,
    pub q_lora_rank: Option<usize>,
    pub kv_lora_rank: usize,
    pub qk_nope_head_dim: usize,
    pub qk_rope_head_dim: usize,
    pub v_head_dim: usize,
    pub use_output_gate: bool,
}

impl MlaConfig {
    /// Width of one cached latent per position: `kv_lora_rank + qk_rope_head_dim` (576 in K3).
    pub fn latent_dim(&self) -> usize {
        self.kv_lora_rank + self.qk_rope_head_dim
    }
    /// Per-head query width `qk_nope_head_dim + qk_rope_head_dim` (192 in K3).
    pub fn q_head_dim(&self) -> usize {
        self.qk_nope_head_dim + self.qk_rope_head_dim
    }
}

/// MoE hyper-parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct MoeConfig {
    pub num_experts: usize,
    pub num_experts_per_token: usize,
    pub num_shared_experts: usize,
    pub moe_intermediate_size: usize,
    pub renormalize: bool,
    pub routed_scaling_factor: f32,
    pub num_expert_group: usize,
    pub topk_group: usize,
    /// Latent MoE width (K3: 3584); experts then map latent → intermediate → latent.
    pub routed_expert_hidden_size: Option<usize>,
    pub latent_moe_use_norm: bool,
    pub expert_format: ExpertFormat,
}

impl MoeConfig {
    /// Input/output width of a routed expert: the latent width, or `hidden_size`.
    pub fn expert_dim(&self, hidden: usize) -> usize {
        self.routed_expert_hidden_size.unwrap_or(hidden)
    }
}

/// Normalised model configuration used by the engine.
#[derive(Debug, Clone)]
pub struct ModelConfig {
    /// Top-level `model_type` (`kimi_k3` or `kimi_linear`).
    pub model_type: String,
    /// Prefix of every tensor name in the checkpoint (`language_model.` for K3, empty otherwise).
    pub weight_prefix: String,
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub num_hidden_layers: usize,
    pub intermediate_size: usize,
    pub rms_norm_eps: f32,
    pub kda: LinearAttnConfig,
    pub mla: MlaConfig,
    pub moe: Option<MoeConfig>,
    pub activation: Activation,
    pub attn_res_block_size: Option<usize>,
    pub tie_word_embeddings: bool,
    pub bos_token_id: Option<u32>,
    /// Token ids that end generation: `generation_config.json`'s `eos_token_id` (an int
    /// or a list) when that file sets one, else `config.json`'s (transformers' priority;
    /// [`load_config`] applies it, [`ModelConfig::from_json_str`] sees `config.json` only).
    pub eos_token_ids: Vec<u32>,
    /// The file [`ModelConfig::eos_token_ids`] came from.
    pub eos_token_ids_source: EosSource,
    /// Per-layer attention kind (0-indexed).
    pub attn_kinds: Vec<AttnKind>,
    /// Per-layer MLP kind (0-indexed).
    pub mlp_kinds: Vec<MlpKind>,
    /// `num_nextn_predict_layers` (DeepSeek-V3 multi-token prediction; default 0): that many
    /// MTP layers may be stored at layer indices `num_hidden_layers..num_hidden_layers + N`
    /// (`enorm`, `hnorm`, `eh_proj`, `shared_head.*` plus a decoder layer). Plain decoding
    /// does not use them: they are recognised, never loaded, and not counted in the model
    /// size (as mlx-lm `kimi_k3.py` `sanitize`, vLLM and llama.cpp skip them).
    pub num_nextn_predict_layers: usize,
    /// gpt-oss settings (`model_type: "gpt_oss"`); `None` for the Kimi models.
    pub gpt_oss: Option<GptOssConfig>,
}

impl ModelConfig {
    /// Reads and validates `DIR/config.json`.
    ///
    /// Errors name the file and the offending key.
    pub fn from_dir(dir: &Path) -> Result<Self> {
        let path = dir.join("config.json");
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        Self::from_json_str(&text).with_context(|| format!("invalid {}", path.display()))
    }

    /// Parses a `config.json` text in any of the accepted forms.
    pub fn from_json_str(text: &str) -> Result<Self> {
        Self::parse_with_eos(text, None)
    }

    /// [`ModelConfig::from_json_str`] with the stop ids `eos` (from
    /// `generation_config.json`) in place of `config.json`'s, which are then neither
    /// defaulted nor range-checked.
    fn parse_with_eos(text: &str, eos: Option<Vec<u32>>) -> Result<Self> {
        let root: Value = serde_json::from_str(text).context("not valid JSON")?;
        if let Some(v) = root
            .get("model_type")
            .filter(|v| !v.is_string() && !v.is_null())
        {
            bail!("`model_type` must be a string, got {v}");
        }
        let model_type = root
            .get("model_type")
            .and_then(Value::as_str)
            .unwrap_or("kimi_linear")
            .to_string();
        if model_type == "gpt_oss" {
            return gpt_oss::parse(&root, eos);
        }
        let (mut text_value, prefix) = match root.get("text_config") {
            Some(tc) => (tc.clone(), "language_model.".to_string()),
            None => (root.clone(), String::new()),
        };
        let form = if model_type == "kimi_k3" {
            crate::format::config_keys::Form::KimiK3
        } else {
            crate::format::config_keys::Form::KimiLinear
        };
        match text_value.as_object_mut() {
            Some(m) => crate::format::config_keys::normalize(m, form)?,
            None => bail!("text_config must be an object"),
        }
        let raw: RawText = serde_json::from_value(text_value).context("text config")?;
        if let Some(mt) = &raw.model_type {
            if mt != "kimi_linear" && mt != "kimi_k3" {
                bail!("unsupported text model_type {mt:?} (expected kimi_linear / kimi_k3)");
            }
        }
        if !matches!(model_type.as_str(), "kimi_k3" | "kimi_linear") {
            bail!(
                "unsupported model_type {model_type:?} (expected kimi_k3, kimi_linear or gpt_oss)"
            );
        }
        Self::from_raw(model_type, prefix, raw, eos)
    }

    /// Applies the `quantization_config` of the root JSON: compressed-tensors
    /// `mxfp4-pack-quantized` switches routed experts to [`ExpertFormat::Mxfp4`],
    /// `memdial-rvq` to [`ExpertFormat::Rvq`].
    pub fn apply_quantization(&mut self, root: &Value) -> Result<()> {
        let Some(q) = root.get("quantization_config") else {
            return Ok(());
        };
        if let Some(g) = self.gpt_oss.as_mut() {
            return gpt_oss::apply_quantization(g, self.hidden_size, q);
        }
        let method = q.get("quant_method").and_then(Value::as_str).unwrap_or("");
        let format = q.get("format").and_then(Value::as_str).unwrap_or("");
        match (method, format) {
            ("compressed-tensors", "mxfp4-pack-quantized") => {
                if let Some(m) = self.moe.as_mut() {
                    m.expert_format = ExpertFormat::Mxfp4;
                }
                Ok(())
            }
            (rvq::RVQ_METHOD, _) => {
                let r = rvq::parse(q)?;
                if let Some(m) = self.moe.as_mut() {
                    m.expert_format = ExpertFormat::Rvq(r);
                }
                Ok(())
            }
            _ => bail!(
                "unsupported quantization_config (quant_method {method:?}, format {format:?}); \
                 only compressed-tensors mxfp4-pack-quantized and memdial-rvq routed experts are supported"
            ),
        }
    }

    /// KDA projection width P = H·K.
    pub fn kda_proj_dim(&self) -> usize {
        self.kda.num_heads * self.kda.head_dim
    }

    /// Number of layers of each Kimi attention kind: (KDA, MLA) (gpt-oss layers are neither).
    pub fn layer_counts(&self) -> (usize, usize) {
        let count = |k: AttnKind| self.attn_kinds.iter().filter(|x| **x == k).count();
        (count(AttnKind::Kda), count(AttnKind::Mla))
    }

    /// Bytes of one KDA layer's recurrent state per sequence: fp32 H·K·V state plus
    /// fp32 conv state (W−1)·3P (docs/model.md §2, conv kept in f32 here).
    pub fn kda_state_bytes(&self) -> usize {
        let h = self.kda.num_heads;
        let k = self.kda.head_dim;
        h * k * k * 4 + (self.kda.short_conv_kernel_size - 1) * 3 * h * k * 4
    }

    /// Bytes of the MLA latent cache per position per MLA layer (f32 here:
    /// `(kv_lora_rank + qk_rope_head_dim) · 4`).
    pub fn mla_cache_bytes_per_position(&self) -> usize {
        self.mla.latent_dim() * 4
    }

    /// Routed experts of a MoE layer and experts selected per token, `(E, k)`: the Kimi
    /// MoE's `num_experts` / `num_experts_per_token`, or gpt-oss's `num_local_experts` /
    /// `num_experts_per_tok`; `None` for a model without routed experts.
    pub fn routed_experts(&self) -> Option<(usize, usize)> {
        match (&self.moe, &self.gpt_oss) {
            (Some(m), _) => Some((m.num_experts, m.num_experts_per_token)),
            (None, Some(g)) => Some((g.num_local_experts, g.num_experts_per_tok)),
            (None, None) => None,
        }
    }
}

/// Checks that a routed-expert layout can be routed by group-limited top-k
/// (DeepSeek-V3 `noaux_tc`, see [`crate::model::moe::route`]):
/// - `1 ≤ num_experts_per_token ≤ num_experts`;
/// - `num_experts` (`n_routed_experts`) divisible by `num_expert_group` (`n_group`);
/// - `1 ≤ topk_group ≤ num_expert_group`;
/// - with more than one group, every group holds at least 2 experts (a group's score is
///   the sum of its top-2 biased scores);
/// - `num_experts_per_token ≤ topk_group · num_experts / num_expert_group` (otherwise the
///   top-k would have to take experts from dropped groups).
///
/// Errors name the config keys and their values. Called at load (so `run`, `plan`,
/// `inspect` and the model loader all refuse such a config).
pub fn check_moe_layout(
    num_experts: usize,
    num_experts_per_token: usize,
    num_expert_group: usize,
    topk_group: usize,
) -> Result<()> {
    let (e, k, ng, tg) = (
        num_experts,
        num_experts_per_token,
        num_expert_group,
        topk_group,
    );
    if k == 0 || k > e {
        bail!("num_experts_per_token {k} must be in 1..=num_experts ({e})");
    }
    if ng == 0 || e % ng != 0 {
        bail!(
            "num_experts (n_routed_experts) {e} is not divisible by num_expert_group (n_group) {ng}"
        );
    }
    if tg == 0 || tg > ng {
        bail!("topk_group {tg} must be in 1..=num_expert_group ({ng})");
    }
    let per_group = e / ng;
    if ng > 1 && per_group < 2 {
        bail!(
            "num_experts {e} / num_expert_group {ng} leaves {per_group} expert per group, but a \
             group's score sums its top-2 experts: need at least 2 experts per group"
        );
    }
    if k > tg * per_group {
        bail!(
            "num_experts_per_token {k} exceeds topk_group {tg} × {per_group} experts per group \
             (num_experts {e} / num_expert_group {ng}) = {}: the top-k cannot be taken from \
             the kept groups",
            tg * per_group
        );
    }
    Ok(())
}

/// An `eos_token_id` value (absent/`null`, an integer or a list of integers) as
/// token ids, in the order written. Errors name the value.
pub(crate) fn eos_ids(v: Option<&Value>) -> Result<Vec<u32>> {
    match v {
        None | Some(Value::Null) => Ok(vec![]),
        Some(n @ Value::Number(_)) => Ok(vec![token_id(n)?]),
        Some(Value::Array(a)) => a.iter().map(token_id).collect(),
        Some(other) => bail!("eos_token_id has unexpected value {other}"),
    }
}

/// The `eos_token_id` of `DIR/generation_config.json` (an integer or a list), which
/// transformers' and mlx-lm's `generate` use instead of `config.json`'s.
///
/// `None` — `config.json`'s ids stay in force — when the file does not exist or sets
/// no ids (key absent, `null` or `[]`), as mlx-lm's `load_config` does (transformers
/// would then stop on no id at all when the file exists; keeping `config.json`'s is the
/// safer reading).
///
/// Errors (naming the file): unreadable, not a JSON object, or an `eos_token_id` that is
/// not a non-negative integer (below 2^32) or a list of them. Both references silently
/// ignore an unparsable file; it is refused here, because ignoring it would run past
/// the stop ids it was meant to set.
pub fn generation_eos_ids(dir: &Path) -> Result<Option<Vec<u32>>> {
    let path = dir.join(GENERATION_CONFIG);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
    };
    let root: Value = serde_json::from_str(&text)
        .with_context(|| format!("invalid {}: not valid JSON", path.display()))?;
    let Some(obj) = root.as_object() else {
        bail!("invalid {}: not a JSON object", path.display());
    };
    match obj.get("eos_token_id") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Array(a)) if a.is_empty() => Ok(None),
        v => eos_ids(v)
            .map(Some)
            .with_context(|| format!("invalid {}", path.display())),
    }
}

/// An `eos_token_id` value as a token id: a non-negative integer below 2^32
/// (a larger one is refused, never truncated).
fn token_id(v: &Value) -> Result<u32> {
    let x = v
        .as_u64()
        .with_context(|| format!("eos_token_id entries must be non-negative integers, got {v}"))?;
    u32::try_from(x)
        .map_err(|_| anyhow::anyhow!("eos_token_id {x} is out of range (token ids are below 2^32)"))
}

/// Loads `DIR/config.json` including its `quantization_config`, and the stop ids of
/// `DIR/generation_config.json` when it sets `eos_token_id` ([`generation_eos_ids`];
/// they replace `config.json`'s, as in transformers' `generate`).
///
/// Errors: `dir` is not a directory (a [`crate::util::error::UsageError`]: the caller named
/// the wrong path); `config.json` unreadable or invalid; `generation_config.json`
/// present but unreadable or invalid, or naming an eos id outside the vocabulary.
pub fn load_config(dir: &Path) -> Result<ModelConfig> {
    if !dir.is_dir() {
        return Err(crate::util::error::UsageError::Invalid(format!(
            "model directory {} does not exist",
            dir.display()
        ))
        .into());
    }
    let path = dir.join("config.json");
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read {}", path.display()))?;
    let gen_eos = generation_eos_ids(dir)?;
    // The generation config's ids against config.json's vocab_size, named as theirs
    // (a config.json without a usable vocab_size is reported by its own parse).
    if let Some(ids) = &gen_eos {
        let root: Option<Value> = serde_json::from_str(&text).ok();
        let vocab = root.as_ref().and_then(|r| {
            r.get("text_config")
                .unwrap_or(r)
                .get("vocab_size")
                .and_then(Value::as_u64)
        });
        if let Some(v) = vocab {
            if let Some(e) = ids.iter().find(|&&e| u64::from(e) >= v) {
                bail!(
                    "invalid {}: eos_token_id {e} is out of range (vocab_size {v})",
                    dir.join(GENERATION_CONFIG).display()
                );
            }
        }
    }
    let from_generation = gen_eos.is_some();
    let mut cfg = ModelConfig::parse_with_eos(&text, gen_eos)
        .with_context(|| format!("invalid {}", path.display()))?;
    let root: Value = serde_json::from_str(&text)?;
    cfg.apply_quantization(&root)
        .with_context(|| format!("invalid {}", path.display()))?;
    if from_generation {
        cfg.eos_token_ids_source = EosSource::GenerationConfig;
    }
    Ok(cfg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn k3_published_layer_pattern_is_1_indexed() {
        // K3: full_attn_layers = [4, 8, …, 92, 93] (docs/model.md §9).
        let mut full: Vec<usize> = (1..=23).map(|i| 4 * i).collect();
        full.push(93);
        let kda: Vec<usize> = (1..=93).filter(|i| !full.contains(i)).collect();
        let json = serde_json::json!({
            "model_type": "kimi_k3",
            "text_config": {
                "model_type": "kimi_linear", "vocab_size": 163840, "hidden_size": 7168,
                "num_hidden_layers": 93, "num_attention_heads": 96, "intermediate_size": 33792,
                "linear_attn_config": {"kda_layers": kda, "full_attn_layers": full, "head_dim": 128,
                    "num_heads": 96, "short_conv_kernel_size": 4, "gate_lower_bound": -5.0,
                    "use_full_rank_gate": true},
                "hidden_act": "situ", "activation_situ_beta": 4.0, "activation_situ_linear_beta": 25.0,
                "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128,
                "qk_rope_head_dim": 64, "v_head_dim": 128, "num_experts": 896,
                "num_experts_per_token": 16, "moe_intermediate_size": 3072,
                "first_k_dense_replace": 1, "routed_expert_hidden_size": 3584
            },
            "quantization_config": {"quant_method": "compressed-tensors", "format": "mxfp4-pack-quantized"}
        });
        let mut cfg = ModelConfig::from_json_str(&json.to_string()).unwrap();
        cfg.apply_quantization(&json).unwrap();
        assert_eq!(cfg.layer_counts(), (69, 24));
        assert_eq!(cfg.attn_kinds[3], AttnKind::Mla);
        assert_eq!(cfg.attn_kinds[92], AttnKind::Mla);
        assert_eq!(cfg.attn_kinds[0], AttnKind::Kda);
        assert_eq!(cfg.mlp_kinds[0], MlpKind::Dense);
        assert_eq!(cfg.mlp_kinds[1], MlpKind::Moe);
        assert_eq!(cfg.mla.latent_dim(), 576);
        assert_eq!(cfg.weight_prefix, "language_model.");
        assert_eq!(cfg.moe.as_ref().unwrap().expert_format, ExpertFormat::Mxfp4);
        // 96·128·128·4 = 6,291,456 B state + 3·3·12288·4 = 442,368 B f32 conv state.
        assert_eq!(cfg.kda_state_bytes(), 6_291_456 + 442_368);
    }

    #[test]
    fn layer_in_neither_list_is_an_error() {
        let json = r#"{"model_type":"kimi_linear","vocab_size":10,"hidden_size":8,
            "num_hidden_layers":2,"num_attention_heads":1,"intermediate_size":8,"kv_lora_rank":4,
            "linear_attn_config":{"kda_layers":[1],"full_attn_layers":[],"head_dim":4,"num_heads":2}}"#;
        let err = format!("{:#}", ModelConfig::from_json_str(json).unwrap_err());
        assert!(err.contains("layer 2"), "{err}");
    }
}
