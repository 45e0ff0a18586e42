//! What a sweep writes: `verdict.json`, `report.md` (one section per function) and
//! the charts, all through [`crate::export`].
//!
//! - [`report`]: `verdict.json` and `report.md`;
//! - [`charts`], [`metric_chart`], [`ttft_chart`]: `curve.*`, `io.*`, `ttft.*`.

mod chart_parts;
pub mod charts;
mod metric_chart;
pub mod report;
pub mod ttft_chart;
