//! Models memdial's own engine does not read ("opaque" models): a GGUF, a Hugging Face
//! checkpoint of another architecture, any file or directory an engine takes.
//!
//! A sweep treats `--model` as opaque when memdial is not among the spec's engines and
//! the path is not a checkpoint memdial reads (a file, or a directory without a
//! `config.json` + safetensors memdial opens). Then the model is its files: its size is
//! the bytes of every regular file under it (an engine's setup outputs, e.g. a
//! converted file, are evicted with it before each run but not counted), budgets are
//! sizes or percentages of that, eviction and the mincore checks cover those files, and
//! its identity is [`memdial::tools::identity::Identity`] over them. What needs memdial's
//! plan (its floor, pinned set, predicted reads) is not available; floors come from
//! the engines instead ([`super::floor`]).

use std::path::{Path, PathBuf};

use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};

use super::gguf_meta;
use crate::sweep::record::engine_meta::{FloorMeta, OpaqueMeta};
use crate::sweep::spec::Spec;

/// An opaque model: its path and files.
#[derive(Debug, Clone, PartialEq)]
pub struct OpaqueModel {
    /// `--model` (canonical).
    pub path: PathBuf,
    /// Every regular file under it (the file itself for a file), sorted; names
    /// starting with `.` skipped, as [`memdial::tools::identity`] does.
    pub files: Vec<PathBuf>,
    /// Sum of the files' sizes, bytes.
    pub bytes: u64,
    /// The GGUF llama.cpp loads: the file itself, or in a directory the first `.gguf`
    /// in name order (a split GGUF's `-00001-of-N` part, which names the others).
    pub gguf: Option<PathBuf>,
    /// The GGUF's `general.architecture`, else config.json's `model_type`, else empty.
    pub model_type: String,
    /// The GGUF's `tokenizer.ggml.eos_token_id`, else config.json's `eos_token_id`.
    pub eos_ids: Vec<u32>,
}

/// An engine's floor at one IO mode.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Floor {
    /// Bytes.
    pub bytes: u64,
    /// Where it came from: `declared`, `floor_command`, `search` or `search (cached)`.
    pub source: String,
}

impl OpaqueMeta {
    /// The record of `m` with the engines' `floors` by (engine, IO mode).
    pub fn of(
        m: &OpaqueModel,
        floors: &std::collections::BTreeMap<(String, String), Floor>,
    ) -> OpaqueMeta {
        OpaqueMeta {
            files: m.files.len(),
            bytes: m.bytes,
            model_type: m.model_type.clone(),
            floors: floors
                .iter()
                .map(|((e, io), f)| FloorMeta {
                    engine: e.clone(),
                    io: io.clone(),
                    bytes: f.bytes,
                    source: f.source.clone(),
                })
                .collect(),
        }
    }

    /// The report's paragraph on the model: what its size is and what is not
    /// available without memdial's plan.
    pub fn markdown(&self) -> String {
        let mut s = format!(
            "The model is {} file(s) memdial's engine does not read{}: its size is their bytes \
             (budgets in % are fractions of it; an engine's setup outputs are evicted with it \
             but not counted), the cold-cache checks and its identity cover them. memdial's \
             plan (its floor, pinned set, predicted reads) is not available for this engine: \
             the columns read/token, IO wait, trunk hit and expert hit are memdial's own \
             figures.",
            self.files,
            if self.model_type.is_empty() {
                String::new()
            } else {
                format!(" (`{}`)", self.model_type)
            }
        );
        if !self.floors.is_empty() {
            s += " Floors (the engines' own):";
            for f in &self.floors {
                s += &format!(
                    " {} at {}: {} ({});",
                    f.engine,
                    f.io,
                    memdial::util::units::fmt_bytes(f.bytes),
                    f.source
                );
            }
            s.pop();
            s.push('.');
        }
        s
    }
}

/// Whether the sweep of `spec` takes `model` as an opaque model: memdial is not among
/// its engines and memdial's engine does not read `model`.
pub fn wanted(spec: &Spec, model: &Path) -> bool {
    if spec.engines.iter().any(|e| {
        crate::sweep::spec::engines::resolve::resolve_def(&spec.engine, e)
            .is_ok_and(|d| is_memdial(&d))
    }) {
        return false;
    }
    !(model.is_dir()
        && memdial::format::config::load_config(model).is_ok()
        && memdial::format::checkpoint::Checkpoint::open(model).is_ok())
}

fn is_memdial(d: &crate::sweep::spec::engines::def::EngineDef) -> bool {
    d.adapter.as_deref() == Some("memdial")
}

impl OpaqueModel {
    /// The files and facts of `path` (a file or a directory).
    ///
    /// Errors: `path` missing, a directory without regular files, a `.gguf` whose
    /// header cannot be read.
    pub fn open(path: &Path) -> Result<OpaqueModel> {
        let path = std::fs::canonicalize(path)
            .map_err(|e| anyhow::anyhow!("model {}: {e}", path.display()))?;
        let mut files = vec![];
        walk(&path, &mut files);
        files.sort();
        if files.is_empty() {
            bail!("model {} holds no regular file", path.display());
        }
        let bytes = files
            .iter()
            .filter_map(|f| std::fs::metadata(f).ok())
            .map(|m| m.len())
            .sum();
        let gguf = if path.is_file() {
            gguf_meta::is_gguf(&path).then(|| path.clone())
        } else {
            files
                .iter()
                .find(|f| f.extension().is_some_and(|x| x == "gguf"))
                .cloned()
        };
        let mut m = OpaqueModel {
            path,
            files,
            bytes,
            gguf,
            model_type: String::new(),
            eos_ids: vec![],
        };
        if let Some(g) = &m.gguf {
            let meta = gguf_meta::read(g)?;
            m.model_type = meta.architecture;
            m.eos_ids = meta.eos_token_id.into_iter().collect();
        } else if let Ok(v) = std::fs::read_to_string(m.path.join("config.json"))
            .map_err(anyhow::Error::from)
            .and_then(|t| Ok(serde_json::from_str::<serde_json::Value>(&t)?))
        {
            m.model_type = v["model_type"].as_str().unwrap_or_default().to_string();
            m.eos_ids = match &v["eos_token_id"] {
                serde_json::Value::Number(n) => n.as_u64().map(|x| x as u32).into_iter().collect(),
                serde_json::Value::Array(a) => a
                    .iter()
                    .filter_map(|x| x.as_u64())
                    .map(|x| x as u32)
                    .collect(),
                _ => vec![],
            };
        }
        Ok(m)
    }
}

fn walk(p: &Path, out: &mut Vec<PathBuf>) {
    if p.is_file() {
        out.push(p.to_path_buf());
    } else if let Ok(rd) = std::fs::read_dir(p) {
        for e in rd.flatten() {
            if !e.file_name().to_string_lossy().starts_with('.') {
                walk(&e.path(), out);
            }
        }
    }
}
