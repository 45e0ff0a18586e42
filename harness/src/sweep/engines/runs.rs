//! Per-run glue between the sweep and the engines: prompt ids for every prompt,
//! kimi-k3-in-c's trunk share, and reading another engine's output after its run.

use std::path::Path;

use anyhow::Result;

use super::registry::{Engine, Registry};
use crate::sweep::run::plugin::RunCtx;
use crate::sweep::spec::engines::def::uses;
use crate::sweep::spec::engines::def::BudgetHold;
use crate::sweep::spec::{Point, Spec};

/// Prompt ids of every prompt of `spec` (text tokenized with the model's tokenizer,
/// as `memdial run` does). On a model memdial's engine does not read, text is
/// tokenized by, in this order: a Hugging Face `tokenizer.json` an engine declares
/// (`tokenizer`), the GGUF's own vocabulary through the `llama.cpp` engine's driver
/// ([`gguf_tokenize`]), the model directory's `tokenizer.json`. Other engines get ids,
/// never text, so every engine sees the same tokens. Errors (usage) only when the
/// sweep has another engine and a prompt cannot be tokenized, or a declared tokenizer
/// cannot be read.
pub fn prompt_ids(spec: &Spec, model: &Path, reg: &Registry) -> Result<Vec<Vec<u32>>> {
    use crate::sweep::spec::PromptSpec;
    // Text-only engines take the text itself: only engines given ids need them.
    let needed = reg.engines.iter().any(|e| {
        !e.is_memdial() && e.def.output != Some(crate::sweep::spec::engines::def::OutputKind::Text)
    });
    if let Some(tk) = opaque_tokenizer(model, reg)? {
        let mut out = vec![];
        for p in &spec.prompts {
            out.push(match p {
                PromptSpec::Ids { ids } => ids.clone(),
                PromptSpec::Text(t) => tk(t)?,
                PromptSpec::File { file } => tk(&std::fs::read_to_string(file).map_err(|e| {
                    crate::args::usage(format!("prompt file {}: {e}", file.display()))
                })?)?,
            });
        }
        return Ok(out);
    }
    let tok = memdial::format::tokenizer::Tokenizer::from_dir(model).ok();
    let mut out = vec![];
    for p in &spec.prompts {
        let text = match p {
            PromptSpec::Ids { ids } => {
                out.push(ids.clone());
                continue;
            }
            PromptSpec::Text(t) => Some(t.clone()),
            PromptSpec::File { file } => std::fs::read_to_string(file).ok(),
        };
        match (text, &tok) {
            (Some(t), Some(k)) => out.push(k.encode(&t, true)),
            _ if !needed => out.push(vec![]),
            _ => {
                return Err(crate::args::usage(format!(
                    "other engines are given token ids: the model at {} has no tokenizer for the text prompts \
                     (give prompts as {{ ids = [...] }}, or a tokenizer.json as an engine's `tokenizer`)",
                    model.display()
                )))
            }
        }
    }
    Ok(out)
}

/// The text of prompt `index` of `spec` (a text prompt, or a prompt file's contents;
/// `None` for ids or an unreadable file), for text-only engines' `{prompt_text}`.
pub fn prompt_text(spec: &Spec, index: usize) -> Option<String> {
    use crate::sweep::spec::PromptSpec;
    match spec.prompts.get(index)? {
        PromptSpec::Ids { .. } => None,
        PromptSpec::Text(t) => Some(t.clone()),
        PromptSpec::File { file } => std::fs::read_to_string(file).ok(),
    }
}

/// Text → ids on an opaque model (see [`prompt_ids`] for the order); `None` on a
/// model memdial reads, or when nothing tokenizes this model.
#[allow(clippy::type_complexity)]
fn opaque_tokenizer<'a>(
    model: &Path,
    reg: &'a Registry,
) -> Result<Option<Box<dyn Fn(&str) -> Result<Vec<u32>> + 'a>>> {
    let declared = declared_tokenizer(reg)?;
    if reg.opaque.is_none() {
        if let Some((name, _)) = declared {
            return Err(crate::args::usage(format!(
                "engine {name:?}: `tokenizer` is for models memdial's engine does not read; {} is tokenized \
                 by its own tokenizer",
                model.display()
            )));
        }
        return Ok(None);
    }
    let hf = match declared {
        Some((name, t)) => Some(
            crate::hf_tokenizer::HfTokenizer::open(Path::new(&t))
                .map_err(|e| crate::args::usage(format!("engine {name:?}: tokenizer: {e:#}")))?,
        ),
        None => None,
    };
    if hf.is_none() {
        if let Some(tk) = gguf_tokenizer(reg) {
            return Ok(Some(tk));
        }
    }
    let hf = match hf {
        Some(h) => h,
        None if model.is_dir() && crate::hf_tokenizer::find(model).is_some() => {
            crate::hf_tokenizer::HfTokenizer::open(model)
                .map_err(|e| crate::args::usage(format!("{e:#}")))?
        }
        None => return Ok(None),
    };
    Ok(Some(Box::new(move |text: &str| {
        hf.encode(text, true)
            .map_err(|e| crate::args::usage(format!("{e:#}")))
    })))
}

/// The `tokenizer` declared by the spec's engines, with the first engine declaring
/// it. Errors (usage): two engines declare different ones (every engine is given the
/// same ids).
fn declared_tokenizer(reg: &Registry) -> Result<Option<(String, String)>> {
    let mut found: Option<(String, String)> = None;
    for e in &reg.engines {
        let Some(t) = &e.def.tokenizer else { continue };
        match &found {
            Some((n, f)) if f != t => {
                return Err(crate::args::usage(format!(
                    "engines {n:?} and {:?} declare different tokenizers ({f} and {t}): every engine is \
                     given the same prompt ids, so declare one",
                    e.name
                )))
            }
            Some(_) => {}
            None => found = Some((e.name.to_string(), t.clone())),
        }
    }
    Ok(found)
}

/// On an opaque model with a GGUF and a `llama.cpp` engine whose binary is known: text
/// → ids with the GGUF's own tokenizer ([`gguf_tokenize`]).
#[allow(clippy::type_complexity)]
fn gguf_tokenizer(reg: &Registry) -> Option<Box<dyn Fn(&str) -> Result<Vec<u32>> + '_>> {
    let gguf = reg.opaque.as_ref()?.gguf.clone()?;
    let bin = reg
        .engines
        .iter()
        .find(|e| e.adapter == "llama.cpp" && e.not_here.is_none())?
        .bin
        .clone()?;
    Some(Box::new(move |text: &str| {
        gguf_tokenize(&bin, &gguf, text).map_err(|e| crate::args::usage(format!("{e:#}")))
    }))
}

/// How long tokenizing one prompt with the GGUF may take (it loads the vocabulary
/// only).
const TOKENIZE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(300);

/// The ids of `text` in the GGUF `gguf`'s own vocabulary, as llama.cpp tokenizes a
/// prompt (special tokens such as BOS added as the GGUF says): `llama_ids -m GGUF
/// --tokenize TEXT` (memdial's driver, `tools/llama-ids`).
///
/// Errors: the driver cannot be run, fails, or prints no `ids:` line.
pub fn gguf_tokenize(bin: &Path, gguf: &Path, text: &str) -> Result<Vec<u32>> {
    let mut cmd = std::process::Command::new(bin);
    cmd.arg("-m").arg(gguf).arg("--tokenize").arg(text);
    let o = crate::sweep::run::child::run_captured(&cmd, TOKENIZE_TIMEOUT)
        .map_err(|e| anyhow::anyhow!("cannot run {}: {e}", bin.display()))?;
    if o.timed_out {
        anyhow::bail!(
            "{} --tokenize did not finish within {} s: killed",
            bin.display(),
            TOKENIZE_TIMEOUT.as_secs()
        );
    }
    let out = String::from_utf8_lossy(&o.stdout);
    let line = out.lines().find_map(|l| l.strip_prefix("ids: "));
    match (o.status.success(), line) {
        (true, Some(l)) => l
            .split(',')
            .filter(|x| !x.is_empty())
            .map(|x| {
                x.trim()
                    .parse::<u32>()
                    .map_err(|e| anyhow::anyhow!("{x:?}: {e}"))
            })
            .collect(),
        _ => anyhow::bail!(
            "{} cannot tokenize with {} (a driver built before its --tokenize mode? rebuild with \
             tools/build-engines.sh): {}",
            bin.display(),
            gguf.display(),
            String::from_utf8_lossy(&o.stderr).trim()
        ),
    }
}

/// kimi-k3-in-c's trunk share of `budget`: memdial's pinned trunk + trunk slot bytes
/// at the same budget, IO mode and context (`store::plan`), so both engines give the
/// trunk the same memory. `None` for other engines or when the plan fails.
pub fn trunk_share(
    e: &Engine,
    model: &Path,
    budget: u64,
    p: &Point,
    context: usize,
) -> Option<u64> {
    if !uses(&e.def, "{k3c_") {
        return None;
    }
    let cfg = memdial::format::config::load_config(model).ok()?;
    let ck = memdial::format::checkpoint::Checkpoint::open(model).ok()?;
    let seqs = memdial::store::plan::Sequences::single(context);
    let act = memdial::engine::arena::Scratch::activations(&cfg, seqs, p.threads);
    let plan =
        memdial::store::plan::plan_unchecked(&cfg, &ck, budget, p.io, p.prefetch, act).ok()?;
    Some(plan.pinned_trunk_bytes + plan.trunk_slots as u64 * plan.slot_bytes)
}

/// After a run of engine `e`: records how the budget was held and the engine's
/// version, and for another engine reads its output into `o.metrics`.
pub fn finish_run(
    reg: &Registry,
    e: &Engine,
    c: &RunCtx,
    o: &mut crate::sweep::run::runner::RunOutcome,
    row: &mut crate::sweep::record::row::Row,
    in_cgroup: bool,
) {
    row.budget_held_by = Some(
        match (e.budget, in_cgroup) {
            (BudgetHold::Flag, _) => "flag",
            (BudgetHold::Cgroup, true) => "cgroup",
            (BudgetHold::Cgroup, false) => "none",
            (BudgetHold::Both, true) => "flag+cgroup",
            (BudgetHold::Both, false) => "flag",
        }
        .into(),
    );
    row.engine_version = (!e.version.is_empty()).then(|| e.version.clone());
    if e.def.output == Some(crate::sweep::spec::engines::def::OutputKind::Text) {
        row.output_kind = Some(crate::sweep::spec::engines::def::OutputKind::Text);
    }
    if e.is_memdial() || o.timed_out || o.exit_code != Some(0) {
        return;
    }
    let got = reg
        .run_vars(e, c)
        .and_then(|v| super::output::read_metrics(e, &v, c.run_dir, c.prompt_ids.len(), o.started));
    match got {
        Ok(m) => {
            // The run's own record, as for memdial's runs: resume, merge and
            // `report verify` check the row against it.
            if let Err(err) = crate::export::write_json(&c.run_dir.join("metrics.json"), &m) {
                o.metrics = None;
                o.metrics_error = Some(format!("cannot write metrics.json: {err:#}"));
                return;
            }
            if let Some(v) = m.get("engine_version").and_then(|v| v.as_str()) {
                row.engine_version = Some(v.to_string());
            }
            o.metrics = Some(m);
            o.metrics_error = None;
        }
        Err(err) => {
            o.metrics = None;
            o.metrics_error = Some(format!("{err:#}"));
        }
    }
}

/// Files of engine `e` that a run reads besides the model's shards, to be evicted with
/// them before each run (and watched during it): every file of its setup directory
/// (e.g. llama.cpp's GGUF, kimi-k3-in-c's packed trunk — written by the setup step,
/// so hot in the page cache otherwise) and its `{model}` when that is a file or
/// directory outside the model directory. Sorted, without duplicates.
pub fn cold_files(reg: &Registry, e: &Engine, c: &RunCtx) -> Vec<std::path::PathBuf> {
    let mut out = vec![];
    if e.is_memdial() {
        return out;
    }
    fn walk(p: &Path, out: &mut Vec<std::path::PathBuf>) {
        if p.is_file() {
            out.push(p.to_path_buf());
        } else if let Ok(rd) = std::fs::read_dir(p) {
            for ent in rd.flatten() {
                walk(&ent.path(), out);
            }
        }
    }
    if let Some(d) = &e.setup_dir {
        walk(d, &mut out);
    }
    if let Some(m) = reg
        .run_vars(e, c)
        .ok()
        .and_then(|v| v.scalars.get("model").cloned())
    {
        let m = std::path::PathBuf::from(m);
        if !m.starts_with(c.model_dir) {
            walk(&m, &mut out);
        }
    }
    out.sort();
    out.dedup();
    out
}
