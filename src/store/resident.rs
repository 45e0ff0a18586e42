//! Fully resident store: every tensor read into memory at open.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::{Arc, Mutex};

use anyhow::{bail, Context, Result};

use super::{Bytes, ExpertWeights, WeightStore};
use crate::format::checkpoint::Checkpoint;
use crate::format::config::{ExpertFormat, ModelConfig};
use crate::format::schema::{expected_tensors, layer_name, TensorSpec};

/// Every tensor of the model in RAM (one allocation per shard).
pub struct ResidentStore {
    prefix: String,
    tensors: HashMap<String, Bytes>,
    expert_format: Option<ExpertFormat>,
    /// Routed experts whose scales were checked ([`crate::format::integrity::check_expert`]),
    /// once each, when first handed out (not at open: no full scan).
    checked: Mutex<HashSet<(usize, usize)>>,
    /// Bytes held.
    pub resident_bytes: u64,
}

impl ResidentStore {
    /// Reads every tensor the config implies (aliases resolved) into memory; the
    /// tensors of a lossless pack are decoded ([`crate::format::lossless`]).
    /// Errors: a missing tensor, or IO failure naming file and offset.
    pub fn open(cfg: &ModelConfig, ck: &Checkpoint) -> Result<Self> {
        Self::open_specs(cfg, ck, &expected_tensors(cfg))
    }

    /// [`ResidentStore::open`] with the expected-tensor table computed by the caller.
    pub fn open_specs(cfg: &ModelConfig, ck: &Checkpoint, specs: &[TensorSpec]) -> Result<Self> {
        let mut shards: Vec<Option<Arc<Vec<u8>>>> = vec![None; ck.shards.len()];
        let mut tensors = HashMap::new();
        let mut resident = 0u64;
        let mut pool = None;
        for spec in specs {
            let Some((name, loc)) = std::iter::once(&spec.name)
                .chain(spec.aliases.iter())
                .find_map(|n| ck.get(n).map(|l| (n, l)))
            else {
                bail!("tensor {} is missing from {}", spec.name, ck.dir.display());
            };
            // Key by the canonical (schema) name, without the weight prefix.
            let key = spec
                .name
                .strip_prefix(&cfg.weight_prefix)
                .unwrap_or(&spec.name)
                .to_string();
            if let Some(p) = ck.lossless.as_ref().filter(|p| p.shard == loc.shard) {
                // A packed tensor: decoded once, here.
                let pool = pool.get_or_insert_with(|| {
                    crate::format::lossless::read::StagingPool::new(&p.index)
                });
                let v = crate::format::lossless::decode_tensor(
                    p,
                    &ck.shards[p.shard].path,
                    name,
                    pool,
                )?;
                resident += v.len() as u64;
                tensors.insert(key, Bytes::from_vec(v));
                continue;
            }
            if shards[loc.shard].is_none() {
                let sh = &ck.shards[loc.shard];
                let f = File::open(&sh.path)
                    .with_context(|| format!("cannot open {}", sh.path.display()))?;
                let mut buf = vec![0u8; sh.size as usize];
                f.read_exact_at(&mut buf, 0).with_context(|| {
                    format!("reading {} ({} bytes) failed", sh.path.display(), sh.size)
                })?;
                resident += sh.size;
                shards[loc.shard] = Some(Arc::new(buf));
            }
            let owner = shards[loc.shard].clone().unwrap();
            if loc.offset + loc.len > owner.len() as u64 {
                bail!(
                    "{}: range past end of {}",
                    spec.name,
                    ck.shards[loc.shard].path.display()
                );
            }
            tensors.insert(
                key,
                Bytes::new(owner, loc.offset as usize, loc.len as usize),
            );
        }
        Ok(ResidentStore {
            prefix: cfg.weight_prefix.clone(),
            tensors,
            expert_format: cfg.moe.as_ref().map(|m| m.expert_format),
            checked: Mutex::new(HashSet::new()),
            resident_bytes: resident,
        })
    }

    fn get(&self, key: &str) -> Result<Bytes> {
        self.tensors
            .get(key)
            .cloned()
            .with_context(|| format!("tensor {}{} is not in the checkpoint", self.prefix, key))
    }
}

impl WeightStore for ResidentStore {
    fn groups_chunk_experts(&self) -> bool {
        true
    }

    fn tensor(&self, layer: Option<usize>, name: &str) -> Result<Bytes> {
        match layer {
            Some(l) => self.get(&layer_name(l, name)),
            None => self.get(name),
        }
    }

    fn expert(&self, layer: usize, expert: usize) -> Result<ExpertWeights> {
        let fmt = self.expert_format.context("model has no routed experts")?;
        let mut get = |name: &str| self.get(name);
        let w = ExpertWeights {
            w1: crate::store::expert_mat(fmt, layer, expert, "w1", &mut get)?,
            w2: crate::store::expert_mat(fmt, layer, expert, "w2", &mut get)?,
            w3: crate::store::expert_mat(fmt, layer, expert, "w3", &mut get)?,
        };
        let mut checked = self.checked.lock().unwrap_or_else(|p| p.into_inner());
        if !checked.contains(&(layer, expert)) {
            w.check_e8m0(layer, expert)?;
            checked.insert((layer, expert));
        }
        Ok(w)
    }
}
