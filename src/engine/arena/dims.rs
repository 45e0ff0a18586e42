//! The widths the arena is sized from ([`Dims`]), read once from the config, the
//! prefill chunk, the kernel threads and the context.

use crate::format::config::{AttnKind, MlpKind, ModelConfig};
use crate::kernels::workspace::{attend_floats, product_floats};

/// The widths the arena is sized from (all element counts; names as the config keys
/// they come from).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Dims {
    /// Tokens per forward call (the prefill chunk, ≥ 1).
    pub chunk: usize,
    /// `hidden_size`.
    pub hidden: usize,
    /// `vocab_size`.
    pub vocab: usize,
    /// Completed AttnRes blocks per token (`⌈layers / block_size⌉`; 0 without AttnRes).
    pub blocks: usize,
    /// Whether any layer is KDA.
    pub kda: bool,
    /// Whether any layer is MLA.
    pub mla: bool,
    /// Whether any layer is MoE (with MoE settings).
    pub moe: bool,
    /// KDA `num_heads` `H`.
    pub kda_heads: usize,
    /// KDA `head_dim` `K`.
    pub kda_head_dim: usize,
    /// KDA projection width `P = H·K`.
    pub kda_proj: usize,
    /// KDA `short_conv_kernel_size` `W`.
    pub kda_conv_width: usize,
    /// MLA `num_heads` `h`.
    pub mla_heads: usize,
    /// MLA `qk_nope_head_dim` `dn`.
    pub qk_nope_head_dim: usize,
    /// MLA `qk_rope_head_dim` `dr`.
    pub qk_rope_head_dim: usize,
    /// MLA `v_head_dim` `dv`.
    pub v_head_dim: usize,
    /// MLA `kv_lora_rank` `r`.
    pub kv_lora_rank: usize,
    /// MLA `q_lora_rank` (0 without the low-rank query).
    pub q_lora_rank: usize,
    /// `mla_use_output_gate`.
    pub mla_output_gate: bool,
    /// Routed experts `E` (`num_experts`; gpt-oss `num_local_experts`).
    pub num_experts: usize,
    /// Experts per token, top-`k` (`num_experts_per_token`; gpt-oss `num_experts_per_tok`).
    pub experts_per_token: usize,
    /// `num_expert_group` (1 when ungrouped).
    pub expert_groups: usize,
    /// Width a routed expert works on (`routed_expert_hidden_size` with latent MoE, else `hidden_size`).
    pub expert_dim: usize,
    /// Width of `routed_expert_norm` (0 without `latent_moe_use_norm`).
    pub latent_norm_dim: usize,
    /// Widest gated-MLP intermediate: dense `intermediate_size`, routed
    /// `moe_intermediate_size`, shared `moe_intermediate_size · num_shared_experts`.
    pub intermediate: usize,
    /// Widest input of a matrix product of the forward: the max of `D`, `q_lora_rank`,
    /// `kv_lora_rank`, `P`, `K`, the intermediate, the expert width and `h·dv`
    /// (present layer kinds only).
    pub max_cols: usize,
    /// Kernel threads (the kernel workspace holds one region per thread).
    pub threads: usize,
    /// Positions the MLA attention scores (and gpt-oss's) are sized for.
    pub max_context: usize,
    /// Whether the config is gpt-oss.
    pub gqa: bool,
    /// gpt-oss `num_attention_heads` `H`.
    pub gqa_heads: usize,
    /// gpt-oss query width `H·head_dim`.
    pub gqa_q_dim: usize,
    /// gpt-oss key / value width `KV·head_dim`.
    pub gqa_kv_dim: usize,
    /// gpt-oss expert `intermediate_size` `I` (its experts and top-k are
    /// `num_experts`, `experts_per_token`).
    pub gqa_intermediate: usize,
    /// Rows of logits one forward returns at most (1 for a single sequence; a
    /// batch forward returns one row per sequence that asks for logits).
    pub logit_rows: usize,
}

impl Dims {
    /// The widths of `cfg` for forwards of up to `chunk` tokens with one kernel
    /// thread and `chunk` positions of context (the layer buffers alone; a run's
    /// arena uses [`Dims::for_run`]).
    pub fn new(cfg: &ModelConfig, chunk: usize) -> Dims {
        Dims::for_run(cfg, chunk, 1, chunk)
    }

    /// The widths of `cfg` for forwards of up to `chunk` tokens (a `chunk` of 0
    /// counts as 1) on `threads` kernel threads (0 counts as 1), with up to
    /// `max_context` positions in the MLA caches.
    pub fn for_run(cfg: &ModelConfig, chunk: usize, threads: usize, max_context: usize) -> Dims {
        Dims::for_batch(cfg, chunk, threads, max_context, 1)
    }

    /// [`Dims::for_run`] for the shared arena of a batch: forwards of up to `chunk`
    /// tokens in all returning up to `logit_rows` rows of logits (0 counts as 1);
    /// `max_context` is the context of one sequence.
    pub fn for_batch(
        cfg: &ModelConfig,
        chunk: usize,
        threads: usize,
        max_context: usize,
        logit_rows: usize,
    ) -> Dims {
        let m = &cfg.mla;
        let kda = cfg.attn_kinds.contains(&AttnKind::Kda);
        let mla = cfg.attn_kinds.contains(&AttnKind::Mla);
        let dense = cfg.mlp_kinds.contains(&MlpKind::Dense);
        let moe = cfg
            .moe
            .as_ref()
            .filter(|_| cfg.mlp_kinds.contains(&MlpKind::Moe));
        let mut f = if dense { cfg.intermediate_size } else { 0 };
        if let Some(x) = moe {
            f = f
                .max(x.moe_intermediate_size)
                .max(x.moe_intermediate_size * x.num_shared_experts);
        }
        let mut cols = cfg.hidden_size;
        if kda {
            cols = cols.max(cfg.kda_proj_dim()).max(cfg.kda.head_dim);
        }
        if mla {
            cols = cols
                .max(m.q_lora_rank.unwrap_or(0))
                .max(m.kv_lora_rank)
                .max(m.num_heads * m.v_head_dim);
        }
        cols = cols.max(f);
        if let Some(x) = moe {
            cols = cols.max(x.expert_dim(cfg.hidden_size));
        }
        let g = cfg.gpt_oss.as_ref();
        if let Some(g) = g {
            cols = cols.max(g.q_dim()).max(g.intermediate_size);
        }
        Dims {
            chunk: chunk.max(1),
            hidden: cfg.hidden_size,
            vocab: cfg.vocab_size,
            blocks: cfg
                .attn_res_block_size
                .map(|b| cfg.num_hidden_layers.div_ceil(b.max(1)))
                .unwrap_or(0),
            kda,
            mla,
            moe: moe.is_some(),
            kda_heads: cfg.kda.num_heads,
            kda_head_dim: cfg.kda.head_dim,
            kda_proj: cfg.kda_proj_dim(),
            kda_conv_width: cfg.kda.short_conv_kernel_size,
            mla_heads: m.num_heads,
            qk_nope_head_dim: m.qk_nope_head_dim,
            qk_rope_head_dim: m.qk_rope_head_dim,
            v_head_dim: m.v_head_dim,
            kv_lora_rank: m.kv_lora_rank,
            q_lora_rank: m.q_lora_rank.unwrap_or(0),
            mla_output_gate: m.use_output_gate,
            num_experts: moe
                .map(|x| x.num_experts)
                .or(g.map(|g| g.num_local_experts))
                .unwrap_or(0),
            experts_per_token: moe
                .map(|x| x.num_experts_per_token)
                .or(g.map(|g| g.num_experts_per_tok))
                .unwrap_or(0),
            expert_groups: moe.map(|x| x.num_expert_group.max(1)).unwrap_or(1),
            expert_dim: moe.map(|x| x.expert_dim(cfg.hidden_size)).unwrap_or(0),
            latent_norm_dim: moe
                .filter(|x| x.latent_moe_use_norm)
                .and_then(|x| x.routed_expert_hidden_size)
                .unwrap_or(0),
            intermediate: f,
            max_cols: cols,
            threads: threads.max(1),
            max_context,
            logit_rows: logit_rows.max(1),
            gqa: g.is_some(),
            gqa_heads: g.map_or(0, |g| g.num_attention_heads),
            gqa_q_dim: g.map_or(0, |g| g.q_dim()),
            gqa_kv_dim: g.map_or(0, |g| g.kv_dim()),
            gqa_intermediate: g.map_or(0, |g| g.intermediate_size),
        }
    }

    /// `(shared, per-thread)` f32 of the kernel workspace: the products' needs at
    /// the widest input and the chunk ([`product_floats`]), the shared region also
    /// covering MLA attention over `ctx` positions ([`attend_floats`]).
    pub fn kernel_floats(&self) -> (usize, usize) {
        let (mut shared, per) = product_floats(self.max_cols, self.chunk);
        if self.mla {
            shared = shared.max(attend_floats(
                self.max_context,
                self.kv_lora_rank,
                self.qk_rope_head_dim,
                self.mla_heads,
            ));
        }
        (shared, per)
    }
}
