//! Tiled prefill matmuls (AVX2, AVX-512F): `ys[t, r] = Σ_c W[r, c]·xs[t, c]`
//! for `n` token vectors, each weight block decoded once and reused across
//! all `n` tokens, bit-identical to the matching matvec per token.
//!
//! # Why the order is unchanged
//! The matvec orders ([`super::dense`], [`super::mxfp4`]) keep one output's
//! accumulator as independent lane groups: BF16/F32 has four 8-lane groups
//! `k` (columns `32b + 8k + l`), MXFP4 two (`lo`: bytes 0–7 of each block,
//! `hi`: bytes 8–15). Each group is a sequential sum over blocks `b` in
//! increasing order, and the groups only meet in the final halving tree. So
//! the groups can be computed in separate passes or side by side in one
//! wider register (AVX-512: two groups per 16-lane register), and a pass can
//! be cut into column chunks with the accumulator stored and reloaded in
//! between, without changing a single rounding. Products keep the matvec's
//! operand order (`w·x`, then `q·S` for MXFP4); no FMA.
//!
//! # Layout and blocking
//! * Each thread owns whole output rows (split as the matvecs do). Per
//!   [`ROW_BLOCK`] rows it decodes the weights once into an f32 panel
//!   (BF16 → f32 exact; MXFP4 → doubled E2M1 codes plus the block's half
//!   scale) and runs register tiles over it; the inputs are copied once per
//!   call into the tiles' order.
//! * AVX2 ([`avx2`]): "group-major" order (per token or row, group `k`'s lanes
//!   of every block contiguous), tiles of 2 rows × 6 tokens (dense) or 2 rows ×
//!   3 tokens (MXFP4; 2 × 4 where the scale is folded, [`fold`]) over
//!   [`COL_CHUNK`]-block column chunks (in practice whole rows up to 8192
//!   columns: smaller chunks, 32–128 blocks, measured slower on Zen 3 and Zen 4,
//!   benches/README.md).
//! * AVX-512F ([`avx512`]): tiles of 4 rows × ≤ 6 tokens (dense) or 2 rows × ≤ 8
//!   tokens (MXFP4) whose weights and inputs are each packed as one sequential
//!   stream (`[block][row or token][lanes]`): the hardware prefetchers follow
//!   two streams, not one per row and token (measured in isolation: a 4 × 6
//!   tile over per-row and per-token streams ran at 60–65 % of the packed
//!   tile's speed once its data left L1). The next row block's raw weights are
//!   prefetched into L2 while the current one is multiplied.
//! * Columns past the last whole 32-block (dense only) are added after the
//!   tree, in order, as the matvec does.

use super::dense::{bf16_le, DenseMat, PAR_MIN_ELEMS};
use super::mxfp4::{Mxfp4Mat, HALF_SCALE};
use super::par::OutPtr;
use super::workspace::{product_floats, Workspace};
use super::{Isa, Par};

/// Output rows decoded into one f32 panel.
pub const ROW_BLOCK: usize = 8;

/// 32-column blocks per column chunk of the AVX2 tiles (the accumulators are
/// reloaded once per chunk; 256 = whole rows for the models' widths, the
/// fastest size measured).
pub const COL_CHUNK: usize = 256;

/// Row stride (f32) of the panel and the group-major inputs: `32·nb` plus one
/// cache line, so rows whose byte length is a multiple of 4 KiB (e.g. 7168
/// or 2048 columns) do not all map to the same L1 sets.
fn row_stride(nb: usize) -> usize {
    nb * 32 + 16
}

/// Dense (BF16 when `bf16`, else F32) tiled matmul; shapes already checked
/// by the caller: `w: [rows, cols]`, `xs: [n, cols]`, `ys: [n, rows]`;
/// scratch in `ws` ([`product_floats`]).
pub(crate) fn dense(
    par: &Par,
    ws: &mut Workspace,
    bf16: bool,
    w: DenseMat<'_>,
    xs: &[f32],
    n: usize,
    ys: &mut [f32],
) {
    let DenseMat {
        bytes: w,
        rows,
        cols,
    } = w;
    let es = if bf16 { 2 } else { 4 };
    let nb = cols / 32;
    let m = nb * 32;
    let ms = row_stride(nb);
    let (shared, per) = product_floats(cols, n);
    let (xk, slots) = ws.split(shared, per, par.threads());
    let xk = &mut xk[..n * ms];
    let z = par.isa() == Isa::Avx512;
    if z {
        avx512::pack_dense_inputs(xs, cols, n, xk);
    } else {
        // xk[t][k][b][8] = xs[t][32b + 8k ..][..8]
        for t in 0..n {
            let x = &xs[t * cols..(t + 1) * cols];
            let d = &mut xk[t * ms..t * ms + m];
            for b in 0..nb {
                for k in 0..4 {
                    d[(k * nb + b) * 8..][..8].copy_from_slice(&x[32 * b + 8 * k..][..8]);
                }
            }
        }
    }
    let weight = |r: usize, c: usize| -> f32 {
        let p = (r * cols + c) * es;
        if bf16 {
            bf16_le([w[p], w[p + 1]])
        } else {
            f32::from_le_bytes([w[p], w[p + 1], w[p + 2], w[p + 3]])
        }
    };
    let xk = &*xk;
    let out = OutPtr::new(ys);
    par.for_ranges_on(rows, 16, rows * cols * n, PAR_MIN_ELEMS, &|who, range| {
        // SAFETY: one live view per participant (Par::for_ranges_on).
        let mine = unsafe { slots.get(who) };
        let (panel, part) = mine.split_at_mut(ROW_BLOCK * ms);
        let part = &mut part[..ROW_BLOCK * n * 32];
        let mut r0 = range.start;
        while r0 < range.end {
            let nr = (range.end - r0).min(ROW_BLOCK);
            let next = r0 + nr..(r0 + 2 * nr).min(range.end);
            if z {
                // SAFETY: Par selects AVX-512 only on CPUs that have it; lengths as
                // asserted inside.
                unsafe { avx512::dense_rows(bf16, w, cols, r0..r0 + nr, next, xk, n, panel, part) };
            } else {
                for i in 0..nr {
                    let row = &w[(r0 + i) * cols * es..][..m * es];
                    // SAFETY: AVX2 (caller checks the ISA); lengths as asserted inside.
                    unsafe { avx2::decode_dense(bf16, row, nb, &mut panel[i * ms..i * ms + m]) };
                }
                part[..nr * n * 32].fill(0.0);
                // SAFETY: Par selects AVX2 only on CPUs that have it.
                unsafe { avx2::dense_block(panel, nb, nr, xk, n, part) };
            }
            for t in 0..n {
                // SAFETY: rows r0 .. r0 + nr belong to this thread only.
                let o = unsafe { out.slice(t * rows + r0..t * rows + r0 + nr) };
                for (i, y) in o.iter_mut().enumerate() {
                    // SAFETY: AVX2 (this module runs on AVX2 and AVX-512 CPUs only).
                    let mut s = unsafe { avx2::reduce32(&part[(i * n + t) * 32..][..32]) };
                    for c in m..cols {
                        s += weight(r0 + i, c) * xs[t * cols + c];
                    }
                    *y = s;
                }
            }
            r0 += nr;
        }
    });
}

/// MXFP4 tiled matmul; shapes already checked by the caller (`cols` a multiple
/// of 32): `xs: [n, cols]` in natural order, scratch in `ws` ([`product_floats`]).
pub(crate) fn mxfp4(
    par: &Par,
    ws: &mut Workspace,
    w: Mxfp4Mat<'_>,
    xs: &[f32],
    n: usize,
    ys: &mut [f32],
) {
    let Mxfp4Mat {
        packed,
        scales,
        rows,
        cols,
    } = w;
    let nb = cols / 32;
    let ms = row_stride(nb);
    let (shared, per) = product_floats(cols, n);
    let (xk, slots) = ws.split(shared, per, par.threads());
    let xk = &mut xk[..n * ms];
    // With xq = x in the matvec's permuted block order ([x0, x2, …, x30, x1, …, x31]
    // per block): xk[t][k][b][16] = [xq[32b + 8k ..][..8] | xq[32b + 16 + 8k ..][..8]],
    // i.e. the even then the odd elements 16k .. 16k+16 of block b.
    let z = par.isa() == Isa::Avx512;
    let xr = fold::input_range(xs);
    if z {
        // SAFETY: Par selects AVX-512 only on CPUs that have it.
        unsafe { avx512::pack_mxfp4_inputs(xs, cols, n, xk) };
    }
    for t in (0..n).filter(|_| !z) {
        let x = &xs[t * cols..(t + 1) * cols];
        let d = &mut xk[t * ms..t * ms + cols];
        for b in 0..nb {
            for k in 0..2 {
                let o = (k * nb + b) * 16;
                for i in 0..8 {
                    d[o + i] = x[32 * b + 16 * k + 2 * i];
                    d[o + 8 + i] = x[32 * b + 16 * k + 2 * i + 1];
                }
            }
        }
    }
    let xk = &*xk;
    let (pb, sb) = (cols / 2, nb);
    let out = OutPtr::new(ys);
    par.for_ranges_on(rows, 16, rows * cols * n, PAR_MIN_ELEMS, &|who, range| {
        // SAFETY: one live view per participant (Par::for_ranges_on).
        let mine = unsafe { slots.get(who) };
        let (panel, rest) = mine.split_at_mut(ROW_BLOCK * ms);
        let (sp, part) = rest.split_at_mut(ROW_BLOCK * nb);
        let part = &mut part[..ROW_BLOCK * n * 16];
        let mut r0 = range.start;
        while r0 < range.end {
            let nr = (range.end - r0).min(ROW_BLOCK);
            let next = r0 + nr..(r0 + 2 * nr).min(range.end);
            if z {
                // SAFETY: Par selects AVX-512 only on CPUs that have it; lengths as
                // asserted inside.
                unsafe {
                    avx512::mxfp4_rows(
                        packed,
                        scales,
                        cols,
                        r0..r0 + nr,
                        next,
                        xk,
                        xr,
                        n,
                        panel,
                        sp,
                        part,
                    )
                };
            } else {
                for i in 0..nr {
                    let r = r0 + i;
                    for (dst, &s) in sp[i * nb..(i + 1) * nb]
                        .iter_mut()
                        .zip(&scales[r * sb..(r + 1) * sb])
                    {
                        *dst = HALF_SCALE[s as usize];
                    }
                }
                let fold = fold::fold_scales(xr, scales[r0 * sb..(r0 + nr) * sb].iter().copied());
                for i in 0..nr {
                    let r = r0 + i;
                    let (p, d) = (
                        &packed[r * pb..(r + 1) * pb],
                        &mut panel[i * ms..i * ms + cols],
                    );
                    let s = fold.then(|| &sp[i * nb..(i + 1) * nb]);
                    // SAFETY: AVX2 (caller checks the ISA); lengths as asserted inside.
                    unsafe { avx2::decode_mxfp4(p, nb, s, d) };
                }
                part[..nr * n * 16].fill(0.0);
                // SAFETY: Par selects AVX2 only on CPUs that have it (caller checks the ISA).
                unsafe { avx2::mxfp4_block(panel, sp, nb, nr, xk, n, part, fold) };
            }
            for t in 0..n {
                // SAFETY: rows r0 .. r0 + nr belong to this thread only.
                let o = unsafe { out.slice(t * rows + r0..t * rows + r0 + nr) };
                for (i, y) in o.iter_mut().enumerate() {
                    // SAFETY: AVX2 (this module runs on AVX2 and AVX-512 CPUs only).
                    *y = unsafe { avx2::reduce16(&part[(i * n + t) * 16..][..16]) };
                }
            }
            r0 += nr;
        }
    });
}

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
mod fold;
