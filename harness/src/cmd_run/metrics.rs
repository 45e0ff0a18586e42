//! The figures of one `memdial run`: [`RunFacts`] (what they are computed from) to
//! [`RunMetrics`], with each figure's source, and the `--metrics-json` file.

use std::path::Path;

use anyhow::Result;
use memdial::engine::loader::Opened;
use memdial::engine::metrics::{MetricsFile, RunMetrics, Source, SCHEMA_VERSION};
use memdial::format::config::ModelConfig;
use memdial::util::digest::hex;
use memdial::util::sysmem::PeakTracker;
use sha2::{Digest, Sha256};

use super::args::RunArgs;

/// What the warm start read (`--start warm`).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Warm {
    /// The store's figures of the fill.
    pub(super) fill: memdial::store::streaming::WarmFill,
    /// Device bytes the process read during the fill (when the OS reports them).
    pub(super) device_bytes: Option<u64>,
}

/// What generation produced, with the counters taken when the first token was chosen.
pub(super) struct Generated {
    pub(super) out: memdial::engine::generate::GenerateOutput,
    /// Store counters when the first token was chosen (decode figures start there).
    pub(super) at_first: Option<memdial::store::metrics::StoreMetrics>,
    /// Device read bytes at the first token (when the OS reports them).
    pub(super) device_at_first: Option<u64>,
    /// Wall time of generation (prefill + decode), seconds.
    pub(super) gen_wall: f64,
    /// The warm start's fill (`None`: cold start).
    pub(super) warm: Option<Warm>,
    /// Speculation's counters (`None` with `--speculate off`).
    pub(super) spec: Option<memdial::engine::speculate::SpecStats>,
    /// Seconds prefilling the `--depth` context (`None` without one).
    pub(super) depth_prefill_s: Option<f64>,
}

/// Everything a run's metrics are computed from.
pub(super) struct RunFacts<'a> {
    pub(super) a: &'a RunArgs,
    pub(super) cfg: &'a ModelConfig,
    pub(super) opened: &'a Opened,
    pub(super) prompt_len: usize,
    pub(super) max_context: usize,
    pub(super) load_s: f64,
    pub(super) g: &'a Generated,
    pub(super) mem: &'a PeakTracker,
    pub(super) text: Option<&'a str>,
}

impl RunFacts<'_> {
    /// The run's [`RunMetrics`] (every figure of `--metrics-json`), with each
    /// figure's source: the OS for memory and device reads, the engine otherwise.
    pub(super) fn metrics(&self) -> RunMetrics {
        let (a, out, mem) = (self.a, &self.g.out, self.mem);
        let streaming = &self.opened.streaming;
        let ck = &self.opened.checkpoint.ck;
        let m = streaming.as_ref().map(|s| s.metrics()).unwrap_or_default();
        let decode_total: f64 = out.decode_s.iter().sum();
        let first_m = self.g.at_first.clone().unwrap_or_default();
        let decode_bytes = m.bytes_read.saturating_sub(first_m.bytes_read);
        let steps = out.decode_s.len();
        // The warm start's device reads are reported apart (`warm_fill_bytes`).
        let device_end = memdial::io::accounting::device_read_bytes()
            .map(|d| d.saturating_sub(self.g.warm.and_then(|w| w.device_bytes).unwrap_or(0)));
        let read_busy_decode = m.read_busy_s - first_m.read_busy_s;
        let model_bytes = memdial::format::inspect::model_bytes(self.cfg, ck);
        let page_cache = self.page_cache_bytes();
        let plan = streaming.as_ref().map(|s| s.plan().clone());
        let streamed = streaming.is_some();
        let gen_wall = self.g.gen_wall;
        let mut rm = RunMetrics {
            model: Some(a.model.display().to_string()),
            model_bytes: Some(model_bytes),
            floor_bytes: plan.as_ref().map(|p| p.floor_bytes),
            io_threads: Some(a.store.io_threads as u64),
            max_context: Some(self.max_context as u64),
            prompt_tokens: Some(self.prompt_len as u64),
            generated_tokens: Some(out.output_ids.len() as u64),
            load_s: Some(self.load_s),
            ttft_s: Some(out.ttft_s),
            decode_s_per_token: out.decode_s.clone(),
            decode_s_per_token_median: (steps > 0).then(|| out.decode_median_s()),
            decode_s_per_token_p90: memdial::util::stats::percentile(&out.decode_s, 0.9),
            tokens_per_s: (decode_total > 0.0).then(|| steps as f64 / decode_total),
            bytes_read_total: Some(if streamed {
                (m.bytes_read + m.load_bytes_read) as f64
            } else {
                model_bytes as f64
            }),
            bytes_read_per_token: (steps > 0 && streamed)
                .then(|| decode_bytes as f64 / steps as f64),
            read_throughput_decode_bytes_per_s: (decode_total > 0.0 && streamed)
                .then(|| decode_bytes as f64 / decode_total),
            io_wait_fraction: Some(if gen_wall > 0.0 {
                m.io_wait_s / gen_wall
            } else {
                0.0
            }),
            trunk_hit_rate: streamed.then(|| m.trunk_hit_rate()),
            expert_hit_rate: streamed.then(|| m.expert_hit_rate()),
            expert_hit_rate_per_layer: m
                .expert_layer
                .iter()
                .map(|(r, h)| (*r > 0).then(|| *h as f64 / *r as f64))
                .collect(),
            lookahead_precision: m.lookahead_precision(),
            lookahead_recall: m.lookahead_recall(),
            peak_rss_bytes: Some(mem.last.vm_hwm_bytes),
            peak_rss_anon_bytes: Some(mem.peak_rss_anon_bytes),
            rss_file_bytes: Some(mem.last.rss_file_bytes),
            peak_accounted_bytes: streamed.then_some(m.peak_accounted_bytes),
            budget_overflows: Some(m.budget_overflows),
            page_cache_resident_bytes_end: Some(page_cache),
            output_ids: out.output_ids.clone(),
            output_ids_sha256: Some(out.output_ids_sha256()),
            output_text_sha256: self.text.map(|t| hex(&Sha256::digest(t.as_bytes()))),
            pinned_layers: plan.as_ref().map(|p| p.pinned_layers as u64),
            expert_cache_experts: plan.as_ref().map(|p| p.expert_cache_experts as u64),
            prefill_s: Some(out.prefill_s),
            bytes_read_load: Some(if streamed {
                m.load_bytes_read as f64
            } else {
                model_bytes as f64
            }),
            io_wait_s: Some(m.io_wait_s),
            predicted_trunk_hit_rate: plan.as_ref().map(|p| p.predicted_trunk_hit_rate),
            expert_prefetch_hits: Some(m.expert_prefetch_hits),
            rss_anon_bytes: Some(mem.last.rss_anon_bytes),
            prefill_tokens_per_s: (out.prefill_s > 0.0)
                .then(|| self.prompt_len as f64 / out.prefill_s),
            prefill_bytes_read: streamed.then_some(first_m.bytes_read),
            prefill_expert_fetches: streamed.then_some(first_m.prefill_expert_fetches),
            device_read_bytes: device_end,
            device_read_bytes_per_token: device_end
                .zip(self.g.device_at_first)
                .filter(|_| steps > 0)
                .map(|(e, f)| e.saturating_sub(f) as f64 / steps as f64),
            read_busy_s_decode: streamed.then_some(read_busy_decode),
            read_throughput_busy_decode_bytes_per_s: (streamed && read_busy_decode > 0.0)
                .then(|| decode_bytes as f64 / read_busy_decode),
            lossless_decoded_bytes_per_token: (ck.lossless.is_some() && steps > 0).then(|| {
                m.lossless_decoded_bytes
                    .saturating_sub(first_m.lossless_decoded_bytes) as f64
                    / steps as f64
            }),
            lossless_decode_s_per_token: (ck.lossless.is_some() && steps > 0)
                .then(|| (m.lossless_decode_s - first_m.lossless_decode_s) / steps as f64),
            warm_fill_s: self.g.warm.map(|w| w.fill.seconds),
            warm_fill_bytes: self.g.warm.map(|w| w.fill.bytes),
            depth_tokens: Some(a.depth as u64),
            depth_prefill_s: self.g.depth_prefill_s,
            expert_compute_s_per_token: (a.profile_ops && steps > 0)
                .then(|| profiled_s(memdial::util::profile::Op::ExpertMlp) / steps as f64),
            ..Default::default()
        };
        if streamed && steps > 0 {
            rm.set_io_waits(&m, &first_m, steps);
        }
        rm.set_sched(&out.decode_s, &out.sched);
        self.speculation_figures(&mut rm, decode_bytes);
        mark_os_sources(&mut rm);
        rm.fill_sources(Source::Engine);
        rm
    }
}

/// Decode seconds the per-op timer counted for `op` (it is reset at the first token).
fn profiled_s(op: memdial::util::profile::Op) -> f64 {
    memdial::util::profile::totals()
        .iter()
        .filter(|t| t.0 == op)
        .map(|t| t.1)
        .sum()
}

/// Marks the figures the kernel measured (memory, device reads, the scheduler's
/// figures where present) as `Source::Os`.
fn mark_os_sources(rm: &mut RunMetrics) {
    // The kernel's schedstat and CPU clock measured these, where present.
    let sched_keys = [
        "decode_run_queue_wait_s",
        "run_queue_wait_fraction",
        "uncontended_s_per_token",
        "uncontended_s_per_token_median",
    ];
    if !rm.decode_run_queue_wait_s.is_empty() {
        for k in sched_keys {
            rm.metric_sources.insert(k.into(), Source::Os);
        }
    }
    if rm.cpu_s_per_token.is_some() {
        rm.metric_sources
            .insert("cpu_s_per_token".into(), Source::Os);
    }
    for k in [
        "peak_rss_bytes",
        "peak_rss_anon_bytes",
        "rss_file_bytes",
        "rss_anon_bytes",
        "page_cache_resident_bytes_end",
        "device_read_bytes",
        "device_read_bytes_per_token",
    ] {
        rm.metric_sources.insert(k.into(), Source::Os);
    }
}

impl RunFacts<'_> {
    /// Model bytes in the page cache now: the streaming store's shards, or every shard.
    fn page_cache_bytes(&self) -> u64 {
        match &self.opened.streaming {
            Some(s) => s.page_cache_resident_bytes(),
            None => self
                .opened
                .checkpoint
                .ck
                .shards
                .iter()
                .map(|sh| memdial::io::pagecache::resident_bytes(&sh.path).unwrap_or(0))
                .sum(),
        }
    }

    /// The decode forwards and drafts into `rm` (`decode_bytes`: bytes read after the
    /// first token). Plain decoding: one forward per token after the first, no drafts.
    fn speculation_figures(&self, rm: &mut RunMetrics, decode_bytes: u64) {
        let steps = self.g.out.decode_s.len() as u64;
        let spec = self
            .g
            .spec
            .unwrap_or(memdial::engine::speculate::SpecStats {
                forwards: steps,
                ..Default::default()
            });
        let f = spec.forwards;
        rm.forwards = Some(f);
        rm.drafted_tokens = Some(spec.drafted_tokens);
        rm.accepted_tokens = Some(spec.accepted_tokens);
        rm.mean_accepted_length = spec.mean_accepted_length();
        rm.bytes_read_per_forward =
            (f > 0 && self.opened.streaming.is_some()).then(|| decode_bytes as f64 / f as f64);
    }
}

/// Writes `--metrics-json` (the [`MetricsFile`] with the run's settings) atomically.
pub(super) fn write_metrics_json(path: &Path, a: &RunArgs, rm: &RunMetrics) -> Result<()> {
    let streamed = a.budget.is_some();
    let file = MetricsFile {
        schema_version: Some(SCHEMA_VERSION),
        budget_bytes: a.budget,
        io: streamed.then(|| a.store.io().as_str().to_string()),
        prefetch: Some(a.store.prefetch().as_str().to_string()),
        cache: Some(a.store.cache().as_str().to_string()),
        threads: Some(a.threads as u64),
        metrics: rm.clone(),
    };
    crate::export::write_atomic(
        path,
        (serde_json::to_string_pretty(&file)? + "\n").as_bytes(),
    )
}
