//! The one loader: checkpoint directory → config → shard headers → expected-tensor
//! table → validation → weight store → [`Model`]. `memdial run`, `plan`, `inspect`
//! and the tests start here, so a checkpoint is read and checked the same way
//! everywhere and the expected-tensor table ([`crate::format::schema::expected_tensors`])
//! is computed once per load and passed on.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Result};

use crate::format::checkpoint::Checkpoint;
use crate::format::config::{load_config, ModelConfig};
use crate::format::schema::{expected_tensors, TensorSpec};
use crate::model::Model;
use crate::ops::Par;
use crate::store::resident::ResidentStore;
use crate::store::streaming::{StreamOptions, StreamingStore};
use crate::store::WeightStore;

/// A checkpoint directory read: its config, shard headers and the tensor table the
/// config implies. Not yet validated (see [`Checkpointed::problems`]).
pub struct Checkpointed {
    /// The directory as given.
    pub dir: PathBuf,
    /// `config.json`.
    pub cfg: ModelConfig,
    /// Shard headers and tensor locations.
    pub ck: Checkpoint,
    /// The tensors the config implies (names, dtypes, shapes, aliases).
    pub specs: Vec<TensorSpec>,
}

impl Checkpointed {
    /// Reads `dir/config.json` and the safetensors headers.
    ///
    /// Errors: `dir` is not a directory (a [`crate::util::error::UsageError`], from
    /// [`load_config`]); unreadable or invalid config; unreadable shard headers;
    /// config dimensions the checkpoint cannot hold
    /// ([`crate::format::limits::check_dimensions`], checked before the tensor table is built).
    pub fn read(dir: &Path) -> Result<Self> {
        let cfg = load_config(dir)?;
        let ck = Checkpoint::open(dir)?;
        crate::format::limits::check_dimensions(&cfg, &ck)?;
        let specs = expected_tensors(&cfg);
        Ok(Checkpointed {
            dir: dir.to_path_buf(),
            cfg,
            ck,
            specs,
        })
    }

    /// Problems of the checkpoint against its config (empty = valid); see
    /// [`crate::format::inspect::validate`].
    pub fn problems(&self) -> Vec<String> {
        crate::format::inspect::validate_specs(&self.cfg, &self.ck, &self.specs)
    }

    /// Refuses a checkpoint with problems, listing them.
    pub fn validated(self) -> Result<Self> {
        let problems = self.problems();
        if !problems.is_empty() {
            bail!(
                "checkpoint {} does not match its config.json ({} problem(s)):\n  - {}",
                self.dir.display(),
                problems.len(),
                problems.join("\n  - ")
            );
        }
        Ok(self)
    }
}

/// How the weights are held.
#[derive(Debug, Clone)]
pub enum StoreOptions {
    /// Every tensor read into RAM at load.
    Resident,
    /// Streamed under a memory budget.
    Streaming(StreamOptions),
}

/// A loaded model with what was read to build it.
pub struct Opened {
    /// The model.
    pub model: Model,
    /// Config, checkpoint and tensor table.
    pub checkpoint: Checkpointed,
    /// The streaming store, when [`StoreOptions::Streaming`] (for its plan and counters).
    pub streaming: Option<Arc<StreamingStore>>,
}

impl Model {
    /// Opens the checkpoint in `dir`: reads and validates it ([`Checkpointed`]), opens
    /// the store `store` asks for, and builds the model with `threads` kernel threads
    /// and the checkpoint's dtype hints.
    ///
    /// Errors: unreadable or invalid checkpoint (problems listed); for a streaming
    /// store, the usage errors of [`StreamingStore::open`] (budget below the floor,
    /// direct IO refused, …) and IO failures.
    pub fn open(dir: &Path, store: StoreOptions, threads: usize) -> Result<Opened> {
        Model::open_batch(dir, store, threads, 1)
    }

    /// [`Model::open`] for a batch of up to `max_batch` sequences
    /// ([`crate::engine::batch::Batch`]): a streaming store plans their states and the
    /// shared activation arena ([`StreamingStore::open_batch`]).
    ///
    /// Errors: as [`Model::open`].
    pub fn open_batch(
        dir: &Path,
        store: StoreOptions,
        threads: usize,
        max_batch: usize,
    ) -> Result<Opened> {
        let checkpoint = Checkpointed::read(dir)?.validated()?;
        let (cfg, ck) = (&checkpoint.cfg, &checkpoint.ck);
        let (ws, streaming): (Arc<dyn WeightStore>, _) = match store {
            StoreOptions::Resident => (
                Arc::new(ResidentStore::open_specs(cfg, ck, &checkpoint.specs)?),
                None,
            ),
            StoreOptions::Streaming(opts) => {
                let s = Arc::new(StreamingStore::open_batch(
                    cfg, ck, opts, threads, max_batch,
                )?);
                (s.clone(), Some(s))
            }
        };
        let hints = Model::dtype_hints(cfg, ck);
        let par = Par::try_new(threads)?;
        let model = Model::new(cfg.clone(), ws, par)?.with_dtype_hints(hints);
        Ok(Opened {
            model,
            checkpoint,
            streaming,
        })
    }

    /// Loads `dir` (config.json + safetensors) fully resident with `threads` kernel
    /// threads, after validating every tensor against the config: [`Model::open`]
    /// with a resident store.
    pub fn load(dir: &Path, threads: usize) -> Result<Model> {
        Ok(Model::open(dir, StoreOptions::Resident, threads)?.model)
    }
}
