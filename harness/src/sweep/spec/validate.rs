//! Checking a spec: every axis non-empty, every value known and bounded, the
//! settings that go together given together; the typed [`Spec`] built once.

use anyhow::{bail, Context, Result};
use memdial::io::IoMode;
use memdial::store::eviction::CachePolicy;
use memdial::store::plan::Prefetch;
use memdial::util::budget::parse_size;

use super::prompt::check_prompts;
use super::read_rates::ReadRates;
use super::repeats::{parse_precision, DEFAULT_MAX_REPEATS, DEFAULT_PRECISION, MIN_AUTO_REPEATS};
use super::{
    engines, AutoRepeats, Budget, BudgetExpr, ComputeTime, DeviceRate, EngineName, Precision,
    Prediction, RawSpec, Repeats, Repetition, Spec, MAX_CONTEXT, MAX_DELAY_S, MAX_REPEATS,
    MAX_TIMEOUT_S, MIN_TIMEOUT_S,
};

impl Spec {
    /// Checks `raw` and builds the typed spec from it (`raw` is kept for the hash).
    ///
    /// Errors: an empty axis; an unknown or out-of-range value (budgets, IO modes,
    /// policies, limits); a value listed twice on one axis; settings that go together
    /// given apart (`repeats`, `trace`); an unknown engine or unreadable prompt file.
    pub fn from_raw(raw: RawSpec) -> Result<Self> {
        check_non_empty(&raw)?;
        let budgets = raw
            .budgets
            .iter()
            .map(|t| {
                Ok(Budget {
                    text: t.clone(),
                    expr: BudgetExpr::parse(t)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        crate::sweep::concurrency::check(&raw.concurrency.0)?;
        crate::sweep::speculate::check(&raw.speculate.0)?;
        crate::sweep::speculate::check_with_concurrency(&raw.speculate.0, &raw.concurrency.0)?;
        crate::sweep::depth::check(
            &raw.depth.0,
            &raw.concurrency.0,
            MAX_CONTEXT,
            (raw.max_context, raw.max_tokens),
        )?;
        let io = (raw.io_names.iter().map(|s| IoMode::parse(s))).collect::<Result<Vec<_>, _>>()?;
        let prefetch = prefetch_of(&raw)?;
        let cache = (raw.cache_names.iter().map(|s| CachePolicy::parse(s)))
            .collect::<Result<Vec<_>, _>>()?;
        if raw.threads.contains(&0) {
            bail!("threads must be ≥ 1");
        }
        if raw.max_tokens == 0 {
            bail!("max_tokens must be ≥ 1");
        }
        let repetition = repetition_of(&raw)?;
        check_limits(&raw, &repetition)?;
        refuse_duplicates(&raw, &io, &prefetch, &cache)?;
        let cgroup_slack = parse_size(&raw.cgroup_slack).context("invalid cgroup_slack")?;
        engines::resolve::validate(&raw.engines, raw.reference_engine.as_deref(), &raw.engine)?;
        check_prompts(&raw.prompts)?;
        let prediction = prediction_of(&raw)?;
        if let Some(slo) = &raw.slo {
            slo.check()?;
        }
        let lossy = raw.lossy.clone().unwrap_or_default();
        crate::sweep::layout::check_lossy_limits(&lossy, &raw.layout.0)?;
        if let Some(a) = raw.extra_args.iter().find(|a| a.contains('\0')) {
            bail!("extra_args: {a:?} holds a NUL character, which a command-line argument cannot hold");
        }
        Ok(Spec {
            name: raw.name.clone(),
            budgets,
            io,
            prefetch,
            cache,
            threads: raw.threads.clone(),
            prompts: raw.prompts.clone(),
            max_tokens: raw.max_tokens,
            repetition,
            max_context: raw.max_context,
            extra_args: raw.extra_args.clone(),
            timeout_s: raw.timeout_s,
            cgroup_slack,
            engines: raw
                .engines
                .iter()
                .map(|e| EngineName::from(e.as_str()))
                .collect(),
            reference_engine: raw.reference_engine.as_deref().map(EngineName::from),
            engine: raw.engine.clone(),
            start: raw.start.clone(),
            layout: raw.layout.clone(),
            concurrency: raw.concurrency.clone(),
            speculate: raw.speculate.clone(),
            depth: raw.depth.clone(),
            noise: raw.noise,
            prediction,
            delay_s: raw.delay_s,
            slo: raw.slo,
            lossy,
            raw,
        })
    }
}

/// Refuses an empty axis.
fn check_non_empty(raw: &RawSpec) -> Result<()> {
    for (name, n) in [
        ("budgets", raw.budgets.len()),
        ("io", raw.io_names.len()),
        ("prefetch", raw.prefetch_names.len()),
        ("cache", raw.cache_names.len()),
        ("threads", raw.threads.len()),
        ("prompts", raw.prompts.len()),
    ] {
        if n == 0 {
            bail!("axis `{name}` is empty");
        }
    }
    Ok(())
}

/// The prefetch policies; `oracle` needs a `--trace` in `extra_args`.
fn prefetch_of(raw: &RawSpec) -> Result<Vec<Prefetch>> {
    let mut out = Vec::new();
    for p in &raw.prefetch_names {
        let v = Prefetch::parse(p)?;
        out.push(v);
        if v == Prefetch::Oracle && !raw.extra_args.iter().any(|a| a == "--trace") {
            bail!(
                "prefetch \"oracle\" replays a recorded expert trace: record one with \
                 `memdial run … --record-trace F.jsonl` and add extra_args = [\"--trace\", \"F.jsonl\"] \
                 (the same prompt must be used)"
            );
        }
    }
    Ok(out)
}

/// Refuses timeouts, delays, contexts and repeat counts out of their bounds.
fn check_limits(raw: &RawSpec, rep: &Repetition) -> Result<()> {
    if raw.timeout_s.is_nan() || raw.timeout_s <= 0.0 {
        bail!("timeout_s must be positive");
    }
    if raw.timeout_s < MIN_TIMEOUT_S {
        bail!(
            "timeout_s = {:e} is less than {MIN_TIMEOUT_S} s: every run would time out",
            raw.timeout_s
        );
    }
    if raw.max_tokens > MAX_CONTEXT || raw.max_context.is_some_and(|c| c > MAX_CONTEXT) {
        bail!(
            "max_tokens = {} / max_context = {:?}: at most {MAX_CONTEXT} positions \
             (a larger context needs more memory than any machine has)",
            raw.max_tokens,
            raw.max_context
        );
    }
    if !(0.0..=MAX_DELAY_S).contains(&raw.delay_s) {
        bail!(
            "delay_s = {} must be a number of seconds from 0 to {MAX_DELAY_S}",
            raw.delay_s
        );
    }
    if raw.timeout_s > MAX_TIMEOUT_S {
        bail!(
            "timeout_s = {} is more than {MAX_TIMEOUT_S} s (7 days); give a finite per-run limit",
            raw.timeout_s
        );
    }
    if rep.measured > MAX_REPEATS || rep.warmup > MAX_REPEATS {
        bail!(
            "repeats = {} and warmup = {} must each be at most {MAX_REPEATS} per point",
            rep.measured,
            rep.warmup
        );
    }
    Ok(())
}

/// Refuses an axis that lists a value twice: the two points would share their run
/// ids, so the sweep could never be complete.
fn refuse_duplicates(
    raw: &RawSpec,
    io: &[IoMode],
    prefetch: &[Prefetch],
    cache: &[CachePolicy],
) -> Result<()> {
    fn first_dup<T: PartialEq + std::fmt::Debug>(v: &[T]) -> Option<&T> {
        v.iter()
            .enumerate()
            .find(|(i, x)| v[..*i].contains(x))
            .map(|(_, x)| x)
    }
    let budgets: Vec<String> = (raw.budgets.iter())
        .map(|b| {
            b.split_whitespace()
                .collect::<String>()
                .to_ascii_lowercase()
        })
        .collect();
    let dup = [
        ("budgets", first_dup(&budgets).map(|d| format!("{d:?}"))),
        ("io", first_dup(io).map(|d| format!("{:?}", d.as_str()))),
        (
            "prefetch",
            first_dup(prefetch).map(|d| format!("{:?}", d.as_str())),
        ),
        (
            "cache",
            first_dup(cache).map(|d| format!("{:?}", d.as_str())),
        ),
        ("threads", first_dup(&raw.threads).map(|d| d.to_string())),
        ("engines", first_dup(&raw.engines).map(|d| format!("{d:?}"))),
    ];
    for (axis, d) in dup {
        if let Some(d) = d {
            bail!("axis `{axis}` lists {d} more than once (each point must be distinct)");
        }
    }
    for coords in raw.later_axes() {
        let values: Vec<&str> = coords.iter().map(|c| c.value.as_str()).collect();
        if let (Some(d), Some(c)) = (first_dup(&values), coords.first()) {
            bail!(
                "axis `{}` lists {d:?} more than once (each point must be distinct)",
                c.name
            );
        }
    }
    Ok(())
}

/// The repetition `raw` asks for.
///
/// Errors: `repeats = 0`; `precision` or `max_repeats` with a fixed count; a
/// precision [`parse_precision`] refuses; `max_repeats` below [`MIN_AUTO_REPEATS`].
fn repetition_of(raw: &RawSpec) -> Result<Repetition> {
    let warmup = raw.warmup;
    match raw.repeats {
        Repeats::Count(0) => bail!("repeats must be ≥ 1"),
        Repeats::Count(n) => {
            if raw.precision.is_some() || raw.max_repeats.is_some() {
                bail!(
                    "precision and max_repeats apply to repeats = \"auto\" only \
                     (repeats = {n} is a fixed count)"
                );
            }
            Ok(Repetition {
                warmup,
                measured: n,
                auto: None,
            })
        }
        Repeats::Auto(_) => {
            let precision = match &raw.precision {
                None => parse_precision(DEFAULT_PRECISION),
                Some(Precision::Text(t)) => parse_precision(t),
                Some(Precision::Fraction(f)) => parse_precision(&f.to_string()),
            }?;
            let m = raw.max_repeats.unwrap_or(DEFAULT_MAX_REPEATS);
            if m < MIN_AUTO_REPEATS {
                bail!(
                    "max_repeats = {m}: repeats = \"auto\" measures at least \
                     {MIN_AUTO_REPEATS} runs per point"
                );
            }
            Ok(Repetition {
                warmup,
                measured: m,
                auto: Some(AutoRepeats {
                    precision,
                    min_repeats: MIN_AUTO_REPEATS,
                    max_repeats: m,
                }),
            })
        }
    }
}

/// The `trace` prediction settings of `raw`: `None` without a `trace`.
///
/// Errors: a setting without a `trace`; a `trace` that is not a file; both
/// `device_gbps`, `iobench` and `read_rates`, or both `compute_s_per_token` and
/// `resident_metrics`; a bandwidth that is not positive, a compute time below 0.
fn prediction_of(raw: &RawSpec) -> Result<Option<Prediction>> {
    let given = [
        ("device_gbps", raw.device_gbps.is_some()),
        ("iobench", raw.iobench.is_some()),
        ("read_rates", raw.read_rates.is_some()),
        ("compute_s_per_token", raw.compute_s_per_token.is_some()),
        ("resident_metrics", raw.resident_metrics.is_some()),
    ];
    let Some(t) = &raw.trace else {
        if let Some((k, _)) = given.iter().find(|(_, g)| *g) {
            bail!("{k} sets the predictions of a `trace`: add trace = \"FILE.jsonl\" (a `memdial run --record-trace` of the same prompt)");
        }
        return Ok(None);
    };
    if !t.is_file() {
        bail!(
            "trace {} is not a file (record one with `memdial run … --record-trace FILE`)",
            t.display()
        );
    }
    let device = match (raw.device_gbps, &raw.iobench, raw.read_rates) {
        (Some(g), None, None) => Some(DeviceRate::Gbps(g)),
        (None, Some(d), None) => Some(DeviceRate::Iobench(d.clone())),
        (None, None, Some(ReadRates::Interleaved)) => Some(DeviceRate::Interleaved),
        (None, None, None) => None,
        _ => bail!("give one of device_gbps, iobench and read_rates, not several"),
    };
    let compute = match (raw.compute_s_per_token, &raw.resident_metrics) {
        (Some(_), Some(_)) => bail!("give compute_s_per_token or resident_metrics, not both"),
        (Some(c), None) => Some(ComputeTime::SecondsPerToken(c)),
        (None, Some(m)) => Some(ComputeTime::ResidentMetrics(m.clone())),
        (None, None) => None,
    };
    if let Some(g) = raw.device_gbps.filter(|g| !(g.is_finite() && *g > 0.0)) {
        bail!("device_gbps = {g} is not a positive bandwidth");
    }
    if let Some(c) = raw
        .compute_s_per_token
        .filter(|c| !(c.is_finite() && *c >= 0.0))
    {
        bail!("compute_s_per_token = {c} is not ≥ 0");
    }
    Ok(Some(Prediction {
        trace: t.clone(),
        device,
        compute,
    }))
}
