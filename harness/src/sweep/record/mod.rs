//! What a sweep records: one row per run, the run directory that holds them, the
//! shards merged into one directory, and the baseline a sweep is compared with.
//!
//! - [`row`]: the results schema (`results.csv` / `results.json`) and [`status::RunStatus`];
//! - [`rundir`]: the locked run directory and its metadata (`sweep.json`, [`rundir::Meta`]);
//! - [`merge`]: combining shard directories;
//! - [`proof`]: rows checked against each run's own `metrics.json`;
//! - [`baseline`]: an earlier `results.csv` and the comparison with it;
//! - [`llama_bench`]: llama-bench's field names in every row;
//! - [`host`]: machine and storage facts (recorded in `sweep.json` and every row).

pub mod baseline;
pub mod engine_meta;
pub mod host;
pub mod llama_bench;
pub mod memory;
pub mod merge;
pub mod predictions;
pub mod proof;
pub mod row;
pub mod rundir;
pub mod served;
pub mod status;
