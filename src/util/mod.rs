//! The leaves: helpers every layer may use and that use nothing of the crate above
//! them (the lowest layer, see `docs/architecture.md`).
//!
//! - [`error`]: typed usage-class errors ([`error::UsageError`]);
//! - [`units`]: byte sizes (`512MiB`) parsed and printed;
//! - [`budget`]: budget expressions (`25%`, `2x floor`) bounded and resolved without overflow;
//! - [`digest`]: lower-case hex and SHA-256 (checksum files, output ids);
//! - [`rng`]: SplitMix64, the one seeded generator;
//! - [`sysmem`]: process memory as `/proc` reports it;
//! - [`profile`]: the per-op timer behind `run --profile-ops` (off: one atomic load per op);
//! - [`stats`]: median, percentile and the bootstrap, one definition each;
//! - [`sched`]: per-thread run-queue wait and process CPU time (what a neighbour did to a run).

pub mod budget;
pub mod digest;
pub mod error;
pub mod profile;
pub mod rng;
pub mod sched;
pub mod stats;
pub mod sysmem;
pub mod units;
