//! Tools over the engine: the fixture generator, the IO benchmark and the instruments
//! that describe a run's inputs and surroundings (the top layer of the library).
//!
//! - [`fixture`]: deterministic fixture checkpoints in the published layout;
//! - [`pack`]: packing a checkpoint into the lossless layout (`memdial pack --lossless`);
//! - [`rvq`]: routed experts as residual vector quantization (`memdial pack --rvq`, lossy);
//! - [`iobench`]: the IO benchmark (the engine's read requests, each IO mode, fio beside);
//! - [`noise`]: the noise sentinel (other processes' CPU, steal, pressure, foreign reads on the model's disk around a run);
//! - [`identity`]: the identity of a sweep's inputs over files (models of any format, prompts).

pub mod fixture;
pub mod identity;
pub mod iobench;
pub mod noise;
pub mod pack;
pub mod rvq;
