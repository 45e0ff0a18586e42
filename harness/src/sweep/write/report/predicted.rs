//! `report.md`'s "Predicted vs measured" section: the spec's `trace` replayed at
//! every point ([`crate::sweep::predict`]) beside the measured medians.

use std::fmt::Write as _;

use memdial::util::stats::median;
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
    let rates = match (p.device_gbps, p.expert_gbps) {
        (Some(t), Some(e)) => format!("trunk reads at {t:.3} GB/s and expert reads at {e:.3} GB/s"),
        (Some(t), None) => format!("every read at {t:.3} GB/s"),
        _ => "no read rate".into(),
    };
    let rates = if p.expert_batch_gbps.is_empty() {
        rates
    } else {
        let by: Vec<String> = p
            .expert_batch_gbps
            .iter()
            .map(|b| format!("{} → {:.3}", b.records, b.gbps))
            .collect();
        format!(
            "{rates}, by batch size (expert records queued at once → GB/s, linear between) {}",
            by.join(", ")
        )
    };
    let _ = writeln!(
        s,
        "The simulator replayed the trace `{}` against the store's plan of every point's configuration \
         (docs/simulate.md). Bytes read per decoded token are the store's own count: exact for `direct` and `buffered` IO \
         with `lru`/`lfru` and `none`, `next-layer` or `oracle` prefetch. Predicted s/token is the time model of docs/simulate.md \
         (\"Predicted s/token\": `none` waits for every read; a prefetch hides trunk reads behind the compute before each router, \
         no more) with {rates} ({}) and a compute time of {} ({}), {:.0} % of it after the routers. Error is predicted ÷ measured \
         median − 1; *inside* means the prediction falls in the point's 95 % interval (in its min–max over the repeats when there \
         are too few for one, marked °). The wait columns set the model's IO wait before and after the routers beside the runs' \
         own counters (`io_wait_trunk_s_per_token`; `io_wait_s_per_token` less it): what each prefetch policy hid, measured.\n",
        p.trace,
        p.device_source,
        p.compute_s_per_token.map_or("–".into(), |x| format!("{x:.4} s/token")),
        p.compute_source,
        100.0 * p.expert_compute_share,
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
        "| point | budget | io | prefetch | cache | start | read/token predicted | read/token measured | s/token predicted | s/token measured [95% CI] | error | inside | wait before routers predicted / measured | wait after predicted / measured | note |"
    );
    let _ = writeln!(
        s,
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    );
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
    let (before, after) = measured_waits(runs, st.point_index);
    let pair = |p: Option<f64>, m: Option<f64>| {
        format!(
            "{} / {}",
            p.map_or("–".into(), |x| format!("{x:.4}")),
            m.map_or("–".into(), |x| format!("{x:.4}"))
        )
    };
    format!(
        "| p{} | {} | {} | {} | {} | {} | {} | {} | {} | {measured} | {} | {} | {} | {} | {} |",
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
        pair(r.predicted.trunk_wait_s_per_token, before),
        pair(r.predicted.expert_wait_s_per_token, after),
        notes.join("; ")
    )
}

/// Medians over the point's quiet measured runs of the IO wait before the routers
/// (`io_wait_trunk_s_per_token`) and after them (the rest of `io_wait_s_per_token`).
fn measured_waits(runs: &[Row], point: usize) -> (Option<f64>, Option<f64>) {
    let mine: Vec<&Row> = runs
        .iter()
        .filter(|x| x.point_index == point && x.is_measured_quiet())
        .collect();
    let before: Vec<f64> = mine
        .iter()
        .filter_map(|x| x.metrics.io_wait_trunk_s_per_token)
        .collect();
    let after: Vec<f64> = mine
        .iter()
        .filter_map(|x| {
            let t = x.metrics.io_wait_trunk_s_per_token?;
            Some((x.metrics.io_wait_s_per_token? - t).max(0.0))
        })
        .collect();
    (median(&before), median(&after))
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
        let within = errs.iter().filter(|e| e.0 <= 0.10).count();
        let _ = writeln!(
            s,
            "**Direct IO: {within} of {} points within ±10 %, {inside} inside their interval**; median |error| {:.1} %, largest {:.1} % (p{}). \
             A miss says the model left something out at that point: compute that is not the resident run's (threads contending with \
             other processes, IO threads' CPU), reads slower than the device's sequential bandwidth, or overlap the model does not credit.\n",
            errs.len(),
            100.0 * med,
            100.0 * worst.0,
            worst.1
        );
    }
    if rows.iter().any(|r| r.stats.io != "direct") {
        let _ = writeln!(
            s,
            "`buffered` and `mmap` points are unpredicted: the model has no page cache (a read the page cache holds costs no \
             device time, a miss costs the kernel's copy or fault besides); their bytes are shown, their time is not modelled \
             rather than fitted.\n"
        );
    }
}
