//! Predicted decode seconds per token from a replay's decode bytes: the time model of
//! `memdial simulate` and of a sweep given a trace (docs/simulate.md, "Predicted
//! s/token").
//!
//! Two read rates: `rT` for trunk reads (attention, dense and shared-expert groups,
//! `lm_head` blocks: one group at a time, as the store reads them), `rE` for routed
//! experts and embedding rows (a layer's top-k queued at once). Routed experts are
//! read in batches (the records one layer queues at once: its selection minus cache
//! hits, or a look-ahead's uncached guesses); with rates per batch size
//! ([`BatchRates`]) each batch's bytes take its size's rate, and `X` below is
//! `Σ_K E_K / rE(K)`, else `E / rE`. Compute takes `c` seconds per token with every
//! weight resident, of which the share `s` runs after the router (the routed
//! experts' products) and `c_pre = (1 − s) c` before it. Per decoded token, with `T`
//! the trunk bytes, `E` the routed-expert bytes and `R` the embedding rows:
//!
//! - `none`: nothing is read ahead, the forward waits for every read:
//!   `c + T / rT + X + R / rE`;
//! - `next-layer`: the next trunk group is read while the current layer computes up to
//!   its router; the layer's experts are queued after it and the device serves one read
//!   stream, so only the compute before the router hides trunk reads, and of it only
//!   the share `f` that runs in streamed layers (a read ahead is issued on a streamed
//!   group's first use; pinned layers' compute runs alone):
//!   `max(T / rT, f c_pre) + (1 − f) c_pre + X + R / rE + s c`;
//! - `lookahead`: as `next-layer`, its guessed reads (in `E`) credited no overlap:
//!   measured, the wait after the routers was 2–2.5× what crediting them predicted;
//! - `oracle`: as `next-layer`, and the selected experts are read ahead with the trunk:
//!   `max(T / rT + X, f c_pre) + (1 − f) c_pre + R / rE + s c` (not measured against
//!   runs).
//!
//! With `s = 0`, `f = 1`, `rT = rE` and no batch rates this is the one-rate model `max(B / bw, c + (E + R) / bw)`.
//!
//! The model has no page cache: it predicts `direct` IO. For `buffered` and `mmap` a
//! read that hits the page cache costs no device time and a miss costs the kernel's
//! copy or fault on top; neither is modelled, and callers say so rather than fit it.

use serde::{Deserialize, Serialize};

use super::SimCounts;
use crate::store::plan::Prefetch;

/// Routed-expert read rates by batch size: measured `(K, bytes per second)` pairs, K the
/// expert records queued at once (iobench's `experts:K` cells). The rate of a batch of
/// `n` records: the measured rate at `n`; between two measured sizes, linear in `n`;
/// below the smallest or above the largest, that size's rate.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BatchRates {
    /// Ascending K, each once, rates finite and > 0.
    points: Vec<(u32, f64)>,
}

impl BatchRates {
    /// From `(K, bytes per second)` pairs in any order; pairs with K = 0 or a rate that
    /// is not finite and positive are dropped, and of a repeated K the first is kept.
    pub fn new(pairs: impl IntoIterator<Item = (u32, f64)>) -> BatchRates {
        let mut points: Vec<(u32, f64)> = pairs
            .into_iter()
            .filter(|&(k, r)| k > 0 && r.is_finite() && r > 0.0)
            .collect();
        points.sort_by_key(|p| p.0);
        points.dedup_by_key(|p| p.0);
        BatchRates { points }
    }

    /// No measured size.
    pub fn is_empty(&self) -> bool {
        self.points.is_empty()
    }

    /// The measured `(K, bytes per second)` pairs, ascending K.
    pub fn points(&self) -> &[(u32, f64)] {
        &self.points
    }

    /// Read rate of a batch of `records`, bytes per second (`None` without sizes).
    pub fn rate(&self, records: u32) -> Option<f64> {
        let i = self.points.partition_point(|p| p.0 < records);
        match (i.checked_sub(1).map(|j| self.points[j]), self.points.get(i)) {
            (_, Some(&(k, r))) if k == records => Some(r),
            (Some((k0, r0)), Some(&(k1, r1))) => {
                let t = f64::from(records - k0) / f64::from(k1 - k0);
                Some(r0 + t * (r1 - r0))
            }
            (None, Some(&(_, r))) | (Some((_, r)), None) => Some(r),
            (None, None) => None,
        }
    }
}

/// What the time model needs besides the bytes.
#[derive(Debug, Clone, PartialEq)]
pub struct TimeModel {
    /// Trunk read rate, bytes per second (> 0): one trunk group in flight.
    pub trunk_bytes_per_s: f64,
    /// Routed-expert (and embedding-row) read rate, bytes per second (> 0): a layer's
    /// whole selection (top-k records) queued at once.
    pub expert_bytes_per_s: f64,
    /// Routed-expert read rates by batch size (empty: `expert_bytes_per_s` for every
    /// batch).
    pub expert_batch_rates: BatchRates,
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
            expert_batch_rates: BatchRates::default(),
            compute_s_per_token,
            expert_compute_share: 0.0,
        }
    }

    /// Device seconds per token of `b`'s routed-expert reads (`X`): each batch at its
    /// size's rate, bytes outside the batches (and all, without batch rates) at
    /// `expert_bytes_per_s`.
    pub fn expert_read_s(&self, b: &DecodeBytes) -> f64 {
        let mut in_batches = 0.0;
        let mut s = 0.0;
        for x in &b.expert_batches {
            if let Some(r) = self.expert_batch_rates.rate(x.records) {
                in_batches += x.bytes;
                s += x.bytes / r;
            }
        }
        s + (b.expert_bytes - in_batches).max(0.0) / self.expert_bytes_per_s
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

/// One batch size's share of a replay's routed-expert reads, per decoded token.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ExpertBatch {
    /// Expert records queued at once (≥ 1).
    pub records: u32,
    /// Bytes per decoded token read in batches of that size.
    pub bytes: f64,
}

/// A replay's decode bytes per decoded token, by what the time model tells apart.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
    /// `expert_bytes` by the batch size it was read in, ascending (empty: not known,
    /// all at the full-batch rate).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub expert_batches: Vec<ExpertBatch>,
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
            expert_batches: decode
                .expert_batches
                .iter()
                .map(|(&records, &(_, b))| ExpertBatch {
                    records,
                    bytes: b as f64 / n,
                })
                .collect(),
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
    let experts = m.expert_read_s(b);
    let rows = b.embedding_bytes / m.expert_bytes_per_s;
    let io = trunk + experts + rows;
    let c = m.compute_s_per_token;
    let post = m.expert_compute_share * c;
    let pre_all = c - post;
    // Only compute in streamed layers overlaps a read ahead; the rest runs alone.
    let f = b.streamed_compute_share.unwrap_or(1.0).clamp(0.0, 1.0);
    let pre = f * pre_all;
    let alone = pre_all - pre;
    // Look-ahead's guesses are credited no overlap (measured: they did not hide).
    let recall = match prefetch {
        Prefetch::None | Prefetch::NextLayer | Prefetch::Lookahead => 0.0,
        Prefetch::Oracle => 1.0,
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
            ..m.clone()
        };
        let nl = predict(&d, Prefetch::NextLayer, &slow).unwrap();
        assert!((nl.s_per_token - 0.351).abs() < 1e-12);
        assert!(DecodeBytes::per_token(&SimCounts::default(), 0).is_none());
        let bad = TimeModel {
            trunk_bytes_per_s: 0.0,
            ..m.clone()
        };
        assert!(predict(&d, Prefetch::None, &bad).is_none());
        let bad = TimeModel {
            expert_compute_share: 1.5,
            ..m.clone()
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
        //   lookahead, recall 0.6: its guesses are credited no overlap, so it is
        //     next-layer's 0.131, all 0.051 of expert and row wait after the routers.
        let m = TimeModel {
            trunk_bytes_per_s: 2e9,
            expert_bytes_per_s: 1e9,
            expert_batch_rates: BatchRates::default(),
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
        assert!((la.s_per_token - 0.131).abs() < 1e-12);
        assert!((la.stall_s_per_token - 0.051).abs() < 1e-12);
        assert_eq!(la.trunk_wait_s_per_token, 0.0);
        assert!((la.expert_wait_s_per_token - 0.051).abs() < 1e-12);
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

    #[test]
    fn batch_rates_interpolate_linearly_by_hand() {
        // Measured 0.5 GB/s at 1 record, 2.0 at 4, 2.5 at 8; K = 0, NaN and a second
        // K = 4 are dropped.
        let r = BatchRates::new([
            (8, 2.5e9),
            (4, 2.0e9),
            (0, 1e9),
            (2, f64::NAN),
            (1, 0.5e9),
            (4, 9e9),
        ]);
        assert_eq!(r.points(), &[(1, 0.5e9), (4, 2.0e9), (8, 2.5e9)]);
        let near = |k: u32, want: f64| {
            let g = r.rate(k).unwrap();
            assert!((g - want).abs() < 1e-3, "{k}: {g}");
        };
        near(1, 0.5e9);
        // 2: a third of the way from 1 to 4: 0.5 + 1.5 / 3 = 1.0 GB/s; 3: 0.5 + 1.0 = 1.5.
        near(2, 1.0e9);
        near(3, 1.5e9);
        // 6: half way from 4 to 8: 2.0 + 0.5 / 2 = 2.25 GB/s.
        near(6, 2.25e9);
        // Outside the measured sizes: the nearest one's rate.
        near(16, 2.5e9);
        near(0, 0.5e9);
        assert_eq!(BatchRates::default().rate(3), None);
    }

    #[test]
    fn expert_reads_at_their_batch_rates_by_hand() {
        // Per token: 10 MB trunk at 1 GB/s; 3 MB of experts, 1 MB read in batches of 2
        // and 2 MB in batches of 8; batch rates 0.5 GB/s at 1, 1.5 at 3, 2.0 at 8 (the
        // full-batch rate, also `expert_bytes_per_s`); 0.02 s compute, none after the
        // router, every layer streamed.
        //   batches of 2: half way from 1 to 3: 1.0 GB/s → 1e6 / 1e9 = 0.001 s;
        //   batches of 8: 2e6 / 2e9 = 0.001 s; X = 0.002 s (one rate: 3e6 / 2e9 = 0.0015).
        //   none: 0.02 + 0.010 + 0.002 = 0.032; next-layer: max(0.010, 0.02) + 0.002 = 0.022.
        let m = TimeModel {
            trunk_bytes_per_s: 1e9,
            expert_bytes_per_s: 2e9,
            expert_batch_rates: BatchRates::new([(1, 0.5e9), (3, 1.5e9), (8, 2e9)]),
            compute_s_per_token: 0.02,
            expert_compute_share: 0.0,
        };
        let mut d = DecodeBytes {
            bytes: 13e6,
            expert_bytes: 3e6,
            embedding_bytes: 0.0,
            lookahead_recall: None,
            streamed_compute_share: None,
            expert_batches: vec![
                ExpertBatch {
                    records: 2,
                    bytes: 1e6,
                },
                ExpertBatch {
                    records: 8,
                    bytes: 2e6,
                },
            ],
        };
        assert!((m.expert_read_s(&d) - 0.002).abs() < 1e-12);
        let one = TimeModel::one_rate(2e9, 0.02);
        assert!((one.expert_read_s(&d) - 0.0015).abs() < 1e-12);
        let none = predict(&d, Prefetch::None, &m).unwrap();
        assert!((none.s_per_token - 0.032).abs() < 1e-12);
        assert!((none.expert_wait_s_per_token - 0.002).abs() < 1e-12);
        let nl = predict(&d, Prefetch::NextLayer, &m).unwrap();
        assert!((nl.s_per_token - 0.022).abs() < 1e-12);
        // 0.5 MB of expert bytes outside the batches go at the full-batch rate:
        // 0.002 + 0.5e6 / 2e9 = 0.00225 s.
        d.expert_bytes = 3.5e6;
        d.bytes = 13.5e6;
        assert!((m.expert_read_s(&d) - 0.00225).abs() < 1e-12);
    }
}
