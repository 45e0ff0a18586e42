//! Other engines on the same sweep: the `engines` axis of the spec.
//!
//! Each engine is an adapter ([`def::EngineDef`]): `memdial` runs as before (`memdial
//! run --metrics-json`); every other engine is a command template ([`template`]) run
//! as the child instead, in the same cold cache and (when its budget is held by a
//! cgroup) the same memory cgroup, whose output ids (and timings, when it reports
//! them) are read back by [`output`]. [`agreement`] compares the engines' ids with
//! the reference engine's and [`ratio`] their speed.
//!
//! - [`def`]: the `[engine.NAME]` table and the built-in adapters;
//! - [`resolve`]: an engine's definition merged from the built-in and the spec;
//! - [`registry`]: the spec's engines resolved (binaries, versions, setup step);
//! - [`applicable`]: which points each engine can run;
//! - [`runs`]: per-run glue (prompt ids, trunk share, reading an engine's output);
//! - [`setup`]: cached setup steps and versions;
//! - [`program`]: whether an engine's program can start, before any run;
//! - [`check`]: `memdial engines check`;
//! - [`floor`]: engines' floors on those models (declared, commanded or searched);
//! - [`opaque`], [`gguf_meta`]: models memdial's engine does not read (a GGUF, another
//!   architecture's checkpoint), taken as their files.

pub mod agreement;
pub mod applicable;
pub mod check;
pub mod floor;
pub mod gguf_meta;
pub mod margins;
pub mod opaque;
pub mod output;
pub mod plugin;
pub mod program;
pub mod ratio;
pub mod registry;
pub mod runs;
pub mod setup;
