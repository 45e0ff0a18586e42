//! Kimi K3 / Kimi Linear checkpoints as llama.cpp's `kimi-k3` / `kimi-linear` GGUF:
//! tensor names, shapes, types and the few transforms llama.cpp's converter applies
//! (`convert_hf_to_gguf.py` → `conversion/kimi_k3.py`, `conversion/kimi_linear.py`,
//! names from `gguf-py/gguf/tensor_mapping.py`, as the loaders in
//! `src/models/kimi-k3.cpp` / `kimi-linear.cpp` read them):
//! - routed experts stacked per layer into `blk.N.ffn_{gate,up,down}_exps.weight`
//!   (`ne = [cols, rows, n_expert]`); MXFP4 experts repacked to ggml `block_mxfp4`;
//! - `kv_b_proj` (`[H·(nope+v), kv_lora_rank]`) split into `attn_k_b` (per head the
//!   first `nope` rows, transposed: `ne = [nope, kv_lora_rank, H]`) and `attn_v_b`
//!   (the last `v` rows: `ne = [kv_lora_rank, v, H]`);
//! - `A_log` → `ssm_a = −exp(A_log)` (K3: its first `num_attention_heads` values);
//! - `dt_bias` → `ssm_dt.bias`; conv1d `[d, 1, k]` → `ne = [k, 1, d, 1]`;
//! - K3 `g_proj` is `ssm_g` on KDA layers and `attn_gate` on MLA layers;
//! - K3 `*_res_norm · *_res_proj` fused into one `[n_embd]` F32 vector
//!   (`attn_res_score`, `ffn_res_score`, `output_res_score`).
//!
//! Types (`--dtype native`): F32 for 1-D tensors, `*_norm.weight`, `ffn_gate_inp`,
//! the KDA convs, every name not ending in `.weight` (the converter's rules) and every
//! tensor stored as F32 in the checkpoint; BF16 for the other BF16 tensors; MXFP4 for
//! MXFP4 experts. `--dtype f32`: everything F32 (BF16 and MXFP4 widen exactly).

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{bail, Context, Result};
use memdial::format::checkpoint::Checkpoint;
use serde_json::Value as Json;

use super::gguf::{GgmlType, TensorInfo};

/// Output precision of `memdial convert`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Dtype {
    /// BF16 stays BF16, MXFP4 experts stay MXFP4, F32 stays F32.
    Native,
    /// Every tensor F32 (exact widening).
    F32,
}

/// Where a GGUF tensor's values come from.
#[derive(Debug, Clone)]
pub enum Src {
    /// One checkpoint tensor, values unchanged (possibly reshaped).
    Plain(String),
    /// `−exp(x)` of the first `n` values (all when `None`), computed in f64, rounded to f32.
    NegExp(String, Option<usize>),
    /// Element-wise f32 product of two tensors.
    Product(String, String),
    /// `kv_b_proj` split: `k` = the `attn_k_b` half, else `attn_v_b`.
    KvB {
        /// Checkpoint tensor.
        name: String,
        /// Heads.
        heads: usize,
        /// `qk_nope_head_dim`.
        nope: usize,
        /// `v_head_dim`.
        v: usize,
        /// `kv_lora_rank`.
        rank: usize,
        /// The K half.
        k: bool,
    },
    /// Dense experts stacked in expert order.
    Stack(Vec<String>),
    /// MXFP4 experts (`weight_packed`, `weight_scale`) stacked in expert order.
    StackMxfp4(Vec<(String, String)>),
}

/// One planned GGUF tensor.
#[derive(Debug, Clone)]
pub struct Planned {
    /// Name, shape and type.
    pub info: TensorInfo,
    /// Its values.
    pub src: Src,
}

/// The checkpoint's text config (`text_config` of a K3 config, else the root).
pub fn text_config(dir: &Path) -> Result<Json> {
    let p = dir.join("config.json");
    let t = std::fs::read_to_string(&p).with_context(|| format!("reading {}", p.display()))?;
    let v: Json = serde_json::from_str(&t).with_context(|| format!("parsing {}", p.display()))?;
    Ok(v.get("text_config").cloned().unwrap_or(v))
}

/// llama.cpp architecture of a `model_type` (`kimi_k3` → `kimi-k3`, `kimi_linear` →
/// `kimi-linear`). Errors: any other model type.
pub fn arch_of(dir: &Path) -> Result<&'static str> {
    let p = dir.join("config.json");
    let t = std::fs::read_to_string(&p).with_context(|| format!("reading {}", p.display()))?;
    let v: Json = serde_json::from_str(&t).with_context(|| format!("parsing {}", p.display()))?;
    match v.get("model_type").and_then(Json::as_str) {
        Some("kimi_k3") => Ok("kimi-k3"),
        Some("kimi_linear") => Ok("kimi-linear"),
        other => bail!(
            "{}: model_type {:?} has no GGUF conversion (kimi_k3 and kimi_linear do)",
            p.display(),
            other.unwrap_or("(none)")
        ),
    }
}

pub(super) fn num(c: &Json, key: &str) -> Result<u64> {
    c.get(key)
        .and_then(Json::as_u64)
        .with_context(|| format!("config.json: `{key}` missing or not a non-negative integer"))
}

/// Full-attention (MLA) layers, 0-based (`linear_attn_config.full_attn_layers` is 1-based).
pub fn mla_layers(c: &Json) -> Result<Vec<usize>> {
    let v = c
        .pointer("/linear_attn_config/full_attn_layers")
        .and_then(Json::as_array)
        .context("config.json: `linear_attn_config.full_attn_layers` missing")?;
    v.iter()
        .map(|x| {
            x.as_u64()
                .filter(|x| *x >= 1)
                .map(|x| x as usize - 1)
                .context("config.json: full_attn_layers must hold 1-based layer numbers")
        })
        .collect()
}

/// GGUF name of a per-layer checkpoint tensor suffix (after `model.layers.N.`), or
/// `None` for tensors handled elsewhere (experts, kv_b, res pairs, g_proj).
fn layer_name(suffix: &str) -> Option<&'static str> {
    Some(match suffix {
        "input_layernorm.weight" => "attn_norm.weight",
        "post_attention_layernorm.weight" => "ffn_norm.weight",
        "mlp.gate_proj.weight" => "ffn_gate.weight",
        "mlp.up_proj.weight" => "ffn_up.weight",
        "mlp.down_proj.weight" => "ffn_down.weight",
        "self_attn.q_proj.weight" => "attn_q.weight",
        "self_attn.k_proj.weight" => "attn_k.weight",
        "self_attn.v_proj.weight" => "attn_v.weight",
        "self_attn.o_proj.weight" => "attn_output.weight",
        "self_attn.A_log" => "ssm_a",
        "self_attn.b_proj.weight" => "ssm_beta.weight",
        "self_attn.dt_bias" => "ssm_dt.bias",
        "self_attn.f_a_proj.weight" => "ssm_f_a.weight",
        "self_attn.f_b_proj.weight" => "ssm_f_b.weight",
        "self_attn.g_a_proj.weight" => "ssm_g_a.weight",
        "self_attn.g_b_proj.weight" => "ssm_g_b.weight",
        "self_attn.q_conv1d.weight" => "ssm_conv1d_q.weight",
        "self_attn.k_conv1d.weight" => "ssm_conv1d_k.weight",
        "self_attn.v_conv1d.weight" => "ssm_conv1d_v.weight",
        "self_attn.o_norm.weight" => "ssm_norm.weight",
        "self_attn.kv_a_layernorm.weight" => "attn_kv_a_norm.weight",
        "self_attn.kv_a_proj_with_mqa.weight" => "attn_kv_a_mqa.weight",
        "self_attn.q_a_layernorm.weight" => "attn_q_a_norm.weight",
        "self_attn.q_a_proj.weight" => "attn_q_a.weight",
        "self_attn.q_b_proj.weight" => "attn_q_b.weight",
        "block_sparse_moe.gate.weight" => "ffn_gate_inp.weight",
        "block_sparse_moe.gate.e_score_correction_bias" => "exp_probs_b.bias",
        "block_sparse_moe.shared_experts.gate_proj.weight" => "ffn_gate_shexp.weight",
        "block_sparse_moe.shared_experts.up_proj.weight" => "ffn_up_shexp.weight",
        "block_sparse_moe.shared_experts.down_proj.weight" => "ffn_down_shexp.weight",
        "block_sparse_moe.routed_expert_down_proj.weight" => "ffn_routed_down.weight",
        "block_sparse_moe.routed_expert_up_proj.weight" => "ffn_routed_up.weight",
        "block_sparse_moe.routed_expert_norm.weight" => "ffn_routed_norm.weight",
        _ => return None,
    })
}

/// The converter's "always F32" rule for a GGUF name.
fn forced_f32(name: &str) -> bool {
    !name.ends_with(".weight")
        || name.ends_with("_norm.weight")
        || name.ends_with(".ffn_gate_inp.weight")
        || name.contains(".ssm_conv1d_")
}

/// The GGUF tensors of checkpoint `ck` (config `c`, architecture `arch`) at `dtype`,
/// in checkpoint order (layers ascending). Errors: a tensor with no GGUF name, a
/// missing expert or pair, an unsupported dtype, shapes the transforms do not fit.
pub fn plan(ck: &Checkpoint, c: &Json, arch: &str, dtype: Dtype) -> Result<Vec<Planned>> {
    let k3 = arch == "kimi-k3";
    let pl = Planner {
        ck,
        c,
        k3,
        n_layer: num(c, "num_hidden_layers")? as usize,
        n_head: num(c, "num_attention_heads")? as usize,
        n_expert: num(c, "num_experts")? as usize,
        mla: mla_layers(c)?,
        prefix: if k3 { "language_model." } else { "" },
        dtype,
    };
    let (prefix, n_layer) = (pl.prefix, pl.n_layer);
    let mut names: Vec<&String> = ck.tensors.keys().collect();
    names.sort_by_key(|n| (layer_of(n, prefix), n.to_string()));
    let mut out = vec![];
    let mut experts: Experts = BTreeMap::new();
    let shape = |n: &str| pl.shape(n);
    let rev = |s: &[usize]| s.iter().rev().map(|x| *x as u64).collect::<Vec<_>>();
    let push =
        |out: &mut Vec<Planned>, gname: String, ne: Vec<u64>, hf: &str| pl.push(out, gname, ne, hf);
    for full in names {
        let Some(n) = full.strip_prefix(prefix) else {
            if k3 && (full.starts_with("vision_tower.") || full.starts_with("mm_projector.")) {
                continue;
            }
            bail!("tensor {full}: no GGUF name (expected the {prefix:?} prefix)");
        };
        let top = match n {
            "model.embed_tokens.weight" => Some("token_embd.weight"),
            "model.norm.weight" => Some("output_norm.weight"),
            "lm_head.weight" => Some("output.weight"),
            _ => None,
        };
        if let Some(g) = top {
            push(&mut out, g.into(), rev(&shape(full)), full)?;
            continue;
        }
        if n == "model.output_attn_res_norm.weight" {
            let proj = format!("{prefix}model.output_attn_res_proj.weight");
            out.push(res_fused(
                "output_res_score.weight".into(),
                full,
                &proj,
                ck,
            )?);
            continue;
        }
        if n == "model.output_attn_res_proj.weight" {
            continue;
        }
        let Some(rest) = n.strip_prefix("model.layers.") else {
            bail!("tensor {full}: no GGUF name");
        };
        let (l, suffix) = rest.split_once('.').context("bad layer tensor name")?;
        let l: usize = l
            .parse()
            .with_context(|| format!("tensor {full}: bad layer"))?;
        if l >= n_layer {
            bail!("tensor {full}: layer {l} ≥ num_hidden_layers {n_layer}");
        }
        if let Some(e) = suffix.strip_prefix("block_sparse_moe.experts.") {
            let (id, w) = e.split_once('.').context("bad expert tensor name")?;
            let id: usize = id
                .parse()
                .with_context(|| format!("tensor {full}: bad expert id"))?;
            experts
                .entry((l, w.to_string()))
                .or_default()
                .insert(id, full.clone());
            continue;
        }
        pl.layer_tensor(&mut out, full, l, suffix)?;
    }
    // stacked experts, after the layer's other tensors (order does not matter to GGUF)
    let mut by_layer: BTreeMap<usize, Vec<Planned>> = BTreeMap::new();
    for w in ["w1", "w2", "w3"] {
        for l in 0..n_layer {
            if let Some(p) = pl.expert_stack(&experts, l, w)? {
                by_layer.entry(l).or_default().push(p);
            }
        }
    }
    for (_, v) in by_layer {
        out.extend(v);
    }
    Ok(out)
}

/// Expert tensors by (layer, weight suffix): expert id → tensor name.
type Experts = BTreeMap<(usize, String), BTreeMap<usize, String>>;

/// What [`plan`] needs of the checkpoint and its config.
struct Planner<'a> {
    ck: &'a Checkpoint,
    c: &'a Json,
    k3: bool,
    n_layer: usize,
    n_head: usize,
    n_expert: usize,
    mla: Vec<usize>,
    prefix: &'static str,
    dtype: Dtype,
}

impl Planner<'_> {
    fn shape(&self, n: &str) -> Vec<usize> {
        self.ck.tensors[n].shape.clone()
    }

    fn dt(&self, n: &str) -> String {
        self.ck.tensors[n].dtype.clone()
    }

    /// The GGUF type of tensor `name` read as `src_dtype` with `ndims` dimensions.
    fn ty_for(&self, name: &str, src_dtype: &str, ndims: usize) -> Result<GgmlType> {
        if !matches!(src_dtype, "BF16" | "F32") {
            bail!("tensor for {name}: dtype {src_dtype} is not converted (BF16, F32 and MXFP4 experts are)");
        }
        Ok(
            if self.dtype == Dtype::F32 || src_dtype == "F32" || ndims <= 1 || forced_f32(name) {
                GgmlType::F32
            } else {
                GgmlType::Bf16
            },
        )
    }

    /// Plans `hf` copied as GGUF tensor `gname` of shape `ne`.
    fn push(&self, out: &mut Vec<Planned>, gname: String, ne: Vec<u64>, hf: &str) -> Result<()> {
        let ty = self.ty_for(&gname, &self.dt(hf), ne.len())?;
        out.push(Planned {
            info: TensorInfo {
                name: gname,
                ne,
                ty,
            },
            src: Src::Plain(hf.to_string()),
        });
        Ok(())
    }

    /// Plans the non-expert tensor `full` of layer `l` (`suffix`: its name after
    /// `model.layers.L.`).
    fn layer_tensor(
        &self,
        out: &mut Vec<Planned>,
        full: &String,
        l: usize,
        suffix: &str,
    ) -> Result<()> {
        let Planner {
            ck, c, k3, n_head, ..
        } = *self;
        let (mla, prefix) = (&self.mla, self.prefix);
        let shape = |n: &str| self.shape(n);
        let dt = |n: &str| self.dt(n);
        let ty_for = |name: &str, src: &str, ndims: usize| self.ty_for(name, src, ndims);
        let rev = |s: &[usize]| s.iter().rev().map(|x| *x as u64).collect::<Vec<_>>();
        let push = |out: &mut Vec<Planned>, gname: String, ne: Vec<u64>, hf: &str| {
            self.push(out, gname, ne, hf)
        };
        let g = |s: &str| format!("blk.{l}.{s}");
        match suffix {
            "self_attention_res_norm.weight" | "mlp_res_norm.weight" => {
                let (part, gname) = if suffix.starts_with("self") {
                    ("self_attention_res_proj", "attn_res_score.weight")
                } else {
                    ("mlp_res_proj", "ffn_res_score.weight")
                };
                let proj = format!("{prefix}model.layers.{l}.{part}.weight");
                out.push(res_fused(g(gname), full, &proj, ck)?);
            }
            "self_attention_res_proj.weight" | "mlp_res_proj.weight" => {}
            "self_attn.g_proj.weight" if k3 => {
                let name = if mla.contains(&l) {
                    "attn_gate.weight"
                } else {
                    "ssm_g.weight"
                };
                push(out, g(name), rev(&shape(full)), full)?;
            }
            "self_attn.kv_b_proj.weight" => {
                let s = shape(full);
                let nope = num(c, "qk_nope_head_dim")? as usize;
                let v = num(c, "v_head_dim")? as usize;
                if s.len() != 2 || s[0] != n_head * (nope + v) {
                    bail!("tensor {full}: shape {s:?}, expected [{n_head}·({nope}+{v}), kv_lora_rank]");
                }
                let rank = s[1];
                for (k, gname, ne) in [
                    (true, "attn_k_b.weight", vec![nope, rank, n_head]),
                    (false, "attn_v_b.weight", vec![rank, v, n_head]),
                ] {
                    out.push(Planned {
                        info: TensorInfo {
                            name: g(gname),
                            ne: ne.iter().map(|x| *x as u64).collect(),
                            ty: ty_for(gname, &dt(full), 3)?,
                        },
                        src: Src::KvB {
                            name: full.clone(),
                            heads: n_head,
                            nope,
                            v,
                            rank,
                            k,
                        },
                    });
                }
            }
            "self_attn.A_log" => {
                let s = shape(full);
                let (ne, take) = if k3 {
                    if s.iter().product::<usize>() < n_head {
                        bail!("tensor {full}: fewer than {n_head} values");
                    }
                    (vec![n_head as u64], Some(n_head))
                } else {
                    (rev(&s), None)
                };
                out.push(Planned {
                    info: TensorInfo {
                        name: g("ssm_a"),
                        ne,
                        ty: GgmlType::F32,
                    },
                    src: Src::NegExp(full.clone(), take),
                });
            }
            _ if suffix.ends_with("_conv1d.weight") => {
                let s = shape(full);
                let (d, k) = match s.as_slice() {
                    [d, 1, k] | [d, k] => (*d, *k),
                    _ => bail!("tensor {full}: conv1d shape {s:?}, expected [d, 1, k]"),
                };
                let gname = layer_name(suffix).context("conv name")?;
                push(out, g(gname), vec![k as u64, 1, d as u64, 1], full)?;
            }
            _ => match layer_name(suffix) {
                Some(gname) => push(out, g(gname), rev(&shape(full)), full)?,
                None => bail!("tensor {full}: no GGUF name for `{suffix}`"),
            },
        }
        Ok(())
    }

    /// The stacked tensor of weight `w` of layer `l`'s experts (dense, or MXFP4
    /// packed + scale); `None` when the layer has none.
    fn expert_stack(&self, experts: &Experts, l: usize, w: &str) -> Result<Option<Planned>> {
        let (n_expert, dtype) = (self.n_expert, self.dtype);
        let shape = |n: &str| self.shape(n);
        let dt = |n: &str| self.dt(n);
        let ty_for = |name: &str, src: &str, ndims: usize| self.ty_for(name, src, ndims);
        let rev = |s: &[usize]| s.iter().rev().map(|x| *x as u64).collect::<Vec<_>>();
        let dense = experts.get(&(l, format!("{w}.weight")));
        let packed = experts.get(&(l, format!("{w}.weight_packed")));
        let scale = experts.get(&(l, format!("{w}.weight_scale")));
        let gname = format!(
            "blk.{l}.{}",
            match w {
                "w1" => "ffn_gate_exps.weight",
                "w2" => "ffn_down_exps.weight",
                _ => "ffn_up_exps.weight",
            }
        );
        let check = |m: &BTreeMap<usize, String>| -> Result<Vec<String>> {
            if let Some(miss) = (0..n_expert).find(|e| !m.contains_key(e)) {
                bail!("layer {l} {w}: expert {miss} of {n_expert} is missing");
            }
            if m.len() != n_expert {
                bail!("layer {l} {w}: {} experts, config says {n_expert}", m.len());
            }
            Ok(m.values().cloned().collect())
        };
        let p = match (dense, packed, scale) {
            (Some(d), None, None) => {
                let v = check(d)?;
                let s = shape(&v[0]);
                if v.iter().any(|x| shape(x) != s || dt(x) != dt(&v[0])) {
                    bail!("layer {l} {w}: experts differ in shape or dtype");
                }
                let mut ne = rev(&s);
                ne.push(n_expert as u64);
                Planned {
                    info: TensorInfo {
                        ty: ty_for(&gname, &dt(&v[0]), 3)?,
                        name: gname,
                        ne,
                    },
                    src: Src::Stack(v),
                }
            }
            (None, Some(p), Some(s)) => {
                let p = check(p)?;
                let s = check(s)?;
                let ps = shape(&p[0]);
                let [rows, half] = ps[..] else {
                    bail!("{}: packed shape {ps:?} is not 2-D", p[0]);
                };
                let cols = half * 2;
                if cols % 32 != 0 {
                    bail!("{}: {cols} columns, not a multiple of 32", p[0]);
                }
                for (a, b) in p.iter().zip(&s) {
                    if shape(a) != ps || shape(b) != vec![rows, cols / 32] {
                        bail!("layer {l} {w}: expert shapes differ ({a}, {b})");
                    }
                }
                Planned {
                    info: TensorInfo {
                        name: gname,
                        ne: vec![cols as u64, rows as u64, n_expert as u64],
                        ty: if dtype == Dtype::F32 {
                            GgmlType::F32
                        } else {
                            GgmlType::Mxfp4
                        },
                    },
                    src: Src::StackMxfp4(p.into_iter().zip(s).collect()),
                }
            }
            (None, None, None) => return Ok(None),
            _ => bail!("layer {l} {w}: experts are neither all dense nor all MXFP4 packed + scale"),
        };
        Ok(Some(p))
    }
}

fn layer_of(n: &str, prefix: &str) -> (usize, usize) {
    let n = n.strip_prefix(prefix).unwrap_or(n);
    match n.strip_prefix("model.layers.") {
        Some(r) => (
            1,
            r.split('.')
                .next()
                .and_then(|x| x.parse().ok())
                .unwrap_or(0),
        ),
        None if n.starts_with("model.embed") => (0, 0),
        None => (2, 0),
    }
}

fn res_fused(gname: String, norm: &str, proj: &str, ck: &Checkpoint) -> Result<Planned> {
    let (Some(a), Some(b)) = (ck.tensors.get(norm), ck.tensors.get(proj)) else {
        bail!("{norm}: its pair {proj} is missing");
    };
    let n: usize = a.shape.iter().product();
    if b.shape.iter().product::<usize>() != n {
        bail!("{norm} and {proj} differ in size");
    }
    Ok(Planned {
        info: TensorInfo {
            name: gname,
            ne: vec![n as u64],
            ty: GgmlType::F32,
        },
        src: Src::Product(norm.into(), proj.into()),
    })
}
