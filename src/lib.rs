#![recursion_limit = "256"]
//! memdial: a CPU inference engine for Kimi K3 / Kimi Linear mixture-of-experts
//! models that keeps resident memory under a budget by streaming weights from
//! disk, and the instruments that measure that trade.
//!
//! Modules:
//! - [`config`]: `config.json` in Moonshot's and transformers' forms;
//! - [`config_keys`]: key-by-key defaults, null and type rules of the reference config classes;
//! - [`schema`]: the tensor table a config implies (names, dtypes, shapes);
//! - [`checkpoint`]: safetensors shard headers and tensor locations;
//! - [`manifest`]: the per-tensor checksum manifest `tensors.sha256`;
//! - [`inspect`]: architecture summary and checkpoint validation;
//! - [`identity`]: the identity of a sweep's inputs over files (models of any format, prompts);
//! - [`limits`]: values refused before work (config ranges, dimensions against the checkpoint, thread counts, traces);
//! - [`fixture`]: deterministic fixture checkpoints in the published layout;
//! - [`tokenizer`]: the Kimi tiktoken tokenizer and chat template;
//! - [`chat`]: chat prompts from the checkpoint's own Jinja `chat_template`;
//! - [`io`]: aligned direct / buffered / mmap reads and page-cache control;
//! - [`store`]: the weight store interface, resident and streaming stores;
//! - [`iobench`]: the IO benchmark (the engine's read requests, each IO mode, fio beside).
//! - [`loader`]: the one loader, [`model::Model::open`] (config → checkpoint → validation → store → model);
//! - [`arena`]: the forward pass's scratch arena (every activation buffer, sized from the config; the plan's activation figure);
//! - [`model`]: the forward pass (KDA, MLA, MoE, AttnRes) over a [`store::WeightStore`];
//! - [`noise`]: the noise sentinel (other processes' CPU, steal, pressure, foreign reads on the model's disk around a run);
//! - [`profile`]: the per-op timer behind `run --profile-ops` (off: one atomic load per op);
//! - [`ops`]: the kernel API the model calls (reference implementations);
//! - [`sampler`], [`generate`]: token selection and the prefill/decode loop;
//! - [`metrics`]: [`metrics::RunMetrics`], the figures of one run (`--metrics-json`, `results.csv`);
//! - [`error`]: typed usage-class errors ([`error::UsageError`]);
//! - [`units`]: byte sizes (`512MiB`) parsed and printed;
//! - [`budget`]: budget expressions (`25%`, `2x floor`) bounded and resolved without overflow.

pub mod arena;
pub mod budget;
pub mod chat;
pub mod checkpoint;
pub mod config;
pub mod config_keys;
pub mod error;
pub mod fixture;
pub mod generate;
pub mod identity;
pub mod inspect;
pub mod integrity;
pub mod io;
pub mod iobench;
pub mod kernels;
pub mod limits;
pub mod loader;
pub mod manifest;
pub mod metrics;
pub mod model;
pub mod noise;
pub mod ops;
pub mod profile;
pub mod rng;
pub mod sampler;
pub mod schema;
pub mod store;
pub mod sysmem;
pub mod tokenizer;
pub mod units;
