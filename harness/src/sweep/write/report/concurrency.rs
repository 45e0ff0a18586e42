//! The report's concurrency section: aggregate tokens/s, TTFT and inter-token latency
//! per budget and concurrency (the memory/throughput curve of the `concurrency` axis,
//! [`crate::sweep::concurrency`]).

use std::fmt::Write as _;

use crate::sweep::record::row::Row;

fn median_of(rows: &[&Row], f: impl Fn(&Row) -> Option<f64>) -> Option<f64> {
    let v: Vec<f64> = rows.iter().filter_map(|r| f(r)).collect();
    memdial::util::stats::median(&v)
}

fn cell(v: Option<f64>, digits: usize) -> String {
    v.map_or("–".into(), |x| format!("{x:.digits$}"))
}

/// The report's concurrency section: per point (budget, settings, concurrency), the
/// medians over its quiet measured runs of aggregate tokens/s, TTFT and
/// inter-token latency (p50 / p90), and the aggregate against concurrency 1 at the
/// same point. A point without a quiet run shows its noisy ones, marked so (the
/// statistics and the recommendation never use them). Empty for sweeps without a
/// point above concurrency 1.
pub fn markdown(rows: &[Row]) -> String {
    if !rows.iter().any(|r| r.concurrency() > 1) {
        return String::new();
    }
    let mut s = String::from(
        "## Concurrency: the memory/throughput curve\n\n\
         Concurrency 1 is the ordinary `memdial run` (engine timings, no HTTP); above 1, `memdial \
         serve --max-batch N` with N concurrent streaming clients on loopback (client-side timings): \
         aggregate tokens/s is every request's generated tokens over the time from the first request \
         sent to the last one finished; TTFT from a request sent to its first token; inter-token \
         latency between its streamed tokens; bytes read per token, the store's bytes read during \
         decode over the tokens decoded (a served run: the server's batch steps that fed no prompt \
         token); with the spec's `slo`, goodput: the share of requests meeting both its TTFT and \
         TPOT targets (TPOT = (e2e latency − TTFT) / (output tokens − 1)) and those requests per \
         second of the run. Medians over each point's quiet measured runs (a point \
         with none: over its noisy ones, marked *noisy*); every request's ids are in the \
         verdict.\n\n",
    );
    let mut by_point: std::collections::BTreeMap<usize, Vec<&Row>> = Default::default();
    for r in rows.iter().filter(|r| r.is_measured_ok()) {
        by_point.entry(r.point_index).or_default().push(r);
    }
    // Quiet runs where a point has them, else its noisy ones (marked).
    let mut noisy = std::collections::BTreeSet::new();
    for (i, rs) in by_point.iter_mut() {
        if rs.iter().any(|r| r.is_measured_quiet()) {
            rs.retain(|r| r.is_measured_quiet());
        } else {
            noisy.insert(*i);
        }
    }
    curve_md(&mut s, &by_point, &noisy);
    s.push_str(
        "Per point (a served point's clients send every prompt, starting from its own):\n\n\
         | budget | io / prefetch | threads | prompt | concurrency | runs | aggregate tokens/s | × concurrency 1 | TTFT p50 / p90 (s) | inter-token p50 / p90 (s) |\n\
         | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n",
    );
    let key_at_1 = |r: &Row| {
        let c = r.concurrency();
        r.point_key
            .replace(&format!(";concurrency={c}"), ";concurrency=1")
    };
    let agg = |rs: &[&Row]| median_of(rs, |r| r.aggregate_tokens_per_s);
    let mut ordered: Vec<&Vec<&Row>> = by_point.values().collect();
    ordered.sort_by_key(|rs| (rs[0].budget_bytes, rs[0].point_index));
    for rs in ordered {
        let r = rs[0];
        let base = by_point
            .values()
            .find(|o| o[0].point_key == key_at_1(r))
            .and_then(|o| agg(o));
        let ratio = agg(rs).zip(base).map(|(a, b)| a / b);
        let _ = writeln!(
            s,
            "| {} | {} / {} | {} | {} | {} | {} | {} | {} | {} / {} | {} / {} |",
            crate::sweep::spec::budget_label(&r.budget_spec, r.budget_bytes),
            r.io.as_str(),
            r.prefetch.as_str(),
            r.threads,
            r.prompt_index,
            r.concurrency(),
            if noisy.contains(&r.point_index) {
                format!("{} *noisy*", rs.len())
            } else {
                rs.len().to_string()
            },
            cell(agg(rs), 2),
            ratio.map_or("–".into(), |x| format!("{x:.2}×")),
            cell(median_of(rs, |r| r.ttft_p50_s), 3),
            cell(median_of(rs, |r| r.ttft_p90_s), 3),
            cell(median_of(rs, |r| r.itl_p50_s), 4),
            cell(median_of(rs, |r| r.itl_p90_s), 4),
        );
    }
    s.push('\n');
    s
}

/// The curve: per budget, settings and concurrency, over every prompt's points, the
/// median of the runs' aggregate tokens/s (and its ratio to concurrency 1 at the same
/// budget and settings), TTFT and inter-token latency.
fn curve_md(
    s: &mut String,
    by_point: &std::collections::BTreeMap<usize, Vec<&Row>>,
    noisy: &std::collections::BTreeSet<usize>,
) {
    type Key = (u64, String, String, String, usize);
    let slo = by_point
        .values()
        .flatten()
        .any(|r| r.goodput_fraction.is_some());
    let key = |r: &Row, c: usize| -> Key {
        (
            r.budget_bytes,
            crate::sweep::spec::budget_label(&r.budget_spec, r.budget_bytes),
            format!("{} / {}", r.io.as_str(), r.prefetch.as_str()),
            format!("{}", r.threads),
            c,
        )
    };
    let mut curve: std::collections::BTreeMap<Key, (Vec<&Row>, bool)> = Default::default();
    for (i, rs) in by_point {
        let e = curve.entry(key(rs[0], rs[0].concurrency())).or_default();
        e.0.extend(rs.iter().copied());
        e.1 |= noisy.contains(i);
    }
    s.push_str(
        "| budget | io / prefetch | threads | concurrency | runs | aggregate tokens/s | × concurrency 1 | TTFT p50 / p90 (s) | inter-token p50 / p90 (s) | bytes read / token |",
    );
    s.push_str(if slo {
        " goodput share | goodput requests/s |\n\
         | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n"
    } else {
        "\n| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n"
    });
    for (k, (rs, loud)) in &curve {
        let agg = median_of(rs, |r| r.aggregate_tokens_per_s);
        let base = curve
            .get(&(k.0, k.1.clone(), k.2.clone(), k.3.clone(), 1))
            .and_then(|(b, _)| median_of(b, |r| r.aggregate_tokens_per_s));
        let _ = write!(
            s,
            "| {} | {} | {} | {} | {}{} | {} | {} | {} / {} | {} / {} | {} |",
            k.1,
            k.2,
            k.3,
            k.4,
            rs.len(),
            if *loud { " *noisy*" } else { "" },
            cell(agg, 2),
            agg.zip(base)
                .map_or("–".into(), |(a, b)| format!("{:.2}×", a / b)),
            cell(median_of(rs, |r| r.ttft_p50_s), 3),
            cell(median_of(rs, |r| r.ttft_p90_s), 3),
            cell(median_of(rs, |r| r.itl_p50_s), 4),
            cell(median_of(rs, |r| r.itl_p90_s), 4),
            median_of(rs, |r| r.metrics.bytes_read_per_token).map_or("–".into(), |b| {
                memdial::util::units::fmt_bytes(b.round() as u64)
            }),
        );
        if slo {
            let _ = write!(
                s,
                " {} | {} |",
                cell(median_of(rs, |r| r.goodput_fraction), 2),
                cell(median_of(rs, |r| r.goodput_requests_per_s), 3)
            );
        }
        s.push('\n');
    }
    s.push('\n');
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sweep::analysis::verdict::verdict;
    use crate::sweep::record::served::fill_concurrency;
    use crate::sweep::record::status::RunStatus;
    use crate::sweep::spec::Spec;
    use std::path::Path;

    fn row(point: usize, key: &str, ids: &[u32], requests: &[&[u32]]) -> Row {
        let mut r = Row {
            run_id: format!("{key}#r0"),
            point_index: point,
            point_key: key.into(),
            status: RunStatus::Ok,
            max_tokens: 8,
            ..Default::default()
        };
        r.metrics.output_ids = ids.to_vec();
        r.metrics.generated_tokens = Some(ids.len() as u64);
        r.metrics.output_ids_sha256 = Some(memdial::engine::generate::ids_sha256(ids));
        r.requests_output_ids = requests.iter().map(|x| x.to_vec()).collect();
        r
    }

    #[test]
    fn every_request_is_compared_and_one_that_differs_fails_the_verdict() {
        let same = [
            row(0, "budget=floor;concurrency=1", &[5, 6, 7], &[]),
            row(
                1,
                "budget=floor;concurrency=3",
                &[5, 6, 7],
                &[&[5, 6, 7][..]; 3],
            ),
        ];
        let v = verdict(&same);
        assert!(v.pass, "{}", v.summary());
        // One run plus three requests compared.
        assert_eq!(v.runs_compared, 4);
        // Request 2 of the served run differs at its second token: the run's own
        // ids (request 0's) agree, so only the per-request comparison catches it.
        let differ = [
            row(0, "budget=floor;concurrency=1", &[5, 6, 7], &[]),
            row(
                1,
                "budget=floor;concurrency=3",
                &[5, 6, 7],
                &[&[5, 6, 7], &[5, 6, 7], &[5, 9, 7]],
            ),
        ];
        let v = verdict(&differ);
        assert!(!v.pass);
        let m = &v.groups[0].mismatches;
        assert_eq!(m.len(), 1, "{m:?}");
        assert_eq!(m[0].run_id, "budget=floor;concurrency=3#r0/request 2");
        assert_eq!(m[0].first_diff_position, Some(1));
        assert_eq!((m[0].expected_id, m[0].got_id), (Some(6), Some(9)));
        // A served run alone compares its requests with one another.
        assert!(!verdict(&differ[1..]).pass);
        assert!(verdict(&same[1..]).pass);
    }

    #[test]
    fn the_axis_keys_points_and_checks_its_values() {
        let base = "budgets = [\"floor\"]\nmax_tokens = 4\n";
        let plain = Spec::parse(base, Path::new(".")).unwrap();
        let one = Spec::parse(&format!("{base}concurrency = [1]"), Path::new(".")).unwrap();
        assert_eq!(one.hash(), plain.hash());
        let s = Spec::parse(&format!("{base}concurrency = [1, 2, 4]"), Path::new(".")).unwrap();
        assert_ne!(s.hash(), plain.hash());
        let p = s.points();
        assert_eq!(p.len(), 3);
        assert!(p[2].key().ends_with(";concurrency=4"), "{}", p[2].key());
        assert_eq!(
            p.iter().map(|p| p.concurrency).collect::<Vec<_>>(),
            [1, 2, 4]
        );
        assert_eq!(plain.points()[0].concurrency, 1);
        for bad in ["[0]", "[1, 1]", "[]", "[257]", "[\"two\"]"] {
            assert!(
                Spec::parse(&format!("{base}concurrency = {bad}"), Path::new(".")).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn single_runs_get_end_to_end_figures_and_the_report_compares_with_them() {
        let mut one = row(0, "budget=floor;concurrency=1", &[1, 2, 3], &[]);
        one.axes.insert("concurrency".into(), "1".into());
        one.metrics.ttft_s = Some(1.0);
        one.metrics.decode_s_per_token = vec![0.5, 0.5];
        let mut unlisted = one.clone();
        fill_concurrency(&mut unlisted, false);
        assert_eq!(unlisted.aggregate_tokens_per_s, None);
        fill_concurrency(&mut one, true);
        // 3 tokens in 1 + 0.5 + 0.5 s.
        assert_eq!(one.aggregate_tokens_per_s, Some(1.5));
        assert_eq!(one.itl_p50_s, Some(0.5));
        let mut two = row(
            1,
            "budget=floor;concurrency=2",
            &[1, 2, 3],
            &[&[1, 2, 3][..]; 2],
        );
        two.axes.insert("concurrency".into(), "2".into());
        two.aggregate_tokens_per_s = Some(2.4);
        let md = markdown(&[one.clone(), two.clone()]);
        assert!(md.contains("| 2 | 1 | 2.40 | 1.60× |"), "{md}");
        // The curve's line of concurrency 2 (budget 0 B, direct / none, 0 threads).
        assert!(md.contains("| 0 | 2 | 1 | 2.40 | 1.60× |"), "{md}");
        // Noisy runs show only where a point has no quiet one, marked.
        let mut loud = two.clone();
        loud.noisy = Some("busy".into());
        loud.aggregate_tokens_per_s = Some(9.0);
        let md = markdown(&[one.clone(), two, loud.clone()]);
        assert!(md.contains("| 2 | 1 | 2.40 | 1.60× |"), "{md}");
        let md = markdown(&[one, loud]);
        assert!(md.contains("| 2 | 1 *noisy* | 9.00 | 6.00× |"), "{md}");
        assert_eq!(markdown(&[Row::default()]), "");
    }

    /// Rows with goodput (a spec with an `slo`) add its two columns to the curve,
    /// after the bytes read per token: 2048 B is `2.00 KiB`.
    #[test]
    fn goodput_and_bytes_read_reach_the_curve() {
        let mut two = row(1, "budget=floor;concurrency=2", &[1], &[&[1][..]; 2]);
        two.axes.insert("concurrency".into(), "2".into());
        two.metrics.bytes_read_per_token = Some(2048.0);
        let md = markdown(std::slice::from_ref(&two));
        assert!(!md.contains("goodput share"), "{md}");
        assert!(md.contains("| 2.00 KiB |\n"), "{md}");
        two.goodput_fraction = Some(0.5);
        two.goodput_requests_per_s = Some(0.25);
        let md = markdown(&[two]);
        assert!(md.contains("goodput share | goodput requests/s |"), "{md}");
        assert!(md.contains("| 2.00 KiB | 0.50 | 0.250 |\n"), "{md}");
    }
}
