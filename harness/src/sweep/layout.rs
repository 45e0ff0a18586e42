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
//! - `raw`: the control (`memdial pack --raw`): the lossless layout's blocks,
//!   grouping and file placement with every block stored as it is, so
//!   raw / safetensors is what the layout buys and lossless / raw what coding buys.
//!
//! Only memdial reads the packed layouts: other engines' `lossless` and `raw` points
//! are `n/a`, and so are memdial's `mmap` points on them (a mapping can only hand out
//! the stored blocks). With several layouts in a spec, a budget written relative to
//! the floor resolves against the largest of their floors, so every layout runs at
//! equal budgets.

use serde::{Deserialize, Serialize};

use super::axes::Axis;

/// A model layout (`layout = [...]` in a spec).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LayoutKind {
    /// The safetensors shards of the model directory.
    Safetensors,
    /// The lossless streamed layout packed from them.
    Lossless,
    /// The lossless layout's blocks stored uncoded (the control).
    Raw,
}

impl LayoutKind {
    /// `safetensors`, `lossless` or `raw`.
    pub fn as_str(self) -> &'static str {
        match self {
            LayoutKind::Safetensors => "safetensors",
            LayoutKind::Lossless => "lossless",
            LayoutKind::Raw => "raw",
        }
    }

    /// The layout named `s` (`None`: no such layout).
    pub fn parse(s: &str) -> Option<LayoutKind> {
        [
            LayoutKind::Safetensors,
            LayoutKind::Lossless,
            LayoutKind::Raw,
        ]
        .into_iter()
        .find(|k| k.as_str() == s)
    }

    /// A layout packed from the safetensors checkpoint (read by memdial only, never
    /// mapped).
    pub fn is_packed(self) -> bool {
        self != LayoutKind::Safetensors
    }

    /// The block kinds a packed layout is written with (`None` for safetensors).
    pub fn codec(self) -> Option<memdial::format::lossless::codec::Codec> {
        use memdial::format::lossless::codec::Codec;
        match self {
            LayoutKind::Safetensors => None,
            LayoutKind::Lossless => Some(Codec::Smallest),
            LayoutKind::Raw => Some(Codec::Raw),
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

/// Why an engine (`memdial`: whether it is memdial) cannot run a point of layout
/// `kind` in IO mode `io`, if it cannot: the packed layouts (`lossless`, `raw`) are
/// memdial's own format, read with direct or buffered IO.
pub fn not_applicable(memdial: bool, kind: LayoutKind, io: memdial::io::IoMode) -> Option<String> {
    if !kind.is_packed() {
        return None;
    }
    if !memdial {
        return Some(format!(
            "the {kind} layout is memdial's own format (docs/lossless.md)"
        ));
    }
    (io == memdial::io::IoMode::Mmap).then(|| {
        let blocks = if kind == LayoutKind::Lossless {
            "the coded bytes"
        } else {
            "the stored blocks"
        };
        format!(
            "the {kind} layout is read with direct or buffered IO (a mapping can only hand out \
             {blocks})"
        )
    })
}
