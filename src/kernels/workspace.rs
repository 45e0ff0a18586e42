//! Scratch memory of the kernels, held by the caller so a product allocates nothing.
//!
//! A [`Workspace`] has one region the whole call uses (the batched products' input
//! panel in group-major order, MXFP4's permuted input vector, MLA attention's
//! transposed queries and `[positions, heads]` scores) and one region per
//! participant of [`Par`](super::Par) (the decoded weight rows and partial sums of
//! the batched products), sliced by the participant index of
//! [`Par::for_ranges_on`](super::Par::for_ranges_on). The sizing functions below
//! ([`product_floats`], [`attend_floats`]) are the exact lengths a call uses at
//! most, so the model's arena ([`crate::engine::arena`]) can reserve them once and plan
//! exactly what it holds. A call that needs more than the workspace holds grows it
//! (and the caller sees the larger [`Workspace::bytes`]); results never depend on
//! the workspace's size or contents (every element a kernel reads it wrote first
//! in the same call).

use std::ops::Range;

/// f32 elements of workspace a product of `xs: [n, cols]` with any `[rows, cols]`
/// matrix uses at most (`n` counted as at least 1), as `(shared, per participant)`:
/// shared `n·(cols + 16)` — the batched products' inputs in group-major order with
/// the padded row stride of `kernels::matmul` (`32·⌊cols/32⌋ + 16 ≤ cols + 16`),
/// the scalar MXFP4 path's permuted inputs (`n·cols`) or the MXFP4 matvec's
/// permuted input (`cols`); per participant
/// `ROW_BLOCK·(cols + 16) + ROW_BLOCK·32·n + ROW_BLOCK·⌈cols/32⌉` — one `matmul::ROW_BLOCK`-row decoded weight
/// panel, the 32-lane partial sums of its rows × `n` tokens and its MXFP4 half
/// scales (the scalar paths' one decoded row and its scales fit in the panel).
///
/// Monotone in `cols` and `n`, so the widest input and the largest `n` of a forward
/// bound every product of it.
pub fn product_floats(cols: usize, n: usize) -> (usize, usize) {
    let n = n.max(1);
    let rb = super::matmul::ROW_BLOCK;
    (
        n * (cols + 16),
        rb * (cols + 16) + rb * 32 * n + rb * cols.div_ceil(32),
    )
}

/// f32 elements of shared workspace [`super::attend_latent_heads`] uses for
/// `len` cached positions, latent rank `r`, rope dim `dr` and `heads` heads:
/// `hp·(r + dr + len + 2)` with `hp = 8·⌈heads/8⌉` (queries transposed `[r+dr, hp]`,
/// scores `[len, hp]`, running max and sum `[hp]` each); the scalar path uses
/// `len` of it. Grows with `len`: size it from the largest context.
pub fn attend_floats(len: usize, r: usize, dr: usize, heads: usize) -> usize {
    heads.div_ceil(8) * 8 * (r + dr + len + 2)
}

/// The kernels' scratch: a shared region and one region per participant.
#[derive(Debug, Default)]
pub struct Workspace {
    shared: Vec<f32>,
    per: Vec<f32>,
    /// f32 per participant region.
    stride: usize,
}

impl Workspace {
    /// A workspace reserving `shared` f32 and `threads` participant regions of
    /// `per_thread` f32 each (`Vec::with_capacity`: virtual memory until used).
    pub fn with_capacity(shared: usize, per_thread: usize, threads: usize) -> Workspace {
        Workspace {
            shared: Vec::with_capacity(shared),
            per: Vec::with_capacity(per_thread * threads.max(1)),
            stride: per_thread,
        }
    }

    /// Bytes reserved (capacities × 4).
    pub fn bytes(&self) -> u64 {
        (self.shared.capacity() + self.per.capacity()) as u64 * 4
    }

    /// The shared region with at least `len` elements (grown only when the
    /// workspace is smaller; contents unspecified).
    pub(crate) fn shared(&mut self, len: usize) -> &mut [f32] {
        if self.shared.len() < len {
            self.shared.resize(len, 0.0);
        }
        &mut self.shared[..len]
    }

    /// The shared region of `shared` elements and `threads` participant regions of
    /// `per` elements each (grown only when smaller).
    pub(crate) fn split(
        &mut self,
        shared: usize,
        per: usize,
        threads: usize,
    ) -> (&mut [f32], PerThread) {
        if self.stride < per {
            self.stride = per;
        }
        let need = self.stride * threads.max(1);
        if self.per.len() < need {
            self.per.resize(need, 0.0);
        }
        let stride = self.stride;
        let p = PerThread {
            ptr: self.per.as_mut_ptr(),
            len: need,
            stride,
            use_len: per,
        };
        (self.shared(shared), p)
    }
}

/// The participant regions of one call (see [`Workspace`]).
#[derive(Clone, Copy)]
pub(crate) struct PerThread {
    ptr: *mut f32,
    len: usize,
    stride: usize,
    use_len: usize,
}

// SAFETY: each participant touches only its own region, see `PerThread::get`.
unsafe impl Send for PerThread {}
unsafe impl Sync for PerThread {}

impl PerThread {
    /// Participant `who`'s region (`use_len` f32).
    ///
    /// # Safety
    /// At most one live view per `who` (the participant index of
    /// [`super::Par::for_ranges_on`] is unique among parts running at once).
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn get(&self, who: usize) -> &mut [f32] {
        let r: Range<usize> = who * self.stride..who * self.stride + self.use_len;
        assert!(
            r.end <= self.len,
            "workspace: participant {who} out of range"
        );
        std::slice::from_raw_parts_mut(self.ptr.add(r.start), r.len())
    }
}

#[cfg(test)]
mod tests {
    use crate::kernels::Par;

    /// Every participant index is below the thread count and never shared by two
    /// parts running at the same time.
    #[test]
    fn participants_are_unique_while_running() {
        use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
        for t in 1..5 {
            let par = Par::new(t);
            let busy: Vec<AtomicBool> = (0..t).map(|_| AtomicBool::new(false)).collect();
            for _ in 0..50 {
                par.for_ranges_on(4096, 16, 1 << 20, 0, &|who, _r| {
                    assert!(who < t);
                    assert!(!busy[who].swap(true, SeqCst), "participant {who} shared");
                    std::hint::black_box((0..2000).sum::<u64>());
                    busy[who].store(false, SeqCst);
                });
            }
        }
    }
}
