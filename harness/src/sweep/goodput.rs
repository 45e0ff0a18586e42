//! Goodput under a service-level objective (the spec's `slo = { ttft_s, tpot_s }`):
//! the share and the rate of a run's requests that met both targets, vLLM's
//! `benchmark_serving` definition.
//!
//! A request meets the SLO when its time to first token is at most `ttft_s` and its
//! time per output token — `(e2e latency − TTFT) / (output tokens − 1)`, 0 for a
//! request of one token — is at most `tpot_s`. Per run: `goodput_fraction` = requests
//! meeting it ÷ requests; `goodput_requests_per_s` = requests meeting it ÷ the run's
//! duration (the first request sent to the last finished; an ordinary run of
//! concurrency 1: its TTFT plus its decode steps).

use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};

/// The spec's `slo` table: latency targets a request must meet to count as goodput.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Slo {
    /// Most seconds from the request sent to its first token.
    pub ttft_s: f64,
    /// Most seconds per output token after the first.
    pub tpot_s: f64,
}

impl Slo {
    /// Errors: a target that is not a finite number above 0.
    pub fn check(&self) -> Result<()> {
        for (k, v) in [("ttft_s", self.ttft_s), ("tpot_s", self.tpot_s)] {
            if !(v.is_finite() && v > 0.0) {
                bail!("slo.{k} = {v}: each target must be a number of seconds above 0");
            }
        }
        Ok(())
    }

    /// `r` met both targets.
    pub fn met(&self, r: &Timing) -> bool {
        r.ttft_s <= self.ttft_s && r.tpot_s() <= self.tpot_s
    }
}

/// One finished request's timings as its client saw them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Timing {
    /// Request sent to its first token, seconds.
    pub ttft_s: f64,
    /// Request sent to its last token, seconds.
    pub e2e_s: f64,
    /// Tokens it generated.
    pub output_tokens: usize,
}

impl Timing {
    /// Time per output token after the first, seconds: `(e2e − ttft) / (tokens − 1)`,
    /// 0 for a request of one token (as vLLM's benchmark counts it).
    pub fn tpot_s(&self) -> f64 {
        if self.output_tokens > 1 {
            (self.e2e_s - self.ttft_s) / (self.output_tokens - 1) as f64
        } else {
            0.0
        }
    }
}

/// (`goodput_fraction`, `goodput_requests_per_s`) of `requests` over a run of
/// `duration_s` seconds; `None`s without requests, and a `None` rate without a
/// positive duration.
pub fn goodput(slo: &Slo, requests: &[Timing], duration_s: f64) -> (Option<f64>, Option<f64>) {
    if requests.is_empty() {
        return (None, None);
    }
    let good = requests.iter().filter(|r| slo.met(r)).count() as f64;
    let rate = (duration_s > 0.0).then(|| good / duration_s);
    (Some(good / requests.len() as f64), rate)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A hand-built log of four requests over 10 s under ttft ≤ 0.5 s, tpot ≤ 0.125 s
    /// (binary fractions, so ties are exact): A (ttft 0.25, e2e 1.375, 10 tokens:
    /// tpot 1.125 / 9 = 0.125, on the limit) meets both; B (ttft 0.625) misses TTFT;
    /// C (ttft 0.25, e2e 2.25, 11 tokens: tpot 2 / 10 = 0.2) misses TPOT; D (ttft 0.5,
    /// on the limit, one token: tpot 0) meets both. 2 of 4 = 0.5; 2 / 10 s = 0.2/s.
    #[test]
    fn share_and_rate_of_a_hand_built_log() {
        let slo = Slo {
            ttft_s: 0.5,
            tpot_s: 0.125,
        };
        let t = |ttft_s, e2e_s, output_tokens| Timing {
            ttft_s,
            e2e_s,
            output_tokens,
        };
        let log = [
            t(0.25, 1.375, 10),
            t(0.625, 1.0, 10),
            t(0.25, 2.25, 11),
            t(0.5, 0.5, 1),
        ];
        assert_eq!(log[0].tpot_s(), 0.125);
        assert_eq!(log[2].tpot_s(), 0.2);
        assert_eq!(log[3].tpot_s(), 0.0);
        let met: Vec<bool> = log.iter().map(|r| slo.met(r)).collect();
        assert_eq!(met, [true, false, false, true]);
        assert_eq!(goodput(&slo, &log, 10.0), (Some(0.5), Some(0.2)));
        assert_eq!(goodput(&slo, &[], 10.0), (None, None));
        assert_eq!(goodput(&slo, &log, 0.0), (Some(0.5), None));
    }

    #[test]
    fn targets_must_be_positive() {
        let bad = Slo {
            ttft_s: 0.0,
            tpot_s: 0.1,
        };
        let e = bad.check().unwrap_err().to_string();
        assert!(e.contains("slo.ttft_s"), "{e}");
        assert!(Slo {
            ttft_s: 1.0,
            tpot_s: f64::NAN
        }
        .check()
        .is_err());
    }
}
