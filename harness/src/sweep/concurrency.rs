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
//! ordinary runs of concurrency 1 among them): [`crate::sweep::record::served::per_request_rows`] stands each
//! request in for its run before the verdict groups them. The report's concurrency
//! section ([`crate::sweep::write::report::concurrency::markdown`]) gives aggregate tokens/s, TTFT and inter-token latency
//! (median, p90) per budget and concurrency: the memory/throughput curve.
//!
//! A budget relative to the floor resolves against the floor of the spec's largest
//! concurrency (the plan holding that many sequences), so every concurrency of one
//! budget runs at the same bytes; each point keeps its own floor for the below-floor
//! check.

use super::axes::Axis;

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
