//! The engine layer around the forward pass ([`crate::model`], which sits in this layer
//! too): loading a model, its scratch memory, token choice, the generation loop and
//! the figures of a run.
//!
//! - [`loader`]: the one loader, [`crate::model::Model::open`] (config → checkpoint → validation → store → model);
//! - [`arena`]: the forward pass's scratch arena (every activation buffer, sized from the config; the plan's activation figure);
//! - [`sampler`], [`generate`]: token selection and the prefill/decode loop;
//! - [`step_clock`]: each decode step's run-queue wait and the decode loop's CPU time (uncontended time);
//! - [`depth`]: the deterministic context a run decodes at (`--depth`);
//! - [`speculate`]: exact speculative decoding (drafts that read no weights, verified in one forward);
//! - [`batch`]: several sequences decoded in one pass over the weights ([`batch::Batch`]);
//! - [`metrics`]: [`metrics::RunMetrics`], the figures of one run (`--metrics-json`, `results.csv`).

pub mod arena;
pub mod batch;
pub mod depth;
pub mod generate;
pub mod loader;
pub mod metrics;
pub mod sampler;
pub mod speculate;
pub mod step_clock;
