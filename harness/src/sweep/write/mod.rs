//! What a sweep writes: `verdict.json`, `report.md` (one section per function) and
//! the charts, all through [`crate::export`].
//!
//! - [`report`]: `verdict.json` and `report.md`;
//! - [`charts`], [`metric_chart`], [`ttft_chart`]: `curve.*`, `io.*`, `ttft.*`;
//!   [`predicted_chart`]: `predicted.*` (a sweep given a trace); [`depth_chart`]:
//!   `depth.*` (a sweep of several depths);
//!   [`concurrency_chart`]: `concurrency.*` (a sweep above concurrency 1);
//! - [`ci`] (over [`junit`] and [`gha`]): the JUnit report and GitHub Actions' job
//!   summary and annotations;
//! - [`versus`]: `memdial compare`'s Markdown, CSV and JSON tables.

pub(crate) mod chart_parts;
pub mod charts;
pub mod ci;
pub mod concurrency_chart;
pub mod depth_chart;
pub mod gha;
pub mod junit;
mod metric_chart;
pub mod predicted_chart;
pub mod report;
pub mod ttft_chart;
pub mod versus;
