//! What `plan`, `simulate` and a sweep's predictions size: a config and checkpoint
//! index from a model directory, a config file or a shipped preset.

use std::path::Path;

use anyhow::Result;
use memdial::engine::loader::Checkpointed;
use memdial::format::checkpoint::Checkpoint;
use memdial::format::config::ModelConfig;
use memdial::store::paper::paper_checkpoint;
use memdial::util::error::UsageError;

/// Shipped configs of the published shapes (`fixtures/configs/README.md` says where
/// every number comes from).
const PRESETS: [(&str, &str); 4] = [
    ("k3", include_str!("../../../fixtures/configs/k3.json")),
    (
        "kimi-linear-48b",
        include_str!("../../../fixtures/configs/kimi-linear-48b.json"),
    ),
    (
        "gpt-oss-20b",
        include_str!("../../../fixtures/configs/gpt-oss-20b.json"),
    ),
    (
        "gpt-oss-120b",
        include_str!("../../../fixtures/configs/gpt-oss-120b.json"),
    ),
];

/// Config + checkpoint index to plan with, and where they came from.
pub struct Source {
    pub cfg: ModelConfig,
    pub ck: Checkpoint,
    /// `None` for a real checkpoint; else what the paper plan was derived from.
    pub paper: Option<String>,
}

fn config_from_text(text: &str, what: &str) -> Result<ModelConfig> {
    let parse = || -> Result<ModelConfig> {
        let root: serde_json::Value = serde_json::from_str(text)?;
        // Without a checkpoint nothing would catch a default standing in for a missing
        // key: the model type and the main dimensions must be stated.
        let has = |k: &str| root.get(k).is_some() || root["text_config"].get(k).is_some();
        for k in [
            "model_type",
            "vocab_size",
            "hidden_size",
            "num_hidden_layers",
        ] {
            if !has(k) {
                anyhow::bail!("the config does not state {k}");
            }
        }
        let mut cfg = ModelConfig::from_json_str(text)?;
        cfg.apply_quantization(&root)?;
        Ok(cfg)
    };
    parse().map_err(|e| UsageError::Invalid(format!("cannot plan {what}: {e:#}")).into())
}

/// The [`Source`] of `--model DIR`, `--config FILE` or `--preset NAME` (a shipped
/// config, or a fixture preset's config: planned without weights).
///
/// Errors: an unreadable checkpoint or config, an unknown preset (usage error).
pub fn source_of(
    model: Option<&Path>,
    config: Option<&Path>,
    preset: Option<&str>,
) -> Result<Source> {
    let (text, what) = match (model, config, preset) {
        (Some(dir), ..) => {
            let c = Checkpointed::read(dir)?;
            return Ok(Source {
                cfg: c.cfg,
                ck: c.ck,
                paper: None,
            });
        }
        (_, Some(path), _) => (
            std::fs::read_to_string(path)
                .map_err(|e| UsageError::Invalid(format!("cannot read {}: {e}", path.display())))?,
            path.display().to_string(),
        ),
        (_, _, Some(p)) => match PRESETS.iter().find(|(n, _)| *n == p) {
            Some((_, t)) => (
                t.to_string(),
                format!("preset {p} (fixtures/configs/{p}.json)"),
            ),
            None => match memdial::tools::fixture::presets::preset(p) {
                Some(f) => (
                    f.config.to_string(),
                    format!("fixture preset {p} (memdial fixture --preset {p})"),
                ),
                None => {
                    return Err(UsageError::Invalid(format!(
                        "unknown preset {p:?}: k3, kimi-linear-48b, gpt-oss-20b, gpt-oss-120b or a fixture preset ({})",
                        memdial::tools::fixture::presets::PRESET_NAMES.join(", ")
                    ))
                    .into())
                }
            },
        },
        _ => unreachable!("clap requires one source"),
    };
    let cfg = config_from_text(&text, &what)?;
    let ck = paper_checkpoint(&cfg, &what)?;
    Ok(Source {
        cfg,
        ck,
        paper: Some(what),
    })
}
