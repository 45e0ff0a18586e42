//! Step 1 of a sweep: the spec's points with their budgets resolved against the
//! plan (floor and model bytes per IO mode, prefetch policy and context), and the
//! selection of one shard's points into runnable slots and below-floor points.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use memdial::checkpoint::Checkpoint;
use memdial::io::IoMode;
use memdial::store::plan::{plan_unchecked, Prefetch};

use crate::args::as_usage;

use crate::sweep::engines::registry::Registry;
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
    /// The settings that floor is for ([`crate::cmd_plan::floor_for`]): IO mode,
    /// prefetch, kernel threads, positions, one sequence.
    pub floor_for: String,
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
    /// Resolves every point of `spec` against the model in `model`.
    ///
    /// Errors: the checkpoint or config cannot be read (usage error), or a point's
    /// plan fails.
    pub fn resolve(spec: &Spec, model: &Path) -> Result<Points> {
        let ck = Checkpoint::open(model).map_err(as_usage)?;
        let cfg = memdial::config::load_config(model).map_err(as_usage)?;
        // The context the engine plans for: max(--max-context, prompt + max_tokens).
        let tok = memdial::tokenizer::Tokenizer::from_dir(model).ok();
        let contexts: Vec<usize> = spec
            .prompts
            .iter()
            .map(|p| {
                let n = match p {
                    PromptSpec::Ids { ids } => Some(ids.len()),
                    PromptSpec::Text(t) => tok.as_ref().map(|k| k.encode(t, true).len()),
                    PromptSpec::File { file } => std::fs::read_to_string(file)
                        .ok()
                        .and_then(|t| tok.as_ref().map(|k| k.encode(&t, true).len())),
                };
                match n {
                    Some(n) => spec.max_context.unwrap_or(0).max(n + spec.max_tokens),
                    None => spec.max_context.unwrap_or(DEFAULT_PLAN_CONTEXT),
                }
            })
            .collect();
        let mut floors: HashMap<(IoMode, Prefetch, usize, usize), (u64, u64)> = HashMap::new();
        let mut out = vec![];
        for p in spec.points() {
            let ctx = contexts[p.prompt_index];
            let key = (p.io, p.prefetch, ctx, p.threads);
            let (floor, model_bytes) = match floors.entry(key) {
                std::collections::hash_map::Entry::Occupied(e) => *e.get(),
                std::collections::hash_map::Entry::Vacant(e) => {
                    let plan =
                        plan_unchecked(&cfg, &ck, u64::MAX / 4, p.io, p.prefetch, ctx, p.threads)
                            .with_context(|| {
                            format!("planning {} / {}", p.io.as_str(), p.prefetch.as_str())
                        })?;
                    *e.insert((plan.floor_bytes, plan.model_bytes))
                }
            };
            let budget = BudgetExpr::parse(&p.budget_spec)?.resolve(model_bytes, floor)?;
            out.push(Resolved {
                floor_for: crate::cmd_plan::floor_for(p.io, p.prefetch, p.threads, ctx, 1),
                point: p,
                budget_bytes: budget,
                floor_bytes: floor,
            });
        }
        Ok(Points {
            resolved: out,
            model_bytes: memdial::inspect::model_bytes(&cfg, &ck),
            shard_files: ck.shards.iter().map(|s| s.path.clone()).collect(),
        })
    }

    /// The points of `shard` (all when `None`) split into runs, below-floor points
    /// and points their engine cannot run.
    pub fn select(&self, spec: &Spec, shard: Option<Shard>, engines: &Registry) -> Selection<'_> {
        let selected: Vec<&Resolved> = self
            .resolved
            .iter()
            .filter(|r| shard.map(|s| s.contains(r.point.index)).unwrap_or(true))
            .collect();
        let na: Vec<(&Resolved, String)> = selected
            .iter()
            .filter_map(|r| {
                let e = engines.get(&r.point.engine)?;
                engines
                    .not_applicable(e, spec, &r.point, r.budget_bytes, self.model_bytes)
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
