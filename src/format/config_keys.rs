//! Key-by-key semantics of the `config.json` text config, following the reference config
//! classes: transformers 5.24 `KimiLinearConfig` (`configuration_kimi_linear.py`) for
//! `kimi_linear`, mlx-lm 0.32.2 `kimi_k3.py` `TextArgs` for `kimi_k3` (mlx-lm
//! `kimi_linear.py` `ModelArgs` where transformers has no such key).
//! The table with the meaning and source line of every key is `docs/config-keys.md`.
//!
//! [`normalize`] runs before the text config is deserialised:
//! - a key given with a value of the wrong JSON type is refused, naming the key;
//! - `null` is the same as absent where the reference type allows `None`, else refused;
//! - an absent key takes the reference default of the model type (written into the map),
//!   is refused when the reference requires it, or is refused when its default selects
//!   something memdial does not implement (or that cannot work);
//! - aliases (`n_routed_experts`, `num_experts_per_tok`, …) are accepted for the
//!   canonical key; giving two spellings of one key is refused.

use anyhow::{bail, Result};
use serde_json::{Map, Value};

/// Which reference class governs the defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    /// `model_type: kimi_linear` (transformers `KimiLinearConfig`).
    KimiLinear,
    /// `model_type: kimi_k3` (mlx-lm `kimi_k3.py` `TextArgs`).
    KimiK3,
}

/// JSON type a key must have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Non-negative integer.
    UInt,
    /// Number (integers accepted).
    Float,
    /// `true` / `false`.
    Bool,
    /// String.
    Str,
    /// Array of non-negative integers.
    UIntList,
    /// Array of strings.
    StrList,
    /// Object.
    Object,
    /// Non-negative integer or array of them (`eos_token_id`).
    UIntOrList,
}

impl Kind {
    fn describe(self) -> &'static str {
        match self {
            Kind::UInt => "a non-negative integer",
            Kind::Float => "a number",
            Kind::Bool => "true or false",
            Kind::Str => "a string",
            Kind::UIntList => "an array of non-negative integers",
            Kind::StrList => "an array of strings",
            Kind::Object => "an object",
            Kind::UIntOrList => "a non-negative integer or an array of them",
        }
    }

    fn accepts(self, v: &Value) -> bool {
        let uint = |v: &Value| v.as_u64().is_some();
        match self {
            Kind::UInt => uint(v),
            Kind::Float => v.is_number(),
            Kind::Bool => v.is_boolean(),
            Kind::Str => v.is_string(),
            Kind::UIntList => v.as_array().is_some_and(|a| a.iter().all(uint)),
            Kind::StrList => v.as_array().is_some_and(|a| a.iter().all(Value::is_string)),
            Kind::Object => v.is_object(),
            Kind::UIntOrList => uint(v) || v.as_array().is_some_and(|a| a.iter().all(uint)),
        }
    }
}

/// What an absent key means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Absent {
    /// The reference default, a JSON literal.
    Value(&'static str),
    /// No value: the feature is off (reference default `None`).
    Unset,
    /// The reference requires the key.
    Required,
    /// The reference default selects something memdial does not implement (reason).
    Refuse(&'static str),
}

/// One key of the text config (or of its `linear_attn_config` when `name` starts with
/// `linear_attn_config.`).
#[derive(Debug, Clone, Copy)]
pub struct Key {
    /// Canonical (Hugging Face) name.
    pub name: &'static str,
    /// Other accepted spellings.
    pub aliases: &'static [&'static str],
    /// JSON type.
    pub kind: Kind,
    /// `null` allowed (means the default) for `kimi_linear` / `kimi_k3`.
    pub nullable: (bool, bool),
    /// Default for `kimi_linear` / `kimi_k3`.
    pub default: (Absent, Absent),
}

use Absent::{Refuse, Required, Unset, Value as V};
use Kind::*;

const fn k(
    name: &'static str,
    aliases: &'static [&'static str],
    kind: Kind,
    nullable: (bool, bool),
    default: (Absent, Absent),
) -> Key {
    Key {
        name,
        aliases,
        kind,
        nullable,
        default,
    }
}

const MLA_NONE: &str = "None in mlx-lm kimi_k3.py, which cannot build an MLA layer without it";

/// Every text-config key memdial reads, in `docs/config-keys.md` order.
pub const KEYS: &[Key] = &[
    k("model_type", &[], Str, (true, true), (Unset, Unset)),
    k(
        "vocab_size",
        &[],
        UInt,
        (false, false),
        (V("163840"), V("163840")),
    ),
    k(
        "hidden_size",
        &[],
        UInt,
        (false, false),
        (V("2304"), V("7168")),
    ),
    k(
        "num_hidden_layers",
        &[],
        UInt,
        (false, false),
        (V("27"), V("93")),
    ),
    k(
        "num_attention_heads",
        &[],
        UInt,
        (false, false),
        (V("32"), V("96")),
    ),
    k(
        "intermediate_size",
        &[],
        UInt,
        (false, false),
        (V("9216"), V("33792")),
    ),
    k(
        "rms_norm_eps",
        &[],
        Float,
        (false, false),
        (V("1e-5"), V("1e-5")),
    ),
    k(
        "linear_attn_config",
        &[],
        Object,
        (false, true),
        (
            Unset,
            Refuse("None in mlx-lm kimi_k3.py, which reads linear_attn_config[\"kda_layers\"]"),
        ),
    ),
    k(
        "linear_attn_config.kda_layers",
        &[],
        UIntList,
        (false, false),
        (Unset, Required),
    ),
    k(
        "linear_attn_config.full_attn_layers",
        &[],
        UIntList,
        (false, false),
        (Unset, Unset),
    ),
    k(
        "linear_attn_config.head_dim",
        &[],
        UInt,
        (false, false),
        (V("128"), Required),
    ),
    k(
        "linear_attn_config.num_heads",
        &[],
        UInt,
        (false, false),
        (V("32"), Required),
    ),
    k(
        "linear_attn_config.short_conv_kernel_size",
        &[],
        UInt,
        (false, false),
        (V("4"), V("4")),
    ),
    k(
        "linear_attn_config.gate_lower_bound",
        &[],
        Float,
        (true, true),
        (Unset, Unset),
    ),
    k(
        "linear_attn_config.use_full_rank_gate",
        &[],
        Bool,
        (false, false),
        (V("false"), V("false")),
    ),
    k(
        "linear_head_dim",
        &[],
        UInt,
        (false, false),
        (V("128"), V("128")),
    ),
    k(
        "linear_num_heads",
        &[],
        UInt,
        (false, false),
        (V("32"), V("32")),
    ),
    k(
        "linear_conv_kernel_dim",
        &[],
        UInt,
        (false, false),
        (V("4"), V("4")),
    ),
    k("layer_types", &[], StrList, (true, true), (Unset, Unset)),
    k(
        "mlp_layer_types",
        &[],
        StrList,
        (true, true),
        (Unset, Unset),
    ),
    k(
        "hidden_act",
        &[],
        Str,
        (false, false),
        (V("\"silu\""), V("\"situ\"")),
    ),
    k(
        "activation_situ_beta",
        &[],
        Float,
        (true, true),
        (Unset, Unset),
    ),
    k(
        "activation_situ_linear_beta",
        &[],
        Float,
        (true, true),
        (Unset, Unset),
    ),
    k(
        "attn_res_block_size",
        &[],
        UInt,
        (true, true),
        (Unset, Unset),
    ),
    k("q_lora_rank", &[], UInt, (true, true), (Unset, Unset)),
    k(
        "kv_lora_rank",
        &[],
        UInt,
        (false, true),
        (V("512"), Refuse(MLA_NONE)),
    ),
    k(
        "qk_nope_head_dim",
        &[],
        UInt,
        (false, true),
        (V("128"), Refuse(MLA_NONE)),
    ),
    k(
        "qk_rope_head_dim",
        &[],
        UInt,
        (false, true),
        (V("64"), Refuse(MLA_NONE)),
    ),
    k(
        "v_head_dim",
        &[],
        UInt,
        (true, true),
        (V("128"), Refuse(MLA_NONE)),
    ),
    k(
        "mla_use_nope",
        &[],
        Bool,
        (false, false),
        (V("true"), V("true")),
    ),
    k(
        "mla_use_output_gate",
        &[],
        Bool,
        (false, false),
        (V("false"), V("false")),
    ),
    k(
        "num_experts",
        &["num_local_experts", "n_routed_experts"],
        UInt,
        (false, true),
        (V("256"), Unset),
    ),
    k(
        "num_experts_per_token",
        &["num_experts_per_tok"],
        UInt,
        (true, false),
        (V("8"), V("16")),
    ),
    k(
        "num_shared_experts",
        &["n_shared_experts"],
        UInt,
        (false, false),
        (V("1"), V("0")),
    ),
    k(
        "moe_intermediate_size",
        &[],
        UInt,
        (false, true),
        (V("1024"), Unset),
    ),
    k(
        "moe_router_activation_func",
        &[],
        Str,
        (false, false),
        (V("\"sigmoid\""), V("\"sigmoid\"")),
    ),
    k(
        "moe_renormalize",
        &["norm_topk_prob"],
        Bool,
        (false, false),
        (V("true"), V("true")),
    ),
    k(
        "routed_scaling_factor",
        &[],
        Float,
        (false, false),
        (V("2.446"), V("1.0")),
    ),
    k(
        "first_k_dense_replace",
        &[],
        UInt,
        (false, false),
        (V("1"), V("0")),
    ),
    k(
        "moe_layer_freq",
        &[],
        UInt,
        (false, false),
        (V("1"), V("1")),
    ),
    k(
        "num_expert_group",
        &["n_group"],
        UInt,
        (false, false),
        (V("1"), V("1")),
    ),
    k("topk_group", &[], UInt, (true, false), (V("1"), V("1"))),
    k(
        "routed_expert_hidden_size",
        &[],
        UInt,
        (true, true),
        (Unset, Unset),
    ),
    k(
        "latent_moe_use_norm",
        &[],
        Bool,
        (false, false),
        (V("false"), V("false")),
    ),
    k(
        "tie_word_embeddings",
        &[],
        Bool,
        (false, false),
        (V("false"), V("false")),
    ),
    k(
        "num_nextn_predict_layers",
        &[],
        UInt,
        (false, false),
        (V("0"), V("0")),
    ),
    k(
        "bos_token_id",
        &[],
        UInt,
        (true, true),
        (V("163584"), Unset),
    ),
    k(
        "eos_token_id",
        &[],
        UIntOrList,
        (true, true),
        (V("163586"), Unset),
    ),
];

/// Looks a key up by canonical name.
pub fn key(name: &str) -> Option<&'static Key> {
    KEYS.iter().find(|k| k.name == name)
}

/// Applies the semantics of [`KEYS`] to a text config object in place (see the module
/// docs). Errors name the key (and the spelling found) and say what was expected.
pub fn normalize(text: &mut Map<String, Value>, form: Form) -> Result<()> {
    let pick = |pair: (bool, bool)| if form == Form::KimiK3 { pair.1 } else { pair.0 };
    // transformers: a key missing from linear_attn_config falls back to the flat
    // linear_head_dim / linear_num_heads / linear_conv_kernel_dim (configuration_kimi_linear.py
    // __post_init__).
    if form == Form::KimiLinear {
        let flat: Vec<(&str, Option<Value>)> = [
            ("head_dim", "linear_head_dim"),
            ("num_heads", "linear_num_heads"),
            ("short_conv_kernel_size", "linear_conv_kernel_dim"),
        ]
        .iter()
        .map(|(sub, f)| (*sub, text.get(*f).filter(|v| !v.is_null()).cloned()))
        .collect();
        if let Some(Value::Object(o)) = text.get_mut("linear_attn_config") {
            for (sub, v) in flat {
                if let (false, Some(v)) = (o.contains_key(sub), v) {
                    o.insert(sub.to_string(), v);
                }
            }
        }
    }
    let pick_d = |pair: (Absent, Absent)| if form == Form::KimiK3 { pair.1 } else { pair.0 };
    for key in KEYS {
        let (obj, name) = match key.name.strip_prefix("linear_attn_config.") {
            Some(sub) => match text.get_mut("linear_attn_config") {
                Some(Value::Object(o)) => (o, sub),
                // Absent / null linear_attn_config: its own row decides.
                _ => continue,
            },
            None => (&mut *text, key.name),
        };
        let spellings: Vec<&str> = std::iter::once(name)
            .chain(key.aliases.iter().copied())
            .filter(|s| obj.contains_key(*s))
            .collect();
        if spellings.len() > 1 {
            bail!(
                "{} given as both `{}` and `{}`",
                key.name,
                spellings[0],
                spellings[1]
            );
        }
        let found = spellings.first().map(|s| s.to_string());
        if let Some(s) = &found {
            let v = &obj[s.as_str()];
            if v.is_null() {
                if !pick(key.nullable) {
                    bail!(
                        "`{s}` is null; it must be {} (the reference does not allow None)",
                        key.kind.describe()
                    );
                }
                obj.remove(s.as_str());
            } else if !key.kind.accepts(v) {
                bail!("`{s}` must be {}, got {v}", key.kind.describe());
            } else {
                if s != name {
                    let v = obj.remove(s.as_str()).expect("present");
                    obj.insert(name.to_string(), v);
                }
                continue;
            }
        }
        // Absent (or null meaning absent).
        match pick_d(key.default) {
            V(lit) => {
                let v: Value = serde_json::from_str(lit).expect("valid default literal");
                obj.insert(name.to_string(), v);
            }
            Unset => {}
            Required => bail!("missing `{}` (required by the reference)", key.name),
            Refuse(why) => bail!(
                "missing `{}`: its reference default is {why}; not supported",
                key.name
            ),
        }
    }
    // transformers: unless linear_attn_config has both layer lists (or layer_types is
    // given), every 4th layer (0-indexed i > 0, i % 4 == 0) is full attention.
    let has_lists = match text.get("linear_attn_config") {
        Some(Value::Object(o)) => {
            o.contains_key("kda_layers") && o.contains_key("full_attn_layers")
        }
        _ => false,
    };
    if form == Form::KimiLinear && !has_lists && !text.contains_key("layer_types") {
        if let Some(n) = text.get("num_hidden_layers").and_then(Value::as_u64) {
            let lt: Vec<&str> = (0..n)
                .map(|i| {
                    if i > 0 && i % 4 == 0 {
                        "full_attention"
                    } else {
                        "linear_attention"
                    }
                })
                .collect();
            text.insert("layer_types".into(), serde_json::json!(lt));
        }
    }
    Ok(())
}
