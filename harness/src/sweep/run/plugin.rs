//! What `run` needs of the engines a spec names, as a trait `run` defines and the
//! engines layer implements (`crate::sweep::engines::registry::Registry`): `run` knows
//! no adapter, only this surface.

use std::path::{Path, PathBuf};

use anyhow::Result;

use super::runner::{ExtCommand, RunOutcome};
use crate::sweep::record::row::Row;
use crate::sweep::spec::{Point, Spec};

/// Everything a command template needs for one run.
#[derive(Debug, Clone)]
pub struct RunCtx<'a> {
    /// The sweep's model directory.
    pub model_dir: &'a Path,
    /// Prompt ids.
    pub prompt_ids: &'a [u32],
    /// The prompt's text (`{prompt_text}`), for a text or file prompt; `None` for ids.
    pub prompt_text: Option<&'a str>,
    /// The point.
    pub point: &'a Point,
    /// Budget, bytes.
    pub budget_bytes: u64,
    /// Tokens to generate.
    pub max_tokens: usize,
    /// The run directory.
    pub run_dir: &'a Path,
    /// Memdial's pinned trunk + slot bytes at this budget (kimi-k3-in-c's trunk share).
    pub trunk_share_bytes: Option<u64>,
}

/// One engine as a run sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct RunEngine {
    /// Name on the `engines` axis.
    pub name: String,
    /// Whether this is memdial itself (run through `memdial run`).
    pub is_memdial: bool,
    /// Whether a memory cgroup holds its budget (else its own flags do).
    pub wants_cgroup: bool,
}

/// A model memdial's engine does not read (another engine's file, e.g. a GGUF).
#[derive(Debug, Clone, Copy)]
pub struct Opaque<'a> {
    /// `--model` (canonical).
    pub path: &'a Path,
    /// Every regular file under it, sorted.
    pub files: &'a [PathBuf],
    /// Sum of the files' sizes, bytes.
    pub bytes: u64,
}

/// The engines of a spec, as `run` uses them: looked up by name on the `engines` axis.
pub trait EnginePlugin {
    /// Engine `name`, `None` when the spec does not name it.
    fn engine(&self, name: &str) -> Option<RunEngine>;
    /// The text of prompt `index` for engines given text (`None`: the prompt is ids).
    fn prompt_text(&self, spec: &Spec, index: usize) -> Option<String>;
    /// Memdial's trunk share at `budget` bytes (pinned trunk + slots) for an engine
    /// that takes one (`None` otherwise), at context `context` positions.
    fn trunk_share(
        &self,
        name: &str,
        model: &Path,
        budget: u64,
        p: &Point,
        context: usize,
    ) -> Option<u64>;
    /// The engine's own files a run reads besides the model's shards (made cold too).
    fn cold_files(&self, name: &str, c: &RunCtx) -> Vec<PathBuf>;
    /// The child command of another engine (`None` for memdial). Errors: a template
    /// that cannot be filled.
    fn command(&self, name: &str, c: &RunCtx) -> Result<Option<ExtCommand>>;
    /// After a run: how the budget was held, the engine's version, and another
    /// engine's output read into `o.metrics`.
    fn finish_run(
        &self,
        name: &str,
        c: &RunCtx,
        o: &mut RunOutcome,
        row: &mut Row,
        in_cgroup: bool,
    );
    /// The model, when memdial's engine does not read it.
    fn opaque(&self) -> Option<Opaque<'_>>;
    /// Engine `name`'s floor at `io` on an opaque model, bytes.
    fn floor_of(&self, name: &str, io: memdial::io::IoMode) -> Option<u64>;
    /// Why engine `name` cannot run point `p` at `budget` bytes (`None`: it can).
    fn not_applicable(
        &self,
        name: &str,
        spec: &Spec,
        p: &Point,
        budget: u64,
        model_bytes: u64,
    ) -> Option<String>;
}
