//! Sweep specification (`harness/sweeps/*.toml`) and its expansion into points.
//!
//! Every axis is a list; the sweep is their cartesian product, in a fixed order:
//! budgets (outermost), io, prefetch, cache, threads, prompts (innermost). The
//! point index is the position in that product, so it is identical on every
//! machine and in every shard.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use memdial::io::IoMode;
use memdial::store::eviction::CachePolicy;
use memdial::store::plan::Prefetch;
use memdial::util::budget::parse_size;
use memdial::util::units::fmt_bytes;
use serde::{Deserialize, Serialize};

use super::axes::{Coord, Values};

pub mod engines;
mod hash;
mod points;
mod prompt;
pub mod read_rates;
mod repeats;

pub use hash::spec_hash;
pub use points::{Point, RunSlot, Shard};
use prompt::check_prompts;
pub use prompt::PromptSpec;
pub use repeats::{
    parse_precision, AutoRepeats, Precision, Repeats, DEFAULT_MAX_REPEATS, DEFAULT_PRECISION,
    MIN_AUTO_REPEATS,
};

/// The default spec, embedded so `memdial sweep` works outside the repository root.
pub const DEFAULT_SPEC: &str = include_str!("../../sweeps/default.toml");

/// A sweep specification as written in TOML.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Spec {
    /// Free-form name shown in the report.
    #[serde(default)]
    pub name: Option<String>,
    /// Memory budgets: sizes (`"512MiB"`, `"2GB"`, bytes), fractions of the model's
    /// tensor bytes (`"25%"`), `"floor"`, multiples of the floor (`"2x floor"`), or
    /// `"model"` / multiples of the model size (`"1.5x model"`).
    pub budgets: Vec<String>,
    /// IO modes as written (`direct`, `buffered`, `mmap`); parsed into [`Spec::io`]
    /// by [`Spec::validate`], whose errors are the library's usage errors.
    #[serde(rename = "io", default = "d_io")]
    io_names: Vec<String>,
    /// Prefetch policies as written (`none`, `next-layer`, `lookahead`, `oracle`).
    #[serde(rename = "prefetch", default = "d_prefetch")]
    prefetch_names: Vec<String>,
    /// Expert cache policies as written (`lru`, `lfru`).
    #[serde(rename = "cache", default = "d_cache")]
    cache_names: Vec<String>,
    /// Kernel thread counts.
    #[serde(default = "d_threads")]
    pub threads: Vec<usize>,
    /// Prompts (each one is an axis value).
    #[serde(default = "d_prompts")]
    pub prompts: Vec<PromptSpec>,
    /// Generated tokens per run.
    #[serde(default = "d_max_tokens")]
    pub max_tokens: usize,
    /// Measured runs per point: a count, or `"auto"` (measured until the point's
    /// 95 % interval is within `precision` of its median, at most `max_repeats`).
    #[serde(default = "d_repeats")]
    pub repeats: Repeats,
    /// With `repeats = "auto"`: the interval half-width a point is measured down to,
    /// relative to its median (`"5%"` or `0.05`; default [`DEFAULT_PRECISION`]).
    /// Absent: left out of the spec hash.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub precision: Option<Precision>,
    /// With `repeats = "auto"`: the most measured runs of a point (default
    /// [`DEFAULT_MAX_REPEATS`], at most [`MAX_REPEATS`]). Absent: left out of the
    /// spec hash.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_repeats: Option<u32>,
    /// Discarded warm-up runs per point (recorded with `warmup = true`, checked by the
    /// verdict, excluded from the statistics).
    #[serde(default)]
    pub warmup: u32,
    /// `memdial run --max-context` (positions the MLA cache is sized for). When unset
    /// the engine uses prompt + max_tokens, and the floor is planned the same way.
    #[serde(default)]
    pub max_context: Option<usize>,
    /// Extra arguments appended to every `memdial run` (e.g. `["--ignore-eos"]`).
    #[serde(default)]
    pub extra_args: Vec<String>,
    /// Per-run timeout in seconds; the child is killed and the run recorded as failed.
    #[serde(default = "d_timeout")]
    pub timeout_s: f64,
    /// With `--cgroup`: bytes added to the budget for the cgroup limit (binary text,
    /// allocator slack), e.g. `"32MiB"`.
    #[serde(default = "d_slack")]
    pub cgroup_slack: String,
    /// Engines run at every point (innermost axis): `memdial`, `mlx-lm`,
    /// `kimi-k3-in-c`, `llama.cpp`, `llama.cpp-f32`, or a name defined in an `[engine.NAME]` table
    /// (see `sweep::spec::engines::def`). Default `["memdial"]`; left out of the spec hash
    /// and of point keys when it is the default.
    #[serde(default = "d_engines", skip_serializing_if = "is_default_engines")]
    pub engines: Vec<String>,
    /// Engine whose ids the others are checked against (default: `memdial` when
    /// listed, else the first engine).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference_engine: Option<String>,
    /// Adapter settings per engine (`[engine.NAME]`), overriding the built-in ones.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub engine: BTreeMap<String, engines::def::EngineDef>,
    // Axes declared after the ones above (see `super::axes`) go here, each
    // `#[serde(default, skip_serializing_if = "Values::is_default")] NAME: Values<A>`,
    // and into `Spec::later_axes`.
    /// How runs start (`super::start`): `["cold"]` (default), `["warm"]`, or both.
    #[serde(default, skip_serializing_if = "Values::is_default")]
    pub start: Values<super::start::Start>,
    /// Model layouts read (`super::layout`): `["safetensors"]` (default),
    /// `["lossless"]`, or both.
    #[serde(default, skip_serializing_if = "Values::is_default")]
    pub layout: Values<super::layout::Layout>,
    /// Concurrent clients (`super::concurrency`): `[1]` (default, the ordinary run),
    /// or e.g. `[1, 2, 4]`, above 1 served by `memdial serve`.
    #[serde(default, skip_serializing_if = "Values::is_default")]
    pub concurrency: Values<super::concurrency::Concurrency>,
    /// Speculative decoding (`super::speculate`): `["off"]` (default), or e.g.
    /// `["off", "ngram:4", "replay:ids.txt:4"]` (files relative to the spec file).
    #[serde(default, skip_serializing_if = "Values::is_default")]
    pub speculate: Values<super::speculate::Speculate>,
    /// Context tokens before the prompt (`super::depth`, `memdial run --depth`):
    /// `[0]` (default), or e.g. `[0, 512]`.
    #[serde(default, skip_serializing_if = "Values::is_default")]
    pub depth: Values<super::depth::Depth>,
    /// When a run counts as `noisy` (the `[noise]` table; absent: the defaults of
    /// [`memdial::tools::noise::Thresholds`], left out of the spec hash).
    #[serde(default, skip_serializing_if = "is_default_noise")]
    pub noise: memdial::tools::noise::Thresholds,
    /// A routing trace of the same model and prompt (`memdial run --record-trace`,
    /// docs/simulate.md): each measured point's configuration is replayed by the
    /// simulator, and the report sets its predicted bytes and s/token beside the
    /// measured ones (`super::predict`). Relative to the spec file. Absent: left out
    /// of the spec hash, as are the four settings below.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<PathBuf>,
    /// With `trace`: device read bandwidth for predicted s/token, GB/s (10⁹ bytes/s)
    /// (default: `iobench`'s, else the sweep's own cold `direct` probe).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_gbps: Option<f64>,
    /// With `trace`: a `memdial iobench` report directory whose best cold `direct`
    /// cell is the device bandwidth. Relative to the spec file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iobench: Option<PathBuf>,
    /// With `trace`: `"interleaved"` measures the read rates between the runs
    /// ([`read_rates::ReadRates`]) instead of taking them from `device_gbps` or
    /// `iobench`. Absent: left out of the spec hash.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_rates: Option<read_rates::ReadRates>,
    /// With `trace`: compute seconds per decoded token with every weight resident.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compute_s_per_token: Option<f64>,
    /// With `trace`: a `memdial run --metrics-json` file of a resident run (no
    /// `--budget`) whose median decode s/token is the compute time. Relative to the
    /// spec file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resident_metrics: Option<PathBuf>,
    /// Seconds of cool-down before every run after the first one this invocation makes
    /// (llama-bench's `--delay`): the machine settles (clocks, thermals, writeback)
    /// before the next cold run. Recorded in `sweep.json`; 0 (the default) is left out of
    /// the spec hash. At most [`MAX_DELAY_S`].
    #[serde(default, skip_serializing_if = "is_zero")]
    pub delay_s: f64,
    /// Latency targets of goodput (`slo = { ttft_s = 2.0, tpot_s = 0.5 }`,
    /// `super::goodput`): each row's share and rate of requests meeting both. Absent:
    /// no goodput columns, left out of the spec hash.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slo: Option<super::goodput::Slo>,
    /// IO modes (the spec's `io`), set by [`Spec::validate`].
    #[serde(skip)]
    pub io: Vec<IoMode>,
    /// Prefetch policies (the spec's `prefetch`), set by [`Spec::validate`].
    #[serde(skip)]
    pub prefetch: Vec<Prefetch>,
    /// Expert cache policies (the spec's `cache`), set by [`Spec::validate`].
    #[serde(skip)]
    pub cache: Vec<CachePolicy>,
}

fn d_engines() -> Vec<String> {
    vec![engines::def::DEFAULT_ENGINE.into()]
}
fn is_default_engines(v: &[String]) -> bool {
    v.len() == 1 && v[0] == engines::def::DEFAULT_ENGINE
}

fn is_default_noise(t: &memdial::tools::noise::Thresholds) -> bool {
    *t == memdial::tools::noise::Thresholds::default()
}

fn d_io() -> Vec<String> {
    vec!["direct".into()]
}
fn d_prefetch() -> Vec<String> {
    vec!["none".into()]
}
fn d_cache() -> Vec<String> {
    vec!["lru".into()]
}
fn d_threads() -> Vec<usize> {
    vec![1]
}
fn d_prompts() -> Vec<PromptSpec> {
    vec![PromptSpec::Text("The capital of France is".into())]
}
fn d_max_tokens() -> usize {
    16
}
fn d_repeats() -> Repeats {
    Repeats::Count(3)
}
fn is_zero(v: &f64) -> bool {
    *v == 0.0
}
fn d_timeout() -> f64 {
    600.0
}
fn d_slack() -> String {
    "32MiB".into()
}

/// Largest `timeout_s` accepted: 7 days (a finite limit a timer can hold).
pub const MAX_TIMEOUT_S: f64 = 7.0 * 24.0 * 3600.0;
/// Largest `delay_s` accepted: one hour between runs.
pub const MAX_DELAY_S: f64 = 3600.0;
/// Smallest `timeout_s` accepted: no run of any model finishes faster.
pub const MIN_TIMEOUT_S: f64 = 0.1;
/// Largest `max_tokens` and `max_context`: 2^24 positions (16 times the longest
/// context of the models memdial runs; the MLA cache alone would be over 10 GiB).
pub const MAX_CONTEXT: usize = 1 << 24;
/// Largest `repeats` (and `warmup`) per point: every run slot is planned up front.
pub const MAX_REPEATS: u32 = 10_000;

/// Context length assumed for the floor when the prompt cannot be tokenized.
pub const DEFAULT_PLAN_CONTEXT: usize = 4096;

/// A budget expression: the library's, bounded (a multiple of at most 1000, a finite
/// positive number) and resolved without overflow.
pub use memdial::util::budget::BudgetExpr;

impl Spec {
    /// Parses and validates a spec. `base` is the directory relative prompt files are
    /// resolved against (they are made absolute here).
    pub fn parse(text: &str, base: &Path) -> Result<Self> {
        let mut s: Spec = toml::from_str(text).context("invalid sweep spec")?;
        for p in &mut s.prompts {
            if let PromptSpec::File { file } = p {
                if file.is_relative() {
                    *file = base.join(&*file);
                }
            }
        }
        super::speculate::resolve(&mut s.speculate.0, base);
        for f in [&mut s.trace, &mut s.iobench, &mut s.resident_metrics]
            .into_iter()
            .flatten()
        {
            if f.is_relative() {
                *f = base.join(&*f);
            }
        }
        s.validate()?;
        Ok(s)
    }

    /// Reads a spec file.
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read spec {}", path.display()))?;
        let base = path.parent().unwrap_or(Path::new("."));
        Self::parse(&text, base).with_context(|| format!("in {}", path.display()))
    }

    /// Checks every axis is non-empty and every value is known.
    /// Sets the typed [`Spec::io`], [`Spec::prefetch`] and [`Spec::cache`].
    pub fn validate(&mut self) -> Result<()> {
        for (name, n) in [
            ("budgets", self.budgets.len()),
            ("io", self.io_names.len()),
            ("prefetch", self.prefetch_names.len()),
            ("cache", self.cache_names.len()),
            ("threads", self.threads.len()),
            ("prompts", self.prompts.len()),
        ] {
            if n == 0 {
                bail!("axis `{name}` is empty");
            }
        }
        for b in &self.budgets {
            BudgetExpr::parse(b)?;
        }
        super::concurrency::check(&self.concurrency.0)?;
        super::speculate::check(&self.speculate.0)?;
        super::speculate::check_with_concurrency(&self.speculate.0, &self.concurrency.0)?;
        super::depth::check(
            &self.depth.0,
            &self.concurrency.0,
            MAX_CONTEXT,
            (self.max_context, self.max_tokens),
        )?;
        self.io = Vec::new();
        for io in &self.io_names {
            self.io.push(IoMode::parse(io)?);
        }
        self.prefetch = Vec::new();
        for p in &self.prefetch_names {
            let v = Prefetch::parse(p)?;
            self.prefetch.push(v);
            if v == Prefetch::Oracle && !self.extra_args.iter().any(|a| a == "--trace") {
                bail!(
                    "prefetch \"oracle\" replays a recorded expert trace: record one with \
                     `memdial run … --record-trace F.jsonl` and add extra_args = [\"--trace\", \"F.jsonl\"] \
                     (the same prompt must be used)"
                );
            }
        }
        self.cache = Vec::new();
        for c in &self.cache_names {
            self.cache.push(CachePolicy::parse(c)?);
        }
        if self.threads.contains(&0) {
            bail!("threads must be ≥ 1");
        }
        if self.max_tokens == 0 {
            bail!("max_tokens must be ≥ 1");
        }
        self.check_repeats()?;
        if self.timeout_s.is_nan() || self.timeout_s <= 0.0 {
            bail!("timeout_s must be positive");
        }
        if self.timeout_s < MIN_TIMEOUT_S {
            bail!(
                "timeout_s = {:e} is less than {MIN_TIMEOUT_S} s: every run would time out",
                self.timeout_s
            );
        }
        if self.max_tokens > MAX_CONTEXT || self.max_context.is_some_and(|c| c > MAX_CONTEXT) {
            bail!(
                "max_tokens = {} / max_context = {:?}: at most {MAX_CONTEXT} positions \
                 (a larger context needs more memory than any machine has)",
                self.max_tokens,
                self.max_context
            );
        }
        if !(0.0..=MAX_DELAY_S).contains(&self.delay_s) {
            bail!(
                "delay_s = {} must be a number of seconds from 0 to {MAX_DELAY_S}",
                self.delay_s
            );
        }
        if self.timeout_s > MAX_TIMEOUT_S {
            bail!(
                "timeout_s = {} is more than {MAX_TIMEOUT_S} s (7 days); give a finite per-run limit",
                self.timeout_s
            );
        }
        if self.measured_repeats() > MAX_REPEATS || self.warmup > MAX_REPEATS {
            bail!(
                "repeats = {} and warmup = {} must each be at most {MAX_REPEATS} per point",
                self.measured_repeats(),
                self.warmup
            );
        }
        self.refuse_duplicates()?;
        parse_size(&self.cgroup_slack).context("invalid cgroup_slack")?;
        engines::resolve::validate(
            &self.engines,
            self.reference_engine.as_deref(),
            &self.engine,
        )?;
        check_prompts(&self.prompts)?;
        self.check_prediction()?;
        if let Some(slo) = &self.slo {
            slo.check()?;
        }
        if let Some(a) = self.extra_args.iter().find(|a| a.contains('\0')) {
            bail!("extra_args: {a:?} holds a NUL character, which a command-line argument cannot hold");
        }
        Ok(())
    }

    /// Checks `trace` and the settings of its predictions go together.
    fn check_prediction(&self) -> Result<()> {
        let given = [
            ("device_gbps", self.device_gbps.is_some()),
            ("iobench", self.iobench.is_some()),
            ("read_rates", self.read_rates.is_some()),
            ("compute_s_per_token", self.compute_s_per_token.is_some()),
            ("resident_metrics", self.resident_metrics.is_some()),
        ];
        let Some(t) = &self.trace else {
            if let Some((k, _)) = given.iter().find(|(_, g)| *g) {
                bail!("{k} sets the predictions of a `trace`: add trace = \"FILE.jsonl\" (a `memdial run --record-trace` of the same prompt)");
            }
            return Ok(());
        };
        if !t.is_file() {
            bail!(
                "trace {} is not a file (record one with `memdial run … --record-trace FILE`)",
                t.display()
            );
        }
        let rates = [
            self.device_gbps.is_some(),
            self.iobench.is_some(),
            self.read_rates.is_some(),
        ];
        if rates.iter().filter(|g| **g).count() > 1 {
            bail!("give one of device_gbps, iobench and read_rates, not several");
        }
        if self.compute_s_per_token.is_some() && self.resident_metrics.is_some() {
            bail!("give compute_s_per_token or resident_metrics, not both");
        }
        if let Some(g) = self.device_gbps.filter(|g| !(g.is_finite() && *g > 0.0)) {
            bail!("device_gbps = {g} is not a positive bandwidth");
        }
        if let Some(c) = self
            .compute_s_per_token
            .filter(|c| !(c.is_finite() && *c >= 0.0))
        {
            bail!("compute_s_per_token = {c} is not ≥ 0");
        }
        Ok(())
    }

    /// Checks `repeats`, `precision` and `max_repeats` go together.
    fn check_repeats(&self) -> Result<()> {
        match self.repeats {
            Repeats::Count(0) => bail!("repeats must be ≥ 1"),
            Repeats::Count(_) => {
                if self.precision.is_some() || self.max_repeats.is_some() {
                    bail!(
                        "precision and max_repeats apply to repeats = \"auto\" only \
                         (repeats = {} is a fixed count)",
                        self.measured_repeats()
                    );
                }
            }
            Repeats::Auto(_) => {
                self.precision_value()?;
                let m = self.measured_repeats();
                if m < MIN_AUTO_REPEATS {
                    bail!(
                        "max_repeats = {m}: repeats = \"auto\" measures at least \
                         {MIN_AUTO_REPEATS} runs per point"
                    );
                }
            }
        }
        Ok(())
    }

    /// `precision` as a fraction (the default when unset).
    fn precision_value(&self) -> Result<f64> {
        match &self.precision {
            None => parse_precision(DEFAULT_PRECISION),
            Some(Precision::Text(t)) => parse_precision(t),
            Some(Precision::Fraction(f)) => parse_precision(&f.to_string()),
        }
    }

    /// Most measured runs of a point: the count, or `max_repeats` for `"auto"`.
    pub fn measured_repeats(&self) -> u32 {
        match self.repeats {
            Repeats::Count(n) => n,
            Repeats::Auto(_) => self.max_repeats.unwrap_or(DEFAULT_MAX_REPEATS),
        }
    }

    /// `repeats = "auto"` resolved (`None` for a fixed count). Call after
    /// [`Spec::validate`].
    pub fn auto_repeats(&self) -> Option<AutoRepeats> {
        match self.repeats {
            Repeats::Count(_) => None,
            Repeats::Auto(_) => Some(AutoRepeats {
                precision: self.precision_value().unwrap_or(0.05),
                min_repeats: MIN_AUTO_REPEATS,
                max_repeats: self.measured_repeats(),
            }),
        }
    }

    /// Refuses an axis that lists a value twice: the two points would share their run
    /// ids, so the sweep could never be complete.
    fn refuse_duplicates(&self) -> Result<()> {
        fn first_dup<T: PartialEq + std::fmt::Debug>(v: &[T]) -> Option<&T> {
            v.iter()
                .enumerate()
                .find(|(i, x)| v[..*i].contains(x))
                .map(|(_, x)| x)
        }
        let budgets: Vec<String> = self
            .budgets
            .iter()
            .map(|b| {
                b.split_whitespace()
                    .collect::<String>()
                    .to_ascii_lowercase()
            })
            .collect();
        let dup = [
            ("budgets", first_dup(&budgets).map(|d| format!("{d:?}"))),
            (
                "io",
                first_dup(&self.io).map(|d| format!("{:?}", d.as_str())),
            ),
            (
                "prefetch",
                first_dup(&self.prefetch).map(|d| format!("{:?}", d.as_str())),
            ),
            (
                "cache",
                first_dup(&self.cache).map(|d| format!("{:?}", d.as_str())),
            ),
            ("threads", first_dup(&self.threads).map(|d| d.to_string())),
            (
                "engines",
                first_dup(&self.engines).map(|d| format!("{d:?}")),
            ),
        ];
        for (axis, d) in dup {
            if let Some(d) = d {
                bail!("axis `{axis}` lists {d} more than once (each point must be distinct)");
            }
        }
        for coords in self.later_axes() {
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

    /// The values of the axes declared after engines ([`super::axes`]), in the
    /// order they are expanded (innermost last): one `self.NAME.coords()` each.
    pub fn later_axes(&self) -> Vec<Vec<Coord>> {
        vec![
            self.start.coords(),
            self.layout.coords(),
            self.concurrency.coords(),
            self.speculate.coords(),
            self.depth.coords(),
        ]
    }

    /// All points in the fixed order (budgets, io, prefetch, cache, threads, prompts,
    /// engines, then the later axes).
    pub fn points(&self) -> Vec<Point> {
        self.points_with(&self.later_axes())
    }

    /// [`Spec::points`] with `later` as the values of the later axes.
    pub fn points_with(&self, later: &[Vec<Coord>]) -> Vec<Point> {
        let mut v = Vec::new();
        let multi = self.engines.len() > 1;
        let later = super::axes::product(later);
        for b in &self.budgets {
            for &io in &self.io {
                for &prefetch in &self.prefetch {
                    for &cache in &self.cache {
                        for &threads in &self.threads {
                            for prompt_index in 0..self.prompts.len() {
                                for e in &self.engines {
                                    for axes in &later {
                                        v.push(Point {
                                            index: v.len(),
                                            budget_spec: b.clone(),
                                            io,
                                            prefetch,
                                            cache,
                                            threads,
                                            prompt_index,
                                            engine: e.clone(),
                                            engine_in_key: multi,
                                            axes: axes.clone(),
                                        });
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        v
    }

    /// The runs of `points` in execution order: warm-up rounds first, then the measured
    /// rounds; each round visits every point once (so a partial sweep has data at
    /// every point early and slow drift is spread over all points). With `repeats =
    /// "auto"` there are `max_repeats` measured rounds; the sweep skips a point's
    /// slots once its interval is precise enough.
    pub fn runs(&self, points: &[Point]) -> Vec<RunSlot> {
        let mut v = Vec::new();
        for (warmup, n) in [(true, self.warmup), (false, self.measured_repeats())] {
            for r in 0..n {
                for p in points {
                    v.push(RunSlot {
                        point: p.clone(),
                        repeat: r,
                        warmup,
                    });
                }
            }
        }
        v
    }

    /// SHA-256 of the canonical JSON form of the spec ([`spec_hash`]): shards of one
    /// sweep, and a resumed sweep, must have the same hash.
    pub fn hash(&self) -> String {
        spec_hash(self)
    }
}

/// Human form of a budget: `floor (38.2 MiB)`.
pub fn budget_label(spec: &str, bytes: u64) -> String {
    if BudgetExpr::parse(spec)
        .map(|e| matches!(e, BudgetExpr::Bytes(_)))
        .unwrap_or(true)
    {
        fmt_bytes(bytes)
    } else {
        format!("{spec} ({})", fmt_bytes(bytes))
    }
}

#[cfg(test)]
mod tests;
