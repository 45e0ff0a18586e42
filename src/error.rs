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

use crate::units::fmt_bytes;

/// A request the caller should change: the engine refuses it before doing work.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum UsageError {
    /// The budget cannot hold the plan's floor (`budget` < `floor`, both in bytes).
    /// `detail` lists what makes up the floor (see `store::plan::plan`).
    #[error("budget {} is below the floor of {} for {detail}", fmt_bytes(*budget), fmt_bytes(*floor))]
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
    /// A size that does not parse (see [`crate::units::parse_size`]).
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
