//! One row of `results.csv` / `results.json`: one run of one point.
//!
//! The column list [`COLUMNS`] is the schema; it is documented in
//! `docs/results.md` (a test checks the table against it) and must stay stable (add columns at the end of a
//! group, never rename). Units are in the names: `_s` seconds, `_bytes` bytes,
//! `_per_s` per second; fractions are in [0, 1].

use std::path::Path;

use anyhow::{Context, Result};
use memdial::engine::metrics::{MetricsFile, RunMetrics, Source};
use memdial::io::IoMode;
use memdial::store::eviction::CachePolicy;
use memdial::store::plan::Prefetch;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::status::RunStatus;

/// Version of the results schema (the columns of [`COLUMNS`] and their meaning),
/// recorded in `sweep.json` as `results_schema`. 2: memory columns from
/// `cgroup_reason` on, and baselines checked against it.
pub const RESULTS_SCHEMA: u32 = 2;

/// [`Row::output_kind`] of a text-only engine's run.
pub const TEXT_ONLY: &str = "text";

/// SHA-256 of the empty string: a text-only run with this hash printed nothing.
pub const EMPTY_SHA256: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

/// One run. Engine metrics are `None` (empty in CSV, `null` in JSON) when the run
/// failed or the engine reported `null`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Row {
    // --- identity
    /// `<point key>#r<repeat>` (`#w` for warm-ups); stable across shards and resumes.
    pub run_id: String,
    /// Position of the point in the full product of the spec's axes.
    pub point_index: usize,
    /// `budget=…;io=…;prefetch=…;cache=…;threads=…;prompt=…`.
    pub point_key: String,
    /// Repeat index (0-based).
    pub repeat: u32,
    /// Warm-up run (excluded from statistics, still checked by the verdict).
    pub warmup: bool,
    /// `ok`, `failed` (non-zero exit or unreadable metrics), `refused` (exit 2: below
    /// the engine's floor or usage error), `timeout`, `below_floor` (not run: the
    /// budget resolved below the planned floor), `n/a` (not run: the engine cannot
    /// run this point, e.g. a resident-only engine under the model size).
    pub status: RunStatus,
    /// Exit code of `memdial run` (`None` when killed by a signal or not run).
    pub exit_code: Option<i32>,
    /// Error message (last stderr line of the child, or the harness's reason).
    pub error: Option<String>,
    /// Start of the run, UTC RFC 3339.
    pub started_utc: String,
    /// Wall time of the child process, seconds.
    pub wall_s: Option<f64>,
    // --- axes
    /// Budget as written in the spec (`floor`, `25%`, `512MiB`).
    pub budget_spec: String,
    /// Budget passed to `--budget`, bytes.
    pub budget_bytes: u64,
    /// IO mode.
    pub io: IoMode,
    /// Prefetch policy.
    pub prefetch: Prefetch,
    /// Expert cache policy.
    pub cache: CachePolicy,
    /// Kernel threads (`--threads`).
    pub threads: usize,
    /// Index of the prompt in the spec.
    pub prompt_index: usize,
    /// `--max-tokens`.
    pub max_tokens: usize,
    /// Floor computed by the plan for this point's io/prefetch/max_context, bytes.
    pub planned_floor_bytes: u64,
    // --- cold cache and memory enforcement
    /// Model shard files evicted before the run (plus, for another engine, the files
    /// it reads besides them: its setup directory's, e.g. a GGUF).
    pub model_files: usize,
    /// Page-cache residency of the shard files after eviction, bytes (mincore).
    pub resident_before_bytes: u64,
    /// `resident_before_bytes == 0`: the run started from a verified cold cache.
    pub cold_verified: bool,
    /// The child ran in a memory cgroup whose limit was set.
    pub cgroup_enforced: bool,
    /// Memory cgroup limit, bytes (budget + `cgroup_slack`).
    pub cgroup_limit_bytes: Option<u64>,
    /// Peak memory charged to the cgroup (anon + page cache), bytes.
    pub cgroup_peak_bytes: Option<u64>,
    /// OOM kills in the cgroup.
    pub cgroup_oom_kills: Option<u64>,
    // --- engine metrics (`memdial run --metrics-json`)
    /// Engine metrics schema version.
    pub engine_schema_version: Option<u64>,
    /// The engine's figures (`memdial run --metrics-json`), one column per field.
    #[serde(flatten)]
    pub metrics: RunMetrics,
    // --- host
    /// Host name.
    pub host_name: String,
    /// CPU model name.
    pub cpu_model: String,
    /// Logical CPUs available.
    pub cpu_cores: usize,
    /// Physical memory, bytes.
    pub ram_bytes: u64,
    /// Kernel release.
    pub kernel: String,
    /// Filesystem type of the model directory.
    pub model_fs: String,
    /// Block device of the model directory.
    pub model_device: String,
    /// memdial version.
    pub memdial_version: String,
    // --- memory as the budget sees it (appended after the columns above; never renamed)
    /// Why the run was not in a memory cgroup (`None` when `cgroup_enforced`).
    pub cgroup_reason: Option<String>,
    /// `cgroup_slack` of the spec, bytes: what a run may hold above its budget.
    pub cgroup_slack_bytes: Option<u64>,
    /// Memory samples the harness took while the child ran (every 100 ms; 10 ms in
    /// the first second).
    pub memory_samples: Option<u64>,
    /// Peak `RssAnon` of the child over the harness's samples, bytes.
    pub rss_anon_peak_sampled_bytes: Option<u64>,
    /// Peak page-cache residency of the model's shard files over the samples, bytes.
    pub page_cache_resident_bytes_peak: Option<u64>,
    /// Peak over the samples of `RssAnon + page-cache residency of the model`
    /// (same instant), bytes: the memory the budget has to hold.
    pub anon_plus_page_cache_peak_bytes: Option<u64>,
    /// Unenforced run whose memory (the largest of `anon_plus_page_cache_peak_bytes`,
    /// `peak_rss_anon_bytes + page_cache_resident_bytes_end` and `peak_rss_anon_bytes`)
    /// exceeded `budget_bytes + cgroup_slack_bytes`: its speed is not comparable with
    /// runs held to the budget.
    #[serde(default)]
    pub over_budget: bool,
    // --- engines axis (appended; never renamed)
    /// Engine that ran (`memdial`, `mlx-lm`, …; empty in rows of older sweeps = memdial).
    #[serde(default)]
    pub engine: String,
    /// The engine's version or commit (its own report, else the binary's SHA-256).
    #[serde(default)]
    pub engine_version: Option<String>,
    /// How the budget was held: `flag` (the engine's own budget flags), `cgroup`,
    /// `flag+cgroup`, or `none` (neither: see `cgroup_reason`).
    #[serde(default)]
    pub budget_held_by: Option<String>,
    // --- the noise sentinel (`memdial::tools::noise`; appended, never renamed)
    /// CPU seconds other processes used while the run lived (`/proc/stat` busy time
    /// minus the run's and the harness's own).
    #[serde(default)]
    pub noise_other_cpu_s: Option<f64>,
    /// CPU seconds stolen by the hypervisor while the run lived.
    #[serde(default)]
    pub noise_steal_s: Option<f64>,
    /// PSI cpu "some" stall seconds while the run lived (`None`: no PSI).
    #[serde(default)]
    pub noise_psi_cpu_s: Option<f64>,
    /// PSI io "some" stall seconds while the run lived (`None`: no PSI).
    #[serde(default)]
    pub noise_psi_io_s: Option<f64>,
    /// Bytes others read from the model's block device while the run lived.
    #[serde(default)]
    pub noise_foreign_read_bytes: Option<u64>,
    /// Why the run is noisy (every threshold of the spec's `[noise]` it exceeded), or
    /// `None` when it was quiet: noisy runs are counted apart in the statistics.
    #[serde(default)]
    pub noisy: Option<String>,
    /// llama-bench's fields (`n_prompt`, `n_gen`, `avg_ts`, `stddev_ts`, `load_mode`;
    /// appended).
    #[serde(flatten)]
    pub llama_bench: super::llama_bench::LlamaBench,
    /// The settings `planned_floor_bytes` is for: `direct / next-layer, 2 kernel
    /// thread(s), 13 positions` (as `memdial plan` prints them).
    #[serde(default)]
    pub planned_floor_for: Option<String>,
    /// What the run is compared on: `text` for a text-only engine's run (the SHA-256
    /// of its output text, `output_text_sha256`: a weaker claim than ids); `None`:
    /// its output ids (appended).
    #[serde(default)]
    pub output_kind: Option<String>,
    // --- predictions of the spec's `trace` (`sweep::predict`; appended, never renamed)
    /// The simulator's predicted decode s/token for this point's configuration (the
    /// same on every run of the point; `None` without a trace, a bandwidth and a
    /// compute time).
    #[serde(default)]
    pub predicted_s_per_token: Option<f64>,
    /// The simulator's decode bytes read per token for this point's configuration.
    #[serde(default)]
    pub predicted_bytes_read_per_token: Option<f64>,
    /// `predicted_s_per_token / the point's median decode s/token − 1` (negative:
    /// the prediction is faster than measured).
    #[serde(default)]
    pub prediction_error: Option<f64>,
    // --- the `concurrency` axis (`sweep::concurrency`; appended)
    /// Generated tokens per second of all the run's requests together: served runs,
    /// every request's tokens over the time from the first request sent to the last
    /// finished (client-side); ordinary runs of a sweep with the axis, end to end
    /// from the engine's timings.
    #[serde(default)]
    pub aggregate_tokens_per_s: Option<f64>,
    /// Median time to first token over the run's requests, seconds.
    #[serde(default)]
    pub ttft_p50_s: Option<f64>,
    /// 90th percentile of the time to first token over the run's requests, seconds.
    #[serde(default)]
    pub ttft_p90_s: Option<f64>,
    /// Median inter-token latency over every request's streamed tokens, seconds.
    #[serde(default)]
    pub itl_p50_s: Option<f64>,
    /// 90th percentile of the inter-token latency, seconds.
    #[serde(default)]
    pub itl_p90_s: Option<f64>,
    /// Each request's generated ids, in request order (served runs; empty otherwise).
    /// The verdict compares every one.
    #[serde(default)]
    pub requests_output_ids: Vec<Vec<u32>>,
    /// The prompt each request sent (`prompt_index` of the spec's prompts): request
    /// `i` of a point of prompt `p` sends prompt `(p + i) mod prompts`, so concurrent
    /// clients of a spec with several prompts decode different sequences.
    #[serde(default)]
    pub requests_prompt_index: Vec<usize>,
    // --- goodput under the spec's `slo` (`sweep::goodput`; appended)
    /// Share of the run's requests that met both targets of the spec's `slo`
    /// (TTFT ≤ `ttft_s` and `(e2e − TTFT) / (output tokens − 1)` ≤ `tpot_s`), [0, 1];
    /// `None` without an `slo`.
    #[serde(default)]
    pub goodput_fraction: Option<f64>,
    /// Requests that met the `slo` per second of the run (first request sent to last
    /// finished).
    #[serde(default)]
    pub goodput_requests_per_s: Option<f64>,
    // --- axes declared after engines (`sweep::axes`): one column each, appended
    /// The point's value on each later axis, by axis name (the point's
    /// [`crate::sweep::axes::Coord`]s); empty for sweeps without one.
    #[serde(flatten, default)]
    pub axes: serde_json::Map<String, Value>,
}

/// The schema: every column of `results.csv`, in order (same keys as each object of
/// `results.json`).
pub const COLUMNS: &[&str] = &[
    "run_id",
    "point_index",
    "point_key",
    "repeat",
    "warmup",
    "status",
    "exit_code",
    "error",
    "started_utc",
    "wall_s",
    "budget_spec",
    "budget_bytes",
    "io",
    "prefetch",
    "cache",
    "threads",
    "prompt_index",
    "max_tokens",
    "planned_floor_bytes",
    "model_files",
    "resident_before_bytes",
    "cold_verified",
    "cgroup_enforced",
    "cgroup_limit_bytes",
    "cgroup_peak_bytes",
    "cgroup_oom_kills",
    "engine_schema_version",
    "model",
    "model_bytes",
    "floor_bytes",
    "io_threads",
    "max_context",
    "prompt_tokens",
    "generated_tokens",
    "load_s",
    "ttft_s",
    "decode_s_per_token",
    "decode_s_per_token_median",
    "decode_s_per_token_p90",
    "tokens_per_s",
    "bytes_read_total",
    "bytes_read_per_token",
    "read_throughput_decode_bytes_per_s",
    "io_wait_fraction",
    "trunk_hit_rate",
    "expert_hit_rate",
    "expert_hit_rate_per_layer",
    "lookahead_precision",
    "lookahead_recall",
    "peak_rss_bytes",
    "peak_rss_anon_bytes",
    "rss_file_bytes",
    "peak_accounted_bytes",
    "budget_overflows",
    "page_cache_resident_bytes_end",
    "output_ids",
    "output_ids_sha256",
    "output_text_sha256",
    "host_name",
    "cpu_model",
    "cpu_cores",
    "ram_bytes",
    "kernel",
    "model_fs",
    "model_device",
    "memdial_version",
    // RunMetrics fields added after the first schema (appended, in struct order).
    "pinned_layers",
    "expert_cache_experts",
    "prefill_s",
    "bytes_read_load",
    "io_wait_s",
    "predicted_trunk_hit_rate",
    "expert_prefetch_hits",
    "rss_anon_bytes",
    "prefill_tokens_per_s",
    "prefill_bytes_read",
    "prefill_expert_fetches",
    "metric_sources",
    "cgroup_reason",
    "cgroup_slack_bytes",
    "memory_samples",
    "rss_anon_peak_sampled_bytes",
    "page_cache_resident_bytes_peak",
    "anon_plus_page_cache_peak_bytes",
    "over_budget",
    // RunMetrics fields added after the memory columns (appended, in struct order).
    "device_read_bytes",
    "device_read_bytes_per_token",
    "read_busy_s_decode",
    "read_throughput_busy_decode_bytes_per_s",
    // Engines axis (appended after the device columns).
    "engine",
    "engine_version",
    "budget_held_by",
    // RunMetrics fields of the warm start (appended).
    "warm_fill_s",
    "warm_fill_bytes",
    // The noise sentinel (appended).
    "noise_other_cpu_s",
    "noise_steal_s",
    "noise_psi_cpu_s",
    "noise_psi_io_s",
    "noise_foreign_read_bytes",
    "noisy",
    // RunMetrics fields of the lossless layout (appended).
    "lossless_decoded_bytes_per_token",
    "lossless_decode_s_per_token",
    // llama-bench's field names (appended).
    "n_prompt",
    "n_gen",
    "avg_ts",
    "stddev_ts",
    "load_mode",
    // The settings of the planned floor (appended).
    "planned_floor_for",
    // Text-only engines (appended).
    "output_kind",
    // Predictions of the spec's `trace` (appended).
    "predicted_s_per_token",
    "predicted_bytes_read_per_token",
    "prediction_error",
    // The `concurrency` axis (appended).
    "aggregate_tokens_per_s",
    "ttft_p50_s",
    "ttft_p90_s",
    "itl_p50_s",
    "itl_p90_s",
    "requests_output_ids",
    "requests_prompt_index",
    // RunMetrics fields of what the scheduler did to the run (appended).
    "decode_run_queue_wait_s",
    "run_queue_wait_fraction",
    "uncontended_s_per_token",
    "uncontended_s_per_token_median",
    "cpu_s_per_token",
    // RunMetrics fields of speculative decoding (appended).
    "forwards",
    "drafted_tokens",
    "accepted_tokens",
    "mean_accepted_length",
    "bytes_read_per_forward",
    // The `depth` axis: RunMetrics fields, then llama-bench's name (appended).
    "depth_tokens",
    "depth_prefill_s",
    "n_depth",
    // Goodput under the spec's `slo` (appended).
    "goodput_fraction",
    "goodput_requests_per_s",
];

impl Row {
    /// Reads the engine's `--metrics-json` object ([`MetricsFile`]) into the row.
    /// Unknown keys are ignored; missing ones stay `None`. A median the engine did
    /// not report is computed here (its source recorded as the harness).
    ///
    /// Errors: the object does not have the [`MetricsFile`] types (e.g. `output_ids`
    /// is not an array of u32 token ids).
    pub fn fill_metrics(&mut self, m: &Value) -> Result<()> {
        let f = MetricsFile::deserialize(m).context("engine metrics do not match the schema")?;
        self.engine_schema_version = f.schema_version;
        self.metrics = f.metrics;
        if self.metrics.decode_s_per_token_median.is_none()
            && !self.metrics.decode_s_per_token.is_empty()
        {
            self.metrics.decode_s_per_token_median =
                memdial::util::stats::median(&self.metrics.decode_s_per_token);
            self.metrics
                .metric_sources
                .insert("decode_s_per_token_median".into(), Source::Harness);
        }
        self.llama_bench = super::llama_bench::LlamaBench::of(&self.metrics, self.io);
        Ok(())
    }

    /// Whether the row's metrics prove its output
    /// ([`RunMetrics::check_self_consistent`] against the row's `max_tokens`): as many
    /// ids as generated tokens, no more than `max_tokens`, the hash of those ids,
    /// finite non-negative timings.
    ///
    /// Errors: `the run does not prove its output: FIELD: why`, naming the first
    /// failing field.
    pub fn prove(&self) -> std::result::Result<(), String> {
        if self.is_text_only() {
            return self
                .prove_text()
                .map_err(|why| format!("the run does not prove its output: {why}"));
        }
        self.metrics
            .check_self_consistent(Some(self.max_tokens as u64))
            .map_err(|why| format!("the run does not prove its output: {why}"))
    }

    /// A text-only engine's run ([`Row::output_kind`] `text`).
    pub fn is_text_only(&self) -> bool {
        self.output_kind.as_deref() == Some(TEXT_ONLY)
    }

    /// A text-only run proves its output by a SHA-256 of non-empty text and finite,
    /// non-negative step times.
    fn prove_text(&self) -> std::result::Result<(), String> {
        let m = &self.metrics;
        match m.output_text_sha256.as_deref() {
            None => return Err("output_text_sha256: missing".into()),
            Some(h) if h.len() != 64 || !h.bytes().all(|b| b.is_ascii_hexdigit()) => {
                return Err(format!("output_text_sha256: {h:?} is not a SHA-256"))
            }
            Some(EMPTY_SHA256) => {
                return Err("output_text_sha256: the run printed no text (the hash of \"\")".into())
            }
            _ => {}
        }
        if !m.output_ids.is_empty() {
            return Err("output_ids: a text-only run reported ids".into());
        }
        if let Some((i, x)) = m
            .decode_s_per_token
            .iter()
            .enumerate()
            .find(|(_, x)| !(x.is_finite() && **x >= 0.0))
        {
            return Err(format!(
                "decode_s_per_token[{i}]: {x} is not a finite non-negative time"
            ));
        }
        Ok(())
    }

    /// The hash the verdict compares: the output text's for a text-only run, else
    /// [`Row::ids_hash`].
    pub fn output_hash(&self) -> Option<String> {
        if self.is_text_only() {
            self.metrics.output_text_sha256.clone()
        } else {
            self.ids_hash()
        }
    }

    /// The hash the verdict compares: the engine's `output_ids_sha256`, or the hash
    /// of `output_ids` when the engine gave none.
    pub fn ids_hash(&self) -> Option<String> {
        self.metrics.output_ids_sha256.clone().or_else(|| {
            (self.status == RunStatus::Ok)
                .then(|| memdial::engine::generate::ids_sha256(&self.metrics.output_ids))
        })
    }

    /// Records the harness's memory samples and decides `over_budget` (call after
    /// [`Row::fill_metrics`], so the engine's anonymous peak is known).
    pub fn fill_memory(&mut self, m: &super::memory::MemSamples, slack: u64) {
        self.cgroup_slack_bytes = Some(slack);
        self.memory_samples = Some(m.samples);
        self.rss_anon_peak_sampled_bytes = Some(m.anon_peak_bytes);
        self.page_cache_resident_bytes_peak = Some(m.page_cache_peak_bytes);
        self.anon_plus_page_cache_peak_bytes = Some(m.anon_plus_page_cache_peak_bytes);
        if self.cgroup_enforced && self.cgroup_peak_bytes.is_none() {
            self.cgroup_peak_bytes = m.cgroup_usage_peak_bytes;
        }
        if self.cgroup_enforced && self.cgroup_oom_kills.is_none() {
            self.cgroup_oom_kills = m.cgroup_oom_kills;
        }
        let engine_end = self
            .metrics
            .peak_rss_anon_bytes
            .zip(self.metrics.page_cache_resident_bytes_end)
            .map(|(a, p)| a + p);
        self.over_budget = self.status == RunStatus::Ok
            && super::memory::over_budget(
                self.cgroup_enforced,
                &[
                    self.anon_plus_page_cache_peak_bytes,
                    engine_end,
                    self.metrics.peak_rss_anon_bytes,
                ],
                self.budget_bytes,
                slack,
            );
    }

    /// True for measured (non-warm-up) runs that finished.
    pub fn is_measured_ok(&self) -> bool {
        self.status == RunStatus::Ok && !self.warmup
    }

    /// [`Row::is_measured_ok`] and not marked `noisy`: the runs the statistics use.
    pub fn is_measured_quiet(&self) -> bool {
        self.is_measured_ok() && self.noisy.is_none()
    }

    /// [`Row::is_measured_ok`] but marked `noisy`: counted apart.
    pub fn is_measured_noisy(&self) -> bool {
        self.is_measured_ok() && self.noisy.is_some()
    }

    /// Records the noise sentinel's figures around the run and whether they exceed
    /// `t` ([`memdial::tools::noise::Noise::noisy`]).
    pub fn fill_noise(
        &mut self,
        n: &memdial::tools::noise::Noise,
        t: &memdial::tools::noise::Thresholds,
    ) {
        self.noise_other_cpu_s = Some(n.other_cpu_s);
        self.noise_steal_s = Some(n.steal_s);
        self.noise_psi_cpu_s = n.psi_cpu_some_s;
        self.noise_psi_io_s = n.psi_io_some_s;
        self.noise_foreign_read_bytes = n.foreign_read_bytes;
        self.noisy = n.noisy(t);
    }
}

fn cell(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        Value::String(s) => neutralise_formula(s),
        Value::Array(a) => a
            .iter()
            .map(|x| match x {
                Value::Null => "null".to_string(),
                Value::String(s) => s.clone(),
                o => o.to_string(),
            })
            .collect::<Vec<_>>()
            .join(" "),
        o => o.to_string(),
    }
}

/// The columns of `rows`: [`COLUMNS`], then one per later axis the rows have
/// (`sweep::axes`), in the order the rows first name them.
pub fn columns(rows: &[Row]) -> Vec<String> {
    let mut cols: Vec<String> = COLUMNS.iter().map(|c| c.to_string()).collect();
    for r in rows {
        for k in r.axes.keys() {
            if !cols.contains(k) {
                cols.push(k.clone());
            }
        }
    }
    cols
}

/// A text cell a spreadsheet would run as a formula (it begins with `=`, `+`, `-`,
/// `@`, a tab or a carriage return: OWASP's CSV-injection list) gets a leading `'`, so
/// it shows as the text it is. Only text cells: numbers (a negative one too) are
/// written as numbers, and memdial's own values never begin with those characters.
pub fn neutralise_formula(s: &str) -> String {
    if s.starts_with(['=', '+', '-', '@', '\t', '\r']) {
        format!("'{s}")
    } else {
        s.to_string()
    }
}

/// CSV text of `rows` with the [`columns`] header.
pub fn to_csv(rows: &[Row]) -> Result<Vec<u8>> {
    let mut w = csv::Writer::from_writer(Vec::new());
    let cols = columns(rows);
    w.write_record(&cols)?;
    for r in rows {
        let v = serde_json::to_value(r)?;
        let rec: Vec<String> = cols
            .iter()
            .map(|c| v.get(c.as_str()).map(cell).unwrap_or_default())
            .collect();
        w.write_record(&rec)?;
    }
    w.into_inner().map_err(|e| anyhow::anyhow!("csv: {e}"))
}

/// Writes `results.json` and `results.csv` atomically.
pub fn save(dir: &Path, rows: &[Row]) -> Result<()> {
    crate::export::write_table(dir, rows, &to_csv(rows)?)
}

/// Reads `results.json` of a run directory (empty when it does not exist yet).
pub fn load(dir: &Path) -> Result<Vec<Row>> {
    let p = dir.join("results.json");
    if !p.exists() {
        return Ok(vec![]);
    }
    let text =
        std::fs::read_to_string(&p).with_context(|| format!("cannot read {}", p.display()))?;
    serde_json::from_str(&text).with_context(|| format!("{} is not a results file", p.display()))
}

mod coords;
#[cfg(test)]
mod tests;
