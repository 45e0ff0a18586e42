//! Outputs of `memdial iobench` (the command is `cmd_iobench.rs`), laid out like
//! [`crate::sweep`]: [`report`] (metadata, results table, Markdown) and [`charts`].

pub mod charts;
pub mod report;
