//! The run directory's metadata (`sweep.json`) and the human report (`report.md`,
//! `verdict.json`, charts), regenerated after every finished run so an
//! interrupted sweep always leaves a valid partial report.
//!
//! Here: the writers (the verdict is composed in
//! [`crate::sweep::analysis::sweep_verdict`]); the Markdown
//! sections in `sections.rs` (header to noise), `medians.rs` (the per-point table),
//! `against.rs` (baseline, same budget, layouts, served runs, speculation, depth, charts) and the
//! section modules below.

use std::path::Path;

use anyhow::Result;

use crate::sweep::analysis::baseline::Comparison;
use crate::sweep::analysis::stats::{per_point, PointStats};
use crate::sweep::analysis::sweep_verdict::SweepVerdict;
use crate::sweep::record::baseline::Baseline;
use crate::sweep::record::row::Row;
use crate::sweep::record::rundir::Meta;

mod against;
mod concurrency;
mod contents;
mod depth;
mod medians;
mod noise;
mod predicted;
mod sections;
mod speculation;

use against::{
    baseline_md, charts_md, concurrency_md, depth_md, layouts_md, lossy_md, same_budget_md,
    speculation_md,
};
use contents::Sections;
use medians::medians_md;
use sections::{
    engines_md, environment_md, header_md, noise_md, predicted_md, recommendation_md, verdict_md,
};

/// Writes results, `verdict.json`, `report.md` and the charts; returns the verdict
/// and the baseline comparison (when a baseline is given).
pub fn write_all(
    dir: &Path,
    meta: &Meta,
    rows: &[Row],
    baseline: Option<&Baseline>,
) -> Result<(SweepVerdict, Option<Comparison>)> {
    let stats = per_point(rows);
    // With a trace, the rows carry the predictions of their points.
    let filled;
    let rows = match &meta.predictions {
        Some(p) => {
            filled = p.fill(rows, &stats);
            &filled[..]
        }
        None => rows,
    };
    crate::sweep::record::row::save(dir, rows)?;
    let cmp = baseline.map(|b| {
        crate::sweep::analysis::baseline::compare(
            &b.path,
            &b.runs,
            &b.unreadable,
            rows,
            b.tolerance,
        )
    });
    let v = SweepVerdict::new(dir, meta, rows, &stats)
        .settle(cmp.as_ref(), baseline.is_some_and(|b| b.undecided_passes));
    crate::export::write_json(&dir.join("verdict.json"), &v)?;
    let title = meta
        .spec_name
        .clone()
        .unwrap_or_else(|| "memdial sweep".into());
    let chart_err = crate::sweep::write::charts::write_charts(
        dir,
        &stats,
        Some(meta.model_bytes),
        &title,
        &v.anomalies,
        meta.opaque_model.is_some(),
    )
    .and_then(|_| match &meta.predictions {
        Some(p) => {
            crate::sweep::write::predicted_chart::write_predicted_chart(dir, &stats, p, &title)
        }
        None => Ok(()),
    })
    .and_then(|_| crate::sweep::write::depth_chart::write_depth_chart(dir, &stats, &title))
    .and_then(|_| {
        crate::sweep::write::ttft_chart::write_ttft_chart(
            dir,
            &stats,
            rows,
            Some(meta.model_bytes),
            &title,
            meta.opaque_model.is_some(),
        )
    })
    .and_then(|_| {
        crate::sweep::write::concurrency_chart::write_concurrency_chart(dir, rows, &title)
    })
    .err();
    let md = markdown(meta, rows, &v, &stats, cmp.as_ref(), chart_err.as_ref());
    crate::export::write_text(&dir.join("report.md"), &md)?;
    Ok((v, cmp))
}

/// The Markdown report: its sections in order, each written by its own function.
pub fn markdown(
    meta: &Meta,
    rows: &[Row],
    v: &SweepVerdict,
    stats: &[PointStats],
    baseline: Option<&Comparison>,
    chart_err: Option<&anyhow::Error>,
) -> String {
    let c = Sections {
        meta,
        rows,
        v,
        stats,
        baseline,
        chart_err,
    };
    let mut s = String::new();
    for section in [
        header_md,
        recommendation_md,
        verdict_md,
        engines_md,
        environment_md,
        noise_md,
        medians_md,
        baseline_md,
        same_budget_md,
        layouts_md,
        lossy_md,
        predicted_md,
        concurrency_md,
        speculation_md,
        depth_md,
        charts_md,
    ] {
        section(&mut s, &c);
    }
    s
}

/// The parts of `report.md` a CI job summary shows: the recommendation, the verdict
/// and, with several engines, the agreement tables.
pub fn summary_markdown(
    meta: &Meta,
    rows: &[Row],
    v: &SweepVerdict,
    baseline: Option<&Comparison>,
) -> String {
    let stats = per_point(rows);
    let c = Sections {
        meta,
        rows,
        v,
        stats: &stats,
        baseline,
        chart_err: None,
    };
    let mut s = String::new();
    for section in [recommendation_md, verdict_md, engines_md, baseline_md] {
        section(&mut s, &c);
    }
    s
}
