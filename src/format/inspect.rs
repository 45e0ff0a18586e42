//! `memdial inspect`: architecture summary and validation of a checkpoint against its config.

use std::path::Path;

use anyhow::Result;
use serde::Serialize;

use crate::format::checkpoint::Checkpoint;
use crate::format::config::{load_config, AttnKind, MlpKind, ModelConfig};
use crate::format::schema::{expected_tensors, mtp_layer_of, Role, TensorSpec};
use crate::format::tokenizer::Tokenizer;

/// Byte and parameter accounting of a model (from the config's tensor table).
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub model_type: String,
    pub layers: usize,
    pub kda_layers: usize,
    pub mla_layers: usize,
    pub dense_layers: usize,
    pub moe_layers: usize,
    pub num_experts: usize,
    pub experts_per_token: usize,
    pub hidden_size: usize,
    pub vocab_size: usize,
    /// Parameters read per decoded token: trunk + embedding row + lm_head + top-k experts
    /// (MXFP4 elements count as parameters, scales not).
    pub active_params_per_token: u64,
    pub total_params: u64,
    pub embedding_bytes: u64,
    pub lm_head_bytes: u64,
    /// Trunk: attention, norms, routers, shared experts, dense MLPs, latent projections, globals.
    pub trunk_bytes: u64,
    pub routed_expert_bytes: u64,
    /// Bytes of one routed expert (all its matrices, packed + scales).
    pub bytes_per_expert: u64,
    pub total_bytes: u64,
    /// KDA recurrent state per layer per sequence (f32 state + f32 conv state).
    pub kda_state_bytes_per_layer: u64,
    /// MLA latent cache per position per MLA layer (f32).
    pub mla_cache_bytes_per_position: u64,
    /// gpt-oss: key/value cache per position per full-attention layer (f32 keys and
    /// values; a sliding layer holds at most `sliding_window` positions). 0 otherwise.
    pub kv_cache_bytes_per_position: u64,
}

fn params_of(s: &TensorSpec) -> u64 {
    if s.name.ends_with("weight_packed") || s.name.ends_with("_blocks") {
        s.numel() as u64 * 2
    } else if s.name.ends_with("weight_scale") || s.name.ends_with("_scales") {
        0
    } else {
        s.numel() as u64
    }
}

/// Computes the summary of a config.
pub fn summarize(cfg: &ModelConfig) -> Summary {
    summarize_specs(cfg, &expected_tensors(cfg))
}

/// Computes the summary of a config from its tensor table (`specs` =
/// [`expected_tensors`]`(cfg)`, as the loader's [`crate::engine::loader::Checkpointed`] holds it).
pub fn summarize_specs(cfg: &ModelConfig, specs: &[TensorSpec]) -> Summary {
    let (kda, mla) = cfg.layer_counts();
    let moe_layers = cfg.mlp_kinds.iter().filter(|k| **k == MlpKind::Moe).count();
    let (mut emb, mut head, mut trunk, mut experts) = (0u64, 0u64, 0u64, 0u64);
    let (mut total_p, mut trunk_p, mut expert_p) = (0u64, 0u64, 0u64);
    for s in specs {
        let b = s.nbytes() as u64;
        let p = params_of(s);
        total_p += p;
        match s.role {
            Role::Embedding => emb += b,
            Role::LmHead => {
                head += b;
                trunk_p += p
            }
            Role::Trunk | Role::Global => {
                trunk += b;
                trunk_p += p
            }
            Role::Expert => {
                experts += b;
                expert_p += p
            }
        }
    }
    let (ne, k) = cfg.routed_experts().unwrap_or((0, 0));
    let per_expert = if ne > 0 && moe_layers > 0 {
        experts / (ne * moe_layers) as u64
    } else {
        0
    };
    let active_expert_p = if ne > 0 {
        expert_p / ne as u64 * k as u64
    } else {
        0
    };
    Summary {
        model_type: cfg.model_type.clone(),
        layers: cfg.num_hidden_layers,
        kda_layers: kda,
        mla_layers: mla,
        dense_layers: cfg.num_hidden_layers - moe_layers,
        moe_layers,
        num_experts: ne,
        experts_per_token: k,
        hidden_size: cfg.hidden_size,
        vocab_size: cfg.vocab_size,
        active_params_per_token: trunk_p + cfg.hidden_size as u64 + active_expert_p,
        total_params: total_p,
        embedding_bytes: emb,
        lm_head_bytes: head,
        trunk_bytes: trunk,
        routed_expert_bytes: experts,
        bytes_per_expert: per_expert,
        total_bytes: emb + head + trunk + experts,
        kda_state_bytes_per_layer: cfg.kda_state_bytes() as u64,
        mla_cache_bytes_per_position: cfg.mla_cache_bytes_per_position() as u64,
        kv_cache_bytes_per_position: cfg
            .gpt_oss
            .as_ref()
            .map_or(0, |g| 2 * g.kv_dim() as u64 * 4),
    }
}

/// Problems of a checkpoint against its config: missing tensors, wrong dtype or
/// shape, ranges outside their file, overlaps. Unknown extra tensors are reported
/// as problems too (a strict loader would refuse them), except the tensors of the
/// multi-token-prediction layers the config declares (`num_nextn_predict_layers`,
/// see [`mtp_layer_of`]), which are present-and-unused. Empty = valid.
pub fn validate(cfg: &ModelConfig, ck: &Checkpoint) -> Vec<String> {
    validate_specs(cfg, ck, &expected_tensors(cfg))
}

/// [`validate`] against an expected-tensor table computed by the caller
/// (`specs` = [`expected_tensors`]`(cfg)`).
pub fn validate_specs(cfg: &ModelConfig, ck: &Checkpoint, specs: &[TensorSpec]) -> Vec<String> {
    let mut problems = ck.structural_problems();
    let mut seen = std::collections::HashSet::new();
    for s in specs {
        let found = std::iter::once(&s.name)
            .chain(s.aliases.iter())
            .find_map(|n| ck.get(n).map(|t| (n, t)));
        let Some((name, t)) = found else {
            problems.push(format!(
                "{}: missing (expected {} {:?})",
                s.name,
                s.dtype.as_str(),
                s.shape
            ));
            continue;
        };
        seen.insert(name.clone());
        let file = ck.shards[t.shard]
            .path
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .to_string();
        if !s.accepted.iter().any(|d| d.as_str() == t.dtype) {
            problems.push(format!(
                "{name} in {file}: dtype {} but expected {}",
                t.dtype,
                s.dtype.as_str()
            ));
        }
        let shape_ok = match s.flexible_shape {
            Some(min) => t.shape.iter().product::<usize>() >= min,
            None => t.shape == s.shape,
        };
        if !shape_ok {
            problems.push(format!(
                "{name} in {file}: shape {:?} but expected {:?}",
                t.shape, s.shape
            ));
        }
    }
    let mut extra: Vec<&String> = ck
        .tensors
        .keys()
        .filter(|k| !seen.contains(*k) && mtp_layer_of(cfg, k).is_none())
        .collect();
    extra.sort();
    for k in extra {
        problems.push(format!(
            "{k}: unexpected tensor (not implied by config.json)"
        ));
    }
    problems
}

/// What `inspect` found besides problems: tensors present but unused, and how the
/// tokenizer's ids relate to `vocab_size`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Findings {
    /// Multi-token-prediction layer indices present in the checkpoint (unused).
    pub mtp_layers: Vec<usize>,
    /// Number of present-and-unused tensors (those of `mtp_layers`).
    pub unused_tensors: usize,
    /// Bytes of those tensors (excluded from the model size).
    pub unused_bytes: u64,
    /// Ids of the directory's tokenizer (`n_base` + specials), if it has one.
    pub tokenizer_ids: Option<u32>,
    /// One human-readable line per finding.
    pub notes: Vec<String>,
}

/// Bytes of the checkpoint's tensors that the model uses: every tensor except the
/// present-and-unused multi-token-prediction layers. This is the "model size" of
/// `plan`, `run --metrics-json` and `sweep` budget fractions.
pub fn model_bytes(cfg: &ModelConfig, ck: &Checkpoint) -> u64 {
    ck.tensors
        .iter()
        .filter(|(k, _)| mtp_layer_of(cfg, k).is_none())
        .map(|(_, t)| t.len)
        .sum()
}

/// Findings of a checkpoint directory: MTP layers present-and-unused, tokenizer ids
/// vs `vocab_size` (a padded vocabulary has `vocab_size` > tokenizer ids; the gap ids
/// decode to "" — [`Tokenizer::decode_padded`]).
pub fn findings(dir: &Path, cfg: &ModelConfig, ck: &Checkpoint) -> Findings {
    let mut f = Findings::default();
    let mut layers = std::collections::BTreeSet::new();
    for (name, t) in &ck.tensors {
        if let Some(l) = mtp_layer_of(cfg, name) {
            layers.insert(l);
            f.unused_tensors += 1;
            f.unused_bytes += t.len;
        }
    }
    f.mtp_layers = layers.into_iter().collect();
    if cfg.num_nextn_predict_layers == 0 {
        // Layers past the decoder that the config does not declare: they stay problems
        // ("unexpected tensor"), but say what they probably are.
        let n = cfg.num_hidden_layers;
        let beyond: std::collections::BTreeSet<usize> = ck
            .tensors
            .keys()
            .filter_map(|k| {
                let rest = k
                    .strip_prefix(cfg.weight_prefix.as_str())?
                    .strip_prefix("model.layers.")?;
                rest.split_once('.')?.0.parse::<usize>().ok()
            })
            .filter(|&l| l >= n)
            .collect();
        if !beyond.is_empty() {
            let beyond: Vec<usize> = beyond.into_iter().collect();
            f.notes.push(format!(
                "tensors at layer index(es) {beyond:?} >= num_hidden_layers {n}: if they are \
                 multi-token-prediction layers, config.json must declare num_nextn_predict_layers"
            ));
        }
    }
    if cfg.num_nextn_predict_layers > 0 {
        f.notes.push(format!(
            "num_nextn_predict_layers {}: multi-token-prediction layer(s) {:?} present and unused \
             ({} tensors, {} bytes; not loaded, not counted in the model size)",
            cfg.num_nextn_predict_layers, f.mtp_layers, f.unused_tensors, f.unused_bytes
        ));
    }
    if cfg.eos_token_ids_source == crate::format::config::EosSource::GenerationConfig {
        f.notes.push(format!(
            "stop ids {:?} from {} (its eos_token_id takes priority over config.json's, as in \
             transformers' generate)",
            cfg.eos_token_ids,
            crate::format::config::GENERATION_CONFIG
        ));
    }
    f.notes.extend(ck.notes.iter().cloned());
    match Tokenizer::from_dir(dir) {
        Ok(tok) => {
            let n = tok.n_vocab();
            f.tokenizer_ids = Some(n);
            let v = cfg.vocab_size as u64;
            if v > n as u64 {
                f.notes.push(format!(
                    "vocab_size {v} > {n} tokenizer ids: ids {n}..{} are padding (embedding rows \
                     without a token; they decode to \"\")",
                    v - 1
                ));
            } else if v < n as u64 {
                f.notes.push(format!(
                    "vocab_size {v} < {n} tokenizer ids: tokenizer ids {v}..{} have no embedding row \
                     (prompts containing them are refused)",
                    n - 1
                ));
            }
        }
        Err(e) => f.notes.push(format!(
            "no usable tokenizer ({e:#}); text needs --prompt-ids"
        )),
    }
    f
}

/// Loads config + checkpoint and returns (summary, problems); see [`inspect_read`].
pub fn inspect_dir(dir: &Path) -> Result<(ModelConfig, Summary, Vec<String>)> {
    let cfg = load_config(dir)?;
    let ck = Checkpoint::open(dir)?;
    crate::format::limits::check_dimensions(&cfg, &ck)?;
    let specs = expected_tensors(&cfg);
    let (summary, problems) = inspect_read(&cfg, &ck, &specs)?;
    Ok((cfg, summary, problems))
}

/// Summary and problems of a checkpoint already read, from its tensor table
/// (computed once by the loader, [`crate::engine::loader::Checkpointed`]): the config's
/// summary, the validation problems and the MXFP4 scale scan
/// ([`crate::format::integrity::scan_e8m0`]).
///
/// Errors: unreadable scale bytes.
pub fn inspect_read(
    cfg: &ModelConfig,
    ck: &Checkpoint,
    specs: &[TensorSpec],
) -> Result<(Summary, Vec<String>)> {
    let summary = summarize_specs(cfg, specs);
    let mut problems = validate_specs(cfg, ck, specs);
    problems.extend(crate::format::integrity::scan_e8m0(ck)?);
    Ok((summary, problems))
}

/// Human-readable layer pattern, e.g. `Kd Ke Ke Me`: the attention kind (K KDA, M MLA,
/// gpt-oss S sliding / F full) with a d/e suffix per MLP kind (dense / experts).
pub fn layer_pattern(cfg: &ModelConfig) -> String {
    cfg.attn_kinds
        .iter()
        .zip(&cfg.mlp_kinds)
        .enumerate()
        .map(|(i, (a, m))| {
            let a = match a {
                AttnKind::Kda => "K",
                AttnKind::Mla => "M",
                AttnKind::Gqa => match cfg.gpt_oss.as_ref().and_then(|g| g.window(i)) {
                    Some(_) => "S",
                    None => "F",
                },
            };
            let m = if *m == MlpKind::Dense { "d" } else { "e" };
            format!("{a}{m}")
        })
        .collect::<Vec<_>>()
        .join(" ")
}
