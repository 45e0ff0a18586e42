//! The report's speculation section: per point of the `speculate` axis
//! ([`crate::sweep::speculate`]), bytes read and seconds per generated token against
//! the same point with `off`, and how many drafts were accepted.

use std::fmt::Write as _;

use crate::sweep::record::row::Row;

fn value(r: &Row) -> &str {
    r.axes
        .get(crate::sweep::speculate::Speculate::NAME_STR)
        .and_then(|v| v.as_str())
        .unwrap_or("off")
}

fn median_of(rows: &[&Row], f: impl Fn(&Row) -> Option<f64>) -> Option<f64> {
    let v: Vec<f64> = rows.iter().filter_map(|r| f(r)).collect();
    memdial::util::stats::median(&v)
}

fn cell(v: Option<f64>, f: impl Fn(f64) -> String) -> String {
    v.map_or("–".into(), f)
}

/// The section: per point (budget, settings, prompt, `speculate`), medians over its
/// quiet measured runs (a point without one: its noisy ones, marked) of bytes read per
/// generated token, decode s/token and drafts accepted per forward, with the ratios
/// to the same point at `off`. Empty for sweeps whose points all run `off`.
pub fn markdown(rows: &[Row]) -> String {
    if rows.iter().all(|r| value(r) == "off") {
        return String::new();
    }
    let mut s = String::from(
        "## Speculation: tokens per pass over the weights\n\n\
         `memdial run --speculate` (docs/speculation.md): bytes read and \
         decode seconds per generated token (each pass's time split over the tokens it \
         emitted), medians over each point's quiet measured runs (*noisy*: over its noisy \
         ones), against the same point with `off`; its ids are in the verdict with the \
         `off` points'.\n\n\
         | budget | io / prefetch | threads | prompt | speculate | runs | bytes / token | × off | s / token | × off | accepted per forward | accepted / drafted |\n\
         | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n",
    );
    let mut by_point: std::collections::BTreeMap<usize, Vec<&Row>> = Default::default();
    for r in rows.iter().filter(|r| r.is_measured_ok()) {
        by_point.entry(r.point_index).or_default().push(r);
    }
    let mut noisy = std::collections::BTreeSet::new();
    for (i, rs) in by_point.iter_mut() {
        if rs.iter().any(|r| r.is_measured_quiet()) {
            rs.retain(|r| r.is_measured_quiet());
        } else {
            noisy.insert(*i);
        }
    }
    let bytes = |rs: &[&Row]| median_of(rs, |r| r.metrics.bytes_read_per_token);
    let secs = |rs: &[&Row]| median_of(rs, |r| r.metrics.decode_s_per_token_median);
    let mut ordered: Vec<&Vec<&Row>> = by_point.values().collect();
    ordered.sort_by_key(|rs| (rs[0].budget_bytes, rs[0].point_index));
    for rs in ordered {
        let r = rs[0];
        let v = value(r);
        let off_key = r
            .point_key
            .replace(&format!(";speculate={v}"), ";speculate=off");
        let off = by_point.values().find(|o| o[0].point_key == off_key);
        let ratio = |f: &dyn Fn(&[&Row]) -> Option<f64>| {
            (v != "off")
                .then(|| f(rs).zip(off.and_then(|o| f(o))).map(|(a, b)| a / b))
                .flatten()
        };
        let acc = median_of(rs, |r| r.metrics.mean_accepted_length);
        let (a, d) = rs.iter().fold((0, 0), |(a, d), r| {
            (
                a + r.metrics.accepted_tokens.unwrap_or(0),
                d + r.metrics.drafted_tokens.unwrap_or(0),
            )
        });
        let _ = writeln!(
            s,
            "| {} | {} / {} | {} | {} | `{v}` | {}{} | {} | {} | {} | {} | {} | {a} / {d} |",
            crate::sweep::spec::budget_label(&r.budget_spec, r.budget_bytes),
            r.io.as_str(),
            r.prefetch.as_str(),
            r.threads,
            r.prompt_index,
            rs.len(),
            if noisy.contains(&r.point_index) {
                " *noisy*"
            } else {
                ""
            },
            cell(bytes(rs), |x| memdial::util::units::fmt_bytes(x as u64)),
            cell(ratio(&bytes), |x| format!("{x:.3}")),
            cell(secs(rs), |x| format!("{x:.4}")),
            cell(ratio(&secs), |x| format!("{x:.3}")),
            cell(acc, |x| format!("{x:.2}")),
        );
    }
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use super::markdown;
    use crate::sweep::record::row::Row;
    use crate::sweep::record::status::RunStatus;

    fn row(point: usize, spec: &str, bytes: f64, s: f64, acc: (u64, u64, u64)) -> Row {
        let mut r = Row {
            point_index: point,
            point_key: format!("budget=floor;prompt=0;speculate={spec}"),
            status: RunStatus::Ok,
            budget_spec: "floor".into(),
            budget_bytes: 1 << 20,
            threads: 2,
            ..Default::default()
        };
        r.axes.insert("speculate".into(), spec.into());
        r.metrics.bytes_read_per_token = Some(bytes);
        r.metrics.decode_s_per_token_median = Some(s);
        r.metrics.forwards = Some(acc.0);
        r.metrics.accepted_tokens = Some(acc.1);
        r.metrics.drafted_tokens = Some(acc.2);
        r.metrics.mean_accepted_length = Some(acc.1 as f64 / acc.0 as f64);
        r
    }

    /// Ratios by hand: 100 / 400 bytes = 0.250, 0.1 / 0.25 s = 0.400; 24 of 24
    /// drafts over 8 forwards = 3.00 per forward.
    #[test]
    fn points_are_set_against_their_off_point() {
        assert_eq!(markdown(&[row(0, "off", 400.0, 0.25, (31, 0, 0))]), "");
        let md = markdown(&[
            row(0, "off", 400.0, 0.25, (31, 0, 0)),
            row(1, "replay:/x:4", 100.0, 0.1, (8, 24, 24)),
        ]);
        assert!(md.contains("## Speculation"), "{md}");
        let line = md.lines().find(|l| l.contains("`replay:/x:4`")).unwrap();
        assert!(
            line.contains("| 0.250 |") && line.contains("| 0.400 |") && line.contains("| 3.00 |"),
            "{line}"
        );
        assert!(line.ends_with("| 24 / 24 |"), "{line}");
    }
}
