//! The forward pass's scratch arena: every activation buffer of
//! [`crate::model::Model::forward`], sized once from the config and the prefill
//! chunk, held in the per-sequence [`crate::model::State`].
//!
//! One table ([`Scratch`], written once through the `buffers!` macro below) gives
//! both the allocation (`Vec::with_capacity(count)` per buffer) and the plan's
//! activation figure ([`Scratch::planned_bytes`]), so the memory plan counts
//! exactly what the model allocates. The forward fills the buffers with
//! `clear()` + `resize()` / `extend()`, which never reallocates while a call stays
//! within the sizes here; a call over more tokens than the arena's chunk (or
//! `LogitsMode::All` with several tokens, which keeps `n × vocab` logits) grows
//! the affected buffers, and [`Scratch::bytes`] then reports more than planned.
//!
//! Design as llama2.c `RunState` (every scratch buffer allocated once next to the
//! KV cache). The kernels' workspace ([`crate::kernels::Workspace`]: the batched
//! products' input panels and per-thread decoded weight rows, MXFP4's permuted
//! input, MLA attention's `[positions, heads]` scores) is held here too, sized by
//! the kernels' own formulas ([`crate::kernels::workspace::product_floats`] for the
//! widest product input and the chunk, one region per kernel thread;
//! [`crate::kernels::workspace::attend_floats`] for `max_context` positions). Not
//! held here: tensor-name strings.
//!
//! Dimensions (f32 unless noted): `c` chunk tokens, `D` hidden, `V` vocab, KDA
//! `P = H·K` with conv width `W`, MLA heads `h` with `dn, dr, dv, r`, MoE `E`
//! experts, top-`k`, expert width `ed`, routed / shared / dense intermediate.
//! Layer kinds a config lacks get no buffers.

mod dims;

pub use dims::Dims;

use crate::format::config::ModelConfig;
use crate::kernels::Workspace;
use crate::store::plan::{Activations, Sequences};

/// Prefill tokens per forward call the plan reserves activations for, at most:
/// the plan uses `min(max_context, PLANNED_PREFILL_CHUNK)` ([`planned_prefill_chunk`])
/// and `memdial run --budget` caps `--prefill-chunk` there (the CLI default).
pub const PLANNED_PREFILL_CHUNK: usize = 256;

/// Prefill chunk the plan accounts for with `max_context` positions (≥ 1).
pub fn planned_prefill_chunk(max_context: usize) -> usize {
    max_context.clamp(1, PLANNED_PREFILL_CHUNK)
}

/// Tokens per forward the arena of a batch of up to `max_batch` sequences with
/// `max_context` positions each holds: the planned prefill chunk, or one decode
/// token per sequence when that is more (`max(planned_prefill_chunk, max_batch)`;
/// `max_batch` 1 gives the single-sequence chunk).
pub fn planned_step_tokens(max_context: usize, max_batch: usize) -> usize {
    planned_prefill_chunk(max_context).max(max_batch)
}

/// Declares a group of buffers once: the struct, its allocation from [`Dims`],
/// its planned bytes (same expressions) and its allocated bytes (capacities).
macro_rules! buffers {
    ($(#[$sm:meta])* $name:ident ($d:ident) { $( $(#[$m:meta])* $f:ident : $t:ty = $n:expr , )* }) => {
        $(#[$sm])*
        #[derive(Debug, Default)]
        pub struct $name { $( $(#[$m])* pub $f: Vec<$t>, )* }
        impl $name {
            /// Every buffer allocated with its planned capacity.
            pub fn new($d: &Dims) -> Self {
                Self { $( $f: Vec::with_capacity($n), )* }
            }
            /// `(buffer name, planned bytes)` per buffer.
            pub fn planned($d: &Dims) -> Vec<(&'static str, u64)> {
                vec![ $( (stringify!($f), ($n) as u64 * std::mem::size_of::<$t>() as u64), )* ]
            }
            /// Bytes allocated now (capacities × element size).
            pub fn bytes(&self) -> u64 {
                0 $( + self.$f.capacity() as u64 * std::mem::size_of::<$t>() as u64 )*
            }
        }
    };
}

buffers! {
    /// Buffers of every layer: the residual stream, sub-layer inputs and outputs,
    /// decoded norm weights, AttnRes blocks, and the logits row.
    Main(d) {
        /// Residual stream (or AttnRes partial sum) `[c, D]`.
        hidden: f32 = d.chunk * d.hidden,
        /// Attention input after `input_layernorm` `[c, D]`; final-norm rows for `lm_head`.
        xin: f32 = d.chunk * d.hidden,
        /// MLP input after `post_attention_layernorm` `[c, D]`.
        xin2: f32 = d.chunk * d.hidden,
        /// Attention output `[c, D]`.
        attn_out: f32 = d.chunk * d.hidden,
        /// MLP output `[c, D]`.
        mlp_out: f32 = d.chunk * d.hidden,
        /// `input_layernorm` weight `[D]`.
        ln_in: f32 = d.hidden,
        /// `post_attention_layernorm` / final norm weight `[D]`.
        ln_post: f32 = d.hidden,
        /// AttnRes `w_eff` of the current sub-layer `[D]`.
        res_w: f32 = d.hidden,
        /// AttnRes projection weight while forming `w_eff` `[D]`.
        res_tmp: f32 = d.hidden,
        /// Completed AttnRes blocks per token `[c, blocks, D]`.
        blocks: f32 = d.chunk * d.blocks * d.hidden,
        /// Their `rsqrt(mean(b²)+eps)` `[c, blocks]`.
        blocks_inv: f32 = d.chunk * d.blocks,
        /// AttnRes mixing logits / weights `[blocks + 1]` (0 without AttnRes).
        mix: f32 = if d.blocks > 0 { d.blocks + 1 } else { 0 },
        /// Logits of the last position `[V]` (a batch: one row per sequence `[logit_rows, V]`).
        logits: f32 = d.logit_rows * d.vocab,
        /// A batch's `lm_head` block outputs `[logit_rows, V]` while `lm_head` is read
        /// in row blocks (0 for one row: a block's logits are a slice of the row).
        head_block: f32 = if d.logit_rows > 1 { d.logit_rows * d.vocab } else { 0 },
        /// A batch's tokens whose logits the call returns `[logit_rows]` (0 for one row).
        logit_ids: usize = if d.logit_rows > 1 { d.logit_rows } else { 0 },
        /// Token ids of the call as embedding rows `[c]`.
        ids: usize = d.chunk,
    }
}

buffers! {
    /// KDA layer buffers (none when the config has no KDA layer).
    Kda(d) {
        /// Conv weights `[3P, W]`.
        conv_w: f32 = 3 * d.kda_proj * d.kda_conv_width,
        /// `dt_bias` `[P]`.
        dt_bias: f32 = d.kda_proj,
        /// `A_log` `[H]`.
        a_log: f32 = d.kda_heads,
        /// `o_norm` weight `[K]`.
        o_norm: f32 = d.kda_head_dim,
        /// `q_proj` / `k_proj` / `v_proj` outputs `[c, P]` each.
        q: f32 = d.chunk * d.kda_proj,
        /// See `q`.
        k: f32 = d.chunk * d.kda_proj,
        /// See `q`.
        v: f32 = d.chunk * d.kda_proj,
        /// `f_a_proj` output (then `g_a_proj` output) `[c, K]`.
        fa: f32 = d.chunk * d.kda_head_dim,
        /// `f_b_proj` output `[c, P]`.
        a: f32 = d.chunk * d.kda_proj,
        /// β logits `[c, H]`.
        b: f32 = d.chunk * d.kda_heads,
        /// Output gate logits `[c, P]`.
        g: f32 = d.chunk * d.kda_proj,
        /// Gated, normalised head outputs `[c, P]`.
        y: f32 = d.chunk * d.kda_proj,
        /// Conv input and output of one token `[3P]` each.
        u: f32 = 3 * d.kda_proj,
        /// See `u`.
        uc: f32 = 3 * d.kda_proj,
        /// One head's q, k and decay `[K]` each.
        qh: f32 = d.kda_head_dim,
        /// See `qh`.
        kh: f32 = d.kda_head_dim,
        /// See `qh`.
        alpha: f32 = d.kda_head_dim,
    }
}

buffers! {
    /// MLA layer buffers (none when the config has no MLA layer).
    Mla(d) {
        /// `q_a_layernorm` weight `[q_lora]`.
        q_norm: f32 = d.q_lora_rank,
        /// `kv_a_layernorm` weight `[r]`.
        kv_norm: f32 = d.kv_lora_rank,
        /// Queries `[c, h·(dn+dr)]`.
        q: f32 = d.chunk * d.mla_heads * (d.qk_nope_head_dim + d.qk_rope_head_dim),
        /// `q_a_proj` output `[c, q_lora]`.
        qa: f32 = d.chunk * d.q_lora_rank,
        /// `kv_a_proj_with_mqa` output `[c, r+dr]`.
        kv: f32 = d.chunk * (d.kv_lora_rank + d.qk_rope_head_dim),
        /// Output gate logits `[c, h·dv]` (with `mla_use_output_gate`).
        gate: f32 = if d.mla_output_gate { d.chunk * d.mla_heads * d.v_head_dim } else { 0 },
        /// Head outputs `[c, h·dv]`.
        out: f32 = d.chunk * d.mla_heads * d.v_head_dim,
        /// Absorbed queries `[h, r]`, rope queries `[h, dr]`, contexts `[h, r]`.
        q_abs: f32 = d.mla_heads * d.kv_lora_rank,
        /// See `q_abs`.
        q_pe: f32 = d.mla_heads * d.qk_rope_head_dim,
        /// See `q_abs`.
        ctx: f32 = d.mla_heads * d.kv_lora_rank,
        /// One normalised latent `[r]`.
        lat: f32 = d.kv_lora_rank,
    }
}

buffers! {
    /// Gated-MLP buffers shared by dense MLPs, shared experts and routed experts.
    Mlp(d) {
        /// Gate and up projections `[c, F]` each (`F` the widest intermediate).
        g: f32 = d.chunk * d.intermediate,
        /// See `g`.
        u: f32 = d.chunk * d.intermediate,
    }
}

buffers! {
    /// MoE layer buffers (none when the config has no MoE layer).
    Moe(d) {
        /// `e_score_correction_bias` `[E]`.
        bias: f32 = d.num_experts,
        /// `routed_expert_norm` weight `[latent]`.
        latent_norm: f32 = d.latent_norm_dim,
        /// Router logits `[c, E]`.
        logits: f32 = d.chunk * d.num_experts,
        /// Expert inputs (latent down projection or a copy of the MLP input) `[c, ed]`.
        z: f32 = d.chunk * d.expert_dim,
        /// One expert's gathered inputs `[c, ed]`.
        zg: f32 = d.chunk * d.expert_dim,
        /// One expert's outputs `[c, ed]`.
        eo: f32 = d.chunk * d.expert_dim,
        /// Rank-ordered sums of the routed outputs `[c, ed]`.
        ys: f32 = d.chunk * d.expert_dim,
        /// Routed outputs per `(token, rank)` slot `[c, k, ed]` (grouped prefill).
        slots: f32 = if d.chunk > 1 { d.chunk * d.experts_per_token * d.expert_dim } else { 0 },
        /// Shared experts' output `[c, D]`.
        shared: f32 = d.chunk * d.hidden,
    }
}

buffers! {
    /// Router buffers (MoE configs only): the routing of the call and the router's scratch.
    Router(d) {
        /// Routing `(expert, weight)` per token in rank order `[c, k]`.
        routes: (usize, f32) = d.chunk * d.experts_per_token,
        /// Router scratch: scores `s` and selection scores `s'` `[E]` each.
        s: f32 = d.num_experts,
        /// See `s`.
        sel: f32 = d.num_experts,
        /// Ranking `(score, expert)` `[E]`.
        order: (f32, usize) = d.num_experts,
        /// Group ranking `(score, group)` `[groups]` and one group's scores `[E/groups]`.
        granks: (f32, usize) = d.expert_groups,
        /// See `granks`.
        gvals: f32 = d.num_experts / d.expert_groups.max(1),
        /// Selected expert ids of one token `[k]`.
        ids: usize = d.experts_per_token,
        /// Expert-grouped prefill (chunks of more than one token): the chunk's
        /// expert ids per token `[c, k]`.
        tok_ids: usize = if d.chunk > 1 { d.chunk * d.experts_per_token } else { 0 },
        /// Distinct experts of the chunk in first-use order `[min(c·k, E)]`.
        chunk_order: usize = if d.chunk > 1 { (d.chunk * d.experts_per_token).min(d.num_experts) } else { 0 },
        /// `(token, rank)` slots grouped by expert, groups in `chunk_order` `[c, k]`.
        users: (usize, usize) = if d.chunk > 1 { d.chunk * d.experts_per_token } else { 0 },
        /// Group boundaries into `users` `[min(c·k, E) + 1]`.
        starts: usize = if d.chunk > 1 { (d.chunk * d.experts_per_token).min(d.num_experts) + 1 } else { 0 },
        /// Group of each expert while indexing (`usize::MAX`: none yet) `[E]`.
        group_of: usize = if d.chunk > 1 { d.num_experts } else { 0 },
    }
}

buffers! {
    /// gpt-oss layer buffers (none for the Kimi models; `crate::model::gpt_oss`).
    Gqa(d) {
        /// Queries, keys, values `[c, H·hd]`, `[c, KV·hd]`, `[c, KV·hd]`.
        q: f32 = d.chunk * d.gqa_q_dim,
        /// See `q`.
        k: f32 = d.chunk * d.gqa_kv_dim,
        /// See `q`.
        v: f32 = d.chunk * d.gqa_kv_dim,
        /// Attention head outputs `[c, H·hd]`.
        att: f32 = d.chunk * d.gqa_q_dim,
        /// A projection's bias `[max(H·hd, D)]`; the sinks `[H]`.
        bias: f32 = d.gqa_q_dim.max(d.hidden),
        /// See `bias`.
        sinks: f32 = d.gqa_heads,
        /// One head's scores over the visible positions `[ctx]`.
        scores: f32 = d.max_context,
        /// Router logits `[c, E]`, router bias `[E]`, expert ids by logit `[E]`.
        logits: f32 = d.chunk * d.num_experts,
        /// See `logits`.
        router_bias: f32 = d.num_experts,
        /// See `logits`.
        order: usize = d.num_experts,
        /// One token's `(expert, weight)` in rank order `[k]`.
        routes: (usize, f32) = d.experts_per_token,
        /// One expert's biases `[2I]` and `[D]`.
        gate_up_bias: f32 = 2 * d.gqa_intermediate,
        /// See `gate_up_bias`.
        down_bias: f32 = d.hidden,
        /// One expert's `gate_up` `[2I]`, SwiGLU `[I]` and output `[D]`.
        gate_up: f32 = 2 * d.gqa_intermediate,
        /// See `gate_up`.
        h: f32 = d.gqa_intermediate,
        /// See `gate_up`.
        y: f32 = d.hidden,
        /// Expert outputs per `(token, rank)` slot `[c, k, D]` (grouped prefill).
        slots: f32 = if d.chunk > 1 { d.chunk * d.experts_per_token * d.hidden } else { 0 },
    }
}

/// Every scratch buffer of the forward pass (see the module docs).
#[derive(Debug, Default)]
pub struct Scratch {
    /// The widths the arena was sized from.
    pub dims: Dims,
    /// Buffers of every layer.
    pub main: Main,
    /// KDA buffers.
    pub kda: Kda,
    /// MLA buffers.
    pub mla: Mla,
    /// Gated-MLP buffers.
    pub mlp: Mlp,
    /// MoE buffers.
    pub moe: Moe,
    /// Router buffers.
    pub router: Router,
    /// gpt-oss buffers.
    pub gqa: Gqa,
    /// The kernels' workspace ([`Dims::kernel_floats`]; one region per thread).
    pub kern: Workspace,
}

impl Scratch {
    /// The arena for forwards of up to `chunk` tokens of `cfg` on `threads` kernel
    /// threads with up to `max_context` positions (`Vec::with_capacity` per buffer:
    /// virtual memory until first written).
    pub fn new(cfg: &ModelConfig, chunk: usize, threads: usize, max_context: usize) -> Scratch {
        Scratch::from_dims(Dims::for_run(cfg, chunk, threads, max_context))
    }

    /// The shared arena of a batch of up to `max_batch` sequences with `max_context`
    /// positions each on `threads` kernel threads: forwards of up to
    /// [`planned_step_tokens`] tokens in all, one row of logits per sequence.
    pub fn for_batch(
        cfg: &ModelConfig,
        max_batch: usize,
        threads: usize,
        max_context: usize,
    ) -> Scratch {
        Scratch::from_dims(Dims::for_batch(
            cfg,
            planned_step_tokens(max_context, max_batch),
            threads,
            max_context,
            max_batch,
        ))
    }

    /// The arena of a speculative run ([`crate::engine::speculate`]): [`Scratch::new`]
    /// whose logits hold the `k + 1` rows of a verification forward of `k` drafts
    /// (and the row-block buffer `lm_head` uses for several rows).
    pub fn for_speculation(
        cfg: &ModelConfig,
        chunk: usize,
        threads: usize,
        max_context: usize,
        k: usize,
    ) -> Scratch {
        Scratch::from_dims(Dims::for_batch(cfg, chunk, threads, max_context, k + 1))
    }

    /// Bytes [`Scratch::for_speculation`] allocates (the arena of a speculative run
    /// with drafts of up to `k` ids; [`Scratch::planned_bytes`] for `k` 0).
    pub fn planned_speculation_bytes(
        cfg: &ModelConfig,
        chunk: usize,
        threads: usize,
        max_context: usize,
        k: usize,
    ) -> u64 {
        Scratch::planned_buffers_of(&Dims::for_batch(cfg, chunk, threads, max_context, k + 1))
            .iter()
            .map(|b| b.1)
            .sum()
    }

    /// No buffers at all (a sequence whose forwards run on a batch's shared arena);
    /// the widths are those of a one-token forward, so a forward on it still works
    /// (every buffer then grows).
    pub fn unallocated(cfg: &ModelConfig, max_context: usize) -> Scratch {
        Scratch {
            dims: Dims::for_run(cfg, 1, 1, max_context),
            ..Scratch::default()
        }
    }

    fn from_dims(d: Dims) -> Scratch {
        let (shared, per) = d.kernel_floats();
        Scratch {
            kern: Workspace::with_capacity(shared, per, d.threads),
            dims: d,
            main: Main::new(&d),
            kda: if d.kda { Kda::new(&d) } else { Kda::default() },
            mla: if d.mla { Mla::new(&d) } else { Mla::default() },
            mlp: if d.intermediate > 0 {
                Mlp::new(&d)
            } else {
                Mlp::default()
            },
            moe: if d.moe { Moe::new(&d) } else { Moe::default() },
            router: if d.moe || d.gqa {
                Router::new(&d)
            } else {
                Router::default()
            },
            gqa: if d.gqa { Gqa::new(&d) } else { Gqa::default() },
        }
    }

    /// `(group.buffer, bytes)` of every buffer [`Scratch::new`] allocates for
    /// `cfg`, `chunk`, `threads` and `max_context` (absent layer kinds omitted).
    pub fn planned_buffers(
        cfg: &ModelConfig,
        chunk: usize,
        threads: usize,
        max_context: usize,
    ) -> Vec<(String, u64)> {
        Scratch::planned_buffers_of(&Dims::for_run(cfg, chunk, threads, max_context))
    }

    /// `(group.buffer, bytes)` of every buffer [`Scratch::for_batch`] allocates.
    pub fn planned_batch_buffers(
        cfg: &ModelConfig,
        max_batch: usize,
        threads: usize,
        max_context: usize,
    ) -> Vec<(String, u64)> {
        Scratch::planned_buffers_of(&Dims::for_batch(
            cfg,
            planned_step_tokens(max_context, max_batch),
            threads,
            max_context,
            max_batch,
        ))
    }

    /// Bytes [`Scratch::for_batch`] allocates: a batch plan's activation figure
    /// (equal to [`Scratch::planned_bytes`] at the planned prefill chunk for
    /// `max_batch` 1).
    pub fn planned_batch_bytes(
        cfg: &ModelConfig,
        max_batch: usize,
        threads: usize,
        max_context: usize,
    ) -> u64 {
        Scratch::planned_batch_buffers(cfg, max_batch, threads, max_context)
            .iter()
            .map(|b| b.1)
            .sum()
    }

    /// The arena a plan of `seqs` on `threads` kernel threads counts (what
    /// [`Scratch::for_batch`] allocates): the memory plan is given this
    /// ([`crate::store::plan::plan`]). A `max_batch` of 0 counts as 1, as do 0 threads.
    pub fn activations(cfg: &ModelConfig, seqs: Sequences, threads: usize) -> Activations {
        let seqs = Sequences {
            max_batch: seqs.max_batch.max(1),
            ..seqs
        };
        let threads = threads.max(1);
        Activations {
            seqs,
            threads,
            step_tokens: planned_step_tokens(seqs.max_context, seqs.max_batch),
            bytes: Scratch::planned_batch_bytes(cfg, seqs.max_batch, threads, seqs.max_context),
        }
    }

    fn planned_buffers_of(d: &Dims) -> Vec<(String, u64)> {
        let d = *d;
        let mut out = Vec::new();
        let mut add = |group: &str, on: bool, v: Vec<(&'static str, u64)>| {
            if on {
                out.extend(v.into_iter().map(|(n, b)| (format!("{group}.{n}"), b)));
            }
        };
        add("main", true, Main::planned(&d));
        add("kda", d.kda, Kda::planned(&d));
        add("mla", d.mla, Mla::planned(&d));
        add("mlp", d.intermediate > 0, Mlp::planned(&d));
        add("moe", d.moe, Moe::planned(&d));
        add("router", d.moe || d.gqa, Router::planned(&d));
        add("gqa", d.gqa, Gqa::planned(&d));
        let (shared, per) = d.kernel_floats();
        out.push(("kern.shared".into(), shared as u64 * 4));
        out.push(("kern.per_thread".into(), (per * d.threads) as u64 * 4));
        out
    }

    /// Bytes [`Scratch::new`] allocates for `cfg`, `chunk`, `threads` and
    /// `max_context`: the plan's activation figure.
    pub fn planned_bytes(
        cfg: &ModelConfig,
        chunk: usize,
        threads: usize,
        max_context: usize,
    ) -> u64 {
        Scratch::planned_buffers(cfg, chunk, threads, max_context)
            .iter()
            .map(|b| b.1)
            .sum()
    }

    /// Bytes allocated now (sum of capacities × element sizes); equals
    /// [`Scratch::planned_bytes`] until a call outgrows the arena.
    pub fn bytes(&self) -> u64 {
        self.main.bytes()
            + self.kda.bytes()
            + self.mla.bytes()
            + self.mlp.bytes()
            + self.moe.bytes()
            + self.router.bytes()
            + self.gqa.bytes()
            + self.kern.bytes()
    }
}

impl Clone for Scratch {
    /// A fresh arena of the same sizes (scratch contents never outlive a call).
    fn clone(&self) -> Scratch {
        Scratch::from_dims(self.dims)
    }
}

/// Clears `v` and fills it with `len` zeros, returning the slice (no
/// reallocation while `len ≤ capacity`).
pub fn zeroed(v: &mut Vec<f32>, len: usize) -> &mut [f32] {
    v.clear();
    v.resize(len, 0.0);
    &mut v[..]
}
