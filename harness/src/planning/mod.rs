//! The library side of planning, below the commands and the sweep: where a model's
//! sizes come from ([`source`]), the device rate ([`rates`]) and compute time
//! ([`compute`]) a prediction assumes, and how a floor's settings are named.

pub mod compute;
pub mod rates;
pub mod source;

use memdial::io::IoMode;
use memdial::store::plan::Prefetch;

/// The settings a floor is for, as `plan`, `run` and `sweep` print them: `direct /
/// next-layer, 2 kernel thread(s), 13 positions` (` × 4 sequences` when batched).
pub fn floor_for(
    io: IoMode,
    prefetch: Prefetch,
    threads: usize,
    positions: usize,
    sequences: usize,
) -> String {
    format!(
        "{} / {}, {threads} kernel thread(s), {positions} positions{}",
        io.as_str(),
        prefetch.as_str(),
        if sequences > 1 {
            format!(" × {sequences} sequences")
        } else {
            String::new()
        }
    )
}
