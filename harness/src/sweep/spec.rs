//! Sweep specification (`harness/sweeps/*.toml`) and its expansion into points.
//!
//! Every axis is a list; the sweep is their cartesian product, in a fixed order:
//! budgets (outermost), io, prefetch, cache, threads, prompts (innermost). The
//! point index is the position in that product, so it is identical on every
//! machine and in every shard.
//!
//! A spec is read as written ([`RawSpec`], what is hashed) and checked once into the
//! typed [`Spec`] the sweep uses.

use std::collections::BTreeMap;
use std::path::PathBuf;

use memdial::io::IoMode;
use memdial::store::eviction::CachePolicy;
use memdial::store::plan::Prefetch;
use memdial::util::units::fmt_bytes;
use serde::{Deserialize, Serialize};

use super::axes::Values;

pub mod engines;
mod expand;
mod hash;
mod parse;
mod points;
mod prediction;
mod prompt;
pub mod read_rates;
mod repeats;
mod shard;
mod validate;

pub use engines::name::EngineName;
pub use points::{Point, RunSlot};
pub use prediction::{ComputeTime, DeviceRate, Prediction};
pub use prompt::PromptSpec;
pub use repeats::{AutoRepeats, Precision, Repeats, Repetition};
pub use shard::Shard;

/// One budget of the spec: as written and parsed.
#[derive(Debug, Clone, PartialEq)]
pub struct Budget {
    /// As written (`"2x floor"`): the point key's `budget=` and the CSV's `budget_spec`.
    pub text: String,
    /// The parsed expression, resolved per point against its floor and model bytes.
    pub expr: BudgetExpr,
}

/// A checked sweep spec: what [`Spec::parse`] and [`Spec::load`] return. Fields whose
/// meaning [`RawSpec`] documents are the same values; the others are parsed from it.
#[derive(Debug, Clone)]
pub struct Spec {
    /// The spec as written (prompt and trace paths made absolute): what
    /// [`Spec::hash`] covers.
    pub raw: RawSpec,
    /// [`RawSpec::name`].
    pub name: Option<String>,
    /// The budgets, in the spec's order.
    pub budgets: Vec<Budget>,
    /// IO modes.
    pub io: Vec<IoMode>,
    /// Prefetch policies.
    pub prefetch: Vec<Prefetch>,
    /// Expert cache policies.
    pub cache: Vec<CachePolicy>,
    /// [`RawSpec::threads`] (each ≥ 1).
    pub threads: Vec<usize>,
    /// [`RawSpec::prompts`] (files made absolute and checked).
    pub prompts: Vec<PromptSpec>,
    /// [`RawSpec::max_tokens`].
    pub max_tokens: usize,
    /// Warm-up and measured runs per point.
    pub repetition: Repetition,
    /// [`RawSpec::max_context`].
    pub max_context: Option<usize>,
    /// [`RawSpec::extra_args`].
    pub extra_args: Vec<String>,
    /// [`RawSpec::timeout_s`], seconds.
    pub timeout_s: f64,
    /// `cgroup_slack`, bytes.
    pub cgroup_slack: u64,
    /// [`RawSpec::engines`].
    pub engines: Vec<EngineName>,
    /// [`RawSpec::reference_engine`].
    pub reference_engine: Option<EngineName>,
    /// [`RawSpec::engine`].
    pub engine: BTreeMap<String, engines::def::EngineDef>,
    /// [`RawSpec::start`].
    pub start: Values<crate::sweep::start::Start>,
    /// [`RawSpec::layout`].
    pub layout: Values<crate::sweep::layout::Layout>,
    /// [`RawSpec::concurrency`].
    pub concurrency: Values<crate::sweep::concurrency::Concurrency>,
    /// [`RawSpec::speculate`] (files made absolute).
    pub speculate: Values<crate::sweep::speculate::Speculate>,
    /// [`RawSpec::depth`].
    pub depth: Values<crate::sweep::depth::Depth>,
    /// [`RawSpec::noise`].
    pub noise: memdial::tools::noise::Thresholds,
    /// `trace` and its settings; `None` without a trace.
    pub prediction: Option<Prediction>,
    /// [`RawSpec::delay_s`], seconds.
    pub delay_s: f64,
    /// [`RawSpec::slo`].
    pub slo: Option<crate::sweep::goodput::Slo>,
    /// [`RawSpec::lossy`] (empty without it).
    pub lossy: std::collections::BTreeMap<String, crate::sweep::layout::LossyLimits>,
}

impl Spec {
    /// `repeats = "auto"` resolved (`None` for a fixed count).
    pub fn auto_repeats(&self) -> Option<AutoRepeats> {
        self.repetition.auto
    }
}

/// The default spec, embedded so `memdial sweep` works outside the repository root.
pub const DEFAULT_SPEC: &str = include_str!("../../sweeps/default.toml");

/// A sweep specification as written in TOML: what is deserialised and hashed
/// ([`Spec::hash`]). [`Spec::from_raw`] checks it and builds the typed [`Spec`].
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSpec {
    /// Free-form name shown in the report.
    #[serde(default)]
    pub name: Option<String>,
    /// Memory budgets: sizes (`"512MiB"`, `"2GB"`, bytes), fractions of the model's
    /// tensor bytes (`"25%"`), `"floor"`, multiples of the floor (`"2x floor"`), or
    /// `"model"` / multiples of the model size (`"1.5x model"`).
    pub budgets: Vec<String>,
    /// IO modes as written (`direct`, `buffered`, `mmap`); parsed into [`Spec::io`]
    /// by [`Spec::from_raw`], whose errors are the library's usage errors.
    #[serde(rename = "io", default = "d_io")]
    pub io_names: Vec<String>,
    /// Prefetch policies as written (`none`, `next-layer`, `lookahead`, `oracle`).
    #[serde(rename = "prefetch", default = "d_prefetch")]
    pub prefetch_names: Vec<String>,
    /// Expert cache policies as written (`lru`, `lfru`).
    #[serde(rename = "cache", default = "d_cache")]
    pub cache_names: Vec<String>,
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
    /// relative to its median (`"5%"` or `0.05`; default [`repeats::DEFAULT_PRECISION`]).
    /// Absent: left out of the spec hash.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub precision: Option<Precision>,
    /// With `repeats = "auto"`: the most measured runs of a point (default
    /// [`repeats::DEFAULT_MAX_REPEATS`], at most [`MAX_REPEATS`]). Absent: left out of the
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
    // into the typed `Spec`, both `later_axes` and the typed values of `Point`
    // (`spec/expand.rs`).
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
    /// What each lossy layout of the `layout` axis must meet (`[lossy.rvq3] min_top1 =
    /// 0.9`, `super::layout::LossyLimits`): `--check` fails a lossy layout only on these.
    /// Absent: its agreement is reported, never failed; left out of the spec hash.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lossy: Option<std::collections::BTreeMap<String, super::layout::LossyLimits>>,
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
