//! Per-op timer of the forward pass (`memdial run --profile-ops`): wall time and
//! call count per operation, summed over every layer of a kind.
//!
//! Off by default. When off, a timed scope costs one relaxed atomic load and a
//! branch ([`scope`] returns an empty guard); when on, two `Instant::now()` calls
//! and two relaxed atomic adds. Timing never touches the data, so output is the
//! same either way. Times are of the calling (compute) thread: a kernel split over
//! the thread pool is timed once, from its start to its last thread's end.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

/// An operation of the forward pass (`kind/op` in the report).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(usize)]
pub enum Op {
    /// Embedding row lookup.
    Embed,
    /// Norm weights decoded, RMSNorms and AttnRes mixing around the sub-layers.
    Norms,
    /// KDA `q/k/v/f_a/f_b/b/g` projections.
    KdaProj,
    /// KDA short conv + delta rule + output norm and gate (the recurrence).
    KdaRecur,
    /// KDA `o_proj`.
    KdaOut,
    /// MLA query, `kv_a` and gate projections.
    MlaProj,
    /// MLA absorbed attention over the latent cache (incl. `W_UK`/`W_UV`).
    MlaAttend,
    /// MLA `o_proj`.
    MlaOut,
    /// gpt-oss attention: projections, RoPE, KV cache, attention with sinks, `o_proj`.
    GqaAttend,
    /// Dense MLP (gate, up, act, down).
    DenseMlp,
    /// MoE router (gate matvec + selection) and latent down projection.
    Router,
    /// Routed experts: fetching each expert's weights from the store.
    ExpertFetch,
    /// Routed experts: gate, up, act, down and the weighted sum.
    ExpertMlp,
    /// Latent norm + up projection + shared experts.
    SharedLatent,
    /// Final norm and `lm_head`.
    LmHead,
}

/// Every op, in report order.
pub const OPS: [Op; 15] = [
    Op::Embed,
    Op::Norms,
    Op::KdaProj,
    Op::KdaRecur,
    Op::KdaOut,
    Op::MlaProj,
    Op::MlaAttend,
    Op::MlaOut,
    Op::GqaAttend,
    Op::DenseMlp,
    Op::Router,
    Op::ExpertFetch,
    Op::ExpertMlp,
    Op::SharedLatent,
    Op::LmHead,
];

impl Op {
    /// `kind/op` name in the report.
    pub fn name(self) -> &'static str {
        match self {
            Op::Embed => "global/embed",
            Op::Norms => "all/norms+attn_res",
            Op::KdaProj => "kda/projections",
            Op::KdaRecur => "kda/conv+delta_rule",
            Op::KdaOut => "kda/o_proj",
            Op::MlaProj => "mla/projections",
            Op::MlaAttend => "mla/attend(latent)",
            Op::MlaOut => "mla/o_proj",
            Op::GqaAttend => "gqa/attention+sinks",
            Op::DenseMlp => "dense/mlp",
            Op::Router => "moe/router+latent_down",
            Op::ExpertFetch => "moe/expert_fetch",
            Op::ExpertMlp => "moe/routed_experts",
            Op::SharedLatent => "moe/shared+latent_up",
            Op::LmHead => "global/final_norm+lm_head",
        }
    }
}

static ON: AtomicBool = AtomicBool::new(false);
static NANOS: [AtomicU64; OPS.len()] = [const { AtomicU64::new(0) }; OPS.len()];
static CALLS: [AtomicU64; OPS.len()] = [const { AtomicU64::new(0) }; OPS.len()];

/// Turns the timer on or off (process-wide).
pub fn enable(on: bool) {
    ON.store(on, Ordering::Relaxed);
}

/// Whether the timer is on.
pub fn enabled() -> bool {
    ON.load(Ordering::Relaxed)
}

/// Zeroes every total (e.g. after prefill, to profile decode only).
pub fn reset() {
    for i in 0..OPS.len() {
        NANOS[i].store(0, Ordering::Relaxed);
        CALLS[i].store(0, Ordering::Relaxed);
    }
}

/// A timed scope: adds its wall time to `op` when dropped (nothing when off).
#[must_use]
pub struct Scope(Option<(Op, Instant)>);

/// Starts timing `op` until the returned guard is dropped.
#[inline]
pub fn scope(op: Op) -> Scope {
    if ON.load(Ordering::Relaxed) {
        Scope(Some((op, Instant::now())))
    } else {
        Scope(None)
    }
}

impl Drop for Scope {
    #[inline]
    fn drop(&mut self) {
        if let Some((op, t)) = self.0 {
            let i = op as usize;
            NANOS[i].fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
            CALLS[i].fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// `(op, seconds, calls)` per op, in report order.
pub fn totals() -> Vec<(Op, f64, u64)> {
    OPS.iter()
        .map(|&op| {
            let i = op as usize;
            (
                op,
                NANOS[i].load(Ordering::Relaxed) as f64 * 1e-9,
                CALLS[i].load(Ordering::Relaxed),
            )
        })
        .collect()
}

/// The totals as a table: op, seconds, share of the timed total, calls, and
/// milliseconds per `per` (e.g. per decoded token).
pub fn report(per: usize, per_what: &str) -> String {
    let t = totals();
    let sum: f64 = t.iter().map(|x| x.1).sum();
    let per = per.max(1) as f64;
    let mut s = format!(
        "{:<28} {:>9} {:>7} {:>8} {:>12}\n",
        "op",
        "total s",
        "share",
        "calls",
        format!("ms/{per_what}")
    );
    for (op, secs, calls) in t.iter().filter(|x| x.2 > 0) {
        s += &format!(
            "{:<28} {:>9.4} {:>6.1}% {:>8} {:>12.3}\n",
            op.name(),
            secs,
            100.0 * secs / sum.max(1e-12),
            calls,
            1e3 * secs / per
        );
    }
    s += &format!(
        "{:<28} {:>9.4} {:>6.1}% {:>8} {:>12.3}\n",
        "timed total",
        sum,
        100.0,
        "",
        1e3 * sum / per
    );
    s
}
