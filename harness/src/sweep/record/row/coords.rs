//! A row's coordinates on the later axes, read back from its `axes` columns.

use super::Row;
use crate::sweep::axes::Axis;
use crate::sweep::concurrency::Concurrency;
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

    /// The row's start (its `start` column; absent: `cold`).
    pub fn start(&self) -> StartMode {
        match self.axes.get(Start::NAME).and_then(|v| v.as_str()) {
            Some("warm") => StartMode::Warm,
            _ => StartMode::Cold,
        }
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
