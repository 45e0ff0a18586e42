//! The served figures of a row: one row per request of a served run (for the verdict),
//! and the concurrency and goodput columns of an ordinary run (concurrency 1), from the
//! engine's own timings.

use super::row::Row;
use super::status::RunStatus;
use crate::sweep::goodput::{goodput, Slo, Timing};

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
pub fn fill_concurrency(row: &mut Row, listed: bool) {
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

/// The goodput columns of an ordinary run (concurrency 1) under `slo`: its one
/// request took its TTFT plus its decode steps.
pub fn fill_goodput(row: &mut Row, slo: Option<&Slo>) {
    let (Some(slo), RunStatus::Ok) = (slo, row.status) else {
        return;
    };
    let m = &row.metrics;
    let (Some(ttft_s), Some(n)) = (m.ttft_s, m.generated_tokens) else {
        return;
    };
    let e2e_s = ttft_s + m.decode_s_per_token.iter().sum::<f64>();
    let t = Timing {
        ttft_s,
        e2e_s,
        output_tokens: n as usize,
    };
    (row.goodput_fraction, row.goodput_requests_per_s) = goodput(slo, &[t], e2e_s);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An ordinary run: TTFT 0.5 s and decode steps 0.125 + 0.375 s for 3 tokens:
    /// e2e 1 s, tpot 0.5 / 2 = 0.25 s. Under ttft ≤ 0.5, tpot ≤ 0.25 it is good: 1 of
    /// 1, 1 / 1 s = 1/s; under tpot ≤ 0.2 it is not.
    #[test]
    fn an_ordinary_run_is_one_request() {
        let mut row = Row {
            status: RunStatus::Ok,
            ..Row::default()
        };
        row.metrics.ttft_s = Some(0.5);
        row.metrics.decode_s_per_token = vec![0.125, 0.375];
        row.metrics.generated_tokens = Some(3);
        let slo = |tpot_s| Slo {
            ttft_s: 0.5,
            tpot_s,
        };
        fill_goodput(&mut row, Some(&slo(0.25)));
        assert_eq!(
            (row.goodput_fraction, row.goodput_requests_per_s),
            (Some(1.0), Some(1.0))
        );
        fill_goodput(&mut row, Some(&slo(0.2)));
        assert_eq!(
            (row.goodput_fraction, row.goodput_requests_per_s),
            (Some(0.0), Some(0.0))
        );
        let mut none = Row::default();
        fill_goodput(&mut none, Some(&slo(0.25)));
        assert_eq!(none.goodput_fraction, None);
        let mut no_slo = row.clone();
        no_slo.goodput_fraction = None;
        fill_goodput(&mut no_slo, None);
        assert_eq!(no_slo.goodput_fraction, None);
    }
}
