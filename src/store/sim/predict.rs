//! Predicted decode seconds per token from a replay's decode bytes: the time model of
//! `memdial simulate` and of a sweep given a trace (docs/simulate.md, "Predicted
//! s/token").
//!
//! One device of bandwidth `bw` serves every read; compute takes `c` seconds per token
//! with every weight resident. Per decoded token, with `B` the bytes read, `T` the
//! trunk part (attention, dense and shared-expert groups, `lm_head` blocks), `E` the
//! routed-expert part and `R` the embedding rows:
//!
//! - `none`: nothing is read ahead, the forward waits for every read:
//!   `c + B / bw`;
//! - `next-layer`: the next trunk group is read while the current one computes, so
//!   trunk reads overlap compute; routed experts are known only when the router has
//!   run and the embedding row before the forward, so those reads stall it:
//!   `max(B / bw, c + (E + R) / bw)`, the device's time or compute plus the stalls;
//! - `lookahead` and `oracle`: as `next-layer`, and the routed experts that were
//!   guessed (the look-ahead recall; all of them for `oracle`) are read ahead too:
//!   `max(B / bw, c + ((1 − recall) E + R) / bw)`.
//!
//! The model has no page cache: it predicts `direct` IO. For `buffered` and `mmap` a
//! read that hits the page cache costs no device time and a miss costs the kernel's
//! copy or fault on top; neither is modelled, and callers say so rather than fit it.

use serde::{Deserialize, Serialize};

use super::SimCounts;
use crate::store::plan::Prefetch;

/// What the time model needs besides the bytes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TimeModel {
    /// Device read bandwidth, bytes per second (> 0).
    pub bytes_per_s: f64,
    /// Compute seconds per decoded token with every weight resident (≥ 0).
    pub compute_s_per_token: f64,
}

/// The prediction for one replay's decode tokens.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Predicted {
    /// Device seconds per token: `B / bw`.
    pub io_s_per_token: f64,
    /// Seconds per token the forward waits for reads it could not overlap.
    pub stall_s_per_token: f64,
    /// Predicted decode seconds per token.
    pub s_per_token: f64,
}

/// A replay's decode bytes per decoded token, by what the time model tells apart.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct DecodeBytes {
    /// All bytes read per token (`B`).
    pub bytes: f64,
    /// The routed experts' part (`E`).
    pub expert_bytes: f64,
    /// The embedding rows' part (`R`).
    pub embedding_bytes: f64,
    /// Selected experts that were guessed ahead (look-ahead recall; `None` without
    /// guesses).
    pub lookahead_recall: Option<f64>,
}

impl DecodeBytes {
    /// Per token of `decode` (a replay's decode counters over `tokens` tokens);
    /// `None` when `tokens` is 0.
    pub fn per_token(decode: &SimCounts, tokens: usize) -> Option<DecodeBytes> {
        let n = (tokens > 0).then_some(tokens as f64)?;
        Some(DecodeBytes {
            bytes: decode.bytes_read as f64 / n,
            expert_bytes: decode.expert_bytes_read as f64 / n,
            embedding_bytes: decode.embedding_bytes_read as f64 / n,
            lookahead_recall: decode.hits().lookahead_recall(),
        })
    }
}

/// The prediction for `b` under `prefetch`. `None` when the model's figures are not
/// finite and positive (bandwidth) or non-negative (compute).
pub fn predict(b: &DecodeBytes, prefetch: Prefetch, m: &TimeModel) -> Option<Predicted> {
    let bw_ok = m.bytes_per_s.is_finite() && m.bytes_per_s > 0.0;
    let compute_ok = m.compute_s_per_token.is_finite() && m.compute_s_per_token >= 0.0;
    if !(bw_ok && compute_ok) {
        return None;
    }
    let per = |x: f64| x / m.bytes_per_s;
    let io = per(b.bytes);
    let rows = per(b.embedding_bytes);
    let experts = per(b.expert_bytes);
    let c = m.compute_s_per_token;
    let (stall, s) = match prefetch {
        Prefetch::None => (io, c + io),
        Prefetch::NextLayer => {
            let stall = experts + rows;
            (stall, io.max(c + stall))
        }
        Prefetch::Lookahead | Prefetch::Oracle => {
            let recall = if prefetch == Prefetch::Oracle {
                1.0
            } else {
                b.lookahead_recall.unwrap_or(0.0)
            };
            let stall = (1.0 - recall) * experts + rows;
            (stall, io.max(c + stall))
        }
    };
    Some(Predicted {
        io_s_per_token: io,
        stall_s_per_token: stall,
        s_per_token: s,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(trunk: u64, experts: u64, rows: u64) -> DecodeBytes {
        let c = SimCounts {
            bytes_read: trunk + experts + rows,
            trunk_bytes_read: trunk,
            expert_bytes_read: experts,
            embedding_bytes_read: rows,
            ..Default::default()
        };
        DecodeBytes::per_token(&c, 2).unwrap()
    }

    #[test]
    fn the_three_regimes_by_hand() {
        // 1 GB/s, 0.1 s compute, 2 tokens reading 200 MB trunk + 100 MB experts + 2 MB rows.
        let m = TimeModel {
            bytes_per_s: 1e9,
            compute_s_per_token: 0.1,
        };
        let d = counts(200_000_000, 100_000_000, 2_000_000);
        let none = predict(&d, Prefetch::None, &m).unwrap();
        // 151 MB/token → 0.151 s of IO, serial with compute.
        assert!((none.io_s_per_token - 0.151).abs() < 1e-12);
        assert!((none.s_per_token - 0.251).abs() < 1e-12);
        // Trunk hidden: max(0.151, 0.1 + 0.051) = 0.151.
        let nl = predict(&d, Prefetch::NextLayer, &m).unwrap();
        assert!((nl.s_per_token - 0.151).abs() < 1e-12);
        assert!((nl.stall_s_per_token - 0.051).abs() < 1e-12);
        // Oracle: only the rows stall: max(0.151, 0.101).
        let or = predict(&d, Prefetch::Oracle, &m).unwrap();
        assert!((or.s_per_token - 0.151).abs() < 1e-12);
        // Compute-bound: 0.3 s compute, next-layer → 0.3 + 0.051.
        let slow = TimeModel {
            compute_s_per_token: 0.3,
            ..m
        };
        let nl = predict(&d, Prefetch::NextLayer, &slow).unwrap();
        assert!((nl.s_per_token - 0.351).abs() < 1e-12);
        assert!(DecodeBytes::per_token(&SimCounts::default(), 0).is_none());
        let bad = TimeModel {
            bytes_per_s: 0.0,
            ..m
        };
        assert!(predict(&d, Prefetch::None, &bad).is_none());
    }
}
