//! AVX2 register tiles for [`super`] (8-lane ymm registers, one of the matvec's
//! 8-lane accumulator groups per register).

use super::super::dense::avx2::hsum8;
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
/// values as the matvec decoders), each block times its half scale `s[b]`
/// when `s` is given (a folded row block, [`super::fold`]; exact: a small
/// integer times a power of two).
///
/// # Safety
/// AVX2.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn decode_mxfp4(p: &[u8], nb: usize, s: Option<&[f32]>, d: &mut [f32]) {
    assert!(p.len() == nb * 16 && d.len() == nb * 32 && s.is_none_or(|s| s.len() == nb));
    let lut = _mm_loadu_si128(E2M1_X2.as_ptr() as *const __m128i);
    let mask = _mm_set1_epi8(0x0F);
    let (pp, dp) = (p.as_ptr(), d.as_mut_ptr());
    for b in 0..nb {
        let sc = _mm256_set1_ps(s.map_or(1.0, |s| s[b]));
        let cvt = |v: __m128i| {
            let f = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v));
            if s.is_some() {
                _mm256_mul_ps(f, sc)
            } else {
                f
            }
        };
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

/// The matvec's halving tree over one output's 32 partial sums
/// ([`super::super::dense`] step 2: `(l, l + 16)`, `(l, l + 8)`, then
/// [`super::super::dense::reduce8`]'s order).
///
/// # Safety
/// AVX2.
#[inline]
#[target_feature(enable = "avx2")]
pub(super) unsafe fn reduce32(a: &[f32]) -> f32 {
    assert!(a.len() == 32);
    let p = a.as_ptr();
    let b0 = _mm256_add_ps(_mm256_loadu_ps(p), _mm256_loadu_ps(p.add(16)));
    let b1 = _mm256_add_ps(_mm256_loadu_ps(p.add(8)), _mm256_loadu_ps(p.add(24)));
    hsum8(_mm256_add_ps(b0, b1))
}

/// The MXFP4 matvec's final tree over one output's 16 partial sums
/// (`lo + hi`, then [`super::super::dense::reduce8`]'s order).
///
/// # Safety
/// AVX2.
#[inline]
#[target_feature(enable = "avx2")]
pub(super) unsafe fn reduce16(a: &[f32]) -> f32 {
    assert!(a.len() == 16);
    let p = a.as_ptr();
    hsum8(_mm256_add_ps(_mm256_loadu_ps(p), _mm256_loadu_ps(p.add(8))))
}

/// Tokens per dense register tile.
const DT: usize = 6;
/// Tokens per MXFP4 register tile (2 × 3 accumulators + 4 weights + 2 scales
/// + 2 inputs).
const MT: usize = 3;
/// Tokens per folded MXFP4 register tile (2 × 4 accumulators + 4 weights + 2
/// inputs).
const MT_FOLDED: usize = 4;

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

/// A tile's accumulators, row `r` and token `t` at `accp(r, t)`.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn load_acc<const R: usize, const T: usize>(
    accp: impl Fn(usize, usize) -> *mut f32,
) -> [[__m256; T]; R] {
    std::array::from_fn(|r| std::array::from_fn(|t| _mm256_loadu_ps(accp(r, t))))
}

/// Writes a tile's accumulators back to `accp(r, t)`.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn store_acc<const R: usize, const T: usize>(
    accp: impl Fn(usize, usize) -> *mut f32,
    acc: &[[__m256; T]; R],
) {
    for (r, ar) in acc.iter().enumerate() {
        for (t, a) in ar.iter().enumerate() {
            _mm256_storeu_ps(accp(r, t), *a);
        }
    }
}

#[inline]
#[target_feature(enable = "avx2")]
unsafe fn dense_tile<const R: usize, const T: usize>(a: TileArgs) {
    let (pp, xp, ap, nb, n, k, i0, t0, c0, c1) = a;
    let m = super::row_stride(nb);
    let accp = |r: usize, t: usize| ap.add(((i0 + r) * n + t0 + t) * 32 + 8 * k);
    let mut acc: [[__m256; T]; R] = load_acc(accp);
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
    store_acc(accp, &acc);
}

/// All tiles of one MXFP4 row panel: `panel: [nr][2][nb][16]` doubled
/// codes, `sp: [nr][nb]` half scales, `xk: [n][2][nb][16]`,
/// `part: [nr][n][2][8]` (accumulated into), in 2-row × [`MT`]-token tiles
/// (AVX2's 16 vector registers); when `fold`, the panel already holds the
/// scaled weights `E·S` ([`super::fold`]) and the tiles are 2 × [`MT_FOLDED`].
///
/// # Safety
/// AVX2; shapes as stated.
// Exception: a SIMD inner kernel; its operands are raw panels and ranges the caller
// already sliced, which a struct would only rename.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx2")]
pub(super) unsafe fn mxfp4_block(
    panel: &[f32],
    sp: &[f32],
    nb: usize,
    nr: usize,
    xk: &[f32],
    n: usize,
    part: &mut [f32],
    fold: bool,
) {
    if fold {
        mxfp4_tiles::<MT_FOLDED, true>(panel, sp, nb, nr, xk, n, part)
    } else {
        mxfp4_tiles::<MT, false>(panel, sp, nb, nr, xk, n, part)
    }
}

#[inline]
#[target_feature(enable = "avx2")]
unsafe fn mxfp4_tiles<const TT: usize, const F: bool>(
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
                        (2, 4) => mx_tile::<2, 4, F>(a, sq),
                        (2, 3) => mx_tile::<2, 3, F>(a, sq),
                        (2, 2) => mx_tile::<2, 2, F>(a, sq),
                        (2, _) => mx_tile::<2, 1, F>(a, sq),
                        (_, 4) => mx_tile::<1, 4, F>(a, sq),
                        (_, 3) => mx_tile::<1, 3, F>(a, sq),
                        (_, 2) => mx_tile::<1, 2, F>(a, sq),
                        _ => mx_tile::<1, 1, F>(a, sq),
                    }
                    i0 += ni;
                }
            }
            t0 += nt;
        }
        c0 = c1;
    }
}

/// The matvec's MXFP4 step `acc += (E_e·x_e + E_o·x_o)·S`, or with `S` already in
/// the panel (`FOLDED`) `acc += (E·S)_e·x_e + (E·S)_o·x_o`, bit-identical where
/// [`super::fold::fold_scales`] allows it.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn mx_tile<const R: usize, const T: usize, const FOLDED: bool>(a: TileArgs, sq: *const f32) {
    let (pp, xp, ap, nb, n, k, i0, t0, c0, c1) = a;
    let m = super::row_stride(nb);
    let accp = |r: usize, t: usize| ap.add(((i0 + r) * n + t0 + t) * 16 + 8 * k);
    let mut acc: [[__m256; T]; R] = load_acc(accp);
    let wrow: [*const f32; R] = std::array::from_fn(|r| pp.add((i0 + r) * m + k * nb * 16));
    let srow: [*const f32; R] = std::array::from_fn(|r| sq.add((i0 + r) * nb));
    let xrow: [*const f32; T] = std::array::from_fn(|t| xp.add((t0 + t) * m + k * nb * 16));
    for b in c0..c1 {
        let we: [__m256; R] = std::array::from_fn(|r| _mm256_loadu_ps(wrow[r].add(16 * b)));
        let wo: [__m256; R] = std::array::from_fn(|r| _mm256_loadu_ps(wrow[r].add(16 * b + 8)));
        let s: [__m256; R] = std::array::from_fn(|r| {
            if FOLDED {
                _mm256_setzero_ps()
            } else {
                _mm256_broadcast_ss(&*srow[r].add(b))
            }
        });
        for t in 0..T {
            let xe = _mm256_loadu_ps(xrow[t].add(16 * b));
            let xo = _mm256_loadu_ps(xrow[t].add(16 * b + 8));
            for r in 0..R {
                let q = _mm256_add_ps(_mm256_mul_ps(we[r], xe), _mm256_mul_ps(wo[r], xo));
                let q = if FOLDED { q } else { _mm256_mul_ps(q, s[r]) };
                acc[r][t] = _mm256_add_ps(acc[r][t], q);
            }
        }
    }
    store_acc(accp, &acc);
}
