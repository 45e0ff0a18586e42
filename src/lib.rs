#![recursion_limit = "256"]
//! memdial: a CPU inference engine for Kimi K3 / Kimi Linear mixture-of-experts
//! models that keeps resident memory under a budget by streaming weights from
//! disk, and the instruments that measure that trade.
//!
//! The modules are grouped by layer, lowest first; a layer uses only its own and
//! the layers below it (`docs/architecture.md` has the table a test checks):
//! - [`util`]: the leaves (usage errors, byte sizes, budget expressions, SplitMix64, `/proc`, op timers);
//! - [`kernels`]: matvec / matmul (BF16, MXFP4), MLA attention, the thread pool;
//! - [`io`]: aligned direct / buffered / mmap reads and page-cache control;
//! - [`format`](mod@format): config, tensor table, shard headers, checksums, tokenizer, limits, the lossless layout;
//! - [`store`]: the weight store interface, resident and streaming stores, the budget plan;
//! - [`model`] and [`engine`]: the forward pass (KDA, MLA, MoE, AttnRes) over a
//!   [`store::WeightStore`]; the loader, scratch arena, sampler, generation loop, batches, run metrics;
//! - [`tools`]: fixture checkpoints, the IO benchmark, the noise sentinel, input identity.

pub mod engine;
pub mod format;
pub mod io;
pub mod kernels;
pub mod model;
pub mod store;
pub mod tools;
pub mod util;
