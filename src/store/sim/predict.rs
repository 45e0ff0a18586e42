//! Predicted decode seconds per token from a replay's decode bytes: the time model of
//! `memdial simulate` and of a sweep given a trace (docs/simulate.md, "Predicted
//! s/token").
//!
//! Two read rates: `rT` for trunk reads (attention, dense and shared-expert groups,
//! `lm_head` blocks: one group at a time, as the store reads them), `rE` for routed
//! experts and embedding rows (a layer's top-k queued at once). Compute takes `c`
//! seconds per token with every weight resident, of which the share `s` runs after the
//! router (the routed experts' products) and `c_pre = (1 − s) c` before it. Per
//! decoded token, with `T` the trunk bytes, `E` the routed-expert bytes and `R` the
//! embedding rows:
//!
//! - `none`: nothing is read ahead, the forward waits for every read:
//!   `c + T / rT + (E + R) / rE`;
//! - `next-layer`: the next trunk group is read while the current layer computes up to
//!   its router; the layer's experts are queued after it and the device serves one read
//!   stream, so only the compute before the router hides trunk reads, and of it only
//!   the share `f` that runs in streamed layers (a read ahead is issued on a streamed
//!   group's first use; pinned layers' compute runs alone):
//!   `max(T / rT, f c_pre) + (1 − f) c_pre + (E + R) / rE + s c`;
//! - `lookahead` and `oracle`: as `next-layer`, and the guessed experts (the look-ahead
//!   recall `ρ`; all for `oracle`) are read ahead with the trunk:
//!   `max(T / rT + ρ E / rE, f c_pre) + (1 − f) c_pre + ((1 − ρ) E + R) / rE + s c`.
//!
//! With `s = 0`, `f = 1` and `rT = rE` this is the one-rate model `max(B / bw, c + (E + R) / bw)`.
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
    /// Trunk read rate, bytes per second (> 0): one trunk group in flight.
    pub trunk_bytes_per_s: f64,
    /// Routed-expert (and embedding-row) read rate, bytes per second (> 0): a layer's
    /// selection queued at once.
    pub expert_bytes_per_s: f64,
    /// Compute seconds per decoded token with every weight resident (≥ 0).
    pub compute_s_per_token: f64,
    /// Share of that compute after the router (the routed experts' products), [0, 1].
    pub expert_compute_share: f64,
}

impl TimeModel {
    /// One rate for every read and no compute after the router (the one-rate model).
    pub fn one_rate(bytes_per_s: f64, compute_s_per_token: f64) -> TimeModel {
        TimeModel {
            trunk_bytes_per_s: bytes_per_s,
            expert_bytes_per_s: bytes_per_s,
            compute_s_per_token,
            expert_compute_share: 0.0,
        }
    }
}

/// The prediction for one replay's decode tokens.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Predicted {
    /// Device seconds per token: `T / rT + (E + R) / rE`.
    pub io_s_per_token: f64,
    /// Seconds per token the forward waits for reads it could not overlap.
    pub stall_s_per_token: f64,
    /// The part of the stall before each layer's router (the trunk groups, and
    /// experts guessed ahead): what the engine counts as `io_wait_trunk_s_per_token`.
    pub trunk_wait_s_per_token: f64,
    /// The part after the router (the selected experts not read ahead, embedding rows):
    /// the engine's `io_wait_expert_s_per_token` plus its embedding-row wait.
    pub expert_wait_s_per_token: f64,
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
    /// Share of the compute that runs while a streamed trunk group is in use, [0, 1]:
    /// the streamed groups' bytes ÷ all trunk groups' bytes of the plan (compute taken
    /// as proportional to the weights it reads). A prefetch is issued on a streamed
    /// group's first use, so compute in pinned layers hides no read. `None`: 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub streamed_compute_share: Option<f64>,
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
            streamed_compute_share: None,
        })
    }
}

/// The prediction for `b` under `prefetch`. `None` when a rate is not finite and
/// positive, the compute not finite and ≥ 0, or the share outside [0, 1].
pub fn predict(b: &DecodeBytes, prefetch: Prefetch, m: &TimeModel) -> Option<Predicted> {
    let rate_ok = |r: f64| r.is_finite() && r > 0.0;
    let compute_ok = m.compute_s_per_token.is_finite() && m.compute_s_per_token >= 0.0;
    let share_ok = (0.0..=1.0).contains(&m.expert_compute_share);
    if !(rate_ok(m.trunk_bytes_per_s) && rate_ok(m.expert_bytes_per_s) && compute_ok && share_ok) {
        return None;
    }
    let trunk = (b.bytes - b.expert_bytes - b.embedding_bytes).max(0.0) / m.trunk_bytes_per_s;
    let experts = b.expert_bytes / m.expert_bytes_per_s;
    let rows = b.embedding_bytes / m.expert_bytes_per_s;
    let io = trunk + experts + rows;
    let c = m.compute_s_per_token;
    let post = m.expert_compute_share * c;
    let pre_all = c - post;
    // Only compute in streamed layers overlaps a read ahead; the rest runs alone.
    let f = b.streamed_compute_share.unwrap_or(1.0).clamp(0.0, 1.0);
    let pre = f * pre_all;
    let alone = pre_all - pre;
    let recall = match prefetch {
        Prefetch::None | Prefetch::NextLayer => 0.0,
        Prefetch::Oracle => 1.0,
        Prefetch::Lookahead => b.lookahead_recall.unwrap_or(0.0),
    };
    let (before, after, s) = match prefetch {
        Prefetch::None => (trunk, experts + rows, c + io),
        _ => {
            let ahead = trunk + recall * experts;
            let behind = (1.0 - recall) * experts + rows;
            let hidden_wait = (ahead - pre).max(0.0);
            (hidden_wait, behind, ahead.max(pre) + alone + behind + post)
        }
    };
    Some(Predicted {
        io_s_per_token: io,
        stall_s_per_token: before + after,
        trunk_wait_s_per_token: before,
        expert_wait_s_per_token: after,
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
        let m = TimeModel::one_rate(1e9, 0.1);
        let d = counts(200_000_000, 100_000_000, 2_000_000);
        let none = predict(&d, Prefetch::None, &m).unwrap();
        // 151 MB/token → 0.151 s of IO, serial with compute.
        assert!((none.io_s_per_token - 0.151).abs() < 1e-12);
        assert!((none.s_per_token - 0.251).abs() < 1e-12);
        // Trunk hidden: max(0.1, 0.1) + 0.051 = 0.151.
        let nl = predict(&d, Prefetch::NextLayer, &m).unwrap();
        assert!((nl.s_per_token - 0.151).abs() < 1e-12);
        assert!((nl.stall_s_per_token - 0.051).abs() < 1e-12);
        // Oracle: experts read ahead too: max(0.1 + 0.05, 0.1) + 0.001 = 0.151.
        let or = predict(&d, Prefetch::Oracle, &m).unwrap();
        assert!((or.s_per_token - 0.151).abs() < 1e-12);
        // Compute-bound: 0.3 s compute, next-layer → max(0.1, 0.3) + 0.051.
        let slow = TimeModel {
            compute_s_per_token: 0.3,
            ..m
        };
        let nl = predict(&d, Prefetch::NextLayer, &slow).unwrap();
        assert!((nl.s_per_token - 0.351).abs() < 1e-12);
        assert!(DecodeBytes::per_token(&SimCounts::default(), 0).is_none());
        let bad = TimeModel {
            trunk_bytes_per_s: 0.0,
            ..m
        };
        assert!(predict(&d, Prefetch::None, &bad).is_none());
        let bad = TimeModel {
            expert_compute_share: 1.5,
            ..m
        };
        assert!(predict(&d, Prefetch::None, &bad).is_none());
    }

    #[test]
    fn split_rates_and_compute_after_the_router_by_hand() {
        // Per token: 100 MB trunk, 50 MB experts, 1 MB rows; trunk at 2 GB/s, experts
        // and rows at 1 GB/s; 0.08 s compute, a quarter of it after the router.
        //   trunk 100e6 / 2e9 = 0.050 s; experts 50e6 / 1e9 = 0.050 s; rows 0.001 s.
        //   none: 0.08 + 0.050 + 0.050 + 0.001 = 0.181.
        //   next-layer: c_pre = 0.06, post = 0.02:
        //     max(0.050, 0.06) + 0.051 + 0.02 = 0.131; stall 0 + 0.051.
        //   lookahead, recall 0.6: ahead 0.050 + 0.030 = 0.080 > c_pre:
        //     0.080 + (0.020 + 0.001) + 0.02 = 0.121; stall (0.080 − 0.06) + 0.021 = 0.041.
        let m = TimeModel {
            trunk_bytes_per_s: 2e9,
            expert_bytes_per_s: 1e9,
            compute_s_per_token: 0.08,
            expert_compute_share: 0.25,
        };
        let mut d = counts(200_000_000, 100_000_000, 2_000_000);
        let none = predict(&d, Prefetch::None, &m).unwrap();
        assert!((none.io_s_per_token - 0.101).abs() < 1e-12);
        assert!((none.s_per_token - 0.181).abs() < 1e-12);
        // none waits 0.050 before the routers and 0.051 after them.
        assert!((none.trunk_wait_s_per_token - 0.050).abs() < 1e-12);
        assert!((none.expert_wait_s_per_token - 0.051).abs() < 1e-12);
        let nl = predict(&d, Prefetch::NextLayer, &m).unwrap();
        assert!((nl.s_per_token - 0.131).abs() < 1e-12);
        assert!((nl.stall_s_per_token - 0.051).abs() < 1e-12);
        // The trunk read (0.050) hides behind 0.06 s of compute before the router.
        assert_eq!(nl.trunk_wait_s_per_token, 0.0);
        assert!((nl.expert_wait_s_per_token - 0.051).abs() < 1e-12);
        d.lookahead_recall = Some(0.6);
        let la = predict(&d, Prefetch::Lookahead, &m).unwrap();
        assert!((la.s_per_token - 0.121).abs() < 1e-12);
        assert!((la.stall_s_per_token - 0.041).abs() < 1e-12);
        assert!((la.trunk_wait_s_per_token - 0.020).abs() < 1e-12);
        assert!((la.expert_wait_s_per_token - 0.021).abs() < 1e-12);
        // Half the trunk pinned (f = 0.5): of c_pre = 0.06 only 0.03 overlaps the
        // 0.050 trunk read, the other 0.03 runs alone:
        //   next-layer: max(0.050, 0.03) + 0.03 + 0.051 + 0.02 = 0.151;
        //   waits: 0.050 − 0.03 = 0.020 before the routers, 0.051 after.
        d.lookahead_recall = None;
        d.streamed_compute_share = Some(0.5);
        let half = predict(&d, Prefetch::NextLayer, &m).unwrap();
        assert!((half.s_per_token - 0.151).abs() < 1e-12);
        assert!((half.trunk_wait_s_per_token - 0.020).abs() < 1e-12);
        // `none` overlaps nothing whatever the share.
        let none = predict(&d, Prefetch::None, &m).unwrap();
        assert!((none.s_per_token - 0.181).abs() < 1e-12);
    }
}
