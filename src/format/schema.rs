//! The checkpoint tensor table implied by a [`ModelConfig`]: every tensor's published
//! name, dtype and shape.
//!
//! One table serves three users: `memdial fixture` writes exactly these tensors,
//! `memdial inspect` validates a checkpoint against them, and the model loader
//! checks them before the first forward pass. Names follow the published
//! Kimi-Linear-48B / Kimi K3 checkpoints (docs/model.md §2–§5, quirks in §7).

use crate::format::config::rvq::{RVQ_CODEBOOK, RVQ_GROUP};
use crate::format::config::{AttnKind, ExpertFormat, MlpKind, ModelConfig};

pub mod gpt_oss;

/// Element type of a stored tensor (safetensors dtype names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dtype {
    BF16,
    F32,
    U8,
}

impl Dtype {
    /// The safetensors header spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Dtype::BF16 => "BF16",
            Dtype::F32 => "F32",
            Dtype::U8 => "U8",
        }
    }
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            Dtype::BF16 => 2,
            Dtype::F32 => 4,
            Dtype::U8 => 1,
        }
    }
    /// Parses a safetensors dtype string.
    pub fn parse(s: &str) -> Option<Dtype> {
        match s {
            "BF16" => Some(Dtype::BF16),
            "F32" => Some(Dtype::F32),
            "U8" => Some(Dtype::U8),
            _ => None,
        }
    }
}

/// What a tensor is for; drives residency decisions in the store and byte accounting in `inspect`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// `embed_tokens`.
    Embedding,
    /// `lm_head`.
    LmHead,
    /// Final norm and AttnRes output mixing weights.
    Global,
    /// A layer's attention, norms, router, shared experts, dense MLP, latent projections.
    Trunk,
    /// A routed expert's matrices (or MXFP4 packed/scale pair); gpt-oss: a tensor
    /// stacked over a layer's experts (`expert: None`, expert `e` is its slice `[e]`).
    Expert,
}

/// One expected tensor.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorSpec {
    /// Full name including the model's weight prefix (`language_model.` for K3).
    pub name: String,
    /// Other accepted spellings (e.g. a dense layer 0 saved under `block_sparse_moe.`).
    pub aliases: Vec<String>,
    /// Dtype the fixture writer uses.
    pub dtype: Dtype,
    /// Dtypes a loader accepts (published checkpoints differ, e.g. conv weights BF16 vs F32).
    pub accepted: Vec<Dtype>,
    /// Shape as published.
    pub shape: Vec<usize>,
    /// When true, any shape with at least `min_numel` elements is accepted
    /// (`A_log`: K3 stores `[head_dim]`, Kimi-Linear `[1,1,H,1]`; readers use the first H).
    pub flexible_shape: Option<usize>,
    /// Decoder layer, if any.
    pub layer: Option<usize>,
    /// Routed expert id, if any (`None` for a tensor stacked over the experts).
    pub expert: Option<usize>,
    pub role: Role,
}

impl TensorSpec {
    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }
    /// Bytes on disk.
    pub fn nbytes(&self) -> usize {
        self.numel() * self.dtype.size()
    }
}

struct Builder<'a> {
    prefix: &'a str,
    out: Vec<TensorSpec>,
}

impl Builder<'_> {
    fn push(
        &mut self,
        name: String,
        dtype: Dtype,
        shape: Vec<usize>,
        layer: Option<usize>,
        role: Role,
    ) -> &mut TensorSpec {
        let accepted = match dtype {
            Dtype::BF16 | Dtype::F32 => vec![Dtype::BF16, Dtype::F32],
            Dtype::U8 => vec![Dtype::U8],
        };
        self.out.push(TensorSpec {
            name: format!("{}{}", self.prefix, name),
            aliases: vec![],
            dtype,
            accepted,
            shape,
            flexible_shape: None,
            layer,
            expert: None,
            role,
        });
        self.out.last_mut().unwrap()
    }
}

/// Name of decoder layer `i`'s tensor `rest` without the weight prefix, e.g.
/// `layer_name(3, "self_attn.q_proj.weight")` = `model.layers.3.self_attn.q_proj.weight`.
pub fn layer_name(i: usize, rest: &str) -> String {
    format!("model.layers.{i}.{rest}")
}

/// Routed-expert matrix names (Kimi: `w1` = gate, `w3` = up, `w2` = down).
pub const EXPERT_MATS: [&str; 3] = ["w1", "w2", "w3"];

/// The full tensor table of a model, in a stable order (globals, then layer by
/// layer: attention, norms, MLP/MoE trunk, then routed experts by id).
pub fn expected_tensors(cfg: &ModelConfig) -> Vec<TensorSpec> {
    if cfg.gpt_oss.is_some() {
        return gpt_oss::expected_tensors(cfg);
    }
    let d = cfg.hidden_size;
    let mut b = Builder {
        prefix: &cfg.weight_prefix,
        out: Vec::new(),
    };
    b.push(
        "model.embed_tokens.weight".into(),
        Dtype::BF16,
        vec![cfg.vocab_size, d],
        None,
        Role::Embedding,
    );
    let f32_ = Dtype::F32;
    let bf = Dtype::BF16;
    for i in 0..cfg.num_hidden_layers {
        let l = Some(i);
        let n = |rest: &str| layer_name(i, rest);
        match cfg.attn_kinds[i] {
            AttnKind::Kda => {
                let h = cfg.kda.num_heads;
                let k = cfg.kda.head_dim;
                let p = h * k;
                let w = cfg.kda.short_conv_kernel_size;
                for x in ["q", "k", "v"] {
                    b.push(
                        n(&format!("self_attn.{x}_proj.weight")),
                        bf,
                        vec![p, d],
                        l,
                        Role::Trunk,
                    );
                }
                for x in ["q", "k", "v"] {
                    b.push(
                        n(&format!("self_attn.{x}_conv1d.weight")),
                        f32_,
                        vec![p, 1, w],
                        l,
                        Role::Trunk,
                    );
                }
                b.push(
                    n("self_attn.f_a_proj.weight"),
                    bf,
                    vec![k, d],
                    l,
                    Role::Trunk,
                );
                b.push(
                    n("self_attn.f_b_proj.weight"),
                    bf,
                    vec![p, k],
                    l,
                    Role::Trunk,
                );
                b.push(n("self_attn.dt_bias"), f32_, vec![p], l, Role::Trunk)
                    .flexible_shape = Some(p);
                // Published K3 stores A_log with head_dim entries (first H used); Kimi-Linear [1,1,H,1].
                let a_shape = if cfg.model_type == "kimi_k3" {
                    vec![k.max(h)]
                } else {
                    vec![1, 1, h, 1]
                };
                b.push(n("self_attn.A_log"), f32_, a_shape, l, Role::Trunk)
                    .flexible_shape = Some(h);
                b.push(n("self_attn.b_proj.weight"), bf, vec![h, d], l, Role::Trunk);
                if cfg.kda.use_full_rank_gate {
                    b.push(n("self_attn.g_proj.weight"), bf, vec![p, d], l, Role::Trunk);
                } else {
                    b.push(
                        n("self_attn.g_a_proj.weight"),
                        bf,
                        vec![k, d],
                        l,
                        Role::Trunk,
                    );
                    b.push(
                        n("self_attn.g_b_proj.weight"),
                        bf,
                        vec![p, k],
                        l,
                        Role::Trunk,
                    );
                }
                b.push(n("self_attn.o_norm.weight"), bf, vec![k], l, Role::Trunk);
                b.push(n("self_attn.o_proj.weight"), bf, vec![d, p], l, Role::Trunk);
            }
            AttnKind::Gqa => unreachable!("gpt-oss layers are listed by gpt_oss::expected_tensors"),
            AttnKind::Mla => {
                let m = &cfg.mla;
                let qd = m.num_heads * m.q_head_dim();
                match m.q_lora_rank {
                    Some(r) => {
                        b.push(
                            n("self_attn.q_a_proj.weight"),
                            bf,
                            vec![r, d],
                            l,
                            Role::Trunk,
                        );
                        b.push(
                            n("self_attn.q_a_layernorm.weight"),
                            bf,
                            vec![r],
                            l,
                            Role::Trunk,
                        );
                        b.push(
                            n("self_attn.q_b_proj.weight"),
                            bf,
                            vec![qd, r],
                            l,
                            Role::Trunk,
                        );
                    }
                    None => {
                        b.push(
                            n("self_attn.q_proj.weight"),
                            bf,
                            vec![qd, d],
                            l,
                            Role::Trunk,
                        );
                    }
                }
                b.push(
                    n("self_attn.kv_a_proj_with_mqa.weight"),
                    bf,
                    vec![m.latent_dim(), d],
                    l,
                    Role::Trunk,
                );
                b.push(
                    n("self_attn.kv_a_layernorm.weight"),
                    bf,
                    vec![m.kv_lora_rank],
                    l,
                    Role::Trunk,
                );
                b.push(
                    n("self_attn.kv_b_proj.weight"),
                    bf,
                    vec![
                        m.num_heads * (m.qk_nope_head_dim + m.v_head_dim),
                        m.kv_lora_rank,
                    ],
                    l,
                    Role::Trunk,
                );
                b.push(
                    n("self_attn.o_proj.weight"),
                    bf,
                    vec![d, m.num_heads * m.v_head_dim],
                    l,
                    Role::Trunk,
                );
                if m.use_output_gate {
                    b.push(
                        n("self_attn.g_proj.weight"),
                        bf,
                        vec![m.num_heads * m.v_head_dim, d],
                        l,
                        Role::Trunk,
                    );
                }
            }
        }
        b.push(n("input_layernorm.weight"), bf, vec![d], l, Role::Trunk);
        b.push(
            n("post_attention_layernorm.weight"),
            bf,
            vec![d],
            l,
            Role::Trunk,
        );
        if cfg.attn_res_block_size.is_some() {
            b.push(
                n("self_attention_res_proj.weight"),
                bf,
                vec![1, d],
                l,
                Role::Trunk,
            );
            b.push(
                n("self_attention_res_norm.weight"),
                bf,
                vec![d],
                l,
                Role::Trunk,
            );
            b.push(n("mlp_res_proj.weight"), bf, vec![1, d], l, Role::Trunk);
            b.push(n("mlp_res_norm.weight"), bf, vec![d], l, Role::Trunk);
        }
        match cfg.mlp_kinds[i] {
            MlpKind::Dense => {
                let f = cfg.intermediate_size;
                for (x, shape) in [
                    ("gate_proj", vec![f, d]),
                    ("up_proj", vec![f, d]),
                    ("down_proj", vec![d, f]),
                ] {
                    let alias = format!(
                        "{}{}",
                        cfg.weight_prefix,
                        n(&format!("block_sparse_moe.{x}.weight"))
                    );
                    b.push(n(&format!("mlp.{x}.weight")), bf, shape, l, Role::Trunk)
                        .aliases
                        .push(alias);
                }
            }
            MlpKind::Moe => {
                let moe = cfg
                    .moe
                    .as_ref()
                    .expect("validated: MoE layers need num_experts");
                let e = moe.num_experts;
                b.push(
                    n("block_sparse_moe.gate.weight"),
                    f32_,
                    vec![e, d],
                    l,
                    Role::Trunk,
                );
                b.push(
                    n("block_sparse_moe.gate.e_score_correction_bias"),
                    f32_,
                    vec![e],
                    l,
                    Role::Trunk,
                );
                if moe.num_shared_experts > 0 {
                    let f = moe.moe_intermediate_size * moe.num_shared_experts;
                    for (x, shape) in [
                        ("gate_proj", vec![f, d]),
                        ("up_proj", vec![f, d]),
                        ("down_proj", vec![d, f]),
                    ] {
                        b.push(
                            n(&format!("block_sparse_moe.shared_experts.{x}.weight")),
                            bf,
                            shape,
                            l,
                            Role::Trunk,
                        );
                    }
                }
                let ed = moe.expert_dim(d);
                if let Some(lat) = moe.routed_expert_hidden_size {
                    b.push(
                        n("block_sparse_moe.routed_expert_down_proj.weight"),
                        bf,
                        vec![lat, d],
                        l,
                        Role::Trunk,
                    );
                    b.push(
                        n("block_sparse_moe.routed_expert_up_proj.weight"),
                        bf,
                        vec![d, lat],
                        l,
                        Role::Trunk,
                    );
                    if moe.latent_moe_use_norm {
                        b.push(
                            n("block_sparse_moe.routed_expert_norm.weight"),
                            bf,
                            vec![lat],
                            l,
                            Role::Trunk,
                        );
                    }
                }
                let fi = moe.moe_intermediate_size;
                if let ExpertFormat::Rvq(r) = moe.expert_format {
                    for mat in ["w1", "w2", "w3"] {
                        b.push(
                            n(&format!("block_sparse_moe.rvq_codebooks.{mat}")),
                            Dtype::F32,
                            vec![r.stages, RVQ_CODEBOOK, RVQ_GROUP],
                            l,
                            Role::Trunk,
                        );
                    }
                }
                for ex in 0..e {
                    for (mat, out, inp) in [("w1", fi, ed), ("w2", ed, fi), ("w3", fi, ed)] {
                        let base = n(&format!("block_sparse_moe.experts.{ex}.{mat}"));
                        match moe.expert_format {
                            ExpertFormat::Bf16 => {
                                b.push(
                                    format!("{base}.weight"),
                                    bf,
                                    vec![out, inp],
                                    l,
                                    Role::Expert,
                                )
                                .expert = Some(ex);
                            }
                            ExpertFormat::Mxfp4 => {
                                b.push(
                                    format!("{base}.weight_packed"),
                                    Dtype::U8,
                                    vec![out, inp / 2],
                                    l,
                                    Role::Expert,
                                )
                                .expert = Some(ex);
                                b.push(
                                    format!("{base}.weight_scale"),
                                    Dtype::U8,
                                    vec![out, inp / 32],
                                    l,
                                    Role::Expert,
                                )
                                .expert = Some(ex);
                            }
                            ExpertFormat::Rvq(r) => {
                                b.push(
                                    format!("{base}.rvq_codes"),
                                    Dtype::U8,
                                    vec![out, inp / RVQ_GROUP, r.stages],
                                    l,
                                    Role::Expert,
                                )
                                .expert = Some(ex);
                            }
                        }
                    }
                }
            }
        }
    }
    b.push("model.norm.weight".into(), bf, vec![d], None, Role::Global);
    if cfg.attn_res_block_size.is_some() {
        b.push(
            "model.output_attn_res_proj.weight".into(),
            bf,
            vec![1, d],
            None,
            Role::Global,
        );
        b.push(
            "model.output_attn_res_norm.weight".into(),
            bf,
            vec![d],
            None,
            Role::Global,
        );
    }
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

/// The multi-token-prediction layer a checkpoint tensor belongs to, if any: `name` (with the
/// model's weight prefix) is `model.layers.{L}.…` with
/// `num_hidden_layers ≤ L < num_hidden_layers + num_nextn_predict_layers`.
/// Such tensors (`enorm`, `hnorm`, `eh_proj`, `shared_head.*` and a whole decoder layer in
/// DeepSeek-V3-style checkpoints) are present but unused: never loaded, not model bytes.
pub fn mtp_layer_of(cfg: &ModelConfig, name: &str) -> Option<usize> {
    let rest = name
        .strip_prefix(cfg.weight_prefix.as_str())?
        .strip_prefix("model.layers.")?;
    let (idx, _) = rest.split_once('.')?;
    let l: usize = idx.parse().ok()?;
    let n = cfg.num_hidden_layers;
    (l >= n && l < n + cfg.num_nextn_predict_layers).then_some(l)
}
