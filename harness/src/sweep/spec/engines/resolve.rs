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
    let text_only = d.output == Some(super::def::OutputKind::Text);
    if text_only && adapter == "memdial" {
        bail!("engine {name:?}: memdial gives ids: `output = \"text\"` is for other engines");
    }
    if text_only && (d.ids_json.is_some() || d.ids_stdout_regex.is_some()) {
        bail!(
            "engine {name:?}: a text-only engine (`output = \"text\"`) has no ids: drop `ids_json` / \
             `ids_stdout_regex` (its text is its stdout, or `text_file`)"
        );
    }
    if !text_only && d.text_file.is_some() {
        bail!("engine {name:?}: `text_file` is for text-only engines (`output = \"text\"`)");
    }
    if adapter != "memdial" && !text_only && d.ids_json.is_none() && d.ids_stdout_regex.is_none() {
        bail!("engine {name:?}: say where its ids are (`ids_json` + `ids_key`, or `ids_stdout_regex`)");
    }
    if adapter != "memdial" {
        check_templates(name, &d)?;
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

/// Checks every template of engine `name` ([`super::template::check`]): the error
/// names the engine, the key (`command[2]`, `env.OMP_NUM_THREADS`, …), the template
/// and what is wrong with it.
fn check_templates(name: &str, d: &EngineDef) -> Result<()> {
    use super::template::{check, Scope};
    let mut all: Vec<(String, &str, Scope, bool)> = vec![];
    let lists = [
        ("command", &d.command, Scope::Run),
        ("setup", &d.setup, Scope::Model),
        ("version_command", &d.version_command, Scope::Model),
    ];
    for (key, list, scope) in lists {
        for (i, a) in list.iter().flatten().enumerate() {
            all.push((format!("{key}[{i}]"), a, scope, key == "command"));
        }
    }
    for (k, v) in &d.env {
        if k.is_empty() || k.contains(['=', '\0']) {
            bail!("engine {name:?}: env key {k:?} is not a variable name (empty, or holds `=` or NUL)");
        }
        all.push((format!("env.{k}"), v, Scope::Run, false));
    }
    for (key, t) in [
        ("ids_json", &d.ids_json),
        ("text_file", &d.text_file),
        ("model", &d.model),
    ] {
        if let Some(t) = t {
            all.push((key.to_string(), t, Scope::Run, false));
        }
    }
    for (key, t, scope, whole_arg) in all {
        if let Err(e) = check(t, scope, whole_arg) {
            bail!("engine {name:?}: {key} {t:?}: {e}");
        }
    }
    if d.setup.is_none() && super::def::uses_anywhere(d, "{setup_dir}") {
        bail!(
            "engine {name:?}: {{setup_dir}} is used but the engine has no `setup` step to fill it"
        );
    }
    if d.command.as_ref().is_some_and(|c| c.is_empty()) {
        bail!("engine {name:?}: `command` is empty: give the program and its arguments");
    }
    Ok(())
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
