//! An engine's definition resolved from the spec: the built-in adapter overlaid with
//! the spec's `[engine.NAME]` table, and the spec's engine settings checked.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use super::def::{builtin, overlay, toml_key, EngineDef, BUILTINS, MLX_PYTHON_ENV};

/// The python of the oracle venv: `$MEMDIAL_MLX_PYTHON`, `fixtures/oracle/.venv` under
/// the current directory, else under the repository this binary was built from.
pub fn default_python() -> PathBuf {
    if let Some(p) = std::env::var_os(MLX_PYTHON_ENV).filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    let rel = Path::new("fixtures/oracle/.venv/bin/python");
    if rel.exists() {
        return rel.to_path_buf();
    }
    // The repository root (the harness crate's parent), written without "..".
    let harness = Path::new(env!("CARGO_MANIFEST_DIR"));
    harness.parent().unwrap_or(harness).join(rel)
}

/// The merged definition of engine `name` given the spec's `[engine.NAME]` tables
/// (errors: unknown adapter, an engine that is neither a built-in nor defined with
/// a `command`).
pub fn resolve_def(tables: &BTreeMap<String, EngineDef>, name: &str) -> Result<EngineDef> {
    let table = tables.get(name).cloned().unwrap_or_default();
    let adapter = table.adapter.clone().unwrap_or_else(|| {
        if builtin(name).is_some() {
            name.to_string()
        } else {
            "command".into()
        }
    });
    let Some(base) = builtin(&adapter) else {
        bail!(
            "engine {name:?}: unknown adapter {adapter:?} (known: {})",
            BUILTINS.join(", ")
        );
    };
    let d = overlay(base, &table);
    if adapter != "memdial" && d.command.is_none() {
        bail!(
            "engine {name:?} (adapter {adapter}) has no command template: add `command = [...]` to [engine.{}]",
            toml_key(name)
        );
    }
    if adapter != "memdial" && d.ids_json.is_none() && d.ids_stdout_regex.is_none() {
        bail!("engine {name:?}: say where its ids are (`ids_json` + `ids_key`, or `ids_stdout_regex`)");
    }
    if let Some(r) = &d.steps_stdout_regex {
        let re =
            regex::Regex::new(r).with_context(|| format!("engine {name:?}: steps_stdout_regex"))?;
        if re.captures_len() < 2 {
            bail!("engine {name:?}: steps_stdout_regex needs a capture group holding the seconds");
        }
    }
    if let Some(r) = &d.ids_stdout_regex {
        let re =
            regex::Regex::new(r).with_context(|| format!("engine {name:?}: ids_stdout_regex"))?;
        if re.captures_len() < 2 {
            bail!("engine {name:?}: ids_stdout_regex needs a capture group holding the ids");
        }
    }
    if let Some(o) = &d.runtime_overhead {
        memdial::util::budget::parse_size(o)
            .with_context(|| format!("engine {name:?}: runtime_overhead"))?;
    }
    if d.resident_factor.is_some_and(|f| f.is_nan() || f <= 0.0) {
        bail!("engine {name:?}: resident_factor must be positive");
    }
    if let Some(io) = &d.io {
        for k in io.keys() {
            memdial::io::IoMode::parse(k).with_context(|| format!("engine {name:?}: io"))?;
        }
    }
    Ok(d)
}

/// Checks the spec's engine settings (called by `Spec::validate`): the `engines`
/// axis, `reference_engine` and the `[engine.NAME]` tables.
pub fn validate(
    engines: &[String],
    reference_engine: Option<&str>,
    tables: &BTreeMap<String, EngineDef>,
) -> Result<()> {
    if engines.is_empty() {
        bail!("axis `engines` is empty");
    }
    let mut seen = std::collections::BTreeSet::new();
    for e in engines {
        if !seen.insert(e) {
            bail!("engine {e:?} is listed twice");
        }
        resolve_def(tables, e)?;
    }
    for k in tables.keys() {
        if !engines.contains(k) {
            bail!(
                "[engine.{}] is defined but {k:?} is not in `engines`",
                toml_key(k)
            );
        }
    }
    if let Some(r) = reference_engine {
        if !engines.iter().any(|e| e == r) {
            bail!("reference_engine {r:?} is not in `engines`");
        }
    }
    Ok(())
}
