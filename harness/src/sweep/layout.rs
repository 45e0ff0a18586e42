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
//! - `rvqN` (N = 1…8): the lossy control of the opposite trade (`memdial pack --rvq N`,
//!   docs/lossless.md): routed experts as N-stage residual k-means codes, packed once
//!   per sweep into the same cache. Its ids are never counted as identical to the
//!   exact layouts': its runs form their own identity groups (they must agree among
//!   themselves) and are compared with the exact layout by agreement
//!   ([`crate::sweep::analysis::lossy`]).
//!
//! Only memdial reads the packed layouts: other engines' `lossless`, `raw` and `rvqN`
//! points are `n/a`, and so are memdial's `mmap` points on `lossless` and `raw` (a
//! mapping can only hand out the stored blocks; an `rvqN` layout is safetensors and
//! maps). With several layouts in a spec, a budget written relative to
//! the floor resolves against the largest of their floors, so every layout runs at
//! equal budgets.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::axes::Axis;

/// Stage counts an `rvqN` layout may have (bits per routed weight).
pub const RVQ_BITS: std::ops::RangeInclusive<u8> = 1..=8;

/// The values the `layout` axis allows, for error messages.
pub const ALLOWED: &str = "safetensors, lossless, raw, rvq1 … rvq8";

/// A model layout (`layout = [...]` in a spec).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LayoutKind {
    /// The safetensors shards of the model directory.
    Safetensors,
    /// The lossless streamed layout packed from them.
    Lossless,
    /// The lossless layout's blocks stored uncoded (the control).
    Raw,
    /// Routed experts as residual vector quantization of this many stages (bits per
    /// weight), `memdial pack --rvq`: lossy.
    Rvq(u8),
}

impl LayoutKind {
    /// `safetensors`, `lossless`, `raw` or `rvqN`.
    pub fn as_str(self) -> &'static str {
        const RVQ: [&str; 8] = [
            "rvq1", "rvq2", "rvq3", "rvq4", "rvq5", "rvq6", "rvq7", "rvq8",
        ];
        match self {
            LayoutKind::Safetensors => "safetensors",
            LayoutKind::Lossless => "lossless",
            LayoutKind::Raw => "raw",
            LayoutKind::Rvq(b) => RVQ[(b.clamp(1, 8) - 1) as usize],
        }
    }

    /// The layout named `s` (`None`: no such layout).
    pub fn parse(s: &str) -> Option<LayoutKind> {
        if let Some(b) = s.strip_prefix("rvq") {
            return b
                .parse::<u8>()
                .ok()
                .filter(|b| RVQ_BITS.contains(b) && s == format!("rvq{b}"))
                .map(LayoutKind::Rvq);
        }
        [
            LayoutKind::Safetensors,
            LayoutKind::Lossless,
            LayoutKind::Raw,
        ]
        .into_iter()
        .find(|k| k.as_str() == s)
    }

    /// A layout packed from the safetensors checkpoint (read by memdial only).
    pub fn is_packed(self) -> bool {
        self != LayoutKind::Safetensors
    }

    /// A layout whose output may differ from the checkpoint's (compared by agreement,
    /// never counted as identical).
    pub fn is_lossy(self) -> bool {
        matches!(self, LayoutKind::Rvq(_))
    }

    /// A layout of blocks the store decodes (`lossless`, `raw`): read with direct or
    /// buffered IO only, never mapped.
    pub fn is_block_pack(self) -> bool {
        matches!(self, LayoutKind::Lossless | LayoutKind::Raw)
    }

    /// The block kinds a packed layout is written with (`None` for safetensors).
    pub fn codec(self) -> Option<memdial::format::lossless::codec::Codec> {
        use memdial::format::lossless::codec::Codec;
        match self {
            LayoutKind::Safetensors | LayoutKind::Rvq(_) => None,
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

impl Serialize for LayoutKind {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for LayoutKind {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        LayoutKind::parse(&s).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "unknown layout \"{s}\": allowed values are {ALLOWED}"
            ))
        })
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
/// `kind` in IO mode `io`, if it cannot: the packed layouts (`lossless`, `raw`,
/// `rvqN`) are memdial's own formats; `lossless` and `raw` are read with direct or
/// buffered IO.
pub fn not_applicable(memdial: bool, kind: LayoutKind, io: memdial::io::IoMode) -> Option<String> {
    if !kind.is_packed() {
        return None;
    }
    if !memdial {
        return Some(format!(
            "the {kind} layout is memdial's own format (docs/lossless.md)"
        ));
    }
    (kind.is_block_pack() && io == memdial::io::IoMode::Mmap).then(|| {
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

/// What a lossy layout must meet (`[lossy.rvq3] min_top1 = 0.9` in a spec): the only
/// thing `--check` fails a lossy layout on.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LossyLimits {
    /// Least share (0…1) of teacher-forced positions whose top-1 token matches the
    /// exact layout's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_top1: Option<f64>,
}

/// Checks the spec's `lossy` tables against its `layout` axis `layouts`. Errors: a
/// lossy layout without an exact one on the axis (nothing to compare it with); a
/// table for a value that is not a lossy layout, or not on the axis; a `min_top1`
/// outside 0…1.
pub fn check_lossy_limits(
    limits: &std::collections::BTreeMap<String, LossyLimits>,
    layouts: &[LayoutKind],
) -> anyhow::Result<()> {
    if let Some(l) = layouts.iter().find(|l| l.is_lossy()) {
        if layouts.iter().all(|l| l.is_lossy()) {
            anyhow::bail!(
                "layout = [\"{l}\"]: a lossy layout is compared with an exact one, and the axis has \
                 none (add it: layout = [\"safetensors\", \"{l}\"])"
            );
        }
    }
    for (name, l) in limits {
        match LayoutKind::parse(name) {
            Some(k) if k.is_lossy() && layouts.contains(&k) => {}
            Some(k) if k.is_lossy() => anyhow::bail!(
                "[lossy.{name}]: the `layout` axis has no {name} (add it: layout = [\"safetensors\", \"{name}\"])"
            ),
            _ => anyhow::bail!(
                "[lossy.{name}]: only a lossy layout (rvq1 … rvq8) has limits; {name} is not one"
            ),
        }
        if let Some(t) = l.min_top1 {
            if !(0.0..=1.0).contains(&t) {
                anyhow::bail!("[lossy.{name}] min_top1 = {t}: a share from 0 to 1");
            }
        }
    }
    Ok(())
}
