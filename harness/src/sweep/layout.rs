//! The `layout` axis: which on-disk layout of the model a run reads.
//!
//! - `safetensors` (the default, and every sweep before the axis): the model
//!   directory as given;
//! - `lossless`: the lossless streamed layout of the same model (`memdial pack
//!   --lossless`, docs/lossless.md), packed once per sweep into a cache outside the
//!   model directory ([`crate::sweep::run::packed`]) or given with `--packed`. It
//!   decodes to the same bits, so the verdict compares its ids with the safetensors
//!   runs'.
//!
//! Only memdial reads the lossless layout: other engines' `lossless` points are
//! `n/a`, and so are memdial's `mmap` points on it (a mapping can only hand out the
//! coded bytes). With both layouts in a spec, a budget written relative to the floor
//! resolves against the larger of the two floors, so both layouts run at equal
//! budgets.

use serde::{Deserialize, Serialize};

use super::axes::{Axis, Coord};

/// A model layout (`layout = [...]` in a spec).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LayoutKind {
    /// The safetensors shards of the model directory.
    Safetensors,
    /// The lossless streamed layout packed from them.
    Lossless,
}

impl LayoutKind {
    /// `safetensors` or `lossless`.
    pub fn as_str(self) -> &'static str {
        match self {
            LayoutKind::Safetensors => "safetensors",
            LayoutKind::Lossless => "lossless",
        }
    }

    /// The point's layout: its `layout` coordinate (absent: `safetensors`).
    pub fn of(axes: &[Coord]) -> LayoutKind {
        match axes.iter().find(|c| c.name == Layout::NAME) {
            Some(c) if c.value == "lossless" => LayoutKind::Lossless,
            _ => LayoutKind::Safetensors,
        }
    }

    /// The layout of a results row (its `layout` column; absent: `safetensors`).
    pub fn of_row(r: &crate::sweep::record::row::Row) -> LayoutKind {
        match r.axes.get(Layout::NAME).and_then(|v| v.as_str()) {
            Some("lossless") => LayoutKind::Lossless,
            _ => LayoutKind::Safetensors,
        }
    }
}

impl std::fmt::Display for LayoutKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The `layout` axis (spec key `layout = ["safetensors", "lossless"]`).
pub struct Layout;

impl Axis for Layout {
    const NAME: &'static str = "layout";
    type Value = LayoutKind;
    fn default_value() -> LayoutKind {
        LayoutKind::Safetensors
    }
}

/// Why an engine (`memdial`: whether it is memdial) cannot run a point on the axes
/// `axes` in IO mode `io` because of its layout, if it cannot: the lossless layout
/// is memdial's own format, read with direct or buffered IO.
pub fn not_applicable(memdial: bool, axes: &[Coord], io: memdial::io::IoMode) -> Option<String> {
    if LayoutKind::of(axes) != LayoutKind::Lossless {
        return None;
    }
    if !memdial {
        return Some("the lossless layout is memdial's own format (docs/lossless.md)".into());
    }
    (io == memdial::io::IoMode::Mmap).then(|| {
        "the lossless layout is read with direct or buffered IO (a mapping can only hand out \
         the coded bytes)"
            .to_string()
    })
}
