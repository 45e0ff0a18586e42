//! Floors of other engines on a model memdial's engine does not read (where memdial's
//! plan has none): the least budget an engine runs the model in, per IO mode.
//!
//! In order, from the engine's `[engine.NAME]` table / adapter:
//! 1. `floor`: a declared figure (a size, a fraction of the model, or per IO mode);
//! 2. `floor_command`: a command printing it (bytes or a size on its first line);
//! 3. `floor_search`: a bisection ([`bisect`]) for the smallest memory-cgroup budget at
//!    which the engine *completes* a run — exit 0, its ids read, within `max_run_s` —
//!    from a cold cache (the model's files evicted and checked with mincore before
//!    each probe), to `resolution`. An mmap engine completes at almost any budget, only
//!    slower, so the time bound is part of what the floor means. The search is only
//!    run for the (engine, IO mode) pairs a `floor` budget asks for, and cached per
//!    model identity, engine, engine version, the IO mode's arguments and the search
//!    settings under
//!    `$MEMDIAL_ENGINE_CACHE/floors/` (the probes with it). An engine with a setup
//!    step has it run first (once per model, into the same cached directory its runs
//!    use), its outputs are evicted with the model before each probe, and the cache
//!    key holds the setup's identity (its command line and when it last ran).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::registry::{Engine, Registry};
use crate::args::usage;
use crate::sweep::run::cgroup::{Mode, RunCgroup};
use crate::sweep::run::plugin::RunCtx;
use crate::sweep::spec::engines::def::FloorSearch;
use crate::sweep::spec::{BudgetExpr, Point, Spec};
use memdial::util::units::fmt_bytes;

pub use super::opaque::Floor;

/// One probe of a floor search.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Probe {
    /// The cgroup budget (the cgroup's limit is this plus the spec's `cgroup_slack`).
    pub budget_bytes: u64,
    /// Exit 0, ids read, within the time bound.
    pub completed: bool,
    /// Wall time of the run, seconds.
    pub wall_s: f64,
    /// Why it did not complete (empty when it did).
    pub why: String,
}

/// What a floor search found (also the cache file's content).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SearchResult {
    /// The smallest completing budget found, bytes.
    pub floor_bytes: u64,
    /// Every probe in the order run.
    pub probes: Vec<Probe>,
    /// What the search was for (engine, version, IO mode, threads, tokens, settings).
    pub key: String,
}

/// Smallest budget in `[lo, hi]` for which `complete` holds, assuming it holds from
/// some budget up (monotone): probes `hi` (which must complete), then `lo`, then
/// bisects until the interval between a failing and a completing budget is at most
/// `resolution` bytes (midpoints rounded up to whole MiB). Returns the smallest
/// completing budget probed and every probe.
///
/// Errors: `hi` does not complete (the message names its probe), or `complete` fails.
pub fn bisect(
    lo: u64,
    hi: u64,
    resolution: u64,
    mut complete: impl FnMut(u64) -> Result<Probe>,
) -> Result<(u64, Vec<Probe>)> {
    let mut probes = vec![];
    let top = complete(hi)?;
    let ok = top.completed;
    probes.push(top);
    if !ok {
        bail!(
            "it does not complete even at {}: {}",
            fmt_bytes(hi),
            probes[0].why
        );
    }
    if lo >= hi {
        return Ok((hi, probes));
    }
    let bottom = complete(lo)?;
    let ok = bottom.completed;
    probes.push(bottom);
    if ok {
        return Ok((lo, probes));
    }
    let (mut bad, mut good) = (lo, hi);
    while good - bad > resolution.max(1 << 20) {
        let mid = (bad + (good - bad) / 2).div_ceil(1 << 20) << 20;
        if mid >= good || mid <= bad {
            break;
        }
        let p = complete(mid)?;
        if p.completed {
            good = mid;
        } else {
            bad = mid;
        }
        probes.push(p);
    }
    Ok((good, probes))
}

/// What a floor search run needs of the sweep.
pub struct Ctx<'a> {
    /// The model (`--model`).
    pub model: &'a Path,
    /// Its files (evicted before each probe).
    pub files: &'a [PathBuf],
    /// Its bytes.
    pub model_bytes: u64,
    /// Its identity digest.
    pub identity: &'a str,
    /// Prompt ids of every prompt (the first is used).
    pub prompt_ids: &'a [Vec<u32>],
    /// Where memory cgroups are made (`None`: a search cannot run).
    pub cg_mode: Option<&'a Mode>,
    /// The spec's `cgroup_slack`, bytes.
    pub slack: u64,
    /// Print progress on stderr.
    pub verbose: bool,
}

/// Fills `reg.floors` for an opaque model: every engine's declared or commanded floor
/// at each IO mode of the spec, and a searched one where a `floor` budget needs it.
///
/// Errors (usage): a bad declared floor or floor command; a search that cannot run
/// (no memory cgroup) or whose highest budget does not complete.
pub fn resolve(reg: &mut Registry, spec: &Spec, c: &Ctx) -> Result<()> {
    let needs_floor: Vec<Point> = spec
        .points()
        .into_iter()
        .filter(|p| matches!(p.budget, BudgetExpr::Floor(_)))
        .collect();
    for e in reg.engines.clone() {
        if e.is_memdial() || e.not_here.is_some() {
            continue;
        }
        for io in &spec.io {
            let key = (e.name.to_string(), io.as_str().to_string());
            if let Some(f) = declared(reg, &e, io.as_str(), c)? {
                reg.floors.insert(key, f);
                continue;
            }
            let Some(p) = needs_floor
                .iter()
                .find(|p| p.engine == e.name && p.io == *io)
            else {
                continue;
            };
            // Points the engine cannot run anyway (an IO mode it lacks) need no floor.
            if reg
                .not_applicable(&e, spec, p, u64::MAX / 4, c.model_bytes)
                .is_some()
            {
                continue;
            }
            let settings = e.def.floor_search.clone().unwrap_or_default();
            let f = search(reg, &e, spec, p, &settings, c).map_err(|err| {
                usage(format!(
                    "engine {:?}: floor search at io = {:?}: {err:#}",
                    e.name,
                    io.as_str()
                ))
            })?;
            reg.floors.insert(key, f);
        }
    }
    Ok(())
}

/// `floor` or `floor_command` of engine `e` at `io`, if it has one.
fn declared(reg: &Registry, e: &Engine, io: &str, c: &Ctx) -> Result<Option<Floor>> {
    let bad = |what: &str, err: anyhow::Error| {
        usage(format!(
            "engine {:?}: {what} at io = {io:?}: {err:#}",
            e.name
        ))
    };
    if let Some(text) = e.def.floor.as_ref().and_then(|d| d.for_io(io)) {
        let b = size_or_fraction(text, c.model_bytes).map_err(|err| bad("floor", err))?;
        return Ok(Some(Floor {
            bytes: b,
            source: "declared".into(),
        }));
    }
    if let Some(cmd) = &e.def.floor_command {
        let mut v = reg.vars_for(e, c.model);
        v.set("io", io);
        let args = v
            .expand_args(cmd)
            .map_err(|err| bad("floor_command", err))?;
        let line = super::setup::first_line_of(&args)
            .with_context(|| format!("{} printed nothing (or failed)", args.join(" ")))
            .map_err(|err| bad("floor_command", err))?;
        let b = size_or_fraction(line.trim(), c.model_bytes)
            .map_err(|err| bad("floor_command's output", err))?;
        return Ok(Some(Floor {
            bytes: b,
            source: "floor_command".into(),
        }));
    }
    Ok(None)
}

/// Bytes of `"256MiB"`, `"123456"` or `"40%"` (of `model_bytes`).
fn size_or_fraction(text: &str, model_bytes: u64) -> Result<u64> {
    match BudgetExpr::parse(text)? {
        BudgetExpr::Floor(_) => bail!("{text:?}: a floor cannot be given as a multiple of itself"),
        x => Ok(x.resolve(model_bytes, 0)?),
    }
}

/// The engine's version for the cache key: its version command's first line, else
/// its binary's size + SHA-256 label.
fn version_of(reg: &Registry, e: &Engine, model: &Path) -> String {
    let v = reg.vars_for(e, model);
    e.def
        .version_command
        .as_ref()
        .and_then(|cmd| v.expand_args(cmd).ok())
        .and_then(|a| super::setup::first_line_of(&a))
        .or_else(|| e.bin.as_deref().and_then(super::setup::file_sha_label))
        .unwrap_or_default()
}

fn search(
    reg: &Registry,
    e: &Engine,
    spec: &Spec,
    p: &Point,
    s: &FloorSearch,
    c: &Ctx,
) -> Result<Floor> {
    let Some(mode) = c.cg_mode else {
        bail!("no memory cgroup can be made here, so no budget can be held: declare the engine's `floor`");
    };
    if !s.max_run_s.is_finite() || s.max_run_s <= 0.0 {
        bail!("max_run_s must be a positive number of seconds");
    }
    let res = size_or_fraction(&s.resolution, c.model_bytes).context("resolution")?;
    let lo = size_or_fraction(&s.lowest, c.model_bytes).context("lowest")?;
    let hi = size_or_fraction(&s.highest, c.model_bytes).context("highest")?;
    let ids = c.prompt_ids.first().cloned().unwrap_or_default();
    if ids.is_empty() {
        bail!("the spec's first prompt has no ids");
    }
    let (e, setup) = &with_setup(reg, e, c)?;
    let version = version_of(reg, e, c.model);
    let io_args = e
        .def
        .io
        .as_ref()
        .and_then(|m| m.get(p.io.as_str()))
        .map(|a| a.join(" "))
        .unwrap_or_default();
    let mut key = format!(
        "engine={} version={} io={} io_args=[{}] threads={} prompt_tokens={} max_tokens={} \
         max_run_s={} resolution={} lowest={} highest={} slack={}",
        e.name,
        version,
        p.io.as_str(),
        io_args,
        p.threads,
        ids.len(),
        spec.max_tokens,
        s.max_run_s,
        res,
        lo,
        hi,
        c.slack
    );
    if let Some(s) = setup {
        key += &format!(" setup=[{s}]");
    }
    let digest = hex16(&Sha256::digest(key.as_bytes()));
    let dir = super::setup::setup_cache()
        .join("floors")
        .join(sanitize(&e.name))
        .join(format!(
            "{}-{digest}",
            &c.identity[..c.identity.len().min(16)]
        ));
    let cache = dir.join("floor.json");
    if let Some(bytes) = cached(&cache, &key) {
        return Ok(Floor {
            bytes,
            source: "search (cached)".into(),
        });
    }
    if c.verbose {
        eprintln!(
            "engine {}: searching its floor at io = {} (runs completing within {} s, to {}, between {} and {}; cached in {})",
            e.name,
            p.io.as_str(),
            s.max_run_s,
            fmt_bytes(res),
            fmt_bytes(lo),
            fmt_bytes(hi),
            dir.display()
        );
    }
    let t0 = Instant::now();
    let (floor, probes) = bisect(lo, hi, res, |budget| {
        let r = probe(reg, e, spec, p, &ids, budget, s.max_run_s, mode, &dir, c)?;
        if c.verbose {
            eprintln!(
                "  {}: {} ({:.1} s){}",
                fmt_bytes(budget),
                if r.completed { "completes" } else { "does not" },
                r.wall_s,
                if r.why.is_empty() {
                    String::new()
                } else {
                    format!(": {}", r.why)
                }
            );
        }
        Ok(r)
    })?;
    let r = SearchResult {
        floor_bytes: floor,
        probes,
        key,
    };
    std::fs::create_dir_all(&dir)?;
    crate::export::write_json(&cache, &r)?;
    if c.verbose {
        eprintln!(
            "engine {}: floor at io = {}: {} ({} probes, {:.0} s)",
            e.name,
            p.io.as_str(),
            fmt_bytes(floor),
            r.probes.len(),
            t0.elapsed().as_secs_f64()
        );
    }
    Ok(Floor {
        bytes: floor,
        source: "search".into(),
    })
}

/// Engine `e` ready for probes: with a setup step, the step run (once per model,
/// cached in the directory the sweep's runs use) and `setup_dir` set, and the setup's
/// identity for the cache key: its command line as run and when it ran (a setup
/// directory removed and made again is another setup). `None` without a setup.
///
/// Errors: the setup step fails.
fn with_setup(reg: &Registry, e: &Engine, c: &Ctx) -> Result<(Engine, Option<String>)> {
    let Some(setup) = &e.def.setup else {
        return Ok((e.clone(), None));
    };
    let dir = super::registry::setup_dir(&e.name, c.identity);
    let mut vars = reg.vars_for(e, c.model);
    vars.set("setup_dir", dir.display());
    super::setup::run_setup(&e.name, setup, &vars, &dir)?;
    let ran = std::fs::metadata(dir.join(".memdial-setup-done"))
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let mut e = e.clone();
    e.setup_dir = Some(dir);
    Ok((
        e,
        Some(format!("{} @{ran}", vars.expand_args(setup)?.join(" "))),
    ))
}

/// The floor cached in `cache` for the search `key`, bytes (none if absent, unreadable
/// or for another key).
fn cached(cache: &Path, key: &str) -> Option<u64> {
    std::fs::read_to_string(cache)
        .ok()
        .and_then(|t| serde_json::from_str::<SearchResult>(&t).ok())
        .filter(|r| r.key == key)
        .map(|r| r.floor_bytes)
}

/// One cold run of engine `e` at `budget` in a memory cgroup of budget + slack.
#[allow(clippy::too_many_arguments)]
fn probe(
    reg: &Registry,
    e: &Engine,
    spec: &Spec,
    p: &Point,
    ids: &[u32],
    budget: u64,
    max_run_s: f64,
    mode: &Mode,
    dir: &Path,
    c: &Ctx,
) -> Result<Probe> {
    let run_dir = dir.join(format!("probe-{}", budget >> 20));
    let _ = std::fs::remove_dir_all(&run_dir);
    std::fs::create_dir_all(&run_dir)?;
    let text = super::runs::prompt_text(spec, p.prompt_index);
    let ctx = RunCtx {
        model_dir: c.model,
        prompt_ids: ids,
        prompt_text: text.as_deref(),
        point: p,
        budget_bytes: budget,
        max_tokens: spec.max_tokens,
        run_dir: &run_dir,
        trunk_share_bytes: None,
    };
    let ext = reg.command(e, &ctx)?;
    // The engine's own files (setup outputs, a model outside the model directory) are
    // made cold and watched with the model's, as in the sweep's runs.
    let mut files = c.files.to_vec();
    files.extend(super::runs::cold_files(reg, e, &ctx));
    files.sort();
    files.dedup();
    let cold = crate::sweep::run::coldcache::make_cold(&files)?;
    if !cold.verified() {
        bail!(
            "{} of the model stayed resident after eviction",
            fmt_bytes(cold.resident_bytes)
        );
    }
    let limit = memdial::util::budget::cgroup_limit(budget, c.slack)?;
    let cg = RunCgroup::create(mode, &format!("floor-{}", budget >> 20), limit)?;
    let prompt = crate::sweep::spec::PromptSpec::Ids { ids: ids.to_vec() };
    let req = crate::sweep::run::runner::RunRequest {
        bin: &ext.program,
        model: c.model,
        point: p,
        budget_bytes: budget,
        prompt: &prompt,
        max_tokens: spec.max_tokens,
        max_context: spec.max_context,
        extra_args: &[],
        perturb_logit: None,
        run_dir: &run_dir,
        timeout: Duration::from_secs_f64(max_run_s),
        cgroup: Some(&cg),
        watch_files: &files,
        external: Some(&ext),
    };
    let o = req.execute()?;
    let oom = cg.oom_kills().unwrap_or(0) > 0;
    drop(cg);
    let why = if o.timed_out {
        format!("did not finish within {max_run_s} s")
    } else if oom {
        "OOM-killed in its cgroup".to_string()
    } else if o.exit_code != Some(0) {
        format!(
            "exit {}{}",
            o.exit_code
                .map(|x| x.to_string())
                .unwrap_or_else(|| format!("by signal {}", o.signal.unwrap_or(0))),
            if o.stderr_tail.is_empty() {
                String::new()
            } else {
                format!(" ({})", o.stderr_tail)
            }
        )
    } else {
        let vars = reg.run_vars(e, &ctx)?;
        match super::output::read_metrics(e, &vars, &run_dir, ids.len(), o.started) {
            Ok(_) => String::new(),
            Err(err) => format!("{err:#}"),
        }
    };
    Ok(Probe {
        budget_bytes: budget,
        completed: why.is_empty(),
        wall_s: o.wall_s,
        why,
    })
}

fn hex16(b: &[u8]) -> String {
    b.iter().take(8).map(|x| format!("{x:02x}")).collect()
}

fn sanitize(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(floor: u64) -> impl FnMut(u64) -> Result<Probe> {
        move |b| {
            Ok(Probe {
                budget_bytes: b,
                completed: b >= floor,
                wall_s: 0.0,
                why: if b >= floor { "".into() } else { "oom".into() },
            })
        }
    }

    const MIB: u64 = 1 << 20;

    /// A made-up engine completing from 100 MiB up: the search between 16 MiB and
    /// 1 GiB to 4 MiB ends within (96, 100 + 4] MiB; hand-checked probe order.
    #[test]
    fn bisect_finds_the_smallest_completing_budget_to_the_resolution() {
        let (f, probes) = bisect(16 * MIB, 1024 * MIB, 4 * MIB, at(100 * MIB)).unwrap();
        assert!((100 * MIB..=104 * MIB).contains(&f), "{}", f / MIB);
        let tried: Vec<u64> = probes.iter().map(|p| p.budget_bytes / MIB).collect();
        assert_eq!(&tried[..4], &[1024, 16, 520, 268]);
        assert!(probes
            .iter()
            .all(|p| p.completed == (p.budget_bytes >= 100 * MIB)));
    }

    #[test]
    fn bisect_stops_at_lowest_or_fails_at_highest() {
        let (f, probes) = bisect(16 * MIB, 1024 * MIB, MIB, at(MIB)).unwrap();
        assert_eq!((f, probes.len()), (16 * MIB, 2));
        let e = bisect(16 * MIB, 1024 * MIB, MIB, at(2048 * MIB)).unwrap_err();
        assert!(format!("{e}").contains("does not complete even at"), "{e}");
    }
}
