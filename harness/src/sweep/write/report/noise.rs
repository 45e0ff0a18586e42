//! The Noise section's list of noisy runs: every run when there are few, otherwise a
//! summary — runs per reason, the worst few and how many more (the full list stays
//! in results.csv / results.json, column `noisy`).

use std::fmt::Write as _;

use crate::sweep::record::row::Row;

/// Up to this many noisy runs are listed one by one; above it, summarised.
pub const LIST_ALL_UP_TO: usize = 8;
/// Noisy runs shown by name in a summary.
pub const WORST_SHOWN: usize = 5;

/// The reasons the noise sentinel writes (`memdial::tools::noise::Noise::noisy`), each told
/// by a phrase of its text, with the name the summary gives it.
const KINDS: [(&str, &str); 5] = [
    ("other processes used", "other processes' CPU time"),
    ("the run waited for a CPU", "the run's wait for a CPU"),
    ("CPU steal", "CPU steal"),
    ("CPU pressure", "CPU pressure"),
    (
        "read from the model's disk by others",
        "others' reads on the model's disk",
    ),
];

/// The summary's name of one `; `-separated part of a `noisy` reason.
fn kind(part: &str) -> &str {
    KINDS
        .iter()
        .find(|(phrase, _)| part.contains(phrase))
        .map_or(part, |(_, name)| name)
}

/// `1.50 GiB` / `0.25` / `30 %` as a number in one unit (binary byte units scaled to
/// bytes); `None` when `s` does not start with a number.
fn quantity(s: &str) -> Option<f64> {
    let s = s.trim();
    let end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let x: f64 = s[..end].parse().ok()?;
    let scale = match s[end..].split_whitespace().next() {
        Some("KiB") => 1024.0,
        Some("MiB") => 1024.0 * 1024.0,
        Some("GiB") => 1024.0 * 1024.0 * 1024.0,
        Some("TiB") => 1024.0f64.powi(4),
        _ => 1.0,
    };
    Some(x * scale)
}

/// How far over its threshold one reason part is (`value / threshold`): the first
/// number of the part over the number after `(threshold `.
fn excess(part: &str) -> Option<f64> {
    let (head, t) = part.split_once("(threshold ")?;
    let value = head
        .char_indices()
        .find(|(_, c)| c.is_ascii_digit())
        .and_then(|(i, _)| quantity(&head[i..]))?;
    let limit = quantity(t.trim_end_matches(')'))?;
    (limit > 0.0).then_some(value / limit)
}

/// A noisy run's worst excess over its reasons (0 when none can be read).
fn worst_excess(reason: &str) -> f64 {
    reason.split("; ").filter_map(excess).fold(0.0, f64::max)
}

/// The noisy runs of `rows` as Markdown list items: each with its reason when there
/// are at most [`LIST_ALL_UP_TO`], else runs per reason, the [`WORST_SHOWN`] furthest
/// over a threshold and how many more.
pub fn noisy_runs_md(s: &mut String, rows: &[Row]) {
    let noisy: Vec<(&Row, &str)> = rows
        .iter()
        .filter(|r| r.is_measured_noisy())
        .map(|r| (r, r.noisy.as_deref().unwrap_or_default()))
        .collect();
    let item = |s: &mut String, (r, why): &(&Row, &str)| {
        let _ = writeln!(s, "- `{}`: {why}", r.run_id);
    };
    if noisy.len() <= LIST_ALL_UP_TO {
        noisy.iter().for_each(|x| item(s, x));
        return;
    }
    let mut counts: Vec<(&str, usize)> = vec![];
    for (_, why) in &noisy {
        let mut kinds: Vec<&str> = why.split("; ").map(kind).collect();
        kinds.dedup();
        for k in kinds {
            match counts.iter_mut().find(|(n, _)| *n == k) {
                Some((_, c)) => *c += 1,
                None => counts.push((k, 1)),
            }
        }
    }
    counts.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    let _ = writeln!(
        s,
        "Runs per reason (a run can exceed several thresholds): {}.\n",
        counts
            .iter()
            .map(|(k, c)| format!("{k} {c}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let mut worst = noisy.clone();
    worst.sort_by(|a, b| worst_excess(b.1).total_cmp(&worst_excess(a.1)));
    let _ = writeln!(s, "The {WORST_SHOWN} furthest over a threshold:\n");
    worst.iter().take(WORST_SHOWN).for_each(|x| item(s, x));
    let _ = writeln!(
        s,
        "- and {} more (every noisy run and its reason: column `noisy` of results.csv and results.json)",
        noisy.len() - WORST_SHOWN
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn noisy_row(i: usize, why: &str) -> Row {
        Row {
            run_id: format!("p{i}#r0"),
            status: crate::sweep::record::status::RunStatus::Ok,
            noisy: Some(why.into()),
            ..Default::default()
        }
    }

    #[test]
    fn excess_reads_each_reason_of_the_sentinel() {
        // By hand: 1.81 / 0.25 = 7.24; 0.10 / 0.05 = 2; 30 / 20 = 1.5; 48 MiB / 16 MiB = 3.
        let e = |p: &str| excess(p).unwrap();
        assert!((e("other processes used 1.81 cores (threshold 0.25)") - 7.24).abs() < 1e-12);
        assert!((e("CPU steal 0.10 cores (threshold 0.05)") - 2.0).abs() < 1e-12);
        assert!((e("CPU pressure 30 % (threshold 20 %)") - 1.5).abs() < 1e-12);
        assert!(
            (e("48.00 MiB read from the model's disk by others (threshold 16.00 MiB)") - 3.0).abs()
                < 1e-12
        );
        assert!(
            (e("1.50 GiB read from the model's disk by others (threshold 16.00 MiB)") - 96.0).abs()
                < 1e-12
        );
        // 40 / 25 = 1.6.
        assert!(
            (e("the run waited for a CPU 40 % of its decode time (threshold 25 %)") - 1.6).abs()
                < 1e-12
        );
        assert_eq!(excess("no threshold here"), None);
    }

    #[test]
    fn the_runs_own_wait_is_one_kind_whatever_its_share() {
        assert_eq!(
            kind("the run waited for a CPU 40 % of its decode time (threshold 25 %)"),
            kind("the run waited for a CPU 51 % of its decode time (threshold 25 %)")
        );
        assert_eq!(
            kind("the run waited for a CPU 51 % of its decode time (threshold 25 %)"),
            "the run's wait for a CPU"
        );
    }

    #[test]
    fn few_noisy_runs_are_listed_many_are_summarised() {
        let few: Vec<Row> = (0..3)
            .map(|i| noisy_row(i, "CPU steal 0.10 cores (threshold 0.05)"))
            .collect();
        let mut s = String::new();
        noisy_runs_md(&mut s, &few);
        assert_eq!(s.lines().count(), 3, "{s}");
        // 12 runs: other CPU at 0.30, 0.40, …, 1.40 cores (excess 1.2 … 5.6); runs 0 and
        // 1 also read 48 MiB of others' (excess 3). The worst five: p11 (5.6), p10
        // (5.2), p9 (4.8), p8 (4.4), p7 (4.0); 7 more.
        let many: Vec<Row> = (0..12)
            .map(|i| {
                let mut why = format!(
                    "other processes used {:.2} cores (threshold 0.25)",
                    0.3 + 0.1 * i as f64
                );
                if i < 2 {
                    why += "; 48.00 MiB read from the model's disk by others (threshold 16.00 MiB)";
                }
                noisy_row(i, &why)
            })
            .collect();
        let mut s = String::new();
        noisy_runs_md(&mut s, &many);
        assert!(
            s.starts_with("Runs per reason (a run can exceed several thresholds): other processes' CPU time 12, others' reads on the model's disk 2.\n"),
            "{s}"
        );
        let shown: Vec<&str> = s
            .lines()
            .filter(|l| l.starts_with("- `"))
            .map(|l| &l[3..l[3..].find('`').unwrap() + 3])
            .collect();
        assert_eq!(
            shown,
            ["p11#r0", "p10#r0", "p9#r0", "p8#r0", "p7#r0"],
            "{s}"
        );
        assert!(s.ends_with("- and 7 more (every noisy run and its reason: column `noisy` of results.csv and results.json)\n"), "{s}");
    }
}
