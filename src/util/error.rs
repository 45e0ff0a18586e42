//! Typed errors for requests the caller must change (usage-class failures).
//!
//! The library returns these inside `anyhow::Error` chains; a front end finds them
//! with [`usage_error`] and maps them to its own exit code and wording (the
//! `memdial` binary maps every variant to exit 2 in one place and adds the flag
//! to change). Messages here therefore name *what* is wrong in the engine's
//! vocabulary (budget, IO mode, prefetch policy) and never a command-line flag.
//!
//! Adding a variant: add it here with its message; front ends that match on it
//! (for a hint or another exit code) get a compile-time reminder only where they
//! match exhaustively, so they keep a catch-all arm for new variants.

use std::path::PathBuf;

use crate::util::units::fmt_bytes;

/// `x` as [`fmt_bytes`] writes it, with the exact byte count added when `other`
/// would be written the same (so "39.51 MiB is below the floor of 39.51 MiB" reads
/// "39.51 MiB (41431040 bytes) is below the floor of 39.51 MiB (41431048 bytes)").
fn bytes_apart(x: u64, other: u64) -> String {
    if x != other && fmt_bytes(x) == fmt_bytes(other) {
        format!("{} ({x} bytes)", fmt_bytes(x))
    } else {
        fmt_bytes(x)
    }
}

/// A request the caller should change: the engine refuses it before doing work.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum UsageError {
    /// The budget cannot hold the plan's floor (`budget` < `floor`, both in bytes).
    /// `detail` lists what makes up the floor (see `store::plan::plan`).
    #[error("budget {} is below the floor of {} for {detail}", bytes_apart(*budget, *floor), bytes_apart(*floor, *budget))]
    BelowFloor {
        /// The requested budget in bytes.
        budget: u64,
        /// The plan's floor in bytes.
        floor: u64,
        /// The plan's inputs and the parts of the floor, in words.
        detail: String,
    },
    /// Direct IO (O_DIRECT) is not available for `path`: the filesystem refused the
    /// flag, or `statx` reports no direct-IO alignment (e.g. tmpfs).
    #[error("{}: {reason}; direct IO is not available here, use buffered or mmap IO", path.display())]
    DirectIoRefused {
        /// The shard file that could not be opened for direct IO.
        path: PathBuf,
        /// What the kernel said.
        reason: String,
    },
    /// A size that does not parse (see [`crate::util::budget::parse_size`]).
    #[error("invalid size {text:?}: {reason}")]
    BadSize {
        /// The text as given.
        text: String,
        /// What is wrong with it, with the accepted forms.
        reason: String,
    },
    /// A name outside its set (IO mode, prefetch policy, cache policy, …).
    #[error("unknown {what} {value:?} ({expected})")]
    UnknownName {
        /// What kind of name, e.g. "IO mode".
        what: &'static str,
        /// The name as given.
        value: String,
        /// The accepted names, comma-separated.
        expected: String,
    },
    /// Oracle prefetch was asked for without a recorded expert trace to replay.
    #[error("oracle prefetch needs a recorded expert trace to replay")]
    OracleNeedsTrace,
    /// Any other refused request; the message says what to change.
    #[error("{0}")]
    Invalid(String),
}

impl UsageError {
    /// `UnknownName` for `value`, listing `names` as the accepted set.
    pub fn unknown(what: &'static str, value: &str, names: &[&str]) -> Self {
        UsageError::UnknownName {
            what,
            value: value.to_string(),
            expected: names.join(", "),
        }
    }
}

/// The first [`UsageError`] in `e`'s chain (context layers are looked through).
pub fn usage_error(e: &anyhow::Error) -> Option<&UsageError> {
    e.chain().find_map(|c| c.downcast_ref::<UsageError>())
}

#[cfg(test)]
mod bytes_apart_tests {
    use super::bytes_apart;

    /// Hand-derived: 41431040 / 2^20 = 39.5117 and 41433260 / 2^20 = 39.5138, both
    /// "39.51 MiB"; 1 MiB and 2 MiB differ at two decimals.
    #[test]
    fn exact_bytes_only_where_the_rounded_sizes_look_equal() {
        assert_eq!(
            bytes_apart(41431040, 41433260),
            "39.51 MiB (41431040 bytes)"
        );
        assert_eq!(bytes_apart(1 << 20, 2 << 20), "1.00 MiB");
        assert_eq!(bytes_apart(1 << 20, 1 << 20), "1.00 MiB");
    }
}
