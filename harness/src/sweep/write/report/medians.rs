//! The per-point medians table of `report.md`, its floors line and footnotes.

use std::fmt::Write as _;

use super::contents::*;
use crate::sweep::record::row::Row;
use memdial::util::units::fmt_bytes;

/// The medians per point with their intervals, and the footnotes their marks need.
pub(super) fn medians_md(s: &mut String, c: &Sections) {
    let Sections { meta, stats, v, .. } = *c;
    let starts = stats.iter().any(|p| p.start == "warm");
    let layouts = stats.iter().any(|p| p.layout != stats[0].layout);
    let _ = writeln!(s, "## Medians per point\n");
    let _ = writeln!(
        s,
        "s/token is the median over repeats of each run's median decode time, with its 95 % interval in brackets \
         (two-level bootstrap over runs and the decode times within each run; see docs/statistics.md, \"Noise and signal\"). \
         tok/s is 1 / s/token (the same figure). Read/token is bytes read from the model files per decoded token; IO wait is the share of generation time (prefill + decode) the compute thread spent waiting for reads.\n"
    );
    floors_md(s, c.rows);
    let _ = writeln!(
        s,
        "| point | budget | io | prefetch | cache | threads | runs | s/token [95% CI] | tok/s | TTFT s | read/token | IO wait | trunk hit | expert hit | peak RSS | peak anon | accounted |"
    );
    let _ = writeln!(
        s,
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    );
    for p in stats {
        let budget = crate::sweep::spec::budget_label(&p.budget_spec, p.budget_bytes);
        // Several engines: the engine is named with the point.
        let budget = if meta.engines.is_empty() {
            budget
        } else {
            format!(
                "{budget} · {}",
                crate::export::md_cell(crate::sweep::spec::engines::def::engine_or_default(
                    &p.engine
                ))
            )
        };
        // Warm and cold points: the start is named with the point.
        let budget = if starts {
            format!("{budget} · {}", p.start)
        } else {
            budget
        };
        // Both layouts: the layout is named with the point.
        let budget = if layouts {
            format!("{budget} · {}", p.layout)
        } else {
            budget
        };
        let anomaly = v
            .anomalies
            .iter()
            .find(|a| a.point_index == p.point_index)
            .map(|a| format!(" slower than p{}§", a.faster_point))
            .unwrap_or_default();
        let auto = auto_cell(v, p.point_index);
        if let Some(why) = &p.not_applicable {
            let _ = writeln!(
                s,
                "| p{} | {budget} | {} | {} | {} | {} | n/a: {} | | | | | | | | | | |",
                p.point_index,
                p.io,
                p.prefetch,
                p.cache,
                p.threads,
                crate::export::md_cell(why)
            );
            continue;
        }
        if p.below_floor {
            let _ = writeln!(
                s,
                "| p{} | {budget} | {} | {} | {} | {} | below floor ({}) | | | | | | | | | | |",
                p.point_index,
                p.io,
                p.prefetch,
                p.cache,
                p.threads,
                fmt_bytes(p.floor_bytes)
            );
            continue;
        }
        let _ = writeln!(
            s,
            "| p{} | {budget} | {} | {} | {} | {} | {}{auto}{}{}{}{} | {}{anomaly} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            p.point_index,
            p.io,
            p.prefetch,
            p.cache,
            p.threads,
            p.n,
            if p.failed > 0 { format!(" ({} failed)", p.failed) } else { String::new() },
            if p.noisy_only { " (all noisy: shown, used for no decision)".to_string() } else if p.noisy > 0 { format!(" (+{} noisy, left out)", p.noisy) } else { String::new() },
            if p.over_budget > 0 { format!(" ({} over budget†)", p.over_budget) } else if p.unenforced > 0 { "*".into() } else { String::new() },
            if p.cold_verified { "" } else { " (not cold)" },
            match (p.s_per_token, p.s_per_token_lo, p.s_per_token_hi) {
                (Some(m), Some(a), Some(b)) => format!(
                    "{m:.4} [{a:.4}–{b:.4}]{}",
                    if p.high_variance { " high variance‡" } else { "" }
                ),
                (Some(m), _, _) => format!("{m:.4} (insufficient repeats)"),
                _ => "–".into(),
            },
            opt(p.tokens_per_s, |x| format!("{x:.2}")),
            opt(p.ttft_s, |x| format!("{x:.3}")),
            bytes_f(p.bytes_read_per_token),
            pct(p.io_wait_fraction),
            pct(p.trunk_hit_rate),
            pct(p.expert_hit_rate),
            bytes_f(p.peak_rss_bytes),
            bytes_f(p.peak_rss_anon_bytes),
            bytes_f(p.peak_accounted_bytes),
        );
    }
    medians_footnotes(s, c);
}

/// ` of 10 (±3.1 %, precision reached)` / ` of 10 (±7.2 %, max_repeats reached)`
/// under `repeats = "auto"` (empty otherwise): how many runs the point could take,
/// its interval's half-width and why it stopped.
fn auto_cell(v: &SweepVerdict, point_index: usize) -> String {
    let (Some(a), Some(reps)) = (&v.auto, &v.repeats_auto) else {
        return String::new();
    };
    let Some(r) = reps.iter().find(|r| r.point_index == point_index) else {
        return String::new();
    };
    let hw = match r.half_width {
        Some(h) if r.quiet > 0 => format!("±{}", fmt_pct(h)),
        _ if r.quiet == 0 => "no quiet run".into(),
        _ => "no interval yet".into(),
    };
    let why = if r.reached {
        "precision reached"
    } else if r.runs as u32 >= a.max_repeats {
        "max_repeats reached"
    } else {
        "measuring"
    };
    format!(" of {} ({hw}, {why})", a.max_repeats)
}

/// The planned floors and the settings each is for (`memdial plan` prints the same
/// floor for the same settings), one per distinct pair, in point order.
fn floors_md(s: &mut String, rows: &[Row]) {
    let mut seen: Vec<(u64, &str)> = vec![];
    let mut by_point: Vec<&Row> = rows.iter().collect();
    by_point.sort_by_key(|r| r.point_index);
    for r in by_point {
        if let Some(f) = r.planned_floor_for.as_deref() {
            if !seen.contains(&(r.planned_floor_bytes, f)) {
                seen.push((r.planned_floor_bytes, f));
            }
        }
    }
    if seen.is_empty() {
        return;
    }
    let list: Vec<String> = seen
        .iter()
        .map(|(b, f)| format!("{} for {f}", fmt_bytes(*b)))
        .collect();
    let _ = writeln!(
        s,
        "Floors planned (the smallest budget a point's settings run in; `memdial plan --io … --prefetch … --threads … --max-context …` with the same settings prints the same floor): {}.\n",
        list.join("; ")
    );
}

/// The footnotes the marks of the medians table need.
fn medians_footnotes(s: &mut String, c: &Sections) {
    let Sections { stats, v, .. } = *c;
    if stats.iter().any(|p| p.high_variance) {
        let _ = writeln!(
            s,
            "\n‡ high variance: the 95 % interval is wider than ±10 % of the median. More repeats (`repeats` in the spec) or a quieter machine (no other load on the CPUs or the disk) narrow it."
        );
    }
    if !v.anomalies.is_empty() {
        let _ = writeln!(
            s,
            "\n§ slower than a smaller budget of the same IO mode, prefetch, cache, threads, prompt, start and layout, with the cause the point's own figures support:"
        );
        for a in &v.anomalies {
            let q = stats.iter().find(|q| q.point_index == a.faster_point);
            let label = q
                .map(|q| crate::sweep::spec::budget_label(&q.budget_spec, q.budget_bytes))
                .unwrap_or_else(|| a.faster_budget_spec.clone());
            let _ = writeln!(s, "- {}", a.describe(&label));
        }
    }
    if stats.iter().any(|p| p.unenforced > 0) {
        let _ = writeln!(
            s,
            "\n\\* not held to its budget by a memory cgroup (see `cgroup_reason` in results.csv); its memory was sampled (anon + model page cache) instead."
        );
    }
    if stats.iter().any(|p| p.over_budget > 0) {
        let _ = writeln!(
            s,
            "\n† over budget: the run's anonymous memory plus the model's page-cache residency (sampled every 100 ms) exceeded budget + `cgroup_slack`; it borrowed memory the budget does not count, so its speed is not comparable with runs held to their budget."
        );
    }
    s.push('\n');
}
