//! llama-bench's field names beside memdial's own in every row, so a sweep's
//! `results.csv` reads like `llama-bench -o csv` for the fields both have (names and
//! meanings from llama.cpp's `tools/llama-bench`: `n_prompt`, `n_gen`, `avg_ts`,
//! `stddev_ts`, `load_mode`, `n_depth`).

use serde::{Deserialize, Serialize};

use memdial::engine::metrics::RunMetrics;
use memdial::io::IoMode;

/// The llama-bench columns of one run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LlamaBench {
    /// Prompt tokens (llama-bench `n_prompt`).
    #[serde(default)]
    pub n_prompt: Option<u64>,
    /// Generated tokens (llama-bench `n_gen`).
    #[serde(default)]
    pub n_gen: Option<u64>,
    /// Mean tokens/s over the run's decode steps, each step one sample of 1 token
    /// (llama-bench `avg_ts`: the mean of n_tokens / t over its samples).
    #[serde(default)]
    pub avg_ts: Option<f64>,
    /// Sample standard deviation (n − 1) of the same tokens/s samples (llama-bench
    /// `stddev_ts`); empty with fewer than two decode steps.
    #[serde(default)]
    pub stddev_ts: Option<f64>,
    /// The IO mode in llama.cpp's load-mode names (llama-bench `load_mode`): `mmap`,
    /// `none` (buffered reads), `dio` (direct IO).
    #[serde(default)]
    pub load_mode: Option<String>,
    /// Context tokens before the prompt (llama-bench `n_depth`, memdial's
    /// `depth_tokens`).
    #[serde(default)]
    pub n_depth: Option<u64>,
}

/// llama.cpp's load-mode name of IO mode `io`.
pub fn load_mode(io: IoMode) -> &'static str {
    match io {
        IoMode::Mmap => "mmap",
        IoMode::Buffered => "none",
        IoMode::Direct => "dio",
    }
}

impl LlamaBench {
    /// The columns of a run at `io` with metrics `m`.
    pub fn of(m: &RunMetrics, io: IoMode) -> LlamaBench {
        let ts: Vec<f64> = m
            .decode_s_per_token
            .iter()
            .filter(|s| **s > 0.0 && s.is_finite())
            .map(|s| 1.0 / s)
            .collect();
        let n = ts.len() as f64;
        let avg = (!ts.is_empty()).then(|| ts.iter().sum::<f64>() / n);
        let sd = avg
            .filter(|_| ts.len() > 1)
            .map(|a| (ts.iter().map(|x| (x - a) * (x - a)).sum::<f64>() / (n - 1.0)).sqrt());
        LlamaBench {
            n_prompt: m.prompt_tokens,
            n_gen: m.generated_tokens,
            avg_ts: avg,
            stddev_ts: sd,
            load_mode: Some(load_mode(io).into()),
            n_depth: m.depth_tokens,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Steps of 0.5 s and 0.25 s: 2 and 4 tokens/s, mean 3, sample sd √2 (by hand).
    #[test]
    fn avg_and_stddev_of_per_step_rates() {
        let m = RunMetrics {
            prompt_tokens: Some(5),
            generated_tokens: Some(3),
            decode_s_per_token: vec![0.5, 0.25],
            ..Default::default()
        };
        let b = LlamaBench::of(&m, IoMode::Buffered);
        assert_eq!((b.n_prompt, b.n_gen), (Some(5), Some(3)));
        assert_eq!(b.avg_ts, Some(3.0));
        assert!((b.stddev_ts.unwrap() - 2f64.sqrt()).abs() < 1e-12);
        assert_eq!(b.load_mode.as_deref(), Some("none"));
    }
}
