//! Step 1 of a sweep: the spec's points with their budgets resolved against the
//! plan (floor and model bytes per layout, IO mode, prefetch policy and context), and the
//! selection of one shard's points into runnable slots and below-floor points.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use memdial::engine::arena::Scratch;
use memdial::format::checkpoint::Checkpoint;
use memdial::io::IoMode;
use memdial::store::plan::{plan_unchecked, Prefetch, Sequences};

use crate::args::as_usage;

use super::plugin::{EnginePlugin, Opaque};
use crate::sweep::layout::LayoutKind;
use crate::sweep::spec::{
    BudgetExpr, Point, PromptSpec, RunSlot, Shard, Spec, DEFAULT_PLAN_CONTEXT,
};

/// A point with its budget resolved against the plan.
pub struct Resolved {
    /// The point.
    pub point: Point,
    /// Its budget, bytes.
    pub budget_bytes: u64,
    /// The plan's floor for its IO mode, prefetch policy and context, bytes.
    pub floor_bytes: u64,
    /// The settings that floor is for ([`crate::planning::floor_for`]): IO mode,
    /// prefetch, kernel threads, positions, sequences.
    pub floor_for: String,
    /// Positions per sequence the point is planned for (a served point's
    /// `--max-context`).
    pub context: usize,
}

/// A plan's floor is cached per layout, IO mode, prefetch policy, context, threads
/// and sequences.
type FloorKey = (LayoutKind, IoMode, Prefetch, usize, usize, usize);

/// Tokens of each prompt (`None`: it cannot be tokenized).
fn prompt_lengths(spec: &Spec, model: &Path) -> Vec<Option<usize>> {
    let tok = memdial::format::tokenizer::Tokenizer::from_dir(model).ok();
    spec.prompts
        .iter()
        .map(|p| match p {
            PromptSpec::Ids { ids } => Some(ids.len()),
            PromptSpec::Text(t) => tok.as_ref().map(|k| k.encode(t, true).len()),
            PromptSpec::File { file } => std::fs::read_to_string(file)
                .ok()
                .and_then(|t| tok.as_ref().map(|k| k.encode(&t, true).len())),
        })
        .collect()
}

/// The context a run of a prompt of `n` tokens at `depth` is planned for:
/// max(`max_context`, depth + prompt + `max_tokens`), or `max_context` (else
/// [`DEFAULT_PLAN_CONTEXT`] + depth) when the prompt cannot be tokenized.
fn plan_context(spec: &Spec, n: Option<usize>, depth: usize) -> usize {
    match n {
        Some(n) => spec
            .max_context
            .unwrap_or(0)
            .max(depth + n + spec.max_tokens),
        None => spec.max_context.unwrap_or(DEFAULT_PLAN_CONTEXT + depth),
    }
}

/// The largest K of the spec's `speculate` values (0: none speculates).
fn longest_drafts(spec: &Spec) -> usize {
    spec.speculate
        .0
        .iter()
        .filter_map(|v| memdial::engine::speculate::Speculate::parse(v).ok())
        .map(|v| v.k())
        .max()
        .unwrap_or(0)
}

/// All points of a spec resolved against one model.
pub struct Points {
    /// Every point of the spec, in index order.
    pub resolved: Vec<Resolved>,
    /// Tensor bytes of the model.
    pub model_bytes: u64,
    /// The model's shard files.
    pub shard_files: Vec<PathBuf>,
}

/// The part of a sweep one invocation runs (one shard, or all).
pub struct Selection<'a> {
    /// The shard's points, by index.
    pub by_index: BTreeMap<usize, &'a Resolved>,
    /// Points whose budget is below the floor (recorded, never run).
    pub below: Vec<&'a Resolved>,
    /// Points their engine cannot run (resident-only under its memory need, an IO
    /// mode it lacks), with the reason: recorded as `n/a`, neither run nor failed.
    pub na: Vec<(&'a Resolved, String)>,
    /// Runs of the points at or above the floor, in run order.
    pub slots: Vec<RunSlot>,
}

impl Points {
    /// Resolves every point of `spec` against the model in `model` (and, for the
    /// `lossless` and `raw` points of a `layout` axis, its packed layouts `packed`). With several
    /// layouts, a budget relative to the floor resolves against the largest floor of
    /// the layouts the point's IO mode can read, so every layout runs at the same
    /// budget; each point keeps its own floor for the below-floor check.
    ///
    /// Errors: the checkpoint or config cannot be read (usage error), a `lossless`
    /// point without `packed`, or a point's plan fails.
    pub fn resolve(
        spec: &Spec,
        model: &Path,
        packed: &[super::packed::PackedLayout],
        engines: &dyn EnginePlugin,
    ) -> Result<Points> {
        if let Some(m) = engines.opaque() {
            return Self::resolve_opaque(spec, m, engines);
        }
        let ck = Checkpoint::open(model).map_err(as_usage)?;
        let cfg = memdial::format::config::load_config(model).map_err(as_usage)?;
        let packed_ck = packed_checkpoints(packed)?;
        let lengths = prompt_lengths(spec, model);
        let contexts: Vec<usize> = lengths.iter().map(|&n| plan_context(spec, n, 0)).collect();
        // Every depth of a budget runs at the same bytes: the floor of the deepest.
        let deepest = spec.depth.0.iter().copied().max().unwrap_or(0) as usize;
        let mut floors: HashMap<FloorKey, (u64, u64)> = HashMap::new();
        // Every concurrency of a budget runs at the same bytes: the floor of the largest.
        let top = spec.concurrency.0.iter().copied().max().unwrap_or(1) as usize;
        // Every `speculate` value of a budget too: the floor of the longest drafts.
        let draft_k = longest_drafts(spec);
        let mut floor_of = |layout: LayoutKind,
                            p: &Point,
                            ctx: usize,
                            seqs: usize|
         -> Result<(u64, u64)> {
            let key = (layout, p.io, p.prefetch, ctx, p.threads, seqs);
            if let Some(v) = floors.get(&key) {
                return Ok(*v);
            }
            let (ck, cfg) = match layout {
                LayoutKind::Safetensors => (&ck, &cfg),
                packed => packed_ck.get(&packed).map(|(k, c)| (k, c)).with_context(|| {
                    format!("the spec's `{packed}` layout needs the packed model (internal: none was prepared)")
                })?,
            };
            let s = Sequences {
                max_context: ctx,
                max_batch: seqs,
            };
            let mut act = Scratch::activations(cfg, s, p.threads);
            if seqs == 1 {
                act.bytes += memdial::engine::speculate::speculation_bytes(
                    cfg,
                    act.step_tokens,
                    act.threads,
                    ctx,
                    draft_k,
                );
            }
            let plan = plan_unchecked(cfg, ck, u64::MAX / 4, p.io, p.prefetch, act).with_context(
                || {
                    format!(
                        "planning {} / {} ({})",
                        p.io.as_str(),
                        p.prefetch.as_str(),
                        layout.as_str()
                    )
                },
            )?;
            Ok(*floors
                .entry(key)
                .or_insert((plan.floor_bytes, plan.model_bytes)))
        };
        let mut out = vec![];
        for p in spec.points() {
            let depth = p.depth as usize;
            let ctx = plan_context(spec, lengths[p.prompt_index], depth);
            let deep_ctx = plan_context(spec, lengths[p.prompt_index], deepest);
            let own = p.layout;
            let seqs = p.concurrency as usize;
            // A served point's clients send every prompt: planned for the longest.
            let served_ctx = contexts.iter().copied().max().unwrap_or(ctx);
            let ctx = if seqs > 1 { served_ctx } else { ctx };
            let top_ctx = if top > 1 { served_ctx } else { deep_ctx };
            if own.is_block_pack() && p.io == IoMode::Mmap {
                // `n/a` (the layout cannot be mapped): its budget is the safetensors one.
                let (floor, model_bytes) = floor_of(LayoutKind::Safetensors, &p, ctx, seqs)?;
                let top_floor = floor_of(LayoutKind::Safetensors, &p, top_ctx, top)?.0;
                let budget = p.budget.resolve(model_bytes, floor.max(top_floor))?;
                out.push(Resolved {
                    floor_for: crate::planning::floor_for(p.io, p.prefetch, p.threads, ctx, seqs),
                    point: p,
                    budget_bytes: budget,
                    floor_bytes: floor,
                    context: ctx,
                });
                continue;
            }
            let floor = floor_of(own, &p, ctx, seqs)?.0;
            let mut budget_floor = floor.max(floor_of(own, &p, top_ctx, top)?.0);
            for &l in spec.layout.0.iter().filter(|l| **l != own) {
                if !(l.is_block_pack() && p.io == IoMode::Mmap) {
                    budget_floor = budget_floor.max(floor_of(l, &p, top_ctx, top)?.0);
                }
            }
            // A lossy layout's experts are smaller: its budgets are the exact model's.
            let bytes_of = if own.is_lossy() {
                LayoutKind::Safetensors
            } else {
                own
            };
            let model_bytes = floor_of(bytes_of, &p, ctx, seqs)?.1;
            let budget = p.budget.resolve(model_bytes, budget_floor)?;
            out.push(Resolved {
                floor_for: crate::planning::floor_for(p.io, p.prefetch, p.threads, ctx, seqs),
                point: p,
                budget_bytes: budget,
                floor_bytes: floor,
                context: ctx,
            });
        }
        Ok(Points {
            resolved: out,
            model_bytes: memdial::format::inspect::model_bytes(&cfg, &ck),
            shard_files: ck.shards.iter().map(|s| s.path.clone()).collect(),
        })
    }

    /// The points of `spec` on an opaque model ([`super::plugin::Opaque`]): model
    /// bytes are its files' bytes, a point's floor is its engine's at its IO mode
    /// (the plug-in's `floor_of`; 0, nothing below it, when the engine has none).
    ///
    /// Errors (usage): a `floor` budget for an engine with no floor at that IO mode.
    fn resolve_opaque(spec: &Spec, m: Opaque<'_>, engines: &dyn EnginePlugin) -> Result<Points> {
        let mut out = vec![];
        for p in spec.points() {
            let expr = p.budget;
            let floor = engines.floor_of(&p.engine, p.io);
            if matches!(expr, BudgetExpr::Floor(_)) && floor.is_none() {
                return Err(crate::args::usage(format!(
                    "budget {:?}: engine {:?} has no floor at io = {:?} for {}, a model memdial's \
                     engine does not read (memdial's plan gives floors only for its own models): \
                     declare one in [engine.{}] (`floor = \"256MiB\"` or `floor_command`), or set \
                     `floor_search` (see docs/engines.md)",
                    p.budget_spec,
                    p.engine,
                    p.io.as_str(),
                    m.path.display(),
                    crate::sweep::spec::engines::def::toml_key(&p.engine)
                )));
            }
            let floor = floor.unwrap_or(0);
            let budget = expr
                .resolve(m.bytes, floor)
                .map_err(|e| as_usage(e.into()))?;
            out.push(Resolved {
                floor_for: format!("engine {}'s floor at io = {}", p.engine, p.io.as_str()),
                point: p,
                budget_bytes: budget,
                floor_bytes: floor,
                context: spec.max_context.unwrap_or(DEFAULT_PLAN_CONTEXT),
            });
        }
        Ok(Points {
            resolved: out,
            model_bytes: m.bytes,
            shard_files: m.files.to_vec(),
        })
    }

    /// The points of `shard` (all when `None`) split into runs, below-floor points
    /// and points their engine cannot run.
    pub fn select(
        &self,
        spec: &Spec,
        shard: Option<Shard>,
        engines: &dyn EnginePlugin,
    ) -> Selection<'_> {
        let selected: Vec<&Resolved> = self
            .resolved
            .iter()
            .filter(|r| shard.map(|s| s.contains(r.point.index)).unwrap_or(true))
            .collect();
        let na: Vec<(&Resolved, String)> = selected
            .iter()
            .filter_map(|r| {
                engines
                    .not_applicable(
                        &r.point.engine,
                        spec,
                        &r.point,
                        r.budget_bytes,
                        self.model_bytes,
                    )
                    .map(|why| (*r, why))
            })
            .collect();
        let is_na = |r: &Resolved| na.iter().any(|(x, _)| x.point.index == r.point.index);
        let runnable: Vec<Point> = selected
            .iter()
            .filter(|r| r.budget_bytes >= r.floor_bytes && !is_na(r))
            .map(|r| r.point.clone())
            .collect();
        Selection {
            by_index: selected.iter().map(|r| (r.point.index, *r)).collect(),
            below: selected
                .iter()
                .copied()
                .filter(|r| r.budget_bytes < r.floor_bytes && !is_na(r))
                .collect(),
            slots: spec.runs(&runnable),
            na,
        }
    }
}

/// Each packed layout's checkpoint and config (a lossy layout's config differs from
/// the model's: its expert format). Errors (usage): one cannot be opened.
fn packed_checkpoints(
    packed: &[super::packed::PackedLayout],
) -> Result<HashMap<LayoutKind, (Checkpoint, memdial::format::config::ModelConfig)>> {
    packed
        .iter()
        .map(|p| {
            let c = memdial::format::config::load_config(&p.dir)?;
            Ok((p.kind, (Checkpoint::open(&p.dir)?, c)))
        })
        .collect::<Result<_>>()
        .map_err(as_usage)
}
