//! A row's coordinates on the later axes, read back from its `axes` columns, and the
//! check that a results file holds only values those axes have.

use anyhow::{bail, Result};

use super::Row;
use crate::sweep::axes::Axis;
use crate::sweep::concurrency::{Concurrency, MAX_CONCURRENCY};
use crate::sweep::depth::Depth;
use crate::sweep::layout::{Layout, LayoutKind};
use crate::sweep::start::{Start, StartMode};

impl Row {
    /// The row's concurrency (its `concurrency` column; absent: 1).
    pub fn concurrency(&self) -> usize {
        self.axis_usize(Concurrency::NAME).unwrap_or(1)
    }

    /// The row's depth (its `depth` column; absent: 0).
    pub fn depth(&self) -> usize {
        self.axis_usize(Depth::NAME).unwrap_or(0)
    }

    /// The row's layout (its `layout` column; absent or empty: `safetensors`; a value
    /// no memdial writes: `None`).
    pub fn layout(&self) -> Option<LayoutKind> {
        match self.axes.get(Layout::NAME).and_then(|v| v.as_str()) {
            None | Some("") => Some(LayoutKind::Safetensors),
            Some(v) => LayoutKind::parse(v),
        }
    }

    /// The row's start (its `start` column; absent or empty: `cold`; rows read from
    /// a file hold only `cold` or `warm`, [`Row::check_axes`]).
    pub fn start(&self) -> StartMode {
        match self.axes.get(Start::NAME).and_then(|v| v.as_str()) {
            Some("warm") => StartMode::Warm,
            _ => StartMode::Cold,
        }
    }

    /// Checks the row's `start`, `layout`, `concurrency` and `depth` cells (absent
    /// and empty cells are the axis's default). Errors: a value the axis does not
    /// have, naming the axis and the values it allows — never read as the default.
    pub fn check_axes(&self) -> Result<()> {
        let text = |name: &str| match self.axes.get(name) {
            None | Some(serde_json::Value::Null) => None,
            Some(serde_json::Value::String(s)) if s.is_empty() => None,
            Some(serde_json::Value::String(s)) => Some(s.clone()),
            Some(v) => Some(v.to_string()),
        };
        if let Some(v) = text(Start::NAME) {
            if !["cold", "warm"].contains(&v.as_str()) {
                bail!("axis `start` holds {v:?}: allowed values are cold, warm");
            }
        }
        if let Some(v) = text(Layout::NAME) {
            if LayoutKind::parse(&v).is_none() {
                bail!(
                    "axis `layout` holds {v:?}: allowed values are {}",
                    crate::sweep::layout::ALLOWED
                );
            }
        }
        if let Some(v) = text(Concurrency::NAME) {
            if !matches!(v.parse::<u32>(), Ok(n) if (1..=MAX_CONCURRENCY).contains(&n)) {
                bail!(
                    "axis `concurrency` holds {v:?}: allowed values are whole numbers 1 to {MAX_CONCURRENCY}"
                );
            }
        }
        if let Some(v) = text(Depth::NAME) {
            if v.parse::<u32>().is_err() {
                bail!("axis `depth` holds {v:?}: allowed values are whole numbers of tokens, 0 or more");
            }
        }
        Ok(())
    }

    /// An axis column as a count, written as a string or a number.
    fn axis_usize(&self, name: &str) -> Option<usize> {
        self.axes.get(name).and_then(|v| {
            v.as_str()
                .and_then(|s| s.parse().ok())
                .or_else(|| v.as_u64().map(|n| n as usize))
        })
    }
}
