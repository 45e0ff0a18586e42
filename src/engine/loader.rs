//! The one loader: checkpoint directory → config → shard headers → expected-tensor
//! table → validation → weight store → [`Model`]. `memdial run`, `plan`, `inspect`
//! and the tests start here, so a checkpoint is read and checked the same way
//! everywhere and the expected-tensor table ([`crate::format::schema::expected_tensors`])
//! is computed once per load and passed on.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Result};

use crate::engine::arena::Scratch;
use crate::format::checkpoint::Checkpoint;
use crate::format::config::{load_config, ModelConfig};
use crate::format::schema::{expected_tensors, TensorSpec};
use crate::kernels::Par;
use crate::model::Model;
use crate::store::plan::Sequences;
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
    /// shared activation arena ([`crate::engine::arena::Scratch::activations`]).
    ///
    /// Errors: as [`Model::open`].
    pub fn open_batch(
        dir: &Path,
        store: StoreOptions,
        threads: usize,
        max_batch: usize,
    ) -> Result<Opened> {
        Model::open_with(dir, store, threads, max_batch, 0)
    }

    /// [`Model::open`] for a speculative run with drafts of up to `draft_k` ids
    /// ([`crate::engine::speculate`]): a streaming store's plan also counts the
    /// extra logit rows and the restore point
    /// ([`crate::engine::speculate::speculation_bytes`]; 0 for `draft_k` 0).
    ///
    /// Errors: as [`Model::open`].
    pub fn open_speculative(
        dir: &Path,
        store: StoreOptions,
        threads: usize,
        draft_k: usize,
    ) -> Result<Opened> {
        Model::open_with(dir, store, threads, 1, draft_k)
    }

    fn open_with(
        dir: &Path,
        store: StoreOptions,
        threads: usize,
        max_batch: usize,
        draft_k: usize,
    ) -> Result<Opened> {
        let checkpoint = Checkpointed::read(dir)?.validated()?;
        let (cfg, ck) = (&checkpoint.cfg, &checkpoint.ck);
        if draft_k > 0 && cfg.gpt_oss.is_some() {
            // The restore point knows KDA states and MLA latents; a sliding layer's
            // ring overwrites keys a rejected draft would need back.
            return Err(crate::util::error::UsageError::Invalid(
                "--speculate is not supported for gpt-oss checkpoints yet (use --speculate off)"
                    .into(),
            )
            .into());
        }
        let (ws, streaming): (Arc<dyn WeightStore>, _) = match store {
            StoreOptions::Resident => (
                Arc::new(ResidentStore::open_specs(cfg, ck, &checkpoint.specs)?),
                None,
            ),
            StoreOptions::Streaming(opts) => {
                let seqs = Sequences {
                    max_context: opts.max_context,
                    max_batch,
                };
                let act = streaming_activations(cfg, seqs, threads, draft_k);
                let s = Arc::new(StreamingStore::open(cfg, ck, opts, act)?);
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

/// The activations a streaming model allocates for `seqs` on `threads` kernel threads,
/// with exact speculation's restore point and logit rows for `draft_k` drafts (0: none):
/// what its store's plan (and so its floor) counts.
pub fn streaming_activations(
    cfg: &ModelConfig,
    seqs: Sequences,
    threads: usize,
    draft_k: usize,
) -> crate::store::plan::Activations {
    let mut act = Scratch::activations(cfg, seqs, threads);
    act.bytes += crate::engine::speculate::speculation_bytes(
        cfg,
        act.step_tokens,
        act.threads,
        seqs.max_context,
        draft_k,
    );
    act
}

/// Checks that a run's per-sequence memory fits in `available` bytes before it is
/// allocated: the state for `max_context` positions
/// ([`crate::store::plan::state_estimate`]: KDA states, MLA latent caches) plus the
/// activation arena for forwards of up to `chunk` tokens on `threads` threads
/// ([`crate::engine::arena::Scratch::planned_bytes`], which grows with `max_context` through
/// the MLA attention scores), plus, when `draft_tokens` is above 0, what exact speculation
/// adds ([`crate::engine::speculate::speculation_bytes`]: the restore point and the extra
/// logit rows of a `draft_tokens + 1`-row pass). `available` is normally
/// [`crate::util::sysmem::mem_available`]; `None` (unknown) passes.
///
/// Returns the bytes needed. Errors ([`crate::util::error::UsageError::Invalid`]) name the
/// bytes of each part and the bytes available, and say the context is too long
/// (the caller adds the flag that sets it).
pub fn check_run_memory(
    cfg: &ModelConfig,
    chunk: usize,
    threads: usize,
    max_context: usize,
    draft_tokens: usize,
    available: Option<u64>,
) -> std::result::Result<u64, crate::util::error::UsageError> {
    use crate::util::units::fmt_bytes;
    let state = crate::store::plan::state_estimate(cfg, max_context);
    let act = Scratch::planned_bytes(cfg, chunk, threads, max_context).saturating_add(
        crate::engine::speculate::speculation_bytes(cfg, chunk, threads, max_context, draft_tokens),
    );
    let need = state.saturating_add(act);
    match available {
        Some(avail) if need > avail => Err(crate::util::error::UsageError::Invalid(format!(
            "a context of {max_context} positions needs {} ({need} bytes: MLA latent caches and \
             KDA states {state} bytes, activations {act} bytes), more than the {} ({avail} bytes) \
             this machine has available (MemAvailable); use a shorter context",
            fmt_bytes(need),
            fmt_bytes(avail)
        ))),
        _ => Ok(need),
    }
}

#[cfg(test)]
mod run_memory_tests {
    use super::*;

    fn tiny_k3() -> ModelConfig {
        let j = crate::tools::fixture::preset("tiny-k3").unwrap().config;
        ModelConfig::from_json_str(&j.to_string()).unwrap()
    }

    #[test]
    fn a_context_beyond_available_memory_is_refused() {
        let cfg = tiny_k3();
        let ctx = 1_000_000_000usize;
        let need = check_run_memory(&cfg, 3, 2, ctx, 0, None).unwrap();
        // Lower bound by hand: every MLA layer's f32 latents (kv_lora_rank +
        // qk_rope_head_dim per position) plus the MLA scores of the attention
        // workspace, one f32 per position for each head rounded up to 8.
        let (_, mla) = cfg.layer_counts();
        let latents = (mla * ctx * (cfg.mla.kv_lora_rank + cfg.mla.qk_rope_head_dim) * 4) as u64;
        let scores = (ctx * cfg.mla.num_heads.div_ceil(8) * 8 * 4) as u64;
        assert!(need >= latents + scores, "{need} < {latents} + {scores}");
        // The boundary: exactly the bytes needed pass, one fewer is refused.
        assert_eq!(
            check_run_memory(&cfg, 3, 2, ctx, 0, Some(need)).unwrap(),
            need
        );
        let e = check_run_memory(&cfg, 3, 2, ctx, 0, Some(need - 1))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(&format!("a context of {ctx} positions needs"))
                && e.contains(&format!("({need} bytes:"))
                && e.contains(&format!("({} bytes) this machine has available", need - 1)),
            "{e}"
        );
        // A short context fits in a few MiB.
        assert!(check_run_memory(&cfg, 3, 2, 64, 0, Some(64 << 20)).is_ok());
    }

    /// A speculative run needs the restore point and the extra logit rows on top: for `mini`
    /// at K = 4, 7,457,512 bytes (derived by hand in `harness/tests/plan_config.rs`).
    #[test]
    fn speculation_adds_the_restore_point_to_a_runs_memory() {
        let j = crate::tools::fixture::preset("mini").unwrap().config;
        let cfg = ModelConfig::from_json_str(&j.to_string()).unwrap();
        for chunk in [1, 8] {
            let plain = check_run_memory(&cfg, chunk, 2, 64, 0, None).unwrap();
            let spec = check_run_memory(&cfg, chunk, 2, 64, 4, None).unwrap();
            assert_eq!(spec - plain, 7_457_512, "chunk {chunk}");
        }
    }
}
