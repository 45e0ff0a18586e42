//! Disk IO for the streaming store and the benchmarks: aligned buffers, the three
//! IO modes (`direct` = O_DIRECT, `buffered` = pread through the page cache,
//! `mmap`), and page-cache residency / eviction.
//!
//! Kept apart from model math: nothing here knows what a tensor means.

pub mod accounting;
pub mod aligned;
pub mod mmap_guard;
pub mod pagecache;
pub mod reader;

pub use aligned::AlignedBuf;
pub use reader::{IoMode, ShardFile};
