//! What `sweep.json` records of the engines of a sweep and of an opaque model (the
//! records; the engines module fills them).

use serde::{Deserialize, Serialize};

/// What `sweep.json` records of each engine.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EngineMeta {
    /// Engine name.
    pub name: String,
    /// Adapter.
    pub adapter: String,
    /// Version or commit.
    pub version: String,
    /// Ids must equal the reference engine's.
    pub must_match: bool,
    /// This engine is the reference.
    pub reference: bool,
    /// How its budget is held (`flag`, `cgroup`, `both`).
    pub budget: String,
    /// Its speed-changing settings as every run of it used them: `env:NAME` → the
    /// environment variable's value as given (`env:OMP_WAIT_POLICY` → `passive`) and
    /// `io:MODE` → the arguments it gets in that IO mode (`io:mmap` → `--load-mode mmap
    /// --no-repack`). Empty for memdial (its settings are the point's axes).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub settings: std::collections::BTreeMap<String, String>,
}

/// What `sweep.json` records of an opaque model.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct OpaqueMeta {
    /// Regular files of the model.
    pub files: usize,
    /// Their bytes (the model size budgets are fractions of).
    pub bytes: u64,
    /// The GGUF's architecture or config.json's `model_type` (may be empty).
    pub model_type: String,
    /// Each engine's floor per IO mode, where one is known.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub floors: Vec<FloorMeta>,
}

/// One engine's floor at one IO mode.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FloorMeta {
    /// Engine name.
    pub engine: String,
    /// IO mode.
    pub io: String,
    /// Bytes.
    pub bytes: u64,
    /// `declared`, `floor_command`, `search`, `search (cached)`.
    pub source: String,
}
