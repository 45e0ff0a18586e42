//! The context a run decodes at (`memdial run --depth N`, the sweep's `depth` axis):
//! N deterministic token ids prefilled before the prompt, so decode is timed with N
//! positions already in the cache (llama-bench's `-d` / `n_depth`).

use anyhow::Result;

use crate::model::{LogitsMode, Model, State};
use crate::util::rng::SplitMix64;

/// Seed of the depth context's id stream.
pub const DEPTH_SEED: u64 = 0;

/// The `n` ids of the depth context for a vocabulary of `vocab_size` ids: id `k` is
/// output `k` of [`SplitMix64`] seeded with [`DEPTH_SEED`], modulo `vocab_size`
/// (the same ids on every machine, for every prompt). Empty when `n` or
/// `vocab_size` is 0.
pub fn context_ids(n: usize, vocab_size: usize) -> Vec<u32> {
    if vocab_size == 0 {
        return vec![];
    }
    let mut r = SplitMix64::new(DEPTH_SEED);
    (0..n)
        .map(|_| (r.next_u64() % vocab_size as u64) as u32)
        .collect()
}

/// Prefills `ids` into `state` in forwards of at most `chunk` tokens (0: all at once),
/// computing no logits; returns the seconds it took. The state then holds
/// `ids.len()` more positions, and what is decoded after it is what would be
/// decoded after `ids` ++ the prompt (prefill is bit-identical for any chunking).
///
/// Errors: the forward's (e.g. more positions than the state holds).
pub fn prefill_context(model: &Model, state: &mut State, ids: &[u32], chunk: usize) -> Result<f64> {
    let t0 = std::time::Instant::now();
    let chunk = if chunk == 0 { ids.len().max(1) } else { chunk };
    for c in ids.chunks(chunk) {
        model.forward_logits(state, c, LogitsMode::None)?;
    }
    Ok(t0.elapsed().as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Vigna's splitmix64.c with state 0 gives 0xE220A8397B1DCDAF, 0x6E789E6AA1B965F4
    /// first: modulo 2048 (the low 11 bits) that is 0x5AF = 1455 and 0x5F4 = 1524.
    #[test]
    fn ids_are_the_splitmix_stream_modulo_the_vocabulary() {
        assert_eq!(context_ids(2, 2048), vec![1455, 1524]);
        assert_eq!(context_ids(0, 2048), Vec::<u32>::new());
        assert_eq!(context_ids(3, 0), Vec::<u32>::new());
        assert!(context_ids(1000, 7).iter().all(|&i| i < 7));
    }
}
