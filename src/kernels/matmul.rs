//! Tiled prefill matmuls (AVX2): `ys[t, r] = Σ_c W[r, c]·xs[t, c]` for `n`
//! token vectors, each weight block decoded once and reused across all `n`
//! tokens, bit-identical to the matching matvec per token.
//!
//! # Why the order is unchanged
//! The matvec orders ([`super::dense`], [`super::mxfp4`]) keep one output's
//! accumulator as independent lane groups: BF16/F32 has four 8-lane groups
//! `k` (columns `32b + 8k + l`), MXFP4 two (`lo`: bytes 0–7 of each block,
//! `hi`: bytes 8–15). Each group is a sequential sum over blocks `b` in
//! increasing order, and the groups only meet in the final halving tree. So
//! the groups can be computed in separate passes, and a pass can be cut into
//! column chunks with the accumulator stored and reloaded in between,
//! without changing a single rounding. Products keep the matvec's operand
//! order (`w·x`, then `q·S` for MXFP4); no FMA.
//!
//! # Layout and blocking
//! * Inputs are copied once per call into "group-major" order: per token,
//!   group `k`'s lanes of every block contiguous (`[k][b][8]` dense,
//!   `[k][b][even 8 | odd 8]` MXFP4, from the matvec's permuted block order).
//! * Each thread owns whole output rows (split as the matvecs do). Per
//!   [`ROW_BLOCK`] rows it decodes the weights once into an f32 panel in the
//!   same group-major order (BF16 → f32 exact; MXFP4 → doubled E2M1 codes
//!   plus the block's half scale), then runs register tiles of 2 rows ×
//!   6 tokens (dense) or 2 rows × 3 tokens (MXFP4; 2 × 6 where AVX-512VL gives
//!   256-bit code 32 registers) over [`COL_CHUNK`]-block
//!   column chunks: the tile's inputs stay in L1 while the panel streams
//!   from L2.
//! * Columns past the last whole 32-block (dense only) are added after the
//!   tree, in order, as the matvec does.

use super::dense::{reduce32, reduce8, PAR_MIN_ELEMS};
use super::mxfp4::HALF_SCALE;
use super::par::OutPtr;
use super::workspace::{product_floats, Workspace};
use super::{Isa, Par};

/// Output rows decoded into one f32 panel.
pub const ROW_BLOCK: usize = 8;

/// 32-column blocks per column chunk (the accumulators are reloaded once per
/// chunk).
pub const COL_CHUNK: usize = 256;

/// Row stride (f32) of the panel and the group-major inputs: `32·nb` plus one
/// cache line, so rows whose byte length is a multiple of 4 KiB (e.g. 7168
/// or 2048 columns) do not all map to the same L1 sets.
fn row_stride(nb: usize) -> usize {
    nb * 32 + 16
}

/// Dense (BF16 when `bf16`, else F32) tiled matmul; shapes already checked
/// by the caller: `w: [rows, cols]` bytes, `xs: [n, cols]`, `ys: [n, rows]`;
/// scratch in `ws` ([`product_floats`]).
#[allow(clippy::too_many_arguments)]
pub(crate) fn dense(
    par: &Par,
    ws: &mut Workspace,
    bf16: bool,
    w: &[u8],
    rows: usize,
    cols: usize,
    xs: &[f32],
    n: usize,
    ys: &mut [f32],
) {
    let es = if bf16 { 2 } else { 4 };
    let nb = cols / 32;
    let m = nb * 32;
    let ms = row_stride(nb);
    let (shared, per) = product_floats(cols, n);
    let (xk, slots) = ws.split(shared, per, par.threads());
    let xk = &mut xk[..n * ms];
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
    let weight = |r: usize, c: usize| -> f32 {
        let p = (r * cols + c) * es;
        if bf16 {
            f32::from_bits((u16::from_le_bytes([w[p], w[p + 1]]) as u32) << 16)
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
            for i in 0..nr {
                let row = &w[(r0 + i) * cols * es..][..m * es];
                // SAFETY: AVX2 (caller checks the ISA); lengths as asserted inside.
                unsafe { avx2::decode_dense(bf16, row, nb, &mut panel[i * ms..i * ms + m]) };
            }
            part[..nr * n * 32].fill(0.0);
            // SAFETY: Par selects AVX2 only on CPUs that have it (caller checks the ISA).
            unsafe { avx2::dense_block(panel, nb, nr, xk, n, part) };
            for i in 0..nr {
                for t in 0..n {
                    let a: &[f32; 32] = part[(i * n + t) * 32..][..32].try_into().expect("32");
                    let mut s = reduce32(a);
                    for c in m..cols {
                        s += weight(r0 + i, c) * xs[t * cols + c];
                    }
                    // SAFETY: row r0 + i belongs to this thread only.
                    unsafe { out.slice(t * rows + r0 + i..t * rows + r0 + i + 1)[0] = s };
                }
            }
            r0 += nr;
        }
    });
}

/// MXFP4 tiled matmul; shapes already checked by the caller (`cols` a multiple
/// of 32): `xs: [n, cols]` in natural order, scratch in `ws` ([`product_floats`]).
#[allow(clippy::too_many_arguments)]
pub(crate) fn mxfp4(
    par: &Par,
    ws: &mut Workspace,
    packed: &[u8],
    scales: &[u8],
    rows: usize,
    cols: usize,
    xs: &[f32],
    n: usize,
    ys: &mut [f32],
) {
    let nb = cols / 32;
    let ms = row_stride(nb);
    let (shared, per) = product_floats(cols, n);
    let (xk, slots) = ws.split(shared, per, par.threads());
    let xk = &mut xk[..n * ms];
    // With xq = x in the matvec's permuted block order ([x0, x2, …, x30, x1, …, x31]
    // per block): xk[t][k][b][16] = [xq[32b + 8k ..][..8] | xq[32b + 16 + 8k ..][..8]],
    // i.e. the even then the odd elements 16k .. 16k+16 of block b.
    for t in 0..n {
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
    // Wider tiles where AVX-512VL gives 256-bit code 32 vector registers (the same
    // per-(row, token) order, so bit-identical). The dense kernel keeps its AVX2
    // tile: 2 × 8 and 2 × 10 measured slower than 2 × 6 (more streams than L1 holds).
    let wide = par.isa() == Isa::Avx512 && std::arch::is_x86_feature_detected!("avx512vl");
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
            for i in 0..nr {
                let r = r0 + i;
                // SAFETY: AVX2 (caller checks the ISA); lengths as asserted inside.
                unsafe {
                    avx2::decode_mxfp4(
                        &packed[r * pb..(r + 1) * pb],
                        nb,
                        &mut panel[i * ms..i * ms + cols],
                    )
                };
                for (dst, &s) in sp[i * nb..(i + 1) * nb]
                    .iter_mut()
                    .zip(&scales[r * sb..(r + 1) * sb])
                {
                    *dst = HALF_SCALE[s as usize];
                }
            }
            part[..nr * n * 16].fill(0.0);
            // SAFETY: Par selects AVX2 only on CPUs that have it (caller checks the ISA).
            unsafe {
                if wide {
                    avx2::mxfp4_block_wide(panel, sp, nb, nr, xk, n, part)
                } else {
                    avx2::mxfp4_block(panel, sp, nb, nr, xk, n, part)
                }
            };
            for i in 0..nr {
                for t in 0..n {
                    let a = &part[(i * n + t) * 16..][..16];
                    let c: [f32; 8] = std::array::from_fn(|l| a[l] + a[8 + l]);
                    let s = reduce8(&c);
                    // SAFETY: row r0 + i belongs to this thread only.
                    unsafe { out.slice(t * rows + r0 + i..t * rows + r0 + i + 1)[0] = s };
                }
            }
            r0 += nr;
        }
    });
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::super::mxfp4::E2M1_X2;
    use super::COL_CHUNK;
    use std::arch::x86_64::*;

    /// One dense row (`nb` whole blocks of BF16 or F32 bytes) into the
    /// group-major f32 panel row `d: [4][nb][8]` (BF16 → f32 is exact).
    ///
    /// # Safety
    /// AVX2.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn decode_dense(bf16: bool, row: &[u8], nb: usize, d: &mut [f32]) {
        let es = if bf16 { 2 } else { 4 };
        assert!(row.len() >= nb * 32 * es && d.len() == nb * 32);
        let (rp, dp) = (row.as_ptr(), d.as_mut_ptr());
        for b in 0..nb {
            for k in 0..4 {
                let src = rp.add((32 * b + 8 * k) * es);
                let v = if bf16 {
                    let h = _mm_loadu_si128(src as *const __m128i);
                    _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16))
                } else {
                    _mm256_loadu_ps(src as *const f32)
                };
                _mm256_storeu_ps(dp.add((k * nb + b) * 8), v);
            }
        }
    }

    /// One MXFP4 row (`nb` blocks of 16 packed bytes) into the group-major
    /// panel row `d: [2][nb][even 8 | odd 8]` of doubled E2M1 codes (the same
    /// values as the matvec decoders).
    ///
    /// # Safety
    /// AVX2.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn decode_mxfp4(p: &[u8], nb: usize, d: &mut [f32]) {
        assert!(p.len() == nb * 16 && d.len() == nb * 32);
        let lut = _mm_loadu_si128(E2M1_X2.as_ptr() as *const __m128i);
        let mask = _mm_set1_epi8(0x0F);
        let (pp, dp) = (p.as_ptr(), d.as_mut_ptr());
        let cvt = |v: __m128i| _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v));
        for b in 0..nb {
            let bytes = _mm_loadu_si128(pp.add(16 * b) as *const __m128i);
            let ve = _mm_shuffle_epi8(lut, _mm_and_si128(bytes, mask));
            let vo = _mm_shuffle_epi8(lut, _mm_and_si128(_mm_srli_epi16(bytes, 4), mask));
            let lo = dp.add(b * 16);
            let hi = dp.add((nb + b) * 16);
            _mm256_storeu_ps(lo, cvt(ve));
            _mm256_storeu_ps(lo.add(8), cvt(vo));
            _mm256_storeu_ps(hi, cvt(_mm_srli_si128(ve, 8)));
            _mm256_storeu_ps(hi.add(8), cvt(_mm_srli_si128(vo, 8)));
        }
    }

    /// Tokens per dense register tile.
    const DT: usize = 6;
    /// Tokens per MXFP4 register tile.
    const MT: usize = 3;
    /// Tokens per MXFP4 register tile with AVX-512VL's 32 registers.
    const MT_WIDE: usize = 6;

    /// All tiles of one dense row panel: `panel: [nr][4][nb][8]`,
    /// `xk: [n][4][nb][8]`, `part: [nr][n][4][8]` (accumulated into).
    ///
    /// # Safety
    /// AVX2; shapes as stated.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn dense_block(
        panel: &[f32],
        nb: usize,
        nr: usize,
        xk: &[f32],
        n: usize,
        part: &mut [f32],
    ) {
        let m = super::row_stride(nb);
        assert!(panel.len() >= nr * m && xk.len() == n * m && part.len() >= nr * n * 32);
        let (pp, xp, ap) = (panel.as_ptr(), xk.as_ptr(), part.as_mut_ptr());
        let mut c0 = 0;
        while c0 < nb {
            let c1 = (c0 + COL_CHUNK).min(nb);
            let mut t0 = 0;
            while t0 < n {
                let nt = (n - t0).min(DT);
                for k in 0..4 {
                    let mut i0 = 0;
                    while i0 < nr {
                        let ni = (nr - i0).min(2);
                        let a = (pp, xp, ap, nb, n, k, i0, t0, c0, c1);
                        match (ni, nt) {
                            (2, 6) => dense_tile::<2, 6>(a),
                            (2, 5) => dense_tile::<2, 5>(a),
                            (_, 6) => dense_tile::<1, 6>(a),
                            (_, 5) => dense_tile::<1, 5>(a),
                            (2, 4) => dense_tile::<2, 4>(a),
                            (2, 3) => dense_tile::<2, 3>(a),
                            (2, 2) => dense_tile::<2, 2>(a),
                            (2, _) => dense_tile::<2, 1>(a),
                            (_, 4) => dense_tile::<1, 4>(a),
                            (_, 3) => dense_tile::<1, 3>(a),
                            (_, 2) => dense_tile::<1, 2>(a),
                            _ => dense_tile::<1, 1>(a),
                        }
                        i0 += ni;
                    }
                }
                t0 += nt;
            }
            c0 = c1;
        }
    }

    /// (panel, xk, part, nb, n, group k, first row, first token, block range).
    type TileArgs = (
        *const f32,
        *const f32,
        *mut f32,
        usize,
        usize,
        usize,
        usize,
        usize,
        usize,
        usize,
    );

    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn dense_tile<const R: usize, const T: usize>(a: TileArgs) {
        let (pp, xp, ap, nb, n, k, i0, t0, c0, c1) = a;
        let m = super::row_stride(nb);
        let accp = |r: usize, t: usize| ap.add(((i0 + r) * n + t0 + t) * 32 + 8 * k);
        let mut acc = [[_mm256_setzero_ps(); T]; R];
        for (r, ar) in acc.iter_mut().enumerate() {
            for (t, a) in ar.iter_mut().enumerate() {
                *a = _mm256_loadu_ps(accp(r, t));
            }
        }
        let wrow: [*const f32; R] = std::array::from_fn(|r| pp.add((i0 + r) * m + k * nb * 8));
        let xrow: [*const f32; T] = std::array::from_fn(|t| xp.add((t0 + t) * m + k * nb * 8));
        for b in c0..c1 {
            let w: [__m256; R] = std::array::from_fn(|r| _mm256_loadu_ps(wrow[r].add(8 * b)));
            for t in 0..T {
                let x = _mm256_loadu_ps(xrow[t].add(8 * b));
                for r in 0..R {
                    acc[r][t] = _mm256_add_ps(acc[r][t], _mm256_mul_ps(w[r], x));
                }
            }
        }
        for (r, ar) in acc.iter().enumerate() {
            for (t, a) in ar.iter().enumerate() {
                _mm256_storeu_ps(accp(r, t), *a);
            }
        }
    }

    /// All tiles of one MXFP4 row panel: `panel: [nr][2][nb][16]` doubled
    /// codes, `sp: [nr][nb]` half scales, `xk: [n][2][nb][16]`,
    /// `part: [nr][n][2][8]` (accumulated into), in 2-row × [`MT`]-token tiles
    /// (AVX2's 16 vector registers).
    ///
    /// # Safety
    /// AVX2; shapes as stated.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn mxfp4_block(
        panel: &[f32],
        sp: &[f32],
        nb: usize,
        nr: usize,
        xk: &[f32],
        n: usize,
        part: &mut [f32],
    ) {
        mxfp4_tiles::<MT>(panel, sp, nb, nr, xk, n, part)
    }

    /// [`mxfp4_block`] in 2-row × [`MT_WIDE`]-token tiles: the same per-(row, token)
    /// order, so bit-identical, with the 32 vector registers AVX-512VL gives to
    /// 256-bit code (12 accumulators).
    ///
    /// # Safety
    /// AVX2, AVX-512F and AVX-512VL; shapes as stated.
    #[target_feature(enable = "avx2,avx512f,avx512vl")]
    pub(super) unsafe fn mxfp4_block_wide(
        panel: &[f32],
        sp: &[f32],
        nb: usize,
        nr: usize,
        xk: &[f32],
        n: usize,
        part: &mut [f32],
    ) {
        mxfp4_tiles::<MT_WIDE>(panel, sp, nb, nr, xk, n, part)
    }

    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn mxfp4_tiles<const TT: usize>(
        panel: &[f32],
        sp: &[f32],
        nb: usize,
        nr: usize,
        xk: &[f32],
        n: usize,
        part: &mut [f32],
    ) {
        let m = super::row_stride(nb);
        assert!(
            panel.len() >= nr * m
                && sp.len() >= nr * nb
                && xk.len() == n * m
                && part.len() >= nr * n * 16
        );
        let (pp, sq, xp, ap) = (panel.as_ptr(), sp.as_ptr(), xk.as_ptr(), part.as_mut_ptr());
        let mut c0 = 0;
        while c0 < nb {
            let c1 = (c0 + COL_CHUNK).min(nb);
            let mut t0 = 0;
            while t0 < n {
                let nt = (n - t0).min(TT);
                for k in 0..2 {
                    let mut i0 = 0;
                    while i0 < nr {
                        let ni = (nr - i0).min(2);
                        let a = (pp, xp, ap, nb, n, k, i0, t0, c0, c1);
                        match (ni, nt) {
                            (2, 6) => mx_tile::<2, 6>(a, sq),
                            (2, 5) => mx_tile::<2, 5>(a, sq),
                            (2, 4) => mx_tile::<2, 4>(a, sq),
                            (_, 6) => mx_tile::<1, 6>(a, sq),
                            (_, 5) => mx_tile::<1, 5>(a, sq),
                            (_, 4) => mx_tile::<1, 4>(a, sq),
                            (2, 3) => mx_tile::<2, 3>(a, sq),
                            (2, 2) => mx_tile::<2, 2>(a, sq),
                            (2, _) => mx_tile::<2, 1>(a, sq),
                            (_, 3) => mx_tile::<1, 3>(a, sq),
                            (_, 2) => mx_tile::<1, 2>(a, sq),
                            _ => mx_tile::<1, 1>(a, sq),
                        }
                        i0 += ni;
                    }
                }
                t0 += nt;
            }
            c0 = c1;
        }
    }

    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn mx_tile<const R: usize, const T: usize>(a: TileArgs, sq: *const f32) {
        let (pp, xp, ap, nb, n, k, i0, t0, c0, c1) = a;
        let m = super::row_stride(nb);
        let accp = |r: usize, t: usize| ap.add(((i0 + r) * n + t0 + t) * 16 + 8 * k);
        let mut acc = [[_mm256_setzero_ps(); T]; R];
        for (r, ar) in acc.iter_mut().enumerate() {
            for (t, a) in ar.iter_mut().enumerate() {
                *a = _mm256_loadu_ps(accp(r, t));
            }
        }
        let wrow: [*const f32; R] = std::array::from_fn(|r| pp.add((i0 + r) * m + k * nb * 16));
        let srow: [*const f32; R] = std::array::from_fn(|r| sq.add((i0 + r) * nb));
        let xrow: [*const f32; T] = std::array::from_fn(|t| xp.add((t0 + t) * m + k * nb * 16));
        for b in c0..c1 {
            let we: [__m256; R] = std::array::from_fn(|r| _mm256_loadu_ps(wrow[r].add(16 * b)));
            let wo: [__m256; R] = std::array::from_fn(|r| _mm256_loadu_ps(wrow[r].add(16 * b + 8)));
            let s: [__m256; R] = std::array::from_fn(|r| _mm256_broadcast_ss(&*srow[r].add(b)));
            for t in 0..T {
                let xe = _mm256_loadu_ps(xrow[t].add(16 * b));
                let xo = _mm256_loadu_ps(xrow[t].add(16 * b + 8));
                for r in 0..R {
                    let q = _mm256_add_ps(_mm256_mul_ps(we[r], xe), _mm256_mul_ps(wo[r], xo));
                    acc[r][t] = _mm256_add_ps(acc[r][t], _mm256_mul_ps(q, s[r]));
                }
            }
        }
        for (r, ar) in acc.iter().enumerate() {
            for (t, a) in ar.iter().enumerate() {
                _mm256_storeu_ps(accp(r, t), *a);
            }
        }
    }
}
