//! Token selection from logits: greedy (argmax) or seeded temperature / top-p sampling.
//!
//! Deterministic: greedy ties go to the lowest id; sampling uses a SplitMix64
//! stream seeded by the user, sorts candidates by (probability desc, id asc) and
//! computes probabilities in f64.

#![warn(missing_docs)]

/// Sampling settings. `temperature <= 0` means greedy.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SamplerConfig {
    /// Softmax temperature; ≤ 0 selects greedy decoding.
    pub temperature: f32,
    /// Nucleus mass in (0, 1]; 1 disables the cut.
    pub top_p: f32,
    /// RNG seed (same seed + logits → same tokens).
    pub seed: u64,
}

impl Default for SamplerConfig {
    fn default() -> Self {
        SamplerConfig {
            temperature: 0.0,
            top_p: 1.0,
            seed: 0,
        }
    }
}

use crate::util::rng::SplitMix64;

/// Index of the largest logit (NaN sorts lowest via `total_cmp` ordering of the
/// comparison below; ties → lowest id).
pub fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0usize;
    for (i, v) in logits.iter().enumerate() {
        if v.total_cmp(&logits[best]) == std::cmp::Ordering::Greater && !v.is_nan() {
            best = i;
        }
    }
    best as u32
}

/// A stateful sampler (the RNG advances once per sampled token).
#[derive(Debug, Clone)]
pub struct Sampler {
    /// Settings.
    pub cfg: SamplerConfig,
    rng: SplitMix64,
}

impl Sampler {
    /// A sampler seeded with `cfg.seed`.
    pub fn new(cfg: SamplerConfig) -> Self {
        Sampler {
            cfg,
            rng: SplitMix64::new(cfg.seed),
        }
    }

    /// Picks the next token from `logits: [vocab]`.
    ///
    /// Greedy when `temperature <= 0`; otherwise `p ∝ exp((l − max)/T)`, keep the
    /// smallest prefix of the (p desc, id asc) order whose mass reaches `top_p`,
    /// renormalise and draw one uniform number.
    pub fn sample(&mut self, logits: &[f32]) -> u32 {
        if self.cfg.temperature <= 0.0 {
            return argmax(logits);
        }
        let t = self.cfg.temperature as f64;
        let m = logits
            .iter()
            .filter(|v| !v.is_nan())
            .fold(f32::NEG_INFINITY, |a, &b| a.max(b)) as f64;
        let mut cand: Vec<(f64, u32)> = logits
            .iter()
            .enumerate()
            .map(|(i, &l)| {
                let p = if l.is_nan() {
                    0.0
                } else {
                    ((l as f64 - m) / t).exp()
                };
                (p, i as u32)
            })
            .collect();
        let total: f64 = cand.iter().map(|c| c.0).sum();
        cand.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        let top_p = (self.cfg.top_p as f64).clamp(0.0, 1.0);
        let mut keep = cand.len();
        if top_p < 1.0 {
            let mut acc = 0.0;
            for (i, c) in cand.iter().enumerate() {
                acc += c.0 / total;
                if acc >= top_p {
                    keep = i + 1;
                    break;
                }
            }
        }
        let cand = &cand[..keep.max(1)];
        let mass: f64 = cand.iter().map(|c| c.0).sum();
        let u = self.rng.next_f64() * mass;
        let mut acc = 0.0;
        for c in cand {
            acc += c.0;
            if u < acc {
                return c.1;
            }
        }
        cand[cand.len() - 1].1
    }
}
