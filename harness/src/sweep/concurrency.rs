//! The `concurrency` axis: how many clients a point's engine serves at once.
//!
//! - `1` (the default, and every sweep before the axis): the ordinary run, one
//!   `memdial run` process per run slot;
//! - `N > 1`: each run slot starts `memdial serve --max-batch N` in the point's
//!   memory cgroup at the point's budget, IO mode, prefetch policy, cache and threads,
//!   drives `N` concurrent streaming clients on loopback (client `i` of a point of
//!   prompt `p` sends prompt `(p + i) mod` the spec's prompts, as token ids, greedy,
//!   the spec's `max_tokens`), records each request's ids
//!   and its client-side timings, and stops the server with SIGTERM
//!   ([`crate::sweep::run::clients`]).
//!
//! The verdict compares **every request's** ids with the prompt's other runs (the
//! ordinary runs of concurrency 1 among them): [`per_request_rows`] stands each
//! request in for its run before the verdict groups them. The report's concurrency
//! section ([`crate::sweep::write::report::concurrency::markdown`]) gives aggregate tokens/s, TTFT and inter-token latency
//! (median, p90) per budget and concurrency: the memory/throughput curve.
//!
//! A budget relative to the floor resolves against the floor of the spec's largest
//! concurrency (the plan holding that many sequences), so every concurrency of one
//! budget runs at the same bytes; each point keeps its own floor for the below-floor
//! check.

use super::axes::{Axis, Coord};
use super::record::row::Row;
use super::record::status::RunStatus;

/// Clients at once at most (the server's `--max-batch` range).
pub const MAX_CONCURRENCY: u32 = 256;

/// The `concurrency` axis (spec key `concurrency = [1, 2, 4]`).
pub struct Concurrency;

impl Axis for Concurrency {
    const NAME: &'static str = "concurrency";
    type Value = u32;
    fn default_value() -> u32 {
        1
    }
}

/// The point's concurrency: its `concurrency` coordinate (absent: 1).
pub fn of(axes: &[Coord]) -> usize {
    axes.iter()
        .find(|c| c.name == Concurrency::NAME)
        .and_then(|c| c.value.parse().ok())
        .unwrap_or(1)
}

/// The concurrency of a results row (its `concurrency` column; absent: 1).
pub fn of_row(r: &Row) -> usize {
    r.axes
        .get(Concurrency::NAME)
        .and_then(|v| {
            v.as_str()
                .and_then(|s| s.parse().ok())
                .or_else(|| v.as_u64().map(|n| n as usize))
        })
        .unwrap_or(1)
}

/// Errors: a value of 0 or above [`MAX_CONCURRENCY`].
pub fn check(values: &[u32]) -> anyhow::Result<()> {
    if let Some(v) = values.iter().find(|&&v| v == 0 || v > MAX_CONCURRENCY) {
        anyhow::bail!(
            "concurrency {v}: each value must be 1 (the ordinary run) to {MAX_CONCURRENCY} \
             concurrent clients of `memdial serve`"
        );
    }
    Ok(())
}

/// `rows` with each finished served run replaced by one row per request (run id
/// `RUN_ID/request I`, that request's prompt and ids), so the verdict compares every
/// request's ids with its prompt's other runs. Other rows are unchanged.
pub fn per_request_rows(rows: &[Row]) -> Vec<Row> {
    let mut out = Vec::with_capacity(rows.len());
    for r in rows {
        if r.status != RunStatus::Ok || r.requests_output_ids.is_empty() {
            out.push(r.clone());
            continue;
        }
        for (i, ids) in r.requests_output_ids.iter().enumerate() {
            let mut one = r.clone();
            one.run_id = format!("{}/request {i}", r.run_id);
            one.prompt_index = r
                .requests_prompt_index
                .get(i)
                .copied()
                .unwrap_or(r.prompt_index);
            one.metrics.generated_tokens = Some(ids.len() as u64);
            one.metrics.output_ids_sha256 = Some(memdial::engine::generate::ids_sha256(ids));
            one.metrics.output_ids = ids.clone();
            one.requests_output_ids = vec![];
            one.requests_prompt_index = vec![];
            out.push(one);
        }
    }
    out
}

/// The concurrency figures of an ordinary run (concurrency 1), from the engine's own
/// timings: end-to-end tokens/s `generated_tokens / (ttft_s + Σ decode_s_per_token)`,
/// its TTFT as both quantiles, the decode steps' median and p90 as inter-token
/// latency. Only when the spec `lists` the axis (more than the default): other
/// sweeps' rows keep these columns empty.
pub fn fill_single(row: &mut Row, listed: bool) {
    if !listed || row.status != RunStatus::Ok {
        return;
    }
    let m = &row.metrics;
    let total = m
        .ttft_s
        .map(|t| t + m.decode_s_per_token.iter().sum::<f64>());
    row.aggregate_tokens_per_s = m
        .generated_tokens
        .zip(total)
        .filter(|(_, t)| *t > 0.0)
        .map(|(n, t)| n as f64 / t);
    row.ttft_p50_s = m.ttft_s;
    row.ttft_p90_s = m.ttft_s;
    row.itl_p50_s = memdial::util::stats::percentile(&m.decode_s_per_token, 0.5);
    row.itl_p90_s = memdial::util::stats::percentile(&m.decode_s_per_token, 0.9);
}
