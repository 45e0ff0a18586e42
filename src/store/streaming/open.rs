//! Opening a streaming store: plan the budget, read the trace and the checksum
//! manifest, open the shards, read the pinned set, start the IO threads.

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

use anyhow::{bail, Context, Result};

use super::caches::{Inner, Key};
use super::io::{self, lock, read_group, worker, Shared};
use super::rows::block_key;
use super::{mapped, verify_parts};
use super::{StreamOptions, StreamingStore};
use crate::format::checkpoint::Checkpoint;
use crate::format::config::ModelConfig;
use crate::io::{AlignedBuf, IoMode, ShardFile};
use crate::store::plan::{plan, Activations, Prefetch};
use crate::store::trace;
use crate::store::Bytes;
use crate::util::digest::sha256_hex;

impl StreamingStore {
    /// Plans the budget for `act.seqs` (up to `max_batch` sequences of
    /// `opts.max_context` positions each) with the activation arena `act`
    /// ([`crate::store::plan::plan`], refusing a budget under the floor), opens the
    /// shards in the chosen IO mode, reads the pinned set and starts the IO threads.
    ///
    /// Errors: the plan's (the floor names the state as sequences × bytes each);
    /// `act` planned for another context than `opts.max_context`; mmap on a packed
    /// checkpoint; `--prefetch oracle` without a trace; IO and manifest errors.
    pub fn open(
        cfg: &ModelConfig,
        ck: &Checkpoint,
        opts: StreamOptions,
        act: Activations,
    ) -> Result<Self> {
        let t0 = Instant::now();
        if opts.io == IoMode::Mmap && ck.lossless.is_some() {
            return Err(crate::util::error::UsageError::Invalid(format!(
                "--io mmap is n/a on a packed (lossless) checkpoint ({}): a mapping can only \
                 hand out the coded bytes on disk, and the model must read decoded ones; use \
                 --io direct or --io buffered",
                ck.dir.display()
            ))
            .into());
        }
        if act.seqs.max_context != opts.max_context {
            bail!(
                "the activation arena is planned for a context of {} positions, the store for {}",
                act.seqs.max_context,
                opts.max_context
            );
        }
        let threads = act.threads;
        let plan = plan(cfg, ck, opts.budget, opts.io, opts.prefetch, act)?;
        if opts.prefetch == Prefetch::Oracle && opts.trace.is_none() {
            return Err(crate::util::error::UsageError::OracleNeedsTrace.into());
        }
        let trace_in = match &opts.trace {
            Some(p) => {
                let records = trace::read(p)?;
                trace::check(&records, cfg, p)?;
                trace::by_token_layer(records)
            }
            None => HashMap::new(),
        };
        let files = ck
            .shards
            .iter()
            .map(|s| ShardFile::open(&s.path, opts.io))
            .collect::<Result<Vec<_>>>()?;
        let manifest = if opts.verify_reads {
            Some(crate::format::manifest::manifest_for_run(
                &ck.dir,
                cfg,
                &plan.read_keys(),
            )?)
        } else {
            None
        };
        let first_streamed = plan.pinned_groups;
        let mut group_of = HashMap::new();
        let mut by_layer = vec![Vec::new(); cfg.num_hidden_layers + 1];
        let mut row_groups: HashMap<String, Vec<_>> = HashMap::new();
        for (i, g) in plan.groups.iter().enumerate() {
            by_layer[g.layer.min(cfg.num_hidden_layers)].push(i);
            match &g.rows {
                Some((key, r)) => row_groups
                    .entry(key.clone())
                    .or_default()
                    .push((r.clone(), i)),
                None => {
                    for m in &g.read.members {
                        group_of.insert(m.key.clone(), i);
                    }
                }
            }
        }
        let embedding_loc = if plan.embedding_pinned {
            None
        } else {
            let full = format!("{}{}", cfg.weight_prefix, plan.embedding_key);
            let loc = ck
                .get(&full)
                .with_context(|| format!("tensor {full} is missing from {}", ck.dir.display()))?;
            Some((loc.shard, loc.offset, loc.len))
        };
        let shared = Arc::new(Shared {
            inner: Mutex::new(Inner::default()),
            cv: Condvar::new(),
            files,
            plan,
            io: opts.io,
            manifest,
            willneed_chunk: ck
                .shards
                .iter()
                .map(|s| mapped::willneed_chunk(&s.path))
                .collect(),
            folio: mapped::folio_max(),
            lossless: ck.lossless.as_ref().map(|p| io::PackRead {
                packed: p.clone(),
                pool: crate::format::lossless::read::StagingPool::new(&p.index),
                decoded_bytes: Default::default(),
                decode_ns: Default::default(),
            }),
        });
        if opts.io == IoMode::Mmap {
            // Trunk ranges fault in through 2 MiB folios (see `mapped`).
            for g in shared.plan.groups.iter().map(|g| &g.read) {
                for r in g
                    .ranges
                    .iter()
                    .filter(|r| r.end - r.start >= mapped::HUGE_MIN)
                {
                    mapped::prepare(&shared.files[r.shard], r.start, r.end, shared.folio);
                }
            }
        }
        let mut pinned_ranges = Vec::new();
        // Pinned small tensors and globals: read each tensor.
        let mut pinned = HashMap::new();
        let mut pinned_bytes = 0u64;
        let mut load_read = 0u64;
        for key in &shared.plan.pinned_keys {
            let full = format!("{}{}", cfg.weight_prefix, key);
            let loc = ck
                .get(&full)
                .or_else(|| {
                    crate::format::schema::expected_tensors(cfg)
                        .into_iter()
                        .find(|s| s.name == full)
                        .and_then(|s| s.aliases.iter().find_map(|a| ck.get(a)))
                })
                .with_context(|| format!("tensor {full} is missing from {}", ck.dir.display()))?;
            let f = &shared.files[loc.shard];
            let bytes = if opts.io == IoMode::Mmap {
                let map = f.map().unwrap().clone();
                // Fault the pinned tensor in now (exact pages), not on the compute thread.
                mapped::fault_in(
                    f,
                    loc.offset,
                    loc.offset + loc.len,
                    shared.willneed_chunk[loc.shard],
                    None,
                )?;
                pinned_ranges.push((loc.shard, loc.offset, loc.offset + loc.len));
                load_read += loc.len;
                Bytes::new(map, loc.offset as usize, loc.len as usize)
            } else {
                let mut b = AlignedBuf::new(f.buffer_len_for(loc.offset, loc.len));
                let (d, n) = shared.read_buf(loc.shard, loc.offset, loc.len, &mut b)?;
                load_read += n;
                let owner: Arc<dyn AsRef<[u8]> + Send + Sync> = Arc::new(b);
                Bytes::new(owner, d, loc.len as usize)
            };
            if let Some(man) = &shared.manifest {
                let got = sha256_hex(&bytes[..]);
                io::check_sha(
                    &full,
                    &f.path,
                    loc.offset,
                    &got,
                    man.get(key).map(|s| s.as_str()),
                )?;
            }
            pinned_bytes += loc.len;
            pinned.insert(key.clone(), bytes);
        }
        // Tensors read in parts (lm_head blocks, embedding rows): hashed whole once.
        load_read += verify_parts::verify_partial_tensors(
            &shared,
            ck,
            &cfg.weight_prefix,
            &verify_parts::partial_keys(&shared),
        )?;
        // Pinned trunk prefix: read each group into its own buffer.
        for (i, tg) in shared.plan.groups[..first_streamed].iter().enumerate() {
            let g = &tg.read;
            let (loaded, n) = read_group(&shared, g, None, true)?;
            pinned_ranges.extend(g.ranges.iter().map(|r| (r.shard, r.start, r.end)));
            shared.verify(Key::Group(i), &loaded)?;
            load_read += n;
            pinned_bytes += g.buffer_bytes;
            let loaded = Arc::new(loaded);
            for m in &g.members {
                let (owner, p) = loaded.locate(m.range, m.offset);
                let key = match &tg.rows {
                    Some((k, r)) => block_key(k, r.start),
                    None => m.key.clone(),
                };
                pinned.insert(key, Bytes::new(owner, p, m.len as usize));
            }
        }
        {
            let mut g = lock(&shared);
            g.metrics.load_bytes_read = load_read;
            g.pinned_ranges = pinned_ranges;
            g.metrics.expert_layer = vec![(0, 0); cfg.num_hidden_layers];
            if opts.record_trace.is_some() {
                g.trace_header = Some(trace::TraceHeader {
                    format: trace::FORMAT.into(),
                    version: trace::VERSION,
                    model: trace::TraceModel::of(cfg),
                    top_k: cfg.routed_experts().map_or(0, |(_, k)| k),
                    prefill_chunk: 0,
                    prompt_tokens: 0,
                    engine: format!("memdial {}", env!("CARGO_PKG_VERSION")),
                    plan: Some(trace::TracePlan {
                        budget_bytes: shared.plan.budget_bytes,
                        io: opts.io.as_str().into(),
                        prefetch: opts.prefetch.as_str().into(),
                        cache: opts.cache.as_str().into(),
                        start: "cold".into(),
                        max_context: opts.max_context,
                        threads,
                        identity: trace::plan_identity(&shared.plan),
                    }),
                });
            }
        }
        let workers = spawn_workers(&shared, opts.io_threads.max(1))?;
        let moe_layers = cfg
            .mlp_kinds
            .iter()
            .enumerate()
            .filter(|(_, k)| **k == crate::format::config::MlpKind::Moe)
            .map(|(i, _)| i)
            .collect();
        let store = StreamingStore {
            shared,
            workers,
            pinned,
            prefix: cfg.weight_prefix.clone(),
            expert_format: cfg.moe.as_ref().map(|m| m.expert_format),
            opts,
            first_streamed,
            group_of,
            by_layer,
            row_groups,
            embedding_loc,
            moe_layers,
            trace_in,
            pinned_bytes,
            load_s: t0.elapsed().as_secs_f64(),
        };
        store.update_peak(&mut lock(&store.shared));
        Ok(store)
    }
}

/// Starts `n` IO threads. A thread the OS refuses to spawn is an error (the ones
/// already started are shut down and joined), not a panic.
fn spawn_workers(shared: &Arc<Shared>, n: usize) -> Result<Vec<std::thread::JoinHandle<()>>> {
    let mut workers = Vec::with_capacity(n);
    for i in 0..n {
        let s = shared.clone();
        match crate::kernels::par::spawn_thread(format!("memdial-io-{i}"), i, move || worker(s)) {
            Ok(h) => workers.push(h),
            Err(e) => {
                lock(shared).shutdown = true;
                shared.cv.notify_all();
                for w in workers {
                    let _ = w.join();
                }
                bail!("cannot start IO thread {i} of {n}: {e}");
            }
        }
    }
    Ok(workers)
}
