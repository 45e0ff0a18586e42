//! The gpt-oss tensor table: names, dtypes and shapes of the published Hugging Face
//! layout (openai/gpt-oss-20b, transformers `GptOssForCausalLM`), MXFP4 or BF16 experts.

use super::{layer_name, Builder, Dtype, Role, TensorSpec};
use crate::format::config::{GptOssExperts, ModelConfig};

/// The routed-expert tensors of a gpt-oss layer, stacked over the `E` experts, by
/// layout: (name under `mlp.experts.`, dtype, shape).
pub fn expert_tensors(cfg: &ModelConfig) -> Vec<(&'static str, Dtype, Vec<usize>)> {
    let g = cfg.gpt_oss.as_ref().expect("a gpt-oss config");
    let (d, i, e) = (cfg.hidden_size, g.intermediate_size, g.num_local_experts);
    let bf = Dtype::BF16;
    let mut v = match g.experts {
        GptOssExperts::Mxfp4 => vec![
            ("gate_up_proj_blocks", Dtype::U8, vec![e, 2 * i, d / 32, 16]),
            ("gate_up_proj_scales", Dtype::U8, vec![e, 2 * i, d / 32]),
            ("down_proj_blocks", Dtype::U8, vec![e, d, i / 32, 16]),
            ("down_proj_scales", Dtype::U8, vec![e, d, i / 32]),
        ],
        GptOssExperts::Dense => vec![
            ("gate_up_proj", bf, vec![e, d, 2 * i]),
            ("down_proj", bf, vec![e, i, d]),
        ],
    };
    v.push(("gate_up_proj_bias", bf, vec![e, 2 * i]));
    v.push(("down_proj_bias", bf, vec![e, d]));
    v
}

/// The full tensor table of a gpt-oss model (globals, then per layer: attention,
/// norms, router, the stacked experts). The stacked expert tensors hold every
/// expert of a layer: they are [`Role::Expert`] with `expert: None`, and a store
/// reads expert `e` as its slice `[e]` of each ([`crate::store::groups::stacked_expert_groups`]).
pub(super) fn expected_tensors(cfg: &ModelConfig) -> Vec<TensorSpec> {
    let g = cfg.gpt_oss.as_ref().expect("a gpt-oss config");
    let d = cfg.hidden_size;
    let bf = Dtype::BF16;
    let mut b = Builder {
        prefix: &cfg.weight_prefix,
        out: Vec::new(),
    };
    b.push(
        "model.embed_tokens.weight".into(),
        bf,
        vec![cfg.vocab_size, d],
        None,
        Role::Embedding,
    );
    let (q, kv, e) = (g.q_dim(), g.kv_dim(), g.num_local_experts);
    for i in 0..cfg.num_hidden_layers {
        let l = Some(i);
        let n = |rest: &str| layer_name(i, rest);
        for (x, rows, cols) in [("q", q, d), ("k", kv, d), ("v", kv, d), ("o", d, q)] {
            b.push(
                n(&format!("self_attn.{x}_proj.weight")),
                bf,
                vec![rows, cols],
                l,
                Role::Trunk,
            );
            if g.attention_bias {
                b.push(
                    n(&format!("self_attn.{x}_proj.bias")),
                    bf,
                    vec![rows],
                    l,
                    Role::Trunk,
                );
            }
        }
        b.push(
            n("self_attn.sinks"),
            bf,
            vec![g.num_attention_heads],
            l,
            Role::Trunk,
        );
        b.push(n("input_layernorm.weight"), bf, vec![d], l, Role::Trunk);
        b.push(
            n("post_attention_layernorm.weight"),
            bf,
            vec![d],
            l,
            Role::Trunk,
        );
        b.push(n("mlp.router.weight"), bf, vec![e, d], l, Role::Trunk);
        b.push(n("mlp.router.bias"), bf, vec![e], l, Role::Trunk);
        for (name, dtype, shape) in expert_tensors(cfg) {
            b.push(
                n(&format!("mlp.experts.{name}")),
                dtype,
                shape,
                l,
                Role::Expert,
            );
        }
    }
    b.push("model.norm.weight".into(), bf, vec![d], None, Role::Global);
    if !cfg.tie_word_embeddings {
        b.push(
            "lm_head.weight".into(),
            bf,
            vec![cfg.vocab_size, d],
            None,
            Role::LmHead,
        );
    }
    b.out
}
