//! A sweep's predictions: the spec's `trace` checked against the sweep (same model
//! shape, prompt ids, prompt chunking and token count, else refused before any run),
//! then every point's configuration replayed by the simulator
//! ([`memdial::store::sim`]) and timed by its model
//! ([`memdial::store::sim::predict`]). Stored in `sweep.json`; the report fills the
//! rows' `predicted_*` columns from it and sets predicted beside measured
//! (docs/simulate.md, "Predict, then measure").

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Result;
use memdial::engine::arena::Scratch;
use memdial::io::IoMode;
use memdial::store::plan::{plan_unchecked, Prefetch, Sequences};
use memdial::store::sim::pool::SimPolicy;
use memdial::store::sim::predict::{predict, BatchRates, DecodeBytes, TimeModel};
use memdial::store::sim::{replay, Replayable, SimCounts, SimOptions};
use memdial::store::trace;
use memdial::util::stats::{median, min_max};

use crate::args::usage;
use crate::sweep::analysis::stats::PointStats;
use crate::sweep::record::predictions::{BatchRate, PointPrediction, Predictions, RateSample};
use crate::sweep::record::row::Row;
use crate::sweep::run::points::Points;
use crate::sweep::spec::{ComputeTime, DeviceRate, Spec};
use crate::sweep::start::StartMode;

/// `PointStats` and the point's prediction side by side (the report's table).
#[derive(Debug, Clone)]
pub struct Compared<'a> {
    pub stats: &'a PointStats,
    pub predicted: &'a PointPrediction,
    /// `predicted / measured median − 1`.
    pub error: Option<f64>,
    /// Inside the measured 95 % interval (or the min–max without one).
    pub inside: Option<bool>,
    /// Whether the interval is the bootstrap's (else min–max over too few repeats).
    pub has_interval: bool,
}

fn caveat(io: IoMode, prefetch: Prefetch) -> Option<String> {
    match (io, prefetch) {
        (IoMode::Buffered | IoMode::Mmap, _) => Some(format!(
            "unpredicted ({}: page-cache hits and the kernel's copy/fault costs are not modelled)",
            io.as_str()
        )),
        (_, Prefetch::Lookahead) => Some(
            "lookahead: its guessed reads are credited no overlap beyond next-layer's; a wrong \
             guess still in flight is evictable here, not in the engine"
                .into(),
        ),
        _ => None,
    }
}

/// The prompt chunks a budgeted `memdial run` cuts a `prompt`-token prompt into, with
/// the spec's `--prefill-chunk` (default 256) and `max_context` positions (as
/// `memdial run` does).
fn expected_chunks(spec: &Spec, prompt: usize, max_context: usize) -> Vec<usize> {
    let arg = spec
        .extra_args
        .iter()
        .position(|a| a == "--prefill-chunk")
        .and_then(|i| spec.extra_args.get(i + 1))
        .and_then(|v| v.parse::<usize>().ok())
        .or_else(|| {
            spec.extra_args
                .iter()
                .find_map(|a| a.strip_prefix("--prefill-chunk=")?.parse().ok())
        })
        .unwrap_or(256);
    let want = if arg == 0 { prompt } else { arg };
    let c = want
        .min(memdial::engine::arena::planned_prefill_chunk(max_context))
        .max(1);
    let mut v = Vec::new();
    let mut left = prompt;
    while left > 0 {
        v.push(left.min(c));
        left -= left.min(c);
    }
    v
}

/// Checks the spec's trace against the sweep and replays every point's configuration.
/// `None` when the spec has no trace. Bandwidth from the spec (`device_gbps`,
/// `iobench`) or, when it gives neither, `probe_gbps` (the sweep's own cold `direct`
/// probe; `None` before the run directory exists, see [`Predictions::set_probe`]).
///
/// Errors (usage, exit 2, before any run): a format-1 trace, another model shape,
/// prompt, prompt chunking or token count; an unreadable iobench report or resident
/// metrics file.
pub fn prepare(
    spec: &Spec,
    model: &Path,
    prompt_ids: &[Vec<u32>],
    points: &Points,
) -> Result<Option<Predictions>> {
    let Some(pred) = &spec.prediction else {
        return Ok(None);
    };
    let path = &pred.trace;
    let what = format!("trace {}", path.display());
    let bad = |m: String| usage(format!("{what} does not match the sweep: {m}"));
    let t = trace::read_full(path).map_err(|e| usage(format!("{e:#}")))?;
    let src = crate::planning::source::source_of(Some(model), None, None)?;
    let (cfg, ck) = (&src.cfg, &src.ck);
    let r = Replayable::new(&t, cfg, &what).map_err(|e| bad(format!("{e:#}")))?;
    let (matching, ctx) = check_fit(spec, &t, &r, prompt_ids, &what)?;
    let p = r.header.prompt_tokens;
    let io_threads = crate::store_flags::DEFAULT_IO_THREADS;
    let interleaved = pred.device == Some(DeviceRate::Interleaved);
    let (device, expert_gbps, batches) = match &pred.device {
        Some(DeviceRate::Gbps(g)) => (
            Some((*g, "the spec's device_gbps".to_string())),
            None,
            Vec::new(),
        ),
        Some(DeviceRate::Iobench(dir)) => {
            let top_k = cfg.routed_experts().map_or(1, |(_, k)| k.max(1));
            let r = crate::planning::rates::iobench_rates(dir, IoMode::Direct, top_k, io_threads)?;
            let b = r.expert_batch_gbps.iter();
            let b = b.map(|&(records, gbps)| BatchRate { records, gbps });
            (
                Some((r.trunk_gbps, r.source)),
                Some(r.expert_gbps),
                b.collect(),
            )
        }
        Some(DeviceRate::Interleaved) | None => (None, None, Vec::new()),
    };
    let compute = crate::planning::compute::compute_time(
        pred.compute_s_per_token(),
        pred.resident_metrics(),
    )?;
    let share = crate::planning::compute::expert_share(pred.resident_metrics())?;
    let compute_source = match &pred.compute {
        Some(ComputeTime::SecondsPerToken(_)) => "the spec's compute_s_per_token".to_string(),
        Some(ComputeTime::ResidentMetrics(m)) => format!("the resident run {}", m.display()),
        None => "not given (compute_s_per_token or resident_metrics)".to_string(),
    };
    let mut out = Predictions {
        trace: path.display().to_string(),
        device_gbps: device.as_ref().map(|d| d.0),
        device_source: match device {
            Some(d) => d.1,
            None if interleaved => "interleaved cells (none measured yet)".into(),
            None => "the sweep's cold direct probe".into(),
        },
        expert_gbps,
        expert_batch_gbps: batches,
        compute_s_per_token: compute,
        compute_source,
        expert_compute_share: share,
        decode_ids: t
            .forwards
            .iter()
            .filter(|f| f.forward >= p)
            .flat_map(|f| f.ids.iter().map(|&i| i as u32))
            .collect(),
        points: BTreeMap::new(),
        rate_samples: Vec::new(),
        interleaved_rates: interleaved,
    };
    for res in &points.resolved {
        let pt = &res.point;
        let memdial_engine = crate::sweep::spec::engines::def::engine_or_default(&pt.engine)
            == crate::sweep::spec::engines::def::DEFAULT_ENGINE;
        if !matching.contains(&pt.prompt_index)
            || !memdial_engine
            || pt.layout.is_packed()
            // The trace was recorded without a depth context: no prediction at one.
            || pt.depth > 0
            || res.budget_bytes < res.floor_bytes
        {
            continue;
        }
        let Ok(policy) = SimPolicy::parse(pt.cache.as_str()) else {
            continue;
        };
        let start = pt.start;
        let act = Scratch::activations(cfg, Sequences::single(ctx), pt.threads);
        let p0 = plan_unchecked(cfg, ck, 0, pt.io, pt.prefetch, act)?;
        let plan = p0.with_budget(cfg, res.budget_bytes);
        let emb = crate::planning::compute::embedding_rows(cfg, ck, &p0)?;
        let opts = SimOptions {
            policy,
            warm: start == StartMode::Warm,
            hot_prefix_tokens: p,
            speculate: None,
        };
        let rep = replay(&plan, cfg, &r, emb, &opts)?;
        let mut pp = point_prediction(&rep.decode, rep.decode_tokens, pt, start, res.budget_bytes);
        pp.bytes.streamed_compute_share = Some(memdial::store::rank::streamed_compute_share(&plan));
        out.points.insert(pt.index, pp);
    }
    out.retime();
    Ok(Some(out))
}

/// Checks that the trace `t` (checked as `r`) fits the sweep: a prompt of the sweep
/// (returns the matching prompt indices), the same prefill forwards and token count.
/// Also returns the context the sweep's runs are planned for.
///
/// Errors (usage): what differs, and how to record a trace that fits.
fn check_fit(
    spec: &Spec,
    t: &trace::Trace,
    r: &Replayable<'_>,
    prompt_ids: &[Vec<u32>],
    what: &str,
) -> Result<(Vec<usize>, usize)> {
    let bad = |m: String| usage(format!("{what} does not match the sweep: {m}"));
    let p = r.header.prompt_tokens;
    let trace_prompt: Vec<u32> = t
        .forwards
        .iter()
        .filter(|f| f.forward < p)
        .flat_map(|f| f.ids.iter().map(|&i| i as u32))
        .collect();
    let chunks: Vec<usize> = t
        .forwards
        .iter()
        .filter(|f| f.forward < p)
        .map(|f| f.ids.len())
        .collect();
    let matching: Vec<usize> = (0..prompt_ids.len())
        .filter(|&i| prompt_ids[i] == trace_prompt)
        .collect();
    if matching.is_empty() {
        return Err(bad(format!(
            "it was recorded on a {p}-token prompt {trace_prompt:?}, and no prompt of the sweep \
             tokenizes to those ids ({}): record it with the sweep's prompt",
            prompt_ids
                .iter()
                .map(|v| format!("{} tokens", v.len()))
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    let decode = r.decode_tokens();
    let sweep_decode = spec.max_tokens.saturating_sub(1);
    let ignore_eos = spec.extra_args.iter().any(|a| a == "--ignore-eos");
    if decode > sweep_decode || (ignore_eos && decode != sweep_decode) {
        return Err(bad(format!(
            "it decodes {decode} tokens after the prompt's (recorded with --max-tokens {}), \
             the sweep's runs {sweep_decode} (max_tokens = {}): record it with --max-tokens {}{}",
            decode + 1,
            spec.max_tokens,
            spec.max_tokens,
            if ignore_eos { " --ignore-eos" } else { "" }
        )));
    }
    let ctx = spec.max_context.unwrap_or(0).max(p + spec.max_tokens);
    let want = expected_chunks(spec, p, ctx);
    if chunks != want {
        return Err(bad(format!(
            "it ran the prompt in forwards of {chunks:?} tokens, the sweep's runs in {want:?} \
             (--prefill-chunk and max_context decide it): record it with the sweep's settings"
        )));
    }
    Ok((matching, ctx))
}

fn point_prediction(
    d: &SimCounts,
    n: usize,
    pt: &crate::sweep::spec::Point,
    start: StartMode,
    budget_bytes: u64,
) -> PointPrediction {
    let mut bytes = DecodeBytes::per_token(d, n).unwrap_or(DecodeBytes {
        bytes: 0.0,
        expert_bytes: 0.0,
        embedding_bytes: 0.0,
        lookahead_recall: None,
        streamed_compute_share: None,
        expert_batches: Vec::new(),
    });
    if pt.prefetch == Prefetch::Oracle {
        bytes.lookahead_recall = Some(1.0);
    }
    PointPrediction {
        io: pt.io,
        prefetch: pt.prefetch,
        start,
        budget_bytes,
        bytes,
        expert_hit_rate: d.hits().expert_hit_rate(),
        s_per_token: None,
        trunk_wait_s_per_token: None,
        expert_wait_s_per_token: None,
        caveat: caveat(pt.io, pt.prefetch),
    }
}

impl Predictions {
    /// Uses the sweep's own cold `direct` probe as the bandwidth when the spec gave
    /// none, and times every point again.
    pub fn set_probe(&mut self, probe_gbps: Option<f64>) {
        if self.device_gbps.is_none() && !self.interleaved_rates {
            self.device_gbps = probe_gbps.filter(|g| g.is_finite() && *g > 0.0);
            self.device_source = match self.device_gbps {
                Some(_) => "the sweep's cold direct probe (sweep.json host.direct_cold_gbps)",
                None => "unknown (the cold direct probe failed; give device_gbps or iobench)",
            }
            .into();
        }
        self.retime();
    }

    /// Adds one interleaved measurement of the read rates and times every point again
    /// with the medians of all samples so far (samples with a rate that is not finite
    /// and positive are kept in the record but not used).
    pub fn add_rate_sample(&mut self, s: RateSample) {
        self.rate_samples.push(s);
        let good: Vec<&RateSample> = self
            .rate_samples
            .iter()
            .filter(|s| ok_rate(s.trunk_gbps) && ok_rate(s.expert_gbps))
            .collect();
        let trunk: Vec<f64> = good.iter().map(|s| s.trunk_gbps).collect();
        let expert: Vec<f64> = good.iter().map(|s| s.expert_gbps).collect();
        self.device_gbps = median(&trunk);
        self.expert_gbps = median(&expert);
        self.expert_batch_gbps = batch_medians(&good);
        let (t_lo, t_hi) = min_max(&trunk).unwrap_or((0.0, 0.0));
        let (e_lo, e_hi) = min_max(&expert).unwrap_or((0.0, 0.0));
        self.device_source = match (self.device_gbps, self.expert_gbps) {
            (Some(t), Some(e)) => format!(
                "interleaved cells: medians of {} sample(s), trunk qd 1 {t:.3} GB/s \
                 ({t_lo:.3}–{t_hi:.3}), experts qd {} {e:.3} GB/s ({e_lo:.3}–{e_hi:.3}) \
                 (cold, direct)",
                good.len(),
                crate::store_flags::DEFAULT_IO_THREADS,
            ),
            _ => format!(
                "interleaved cells: none of {} sample(s) measured a rate",
                self.rate_samples.len()
            ),
        };
        self.retime();
    }

    /// Predicted s/token of every point from its bytes ([`predict`]).
    fn retime(&mut self) {
        let model = self
            .device_gbps
            .zip(self.compute_s_per_token)
            .map(|(g, c)| TimeModel {
                expert_bytes_per_s: self.expert_gbps.unwrap_or(g) * 1e9,
                expert_batch_rates: BatchRates::new(
                    self.expert_batch_gbps
                        .iter()
                        .map(|b| (b.records, b.gbps * 1e9)),
                ),
                expert_compute_share: self.expert_compute_share,
                ..TimeModel::one_rate(g * 1e9, c)
            });
        for p in self.points.values_mut() {
            let x = model
                .as_ref()
                .filter(|_| crate::planning::compute::predicted_io(p.io))
                .and_then(|m| predict(&p.bytes, p.prefetch, m));
            p.s_per_token = x.map(|x| x.s_per_token);
            p.trunk_wait_s_per_token = x.map(|x| x.trunk_wait_s_per_token);
            p.expert_wait_s_per_token = x.map(|x| x.expert_wait_s_per_token);
        }
    }

    /// Whether a run's output begins with the trace's decode ids (`false`: it routed
    /// otherwise, and the prediction is not of it).
    pub fn same_output(&self, r: &Row) -> bool {
        r.metrics.output_ids.len() >= self.decode_ids.len()
            && r.metrics.output_ids[..self.decode_ids.len()] == self.decode_ids[..]
    }

    /// `rows` with the `predicted_*` columns filled from the points' predictions and
    /// their measured medians.
    pub fn fill(&self, rows: &[Row], stats: &[PointStats]) -> Vec<Row> {
        let med: BTreeMap<usize, f64> = stats
            .iter()
            .filter_map(|s| s.s_per_token.map(|m| (s.point_index, m)))
            .collect();
        rows.iter()
            .map(|r| {
                let mut r = r.clone();
                if let Some(p) = self.points.get(&r.point_index) {
                    r.predicted_bytes_read_per_token = Some(p.bytes.bytes);
                    r.predicted_s_per_token = p.s_per_token;
                    r.prediction_error = p
                        .s_per_token
                        .zip(med.get(&r.point_index))
                        .map(|(p, m)| p / m - 1.0);
                }
                r
            })
            .collect()
    }

    /// The points with both a prediction and measured statistics, in point order.
    pub fn compare<'a>(&'a self, stats: &'a [PointStats]) -> Vec<Compared<'a>> {
        stats
            .iter()
            .filter_map(|s| {
                let p = self.points.get(&s.point_index)?;
                let (lo, hi, has) = match (s.s_per_token_lo, s.s_per_token_hi) {
                    (Some(l), Some(h)) => (Some(l), Some(h), true),
                    _ => (s.s_per_token_min, s.s_per_token_max, false),
                };
                let inside = p
                    .s_per_token
                    .zip(lo.zip(hi))
                    .map(|(v, (l, h))| v >= l && v <= h);
                Some(Compared {
                    stats: s,
                    predicted: p,
                    error: p.s_per_token.zip(s.s_per_token).map(|(p, m)| p / m - 1.0),
                    inside,
                    has_interval: has,
                })
            })
            .collect()
    }
}

fn ok_rate(g: f64) -> bool {
    g.is_finite() && g > 0.0
}

/// Per batch size, the median of the samples' rates at that size (rates that are not
/// finite and positive left out), ascending.
fn batch_medians(samples: &[&RateSample]) -> Vec<BatchRate> {
    let mut by: BTreeMap<u32, Vec<f64>> = BTreeMap::new();
    for b in samples.iter().flat_map(|s| &s.expert_batch_gbps) {
        if ok_rate(b.gbps) {
            by.entry(b.records).or_default().push(b.gbps);
        }
    }
    by.into_iter()
        .filter_map(|(records, v)| {
            Some(BatchRate {
                records,
                gbps: median(&v)?,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(io: IoMode) -> PointPrediction {
        PointPrediction {
            io,
            prefetch: Prefetch::None,
            start: StartMode::Warm,
            budget_bytes: 1 << 26,
            bytes: DecodeBytes {
                bytes: 3e8,
                expert_bytes: 1e8,
                embedding_bytes: 0.0,
                lookahead_recall: None,
                streamed_compute_share: None,
                expert_batches: Vec::new(),
            },
            expert_hit_rate: 0.0,
            s_per_token: None,
            trunk_wait_s_per_token: None,
            expert_wait_s_per_token: None,
            caveat: caveat(io, Prefetch::None),
        }
    }

    #[test]
    fn buffered_and_mmap_points_are_unpredicted_and_say_so() {
        let mut p = Predictions {
            device_gbps: Some(2.0),
            expert_gbps: Some(1.0),
            compute_s_per_token: Some(0.05),
            expert_compute_share: 0.2,
            ..Default::default()
        };
        for (i, io) in [IoMode::Direct, IoMode::Buffered, IoMode::Mmap]
            .into_iter()
            .enumerate()
        {
            p.points.insert(i, point(io));
        }
        p.retime();
        // direct, none: 0.05 + 2e8 / 2e9 + 1e8 / 1e9 = 0.05 + 0.1 + 0.1 = 0.25 s.
        let d = p.points[&0].s_per_token.unwrap();
        assert!((d - 0.25).abs() < 1e-12, "{d}");
        assert!(p.points[&0].caveat.is_none());
        for i in [1, 2] {
            assert_eq!(p.points[&i].s_per_token, None);
            let cv = p.points[&i].caveat.as_deref().unwrap();
            assert!(cv.starts_with("unpredicted ("), "{cv}");
        }
    }

    #[test]
    fn interleaved_batch_rates_are_per_size_medians_by_hand() {
        let sample = |t: f64, e: f64, b: &[(u32, f64)]| RateSample {
            after_runs: 0,
            trunk_gbps: t,
            expert_gbps: e,
            expert_batch_gbps: b
                .iter()
                .map(|&(records, gbps)| BatchRate { records, gbps })
                .collect(),
            cold_verified: true,
            elapsed_s: 1.0,
        };
        let mut p = Predictions {
            compute_s_per_token: Some(0.05),
            interleaved_rates: true,
            ..Default::default()
        };
        let mut pt = point(IoMode::Direct);
        // All 1e8 expert bytes per token read in batches of 2 records.
        pt.bytes.expert_batches = vec![memdial::store::sim::predict::ExpertBatch {
            records: 2,
            bytes: 1e8,
        }];
        p.points.insert(0, pt);
        p.add_rate_sample(sample(2.0, 2.0, &[(1, 0.4), (8, 2.0)]));
        // A sample without a trunk rate is kept but not used.
        p.add_rate_sample(sample(f64::NAN, 9.0, &[(1, 9.0), (8, 9.0)]));
        p.add_rate_sample(sample(2.0, 2.2, &[(1, 0.5), (2, 1.0), (8, 2.2)]));
        // Medians of the two good samples: trunk 2.0, experts 2.1; by size 1: (0.4 +
        // 0.5) / 2 = 0.45, 2: 1.0 (one sample), 8: (2.0 + 2.2) / 2 = 2.1.
        assert_eq!(p.device_gbps, Some(2.0));
        let near = |a: f64, b: f64| (a - b).abs() < 1e-12;
        assert!(near(p.expert_gbps.unwrap(), 2.1));
        let got: Vec<(u32, f64)> = p
            .expert_batch_gbps
            .iter()
            .map(|b| (b.records, b.gbps))
            .collect();
        assert_eq!(got.len(), 3);
        for ((k, g), (wk, wg)) in got.into_iter().zip([(1, 0.45), (2, 1.0), (8, 2.1)]) {
            assert!(k == wk && near(g, wg), "{k} {g}");
        }
        // none: 0.05 + trunk 2e8 / 2e9 + experts at the 2-record rate 1e8 / 1e9
        // = 0.05 + 0.1 + 0.1 = 0.25 s (at the full batch's 2.1 GB/s it would be 0.198).
        let s = p.points[&0].s_per_token.unwrap();
        assert!((s - 0.25).abs() < 1e-9, "{s}");
    }

    /// tiny-k3 (7 MoE layers, 16 experts, top-4), cold, `none`, a budget that caches
    /// every expert: the replay's decode batches from a written trace, counted by hand.
    #[test]
    fn replayed_batches_are_the_selection_minus_hits_by_hand() {
        let src = crate::planning::source::source_of(None, None, Some("tiny-k3")).unwrap();
        let (cfg, ck) = (&src.cfg, &src.ck);
        let mut t = String::from(
            r#"{"format":"memdial-trace","version":2,"model":{"model_type":"kimi_k3","num_hidden_layers":8,"hidden_size":128,"vocab_size":2304,"num_experts":16,"moe_layers":[1,2,3,4,5,6,7]},"top_k":4,"prefill_chunk":4,"prompt_tokens":1}"#,
        );
        // Token 0 (the prompt) routes 0-3 at every MoE layer, token 1 0, 1, 4, 5 (two
        // hits), token 2 6-9 (none).
        for (tok, ex) in [[0, 1, 2, 3], [0, 1, 4, 5], [6, 7, 8, 9]]
            .iter()
            .enumerate()
        {
            t += &format!("\n{{\"forward\":{tok},\"ids\":[{}],\"logits\":1}}", tok + 1);
            for l in 1..=7 {
                t += &format!("\n{{\"token\":{tok},\"layer\":{l},\"experts\":{ex:?}}}");
            }
        }
        let dir = std::env::temp_dir().join(format!("memdial-batches-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.jsonl");
        std::fs::write(&path, t).unwrap();
        let tr = trace::read_full(&path).unwrap();
        let r = Replayable::new(&tr, cfg, "t").unwrap();
        let act = Scratch::activations(cfg, Sequences::single(8), 1);
        let p0 = plan_unchecked(cfg, ck, 0, IoMode::Direct, Prefetch::None, act).unwrap();
        let plan = p0.with_budget(cfg, 1 << 30);
        assert!(
            plan.expert_cache_experts >= 7 * 16,
            "{}",
            plan.expert_cache_experts
        );
        let emb = crate::planning::compute::embedding_rows(cfg, ck, &p0).unwrap();
        let opts = SimOptions {
            policy: SimPolicy::parse("lru").unwrap(),
            warm: false,
            hot_prefix_tokens: 1,
            speculate: None,
        };
        let rep = replay(&plan, cfg, &r, emb, &opts).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        // Decode: token 1 reads experts 4 and 5 at each of 7 layers (7 batches of 2),
        // token 2 all four (7 batches of 4); each record's aligned size is the plan's.
        let size = |es: &[usize]| -> u64 {
            let g = &plan.expert_groups;
            (1..=7)
                .flat_map(|l| es.iter().map(move |&e| g[&(l, e)].buffer_bytes))
                .sum()
        };
        let (b2, b4) = (size(&[4, 5]), size(&[6, 7, 8, 9]));
        let want: BTreeMap<u32, (u64, u64)> = [(2, (7, b2)), (4, (7, b4))].into();
        assert_eq!(rep.decode.expert_batches, want);
        // Per token (2 decode tokens), at 1 GB/s for batches of 2 records and 2 GB/s
        // for 4: X = (b2 / 2) / 1e9 + (b4 / 2) / 2e9 seconds.
        let d = DecodeBytes::per_token(&rep.decode, 2).unwrap();
        let m = TimeModel {
            expert_batch_rates: BatchRates::new([(2, 1e9), (4, 2e9)]),
            ..TimeModel::one_rate(4e9, 0.0)
        };
        let x = m.expert_read_s(&d);
        let want = b2 as f64 / 2.0 / 1e9 + b4 as f64 / 2.0 / 2e9;
        assert!((x - want).abs() < 1e-15, "{x} {want}");
    }
}
