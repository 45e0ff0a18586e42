//! What every section of `report.md` renders from ([`Sections`]) and the cell
//! formatters (the verdict itself is composed in [`crate::sweep::analysis::sweep_verdict`]).

use memdial::util::units::fmt_bytes;

use crate::sweep::analysis::baseline::Comparison;
use crate::sweep::analysis::stats::PointStats;
use crate::sweep::analysis::sweep_verdict::SweepVerdict;
use crate::sweep::record::row::Row;
use crate::sweep::record::rundir::Meta;

pub(super) fn opt<T>(v: Option<T>, f: impl Fn(T) -> String) -> String {
    v.map(f).unwrap_or_else(|| "–".into())
}

pub(super) fn pct(v: Option<f64>) -> String {
    opt(v, |x| format!("{:.0}%", x * 100.0))
}

pub(super) fn bytes_f(v: Option<f64>) -> String {
    opt(v, |x| fmt_bytes(x.max(0.0).round() as u64))
}

/// What every section of `report.md` renders from.
#[derive(Clone, Copy)]
pub(super) struct Sections<'a> {
    pub(super) meta: &'a Meta,
    pub(super) rows: &'a [Row],
    pub(super) v: &'a SweepVerdict,
    pub(super) stats: &'a [PointStats],
    pub(super) baseline: Option<&'a Comparison>,
    pub(super) chart_err: Option<&'a anyhow::Error>,
}
