//! gpt-oss attention (transformers `GptOssAttention` + `eager_attention_forward`):
//! grouped-query heads with q/k/v/o biases, RoPE, a learned sink logit per head
//! in the softmax denominator, and full or sliding-window causal masks.
//!
//! Per token, in order: rotate its query and key, store key and value in the
//! layer's cache (a sliding layer's ring overwrites the position `W` back, which
//! no later query sees), then attend over the cached positions it may see. So a
//! prefill of `n` tokens does what `n` decode steps do, operation for operation.

use crate::format::config::GptOssConfig;
use crate::model::state::KvCache;

/// Attention of one token's query heads over its cache.
///
/// `q: [heads · head_dim]` (rotated), `cache` holding positions `..=pos`, `sinks:
/// [heads]`, `out: [heads · head_dim]`. Query head `h` reads key/value head
/// `h / (heads / kv_heads)` (`repeat_kv`). Visible positions: `0..=pos` (full) or
/// `pos+1−W ..= pos` (sliding, `W` = window). For each head: scores
/// `s_j = (q·k_j)·head_dim^−½` in position order, `m = max(s, sink)`,
/// `p_j = e^(s_j−m) / (Σ_j e^(s_j−m) + e^(sink−m))` (sum in position order, sink
/// last), `out = Σ_j p_j·v_j` in position order. `scores` is scratch.
pub fn attend(
    g: &GptOssConfig,
    cache: &KvCache,
    pos: usize,
    q: &[f32],
    sinks: &[f32],
    scores: &mut Vec<f32>,
    out: &mut [f32],
) {
    let hd = g.head_dim;
    let kvd = g.kv_dim();
    let rep = g.num_attention_heads / g.num_key_value_heads;
    let first = match cache.window {
        Some(w) => (pos + 1).saturating_sub(w),
        None => 0,
    };
    let scale = 1.0 / (hd as f32).sqrt();
    for h in 0..g.num_attention_heads {
        let kh = h / rep;
        let qh = &q[h * hd..(h + 1) * hd];
        scores.clear();
        for p in first..=pos {
            let s = cache.slot(p) * kvd + kh * hd;
            let k = &cache.k[s..s + hd];
            let dot: f32 = qh.iter().zip(k).map(|(a, b)| a * b).sum();
            scores.push(dot * scale);
        }
        let sink = sinks[h];
        let m = scores.iter().fold(sink, |a, &b| a.max(b));
        let mut denom = 0f32;
        for s in scores.iter_mut() {
            *s = (*s - m).exp();
            denom += *s;
        }
        denom += (sink - m).exp();
        let o = &mut out[h * hd..(h + 1) * hd];
        o.fill(0.0);
        for (j, p) in (first..=pos).enumerate() {
            let w = scores[j] / denom;
            let s = cache.slot(p) * kvd + kh * hd;
            for (oc, vc) in o.iter_mut().zip(&cache.v[s..s + hd]) {
                *oc += w * vc;
            }
        }
    }
}

/// Stores one position's key and value (`[kv_dim]` each) in `cache`.
///
/// Errors: the cache does not hold exactly the positions before `pos` (a state
/// used out of order).
pub fn store(cache: &mut KvCache, pos: usize, k: &[f32], v: &[f32]) -> anyhow::Result<()> {
    let kvd = k.len();
    let slot = cache.slot(pos);
    let held = cache.k.len() / kvd.max(1);
    let expect = match cache.window {
        Some(w) => pos.min(w),
        None => pos,
    };
    if held != expect {
        anyhow::bail!("KV cache holds {held} positions, expected {expect} before position {pos}");
    }
    if slot == held {
        cache.k.extend_from_slice(k);
        cache.v.extend_from_slice(v);
    } else {
        cache.k[slot * kvd..(slot + 1) * kvd].copy_from_slice(k);
        cache.v[slot * kvd..(slot + 1) * kvd].copy_from_slice(v);
    }
    Ok(())
}
