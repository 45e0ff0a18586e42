//! [`RunMetrics`]: the figures of one generation run — the one schema that
//! `memdial run --metrics-json` writes (inside a [`MetricsFile`]), the sweep reads,
//! and `results.csv` flattens into its columns (one column per field, same name).
//!
//! Units are in the names: `_s` seconds, `_bytes` bytes, `_per_s` per second;
//! rates and fractions are in [0, 1]. Every figure is optional (`null`) so an
//! engine that does not measure one (another runtime filling a row, a resident
//! run without a streaming store) leaves it empty; [`RunMetrics::metric_sources`] says
//! who measured each figure that is present.
//!
//! Adding a figure: add the field here (at the end), then its column at the end of
//! `harness/src/sweep/row.rs::COLUMNS` and a row in the schema table of docs/results.md; the row
//! test `every_run_metric_reaches_results_csv` fails until both are done.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize};

/// Version of the [`MetricsFile`] layout (`schema_version`). Adding fields keeps it;
/// renaming or changing the meaning of one bumps it.
pub const SCHEMA_VERSION: u64 = 1;

/// Who measured a figure of [`RunMetrics`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    /// The engine's own clocks and counters (timings, bytes read, hit rates, ids).
    Engine,
    /// The operating system: `/proc/self/status` (RSS) or `mincore` (page cache).
    Os,
    /// The harness, derived from other figures (e.g. a median of the per-token times).
    Harness,
}

/// What `memdial run --metrics-json FILE` writes: the settings the run used and its
/// [`RunMetrics`] (flattened: one JSON object).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct MetricsFile {
    /// [`SCHEMA_VERSION`] of the writer.
    #[serde(deserialize_with = "lenient_u64")]
    pub schema_version: Option<u64>,
    /// Memory budget, bytes (`null`: full residency, no streaming store).
    #[serde(deserialize_with = "lenient_u64")]
    pub budget_bytes: Option<u64>,
    /// IO mode of the streaming store (`null` without one).
    pub io: Option<String>,
    /// Prefetch policy.
    pub prefetch: Option<String>,
    /// Expert-cache policy.
    pub cache: Option<String>,
    /// Kernel threads.
    #[serde(deserialize_with = "lenient_u64")]
    pub threads: Option<u64>,
    /// The run's figures.
    #[serde(flatten)]
    pub metrics: RunMetrics,
}

/// The figures of one run. Missing keys read as `None` / empty; unknown keys are ignored.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RunMetrics {
    /// Model directory as given to the engine.
    pub model: Option<String>,
    /// Tensor bytes of the checkpoint (sum of the safetensors data sections).
    #[serde(deserialize_with = "lenient_u64")]
    pub model_bytes: Option<u64>,
    /// Floor of the memory plan, bytes (`store::plan`).
    #[serde(deserialize_with = "lenient_u64")]
    pub floor_bytes: Option<u64>,
    /// Background IO threads of the streaming store.
    #[serde(deserialize_with = "lenient_u64")]
    pub io_threads: Option<u64>,
    /// Positions the state was sized for, tokens.
    #[serde(deserialize_with = "lenient_u64")]
    pub max_context: Option<u64>,
    /// Prompt length, tokens.
    #[serde(deserialize_with = "lenient_u64")]
    pub prompt_tokens: Option<u64>,
    /// Generated tokens (including a final stop id).
    #[serde(deserialize_with = "lenient_u64")]
    pub generated_tokens: Option<u64>,
    /// Load time (config, checkpoint, validation, store open), seconds.
    #[serde(deserialize_with = "finite_f64")]
    pub load_s: Option<f64>,
    /// Time to first token (prefill + first sample), seconds.
    #[serde(deserialize_with = "finite_f64")]
    pub ttft_s: Option<f64>,
    /// Seconds of every decode step (one per token after the first).
    pub decode_s_per_token: Vec<f64>,
    /// Median of `decode_s_per_token`, seconds.
    #[serde(deserialize_with = "finite_f64")]
    pub decode_s_per_token_median: Option<f64>,
    /// 90th percentile of `decode_s_per_token` by linear interpolation between closest
    /// ranks (rank `0.9 (n − 1)`, NumPy's default; `memdial::util::stats::percentile`), seconds.
    #[serde(deserialize_with = "finite_f64")]
    pub decode_s_per_token_p90: Option<f64>,
    /// Decode steps / decode seconds.
    #[serde(deserialize_with = "finite_f64")]
    pub tokens_per_s: Option<f64>,
    /// Bytes read from the model files during the run (load + generation).
    #[serde(deserialize_with = "finite_f64")]
    pub bytes_read_total: Option<f64>,
    /// Bytes read during decode / decode steps.
    #[serde(deserialize_with = "finite_f64")]
    pub bytes_read_per_token: Option<f64>,
    /// Bytes read during decode / decode seconds.
    #[serde(deserialize_with = "finite_f64")]
    pub read_throughput_decode_bytes_per_s: Option<f64>,
    /// `io_wait_s` / generation wall time (prefill + decode), [0, 1].
    #[serde(deserialize_with = "finite_f64")]
    pub io_wait_fraction: Option<f64>,
    /// Trunk bytes served from pinned memory / trunk bytes needed, [0, 1].
    #[serde(deserialize_with = "finite_f64")]
    pub trunk_hit_rate: Option<f64>,
    /// Expert requests served from the cache (or in flight) / expert requests, [0, 1].
    #[serde(deserialize_with = "finite_f64")]
    pub expert_hit_rate: Option<f64>,
    /// `expert_hit_rate` per layer (`null` for layers without routed experts).
    pub expert_hit_rate_per_layer: Vec<Option<f64>>,
    /// Look-ahead guesses the router then selected / guesses, [0, 1].
    #[serde(deserialize_with = "finite_f64")]
    pub lookahead_precision: Option<f64>,
    /// Look-ahead guesses the router then selected / selections, [0, 1].
    #[serde(deserialize_with = "finite_f64")]
    pub lookahead_recall: Option<f64>,
    /// Peak resident set (VmHWM, includes mapped file pages), bytes.
    #[serde(deserialize_with = "lenient_u64")]
    pub peak_rss_bytes: Option<u64>,
    /// Peak anonymous resident memory over the run's samples (RssAnon), bytes.
    #[serde(deserialize_with = "lenient_u64")]
    pub peak_rss_anon_bytes: Option<u64>,
    /// File-backed resident memory at the end (RssFile), bytes.
    #[serde(deserialize_with = "lenient_u64")]
    pub rss_file_bytes: Option<u64>,
    /// Peak of the store's own accounting (what the budget limits), bytes.
    #[serde(deserialize_with = "lenient_u64")]
    pub peak_accounted_bytes: Option<u64>,
    /// Times the accounting exceeded the budget.
    #[serde(deserialize_with = "lenient_u64")]
    pub budget_overflows: Option<u64>,
    /// Model bytes in the page cache when the run ended (mincore), bytes.
    #[serde(deserialize_with = "lenient_u64")]
    pub page_cache_resident_bytes_end: Option<u64>,
    /// Generated token ids.
    pub output_ids: Vec<u32>,
    /// [`crate::engine::generate::ids_sha256`] of `output_ids`.
    pub output_ids_sha256: Option<String>,
    /// SHA-256 (hex) of the decoded output text (UTF-8).
    pub output_text_sha256: Option<String>,
    // --- added after schema 1's first columns (results.csv appends them at the end)
    /// Layers whose trunk the plan pins.
    #[serde(deserialize_with = "lenient_u64")]
    pub pinned_layers: Option<u64>,
    /// Routed experts the plan's expert cache holds.
    #[serde(deserialize_with = "lenient_u64")]
    pub expert_cache_experts: Option<u64>,
    /// Seconds in the prefill forward calls.
    #[serde(deserialize_with = "finite_f64")]
    pub prefill_s: Option<f64>,
    /// Bytes read while loading (the pinned set, or every tensor when resident).
    #[serde(deserialize_with = "finite_f64")]
    pub bytes_read_load: Option<f64>,
    /// Seconds the compute thread waited for reads.
    #[serde(deserialize_with = "finite_f64")]
    pub io_wait_s: Option<f64>,
    /// Trunk hit rate the plan predicts (pinned trunk bytes / trunk bytes), [0, 1].
    #[serde(deserialize_with = "finite_f64")]
    pub predicted_trunk_hit_rate: Option<f64>,
    /// Expert hits that were in flight thanks to a prefetch.
    #[serde(deserialize_with = "lenient_u64")]
    pub expert_prefetch_hits: Option<u64>,
    /// Anonymous resident memory at the end (RssAnon), bytes.
    #[serde(deserialize_with = "lenient_u64")]
    pub rss_anon_bytes: Option<u64>,
    /// Prompt tokens per second of prefill (`prompt_tokens / prefill_s`).
    #[serde(deserialize_with = "finite_f64")]
    pub prefill_tokens_per_s: Option<f64>,
    /// Bytes read from the model files between load and the first token (streamed runs).
    #[serde(deserialize_with = "lenient_u64")]
    pub prefill_bytes_read: Option<u64>,
    /// Routed-expert fetches of the expert-grouped prefill (one per distinct expert,
    /// chunk and MoE layer; streamed runs).
    #[serde(deserialize_with = "lenient_u64")]
    pub prefill_expert_fetches: Option<u64>,
    /// Bytes the process read from the block device during the run (load +
    /// generation; `/proc/self/io` `read_bytes`, [`crate::io::accounting`]). Against
    /// `bytes_read_total` (what the engine asked for) it shows read-ahead waste.
    #[serde(deserialize_with = "lenient_u64")]
    pub device_read_bytes: Option<u64>,
    /// Device bytes read during decode ÷ decode steps (compare `bytes_read_per_token`).
    #[serde(deserialize_with = "finite_f64")]
    pub device_read_bytes_per_token: Option<f64>,
    /// Seconds of decode during which at least one read of the store was in flight.
    #[serde(deserialize_with = "finite_f64")]
    pub read_busy_s_decode: Option<f64>,
    /// Bytes read during decode ÷ `read_busy_s_decode`: the read throughput the
    /// store got while reading (compare fio on the same request mix and depth).
    #[serde(deserialize_with = "finite_f64")]
    pub read_throughput_busy_decode_bytes_per_s: Option<f64>,
    /// Lossless layout: bytes decoded from coded blocks per decoded token (the
    /// coded bytes read are in `bytes_read_per_token`); `None` for a safetensors
    /// checkpoint.
    #[serde(deserialize_with = "finite_f64")]
    pub lossless_decoded_bytes_per_token: Option<f64>,
    /// Lossless layout: IO-thread CPU seconds checking and decoding blocks per decoded
    /// token; `None` for a safetensors checkpoint.
    #[serde(deserialize_with = "finite_f64")]
    pub lossless_decode_s_per_token: Option<f64>,
    /// Wall time of the warm start's cache fill (`memdial run --start warm`), seconds;
    /// `None` for a cold start. Not part of `load_s`.
    #[serde(deserialize_with = "finite_f64")]
    pub warm_fill_s: Option<f64>,
    /// Bytes the warm start read from the model files to fill the expert cache and the
    /// trunk slots; not part of `bytes_read_total` or `device_read_bytes`.
    #[serde(deserialize_with = "lenient_u64")]
    pub warm_fill_bytes: Option<u64>,
    /// Per decode step, the mean run-queue wait of the compute threads (the thread
    /// driving the forward and the kernel pool's workers), seconds, from
    /// `/proc/self/task/<tid>/schedstat`; empty when unavailable. Time a neighbour (or
    /// one of the run's own threads) held a core the step wanted.
    pub decode_run_queue_wait_s: Vec<f64>,
    /// `Σ decode_run_queue_wait_s / Σ decode_s_per_token`: the share of decode time the
    /// run waited for a CPU (`None`: unavailable).
    #[serde(deserialize_with = "finite_f64")]
    pub run_queue_wait_fraction: Option<f64>,
    /// Per decode step, wall time minus that step's mean compute-thread run-queue
    /// wait, seconds: the step without CPU contention (`engine::step_clock`). Empty when the
    /// waits are unavailable.
    pub uncontended_s_per_token: Vec<f64>,
    /// Median of `uncontended_s_per_token`, seconds.
    #[serde(deserialize_with = "finite_f64")]
    pub uncontended_s_per_token_median: Option<f64>,
    /// CPU seconds of the whole process (all threads) over the decode loop ÷ decode
    /// steps: a measure a neighbour barely moves.
    #[serde(deserialize_with = "finite_f64")]
    pub cpu_s_per_token: Option<f64>,
    /// Decode forwards: one per token after the first with `--speculate off`; one per
    /// verification pass with speculation (each emits ≥ 1 token).
    #[serde(deserialize_with = "lenient_u64")]
    pub forwards: Option<u64>,
    /// Draft ids the verification passes fed (0 with `--speculate off`).
    #[serde(deserialize_with = "lenient_u64")]
    pub drafted_tokens: Option<u64>,
    /// Draft ids accepted: emitted as drafted (0 with `--speculate off`).
    #[serde(deserialize_with = "lenient_u64")]
    pub accepted_tokens: Option<u64>,
    /// `accepted_tokens / forwards`: drafts accepted per decode forward (a forward
    /// emits this + 1 tokens, fewer where generation ends inside it).
    #[serde(deserialize_with = "finite_f64")]
    pub mean_accepted_length: Option<f64>,
    /// Bytes read during decode ÷ `forwards` (streamed runs).
    #[serde(deserialize_with = "finite_f64")]
    pub bytes_read_per_forward: Option<f64>,
    /// Context tokens prefilled before the prompt (`--depth`, llama-bench's
    /// `n_depth`; 0 without it).
    #[serde(deserialize_with = "lenient_u64")]
    pub depth_tokens: Option<u64>,
    /// Seconds prefilling those context tokens (with `--depth` above 0), apart from
    /// `prefill_s` (the prompt's) and `ttft_s`.
    #[serde(deserialize_with = "finite_f64")]
    pub depth_prefill_s: Option<f64>,
    /// Decode IO wait of the compute thread ÷ decode steps, seconds (streamed runs),
    /// and its parts (`store::metrics::IoWaitSplit`): trunk groups (waited for before a
    /// layer's router), of which reads a prefetch queued ahead; routed experts (after
    /// the router), of which reads a prefetch queued ahead. The rest is embedding rows.
    #[serde(deserialize_with = "finite_f64")]
    pub io_wait_s_per_token: Option<f64>,
    #[serde(deserialize_with = "finite_f64")]
    pub io_wait_trunk_s_per_token: Option<f64>,
    #[serde(deserialize_with = "finite_f64")]
    pub io_wait_trunk_prefetched_s_per_token: Option<f64>,
    #[serde(deserialize_with = "finite_f64")]
    pub io_wait_expert_s_per_token: Option<f64>,
    #[serde(deserialize_with = "finite_f64")]
    pub io_wait_expert_prefetched_s_per_token: Option<f64>,
    /// `--profile-ops`: seconds in the routed experts' products (`moe/routed_experts`)
    /// ÷ decode steps: the compute after the router.
    #[serde(deserialize_with = "finite_f64")]
    pub expert_compute_s_per_token: Option<f64>,
    /// Who measured each figure present (field name → source).
    pub metric_sources: BTreeMap<String, Source>,
}

impl RunMetrics {
    /// Fills the scheduler figures (`decode_run_queue_wait_s`, `run_queue_wait_fraction`,
    /// `uncontended_s_per_token` and its median, `cpu_s_per_token`) from a decode loop's
    /// per-step seconds `decode_s` and what its [`crate::engine::step_clock::StepClock`]
    /// measured; figures the machine lacks stay absent.
    pub fn set_sched(&mut self, decode_s: &[f64], f: &crate::engine::step_clock::StepFigures) {
        let steps = decode_s.len();
        let total: f64 = decode_s.iter().sum();
        if let Some(w) = f.run_queue_wait_s.as_deref().filter(|w| w.len() == steps) {
            self.decode_run_queue_wait_s = w.to_vec();
            self.run_queue_wait_fraction = (total > 0.0).then(|| w.iter().sum::<f64>() / total);
            self.uncontended_s_per_token =
                crate::engine::step_clock::uncontended_s(decode_s, w).unwrap_or_default();
            self.uncontended_s_per_token_median =
                crate::util::stats::median(&self.uncontended_s_per_token);
        }
        self.cpu_s_per_token = f.cpu_s.filter(|_| steps > 0).map(|c| c / steps as f64);
    }

    /// Fills the decode IO-wait figures (`io_wait_s_per_token` and its parts) from the
    /// store's counters at the end (`end`) and at the first token (`first`), over
    /// `steps` decode steps (> 0).
    pub fn set_io_waits(
        &mut self,
        end: &crate::store::metrics::StoreMetrics,
        first: &crate::store::metrics::StoreMetrics,
        steps: usize,
    ) {
        let n = steps.max(1) as f64;
        let (a, b) = (&end.io_wait_split, &first.io_wait_split);
        let per = |x: f64, y: f64| Some((x - y).max(0.0) / n);
        self.io_wait_s_per_token = per(end.io_wait_s, first.io_wait_s);
        self.io_wait_trunk_s_per_token = per(
            a.trunk_demand_s + a.trunk_prefetched_s,
            b.trunk_demand_s + b.trunk_prefetched_s,
        );
        self.io_wait_trunk_prefetched_s_per_token = per(a.trunk_prefetched_s, b.trunk_prefetched_s);
        self.io_wait_expert_s_per_token = per(
            a.expert_demand_s + a.expert_prefetched_s,
            b.expert_demand_s + b.expert_prefetched_s,
        );
        self.io_wait_expert_prefetched_s_per_token =
            per(a.expert_prefetched_s, b.expert_prefetched_s);
    }

    /// Records `source` for every figure that is present (non-null, non-empty) and
    /// has no source yet.
    pub fn fill_sources(&mut self, source: Source) {
        let v = serde_json::to_value(&*self).expect("RunMetrics serializes");
        for (k, x) in v.as_object().expect("an object") {
            let present = match x {
                serde_json::Value::Null => false,
                serde_json::Value::Array(a) => !a.is_empty(),
                serde_json::Value::Object(o) => !o.is_empty(),
                _ => true,
            };
            if present && k != "metric_sources" {
                self.metric_sources.entry(k.clone()).or_insert(source);
            }
        }
    }
}

impl RunMetrics {
    /// Whether this run proves its own output: at least one id, exactly
    /// `generated_tokens` of them and no more than `max_tokens` (when given), an
    /// `output_ids_sha256` that is [`crate::engine::generate::ids_sha256`] of those ids, and
    /// every timing and rate present finite, non-negative and plausible: 0 or within
    /// [`PLAUSIBLE_S`] seconds (a rate, `tokens_per_s`, within [`PLAUSIBLE_PER_S`]), element
    /// by element for `decode_s_per_token`. (Far-out values, which no clock gives,
    /// would also stall the harness's chart drawing.)
    ///
    /// Errors: the first field that fails, named, with the values that disagree —
    /// the reason a sweep gives when it counts the run as failed.
    pub fn check_self_consistent(&self, max_tokens: Option<u64>) -> Result<(), String> {
        let n = self.output_ids.len() as u64;
        if n == 0 {
            return Err("output_ids: the run reported no ids".into());
        }
        match self.generated_tokens {
            None => return Err(format!("generated_tokens: missing ({n} ids reported)")),
            Some(g) if g != n => {
                return Err(format!(
                    "generated_tokens: {g}, but output_ids holds {n} ids"
                ))
            }
            _ => {}
        }
        if let Some(m) = max_tokens.filter(|&m| n > m) {
            return Err(format!("output_ids: {n} ids, more than max_tokens = {m}"));
        }
        let want = crate::engine::generate::ids_sha256(&self.output_ids);
        match &self.output_ids_sha256 {
            None => return Err("output_ids_sha256: missing".into()),
            Some(h) if *h != want => {
                return Err(format!(
                    "output_ids_sha256: {h} is not the hash of the reported ids ({want})"
                ))
            }
            _ => {}
        }
        let timings = [
            ("load_s", self.load_s),
            ("ttft_s", self.ttft_s),
            ("prefill_s", self.prefill_s),
            ("decode_s_per_token_median", self.decode_s_per_token_median),
            ("decode_s_per_token_p90", self.decode_s_per_token_p90),
            ("tokens_per_s", self.tokens_per_s),
            ("io_wait_s", self.io_wait_s),
            ("read_busy_s_decode", self.read_busy_s_decode),
            ("warm_fill_s", self.warm_fill_s),
        ];
        if let Some((i, x)) = self
            .decode_s_per_token
            .iter()
            .enumerate()
            .find(|(_, x)| !(x.is_finite() && **x >= 0.0))
        {
            return Err(format!(
                "decode_s_per_token[{i}]: {x} is not a finite non-negative time"
            ));
        }
        if let Some((i, x)) = self
            .decode_s_per_token
            .iter()
            .enumerate()
            .find(|(_, x)| **x != 0.0 && !PLAUSIBLE_S.contains(*x))
        {
            return Err(format!(
                "decode_s_per_token[{i}]: {x:e} s is not a plausible time (0 or {:e} to {:e} s)",
                PLAUSIBLE_S.start(),
                PLAUSIBLE_S.end()
            ));
        }
        for (name, v) in timings {
            if let Some(x) = v.filter(|x| !(x.is_finite() && *x >= 0.0)) {
                return Err(format!("{name}: {x} is not a finite non-negative figure"));
            }
            let (lo, hi) = if name == "tokens_per_s" {
                (*PLAUSIBLE_PER_S.start(), *PLAUSIBLE_PER_S.end())
            } else {
                (*PLAUSIBLE_S.start(), *PLAUSIBLE_S.end())
            };
            if let Some(x) = v.filter(|x| *x != 0.0 && !(lo..=hi).contains(x)) {
                return Err(format!(
                    "{name}: {x:e} is not a plausible figure (0 or {lo:e} to {hi:e})"
                ));
            }
        }
        Ok(())
    }
}

/// The seconds a non-zero timing of a run may take: from 1 ns (below it no clock
/// resolves) to 10⁷ s (116 days, longer than any sweep's per-run timeout).
pub const PLAUSIBLE_S: std::ops::RangeInclusive<f64> = 1e-9..=1e7;
/// The rates (per second) a non-zero rate of a run may have: the inverse of
/// [`PLAUSIBLE_S`].
pub const PLAUSIBLE_PER_S: std::ops::RangeInclusive<f64> = 1e-7..=1e9;

/// `Option<u64>` from a JSON integer, a non-negative float (rounded) or `null`.
fn lenient_u64<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    let v = Option::<serde_json::Number>::deserialize(d)?;
    Ok(v.and_then(|n| {
        n.as_u64().or_else(|| {
            n.as_f64()
                .filter(|f| f.is_finite() && *f >= 0.0)
                .map(|f| f.round() as u64)
        })
    }))
}

/// `Option<f64>`; `null` and non-finite values read as `None`.
fn finite_f64<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.filter(|x| x.is_finite()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A run that proves itself: ids [1, 2], their hash (Python:
    /// hashlib.sha256(struct.pack("<2I", 1, 2)).hexdigest()), finite timings.
    fn proven() -> RunMetrics {
        RunMetrics {
            generated_tokens: Some(2),
            output_ids: vec![1, 2],
            output_ids_sha256: Some(
                "34fb5c825de7ca4aea6e712f19d439c1da0c92c37b423936c5f618545ca4fa1f".into(),
            ),
            ttft_s: Some(0.5),
            decode_s_per_token: vec![0.25],
            ..Default::default()
        }
    }

    #[test]
    fn self_consistency_names_the_field() {
        assert_eq!(proven().check_self_consistent(Some(2)), Ok(()));
        type Case = (Box<dyn Fn(&mut RunMetrics)>, Option<u64>, &'static str);
        let cases: Vec<Case> = vec![
            (
                Box::new(|m| m.output_ids.clear()),
                None,
                "output_ids: the run reported no ids",
            ),
            (
                Box::new(|m| m.generated_tokens = None),
                None,
                "generated_tokens: missing",
            ),
            (
                Box::new(|m| m.generated_tokens = Some(3)),
                None,
                "generated_tokens: 3, but",
            ),
            (Box::new(|_| {}), Some(1), "more than max_tokens = 1"),
            (
                Box::new(|m| m.output_ids_sha256 = None),
                None,
                "output_ids_sha256: missing",
            ),
            (
                Box::new(|m| m.output_ids = vec![1, 3]),
                None,
                "output_ids_sha256: 34fb5c82",
            ),
            (Box::new(|m| m.ttft_s = Some(-5.0)), None, "ttft_s: -5"),
            (
                Box::new(|m| m.decode_s_per_token = vec![0.1, f64::INFINITY]),
                None,
                "decode_s_per_token[1]: inf",
            ),
            (
                Box::new(|m| m.decode_s_per_token = vec![0.1, 1e200]),
                None,
                "decode_s_per_token[1]: 1e200 s is not a plausible time (0 or 1e-9 to 1e7 s)",
            ),
            (
                Box::new(|m| m.decode_s_per_token = vec![1e-300]),
                None,
                "decode_s_per_token[0]: 1e-300 s is not a plausible time",
            ),
            (
                Box::new(|m| m.ttft_s = Some(2e7)),
                None,
                "ttft_s: 2e7 is not a plausible figure (0 or 1e-9 to 1e7)",
            ),
            (
                Box::new(|m| m.tokens_per_s = Some(1e10)),
                None,
                "tokens_per_s: 1e10 is not a plausible figure (0 or 1e-7 to 1e9)",
            ),
        ];
        for (edit, max, want) in cases {
            let mut m = proven();
            edit(&mut m);
            let e = m.check_self_consistent(max).unwrap_err();
            assert!(e.starts_with(want) || e.contains(want), "{want:?} in {e:?}");
        }
    }

    #[test]
    fn lenient_numbers_and_unknown_keys() {
        let m: MetricsFile = serde_json::from_str(
            r#"{"schema_version": 1, "model_bytes": 1000.0, "load_s": null,
                "output_ids": [1, 2], "extra_key": 5, "metric_sources": {"load_s": "engine"}}"#,
        )
        .unwrap();
        assert_eq!(m.schema_version, Some(1));
        assert_eq!(m.metrics.model_bytes, Some(1000));
        assert_eq!(m.metrics.load_s, None);
        assert_eq!(m.metrics.output_ids, vec![1, 2]);
        assert_eq!(m.metrics.metric_sources["load_s"], Source::Engine);
        assert!(serde_json::from_str::<MetricsFile>(r#"{"output_ids": [-1]}"#).is_err());
    }

    #[test]
    fn sources_cover_present_figures_only() {
        let mut m = RunMetrics {
            load_s: Some(1.0),
            peak_rss_bytes: Some(5),
            ..Default::default()
        };
        m.metric_sources.insert("peak_rss_bytes".into(), Source::Os);
        m.fill_sources(Source::Engine);
        assert_eq!(m.metric_sources.len(), 2);
        assert_eq!(m.metric_sources["load_s"], Source::Engine);
        assert_eq!(m.metric_sources["peak_rss_bytes"], Source::Os);
    }
}
