//! The opening sections of `report.md`: predictions, header, recommendation, verdict,
//! engines, environment and noise.

use std::fmt::Write as _;

use super::contents::*;
use super::{noise, predicted};
use crate::sweep::analysis::verdict::short;
use crate::sweep::record::status::RunStatus;
use crate::sweep::util::utc_now_rfc3339;
use memdial::util::units::fmt_bytes;

/// "Predicted vs measured" (a sweep given a trace).
pub(super) fn predicted_md(s: &mut String, c: &Sections) {
    predicted::predicted_md(s, c.meta, c.rows, c.stats);
}

/// The title, the model and the time the report was updated; a partial report says how to complete it.
pub(super) fn header_md(s: &mut String, c: &Sections) {
    let Sections { meta, rows, .. } = *c;
    // Every planned run leaves one row (below-floor points one `below_floor` row each).
    let done = rows.len();
    let planned_runs = meta.runs_planned;
    let _ = writeln!(
        s,
        "# memdial sweep: {}\n",
        crate::export::md_cell(meta.spec_name.as_deref().unwrap_or("unnamed"))
    );
    let _ = writeln!(
        s,
        "Model `{}` ({}), {} generated tokens per run. Started {}, updated {}{}.\n",
        meta.model_dir,
        fmt_bytes(meta.model_bytes),
        meta.max_tokens,
        meta.created_utc,
        utc_now_rfc3339(),
        match &meta.shard {
            Some(sh) => format!(", shard {sh}"),
            None if !meta.merged_from.is_empty() =>
                format!(", merged from {} directories", meta.merged_from.len()),
            None => String::new(),
        }
    );
    if let Some(o) = &meta.opaque_model {
        let _ = writeln!(s, "{}\n", o.markdown());
    }
    if !meta.missing_shards.is_empty() {
        let _ = writeln!(
            s,
            "> **Incomplete merge:** shard(s) {} of the split are missing; merge them in to complete it.\n",
            meta.missing_shards.join(", ")
        );
    }
    if done + c.v.ids.runs_not_needed < planned_runs {
        let _ = writeln!(
            s,
            "> **Partial report:** {done} of {planned_runs} runs finished. Re-run the same command with `--out` set to this directory to complete it.\n"
        );
    }
    if c.v.noisy_runs > 0 {
        let _ = writeln!(
            s,
            "> **Noisy machine:** {} of {} measured runs were marked noisy by the noise sentinel (other processes' CPU time, CPU steal or other reads on the model's disk over the thresholds; see Noise below). They are left out of the medians, intervals and the recommendation.\n",
            c.v.noisy_runs, c.v.measured_runs
        );
    }
}

/// The budget recommendation (computed once, in [`SweepVerdict`]).
pub(super) fn recommendation_md(s: &mut String, c: &Sections) {
    let Sections { v, .. } = *c;
    *s += &v
        .recommendation
        .markdown(&|spec, bytes| crate::sweep::spec::budget_label(spec, bytes));
}

/// The verdict: its line, the differing points, each group and every run that failed or was skipped.
pub(super) fn verdict_md(s: &mut String, c: &Sections) {
    let Sections { v, .. } = *c;
    let _ = writeln!(s, "## Verdict\n\n**{}**\n", v.line);
    let diff = v.ids.differing_points();
    if !diff.is_empty() {
        let _ = writeln!(
            s,
            "Differing points: {}\n",
            diff.iter()
                .map(|(i, k)| format!("p{i} `{k}`"))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    for g in &v.ids.groups {
        let _ = writeln!(
            s,
            "- {}{}prompt {} × {} tokens: {} runs, reference `{}` (run `{}`), {} differing",
            if g.engine.is_empty() {
                String::new()
            } else {
                format!("{}: ", g.engine)
            },
            if g.lossy_layout.is_empty() {
                String::new()
            } else {
                format!("{} (lossy, its own group): ", g.lossy_layout)
            },
            g.prompt_index,
            g.max_tokens,
            g.runs,
            g.hash,
            g.reference_run,
            g.mismatches.len()
        );
        for m in &g.mismatches {
            let _ = writeln!(
                s,
                "  - `{}`: `{}`, first difference at token {}: expected {}, got {}",
                m.run_id,
                short(&m.hash),
                opt(m.first_diff_position, |p| p.to_string()),
                opt(m.expected_id, |p| p.to_string()),
                opt(m.got_id, |p| p.to_string())
            );
        }
    }
    for (id, st, e) in &v.ids.failed {
        let _ = writeln!(s, "- failed `{id}` ({st}): {e}");
    }
    for (id, why) in &v.ids.unproven {
        let _ = writeln!(s, "- failed `{id}` (ok, not compared): {why}");
    }
    for k in &v.ids.below_floor {
        let _ = writeln!(s, "- skipped (budget below the floor): `{k}`");
    }
    for (k, why) in &v.ids.not_applicable {
        let _ = writeln!(s, "- n/a (skipped): `{k}`: {why}");
    }
    s.push('\n');
}

/// The cross-engine verdict, the engines table and their speed against the reference.
pub(super) fn engines_md(s: &mut String, c: &Sections) {
    let Sections { meta, rows, v, .. } = *c;
    if let Some(c) = &v.engines {
        *s += &c.markdown();
        let _ = writeln!(
            s,
            "| engine | adapter | version | budget held by | must match |\n|---|---|---|---|---|"
        );
        for e in &meta.engines {
            let _ = writeln!(
                s,
                "| {}{} | {} | {} | {} | {} |",
                crate::export::md_cell(&e.name),
                if e.reference { " (reference)" } else { "" },
                e.adapter,
                rows.iter()
                    .find(|r| r.engine == e.name && r.engine_version.is_some())
                    .and_then(|r| r.engine_version.clone())
                    .unwrap_or_else(|| e.version.clone()),
                e.budget,
                if e.must_match { "yes" } else { "no" }
            );
        }
        s.push('\n');
        if let Some(r) = meta.engines.iter().find(|e| e.reference) {
            let ratios = v.engine_ratios.as_deref().unwrap_or_default();
            *s += &crate::sweep::analysis::engine_ratio::markdown(ratios, &r.name);
            *s += &crate::sweep::analysis::engine_ratio::at_best_markdown(
                &v.engines_at_best,
                &r.name,
            );
        }
    }
}

/// The machine, its storage and how the runs were held to their budgets.
pub(super) fn environment_md(s: &mut String, c: &Sections) {
    let Sections { meta, rows, .. } = *c;
    let h = &meta.host;
    let _ = writeln!(s, "## Environment\n");
    let _ = writeln!(s, "| | |\n|---|---|");
    let _ = writeln!(
        s,
        "| CPU | {} ({} logical CPUs) |",
        h.cpu_model, h.cpu_cores
    );
    let _ = writeln!(s, "| RAM | {} |", fmt_bytes(h.ram_bytes));
    let _ = writeln!(s, "| Kernel | {} |", h.kernel);
    let _ = writeln!(s, "| Host | {} |", h.host_name);
    let _ = writeln!(
        s,
        "| Model storage | {} on {} (mounted at {}) |",
        h.model_fs, h.model_device, h.model_mount
    );
    let _ = writeln!(
        s,
        "| Cold read, O_DIRECT | {} |",
        opt(h.direct_cold_gbps, |g| format!(
            "{g:.2} GB/s (sequential, 4 MiB requests, QD 1, {})",
            fmt_bytes(h.bandwidth_probe_bytes)
        ))
    );
    let _ = writeln!(
        s,
        "| Cold read, buffered | {} |",
        opt(h.buffered_cold_gbps, |g| format!(
            "{g:.2} GB/s (sequential, 4 MiB reads, kernel read-ahead)"
        ))
    );
    if let Some(n) = &h.bandwidth_note {
        let _ = writeln!(s, "| Bandwidth note | {n} |");
    }
    let cold = rows
        .iter()
        .filter(|r| r.status == RunStatus::Ok && r.cold_verified)
        .count();
    let ok = rows.iter().filter(|r| r.status == RunStatus::Ok).count();
    let _ = writeln!(s, "| Cold cache | {cold} of {ok} finished runs started with 0 bytes of the model resident (mincore) |");
    let _ = writeln!(s, "| Memory cgroup | {} |", meta.cgroup);
    if h.free_page_reporting {
        let _ = writeln!(
            s,
            "| Free page reporting | on (virtio balloon): memory a run frees goes back to the host, and the next run's first use of it waits for the host; runs that fill many fresh buffers (direct IO at large budgets) can be bimodal (docs/io.md §2) |"
        );
    }
    let _ = writeln!(s, "| memdial | {} |", meta.memdial_version);
    let _ = writeln!(s, "| Command | `{}` |\n", meta.command);
}

/// The noise sentinel's thresholds and the noisy runs with their reasons (summarised
/// when there are many: [`noise`]).
pub(super) fn noise_md(s: &mut String, c: &Sections) {
    let Sections { meta, rows, v, .. } = *c;
    let t = meta.noise.unwrap_or_default();
    let _ = writeln!(
        s,
        "## Noise\n\nAround every run the harness measured what the rest of the machine did (docs/steady-state.md): other processes' CPU time, CPU steal, \
         pressure stalls and reads on the model's disk not made by the run (columns `noise_*` of results.csv); memdial runs also measure how long their \
         compute threads waited for a CPU (`run_queue_wait_fraction`). A run is noisy above {} cores (and {} s) of other CPU use, a {:.0} % wait for a CPU, \
         {} cores of steal{} or {} of foreign reads (`[noise]` in the spec). {} of {} measured runs were noisy.\n",
        t.other_cpu_cores,
        t.other_cpu_min_s,
        t.run_queue_wait_fraction * 100.0,
        t.steal_cores,
        t.psi_cpu_some_fraction
            .map(|f| format!(", {:.0} % CPU pressure", f * 100.0))
            .unwrap_or_default(),
        fmt_bytes(t.foreign_read_bytes),
        v.noisy_runs,
        v.measured_runs
    );
    noise::noisy_runs_md(s, rows);
    if v.noisy_runs > 0 {
        s.push('\n');
    }
}
