//! The time-to-first-token chart (`ttft.svg` / `ttft.png`), drawn beside the decode
//! curve whenever a sweep has long prompts ([`LONG_PROMPT_TOKENS`] or more): the
//! median time from the start of prefill to the first chosen token against the
//! memory budget, one line per IO mode × prefetch policy, drawn by the decode
//! curve's drawer ([`super::metric_chart`], metric `TTFT`).

use std::path::Path;

use anyhow::Result;
use plotters::coord::Shift;
use plotters::prelude::*;

use crate::sweep::analysis::stats::PointStats;
use crate::sweep::record::row::Row;

/// Prompts of at least this many tokens count as long (a prefill of several
/// hundred tokens, where time to first token is a figure of its own).
pub const LONG_PROMPT_TOKENS: u64 = 128;

/// The points whose prompt is long: a run of the point reported at least
/// [`LONG_PROMPT_TOKENS`] prompt tokens.
pub fn long_prompt_points(stats: &[PointStats], rows: &[Row]) -> Vec<PointStats> {
    stats
        .iter()
        .filter(|p| {
            rows.iter().any(|r| {
                r.point_index == p.point_index
                    && r.metrics.prompt_tokens.unwrap_or(0) >= LONG_PROMPT_TOKENS
            })
        })
        .cloned()
        .collect()
}

struct Ttft<'a> {
    stats: &'a [PointStats],
    model_bytes: Option<u64>,
    title: String,
    own_floors: bool,
}

impl crate::export::Chart for Ttft<'_> {
    fn draw<DB: DrawingBackend>(&self, root: DrawingArea<DB, Shift>) -> Result<()>
    where
        DB::ErrorType: 'static,
    {
        use super::metric_chart::{draw, TTFT};
        draw(
            root,
            self.stats,
            self.model_bytes,
            &self.title,
            &TTFT,
            &[],
            self.own_floors,
        )
    }
}

/// Writes `ttft.svg` and `ttft.png` into `dir` when `rows` include long prompts
/// (over those points only); returns whether it wrote them. `own_floors`: as for
/// [`super::charts::write_charts`].
///
/// Errors: a chart that cannot be drawn or written.
pub fn write_ttft_chart(
    dir: &Path,
    stats: &[PointStats],
    rows: &[Row],
    model_bytes: Option<u64>,
    title: &str,
    own_floors: bool,
) -> Result<bool> {
    let long = long_prompt_points(stats, rows);
    if long.is_empty() {
        return Ok(false);
    }
    let c = Ttft {
        stats: &long,
        model_bytes,
        title: format!("{title}: time to first token vs memory budget"),
        own_floors,
    };
    crate::export::write_chart(dir, "ttft", (1100, 620), &c)?;
    Ok(true)
}
