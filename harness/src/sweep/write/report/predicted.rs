//! `report.md`'s "Predicted vs measured" section: the spec's `trace` replayed at
//! every point ([`crate::sweep::predict`]) beside the measured medians.

use std::fmt::Write as _;

use memdial::util::units::fmt_bytes;

use crate::sweep::analysis::stats::PointStats;
use crate::sweep::predict::Compared;
use crate::sweep::record::predictions::Predictions;
use crate::sweep::record::row::Row;
use crate::sweep::record::rundir::Meta;

fn pct_signed(v: f64) -> String {
    format!("{:+.1} %", 100.0 * v)
}

/// The section (nothing without a trace).
pub(super) fn predicted_md(s: &mut String, meta: &Meta, runs: &[Row], stats: &[PointStats]) {
    let Some(p) = &meta.predictions else {
        return;
    };
    let _ = writeln!(s, "## Predicted vs measured\n");
    let _ = writeln!(
        s,
        "The simulator replayed the trace `{}` against the store's plan of every point's configuration \
         (docs/simulate.md). Bytes read per decoded token are the store's own count: exact for `direct` and `buffered` IO \
         with `lru`/`lfru` and `none`, `next-layer` or `oracle` prefetch. Predicted s/token is the time model of docs/simulate.md \
         (\"Predicted s/token\": `none` waits for every read, `next-layer` hides trunk reads behind compute) with the device at {} ({}) \
         and a compute time of {} ({}). Error is predicted ÷ measured median − 1; *inside* means the prediction falls in the point's 95 % interval \
         (in its min–max over the repeats when there are too few for one, marked °).\n",
        p.trace,
        p.device_gbps.map_or("–".into(), |g| format!("{g:.3} GB/s")),
        p.device_source,
        p.compute_s_per_token.map_or("–".into(), |x| format!("{x:.4} s/token")),
        p.compute_source,
    );
    let rows = p.compare(stats);
    if rows.is_empty() {
        let _ = writeln!(
            s,
            "No point has both a prediction and a measured run yet.\n"
        );
        return;
    }
    let _ = writeln!(
        s,
        "| point | budget | io | prefetch | cache | start | read/token predicted | read/token measured | s/token predicted | s/token measured [95% CI] | error | inside | note |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for r in &rows {
        let _ = writeln!(s, "{}", row_md(runs, p, r));
    }
    s.push('\n');
    summary_md(s, &rows);
}

fn row_md(runs: &[Row], p: &Predictions, r: &Compared) -> String {
    let st = r.stats;
    let differs = runs
        .iter()
        .filter(|x| x.point_index == st.point_index && x.is_measured_ok())
        .any(|x| !p.same_output(x));
    let mut notes: Vec<String> = Vec::new();
    if differs {
        notes.push("a run's output differs from the trace's: not the routing replayed".into());
    }
    if let Some(cv) = &r.predicted.caveat {
        notes.push(cv.clone());
    }
    let measured = match (st.s_per_token, st.s_per_token_lo, st.s_per_token_hi) {
        (Some(m), Some(a), Some(b)) => format!("{m:.4} [{a:.4}–{b:.4}]"),
        (Some(m), _, _) => format!(
            "{m:.4} ({}–{}°)",
            st.s_per_token_min.map_or("–".into(), |x| format!("{x:.4}")),
            st.s_per_token_max.map_or("–".into(), |x| format!("{x:.4}"))
        ),
        _ => "–".into(),
    };
    format!(
        "| p{} | {} | {} | {} | {} | {} | {} | {} | {} | {measured} | {} | {} | {} |",
        st.point_index,
        crate::sweep::spec::budget_label(&st.budget_spec, st.budget_bytes),
        st.io,
        st.prefetch,
        st.cache,
        st.start,
        fmt_bytes(r.predicted.bytes.bytes.round() as u64),
        st.bytes_read_per_token
            .map_or("–".into(), |b| fmt_bytes(b.max(0.0).round() as u64)),
        r.predicted
            .s_per_token
            .map_or("–".into(), |x| format!("{x:.4}")),
        r.error.map_or("–".into(), pct_signed),
        match r.inside {
            Some(true) if r.has_interval => "yes",
            Some(true) => "yes°",
            Some(false) if r.has_interval => "**no**",
            Some(false) => "**no**°",
            None => "–",
        },
        notes.join("; ")
    )
}

/// One line over the `direct` points (what the model predicts), then what the
/// others are.
fn summary_md(s: &mut String, rows: &[Compared]) {
    let direct: Vec<&Compared> = rows.iter().filter(|r| r.stats.io == "direct").collect();
    let judged: Vec<&&Compared> = direct.iter().filter(|r| r.inside.is_some()).collect();
    if !judged.is_empty() {
        let inside = judged.iter().filter(|r| r.inside == Some(true)).count();
        let mut errs: Vec<(f64, usize)> = judged
            .iter()
            .filter_map(|r| r.error.map(|e| (e.abs(), r.stats.point_index)))
            .collect();
        errs.sort_by(|a, b| a.0.total_cmp(&b.0));
        let med = errs.get(errs.len() / 2).map_or(0.0, |e| e.0);
        let worst = errs.last().copied().unwrap_or((0.0, 0));
        let _ = writeln!(
            s,
            "**Direct IO: {inside} of {} points inside their interval**; median |error| {:.1} %, largest {:.1} % (p{}). \
             A miss says the model left something out at that point: compute that is not the resident run's (threads contending with \
             other processes, IO threads' CPU), reads slower than the device's sequential bandwidth, or overlap the model does not credit.\n",
            judged.len(),
            100.0 * med,
            100.0 * worst.0,
            worst.1
        );
    }
    if rows.iter().any(|r| r.stats.io != "direct") {
        let _ = writeln!(
            s,
            "`buffered` and `mmap` points are shown for reference, not judged: the model has no page cache (a read the page cache \
             holds costs no device time, a miss costs the kernel's copy or fault besides), so their predictions are those of the \
             same bytes read directly. These costs are not modelled rather than fitted.\n"
        );
    }
}
