//! AVX-512F register tiles for [`super`]: a 16-lane zmm register holds two of
//! the matvec's 8-lane accumulator groups side by side (dense: groups `2p` and
//! `2p + 1`, i.e. columns `32b + 16p ..+16`; MXFP4: `lo` and `hi`), so every
//! lane still sums its own column sequence in increasing block order with the
//! matvec's operations: bit-identical, with half the instructions of the AVX2
//! tiles and 32 registers for larger tiles.
//!
//! Layouts (f32; `m` = [`super::row_stride`]), each packed so that a tile reads
//! its weights as one sequential stream and its inputs as another:
//! * dense panel, row group `(i0, ni)` at `i0·m`: element `((p·nb + b)·ni + r)·16 + l`
//!   = column `32b + 16p + l` of row `r`; inputs, token tile `(t0, nt)` at `t0·m`:
//!   `((p·nb + b)·nt + t)·16 + l` ([`pack_dense_inputs`]);
//! * MXFP4 panel, row group at `i0·m`: `(b·ni + r)·32` = `[even 16 | odd 16]` doubled
//!   E2M1 codes of block `b` (byte `j` holds elements `2j`, `2j + 1`), times the
//!   block's half scale where [`super::fold::fold_scales`] allows; inputs `(b·nt + t)·32` =
//!   `[x[32b + 2j] | x[32b + 2j + 1]]` ([`pack_mxfp4_inputs`]).

use super::super::mxfp4::{E2M1_X2, HALF_SCALE};
use super::fold::fold_scales;
use std::arch::x86_64::*;
use std::ops::Range;

/// Rows per dense register tile.
const DR: usize = 4;
/// Most tokens per dense register tile (4 × 6 accumulators + 4 weights + 1 input).
const DT: usize = 6;
/// Rows per MXFP4 register tile.
const MR: usize = 4;
/// Most tokens per MXFP4 register tile (4 × 4 accumulators + 8 weights + 2
/// inputs + 4 scales; 2 × 8 and 3 × 6 measured slower).
const MT: usize = 4;

/// `n` tokens cut into `⌈n / most⌉` tiles whose sizes differ by at most one
/// (16 tokens with at most 6 per tile: 6, 5, 5), as `(first, count)`.
fn token_tiles(n: usize, most: usize) -> impl Iterator<Item = (usize, usize)> {
    let k = n.div_ceil(most).max(1);
    let (base, extra) = (n / k, n % k);
    (0..k).map(move |i| (i * base + i.min(extra), base + usize::from(i < extra)))
}

/// Row groups of a row block: `(first, count)` with at most `most` rows each.
fn row_groups(nr: usize, most: usize) -> impl Iterator<Item = (usize, usize)> {
    (0..nr).step_by(most).map(move |i| (i, (nr - i).min(most)))
}

/// Software prefetch (into L2) of the next row block's raw bytes, handed out
/// in equal runs of cache lines to the current block's tile calls, which issue
/// one per block iteration, so the DRAM reads overlap the arithmetic.
struct Lines {
    p: *const u8,
    end: *const u8,
    per_call: usize,
}

impl Lines {
    fn new(next: &[u8], calls: usize) -> Lines {
        let r = next.as_ptr_range();
        Lines {
            p: r.start,
            end: r.end,
            per_call: next.len().div_ceil(64).div_ceil(calls.max(1)),
        }
    }

    /// The next call's run: `(first line, lines)`.
    fn take(&mut self) -> (*const u8, usize) {
        let left = (self.end as usize)
            .saturating_sub(self.p as usize)
            .div_ceil(64);
        let k = self.per_call.min(left);
        let p = self.p;
        self.p = self.p.wrapping_add(64 * k);
        (p, k)
    }
}

/// One register tile's operands, all packed so each is one sequential stream:
/// weights `w` (`[blocks][R][16]` dense, `[blocks][R][32]` MXFP4), MXFP4 half
/// scales `s` (`[blocks][R]`), inputs `x` (`[blocks][T][16 or 32]`),
/// accumulators for row `r`, token `t` at `acc + r·ar + t·at`;
/// `pf`: lines to prefetch, one per block iteration.
#[derive(Clone, Copy)]
struct Tile {
    w: *const f32,
    s: *const f32,
    x: *const f32,
    acc: *mut f32,
    ar: usize,
    at: usize,
    blocks: usize,
    pf: (*const u8, usize),
}

/// A tile's accumulators from `part` (row `r`, token `t` at `acc + r·ar + t·at`).
#[inline]
#[target_feature(enable = "avx512f,avx2")]
unsafe fn load_acc<const R: usize, const T: usize>(a: &Tile) -> [[__m512; T]; R] {
    std::array::from_fn(|r| {
        std::array::from_fn(|t| _mm512_loadu_ps(a.acc.add(r * a.ar + t * a.at)))
    })
}

/// Writes a tile's accumulators back to `part`.
#[inline]
#[target_feature(enable = "avx512f,avx2")]
unsafe fn store_acc<const R: usize, const T: usize>(a: &Tile, acc: &[[__m512; T]; R]) {
    for (r, ar) in acc.iter().enumerate() {
        for (t, v) in ar.iter().enumerate() {
            _mm512_storeu_ps(a.acc.add(r * a.ar + t * a.at), *v);
        }
    }
}

/// Calls `$f::<R, T>(args…)` for the runtime `($r, $t)`, `R` and `T` from the
/// given lists.
macro_rules! dispatch {
    ($f:ident, $r:expr, [$($R:literal)*], $t:expr, $ts:tt, $a:tt) => {
        match $r {
            $($R => dispatch!(@t $f, $R, $t, $ts, $a),)*
            _ => unreachable!("tile rows"),
        }
    };
    (@t $f:ident, $R:literal, $t:expr, [$($T:literal)*], $a:tt) => {
        match $t {
            $($T => dispatch!(@call $f, $R, $T, $a),)*
            _ => unreachable!("tile tokens"),
        }
    };
    (@call $f:ident, $R:literal, $T:literal, [$($a:expr),*]) => {
        $f::<$R, $T>($($a),*)
    };
}

/// Copies `xs: [n, cols]` into the dense tiles' input order: token tile
/// `(t0, nt)` of [`token_tiles`] at `t0·m`, element `((p·nb + b)·nt + t)·16 + l`
/// = `xs[t0 + t][32b + 16p + l]` (`m` = [`super::row_stride`]).
pub(super) fn pack_dense_inputs(xs: &[f32], cols: usize, n: usize, xk: &mut [f32]) {
    let (nb, m) = (cols / 32, super::row_stride(cols / 32));
    for (t0, nt) in token_tiles(n, DT) {
        for t in 0..nt {
            let x = &xs[(t0 + t) * cols..][..cols];
            for p in 0..2 {
                for b in 0..nb {
                    let d = t0 * m + ((p * nb + b) * nt + t) * 16;
                    xk[d..d + 16].copy_from_slice(&x[32 * b + 16 * p..][..16]);
                }
            }
        }
    }
}

/// Copies `xs: [n, cols]` into the MXFP4 tiles' input order: token tile
/// `(t0, nt)` at `t0·m`, element `(b·nt + t)·32 + l` = `xs[t0 + t][32b + 2l]`,
/// `+ 16` = `xs[t0 + t][32b + 2l + 1]` (`l < 16`).
///
/// # Safety
/// AVX-512F.
#[target_feature(enable = "avx512f,avx2")]
pub(super) unsafe fn pack_mxfp4_inputs(xs: &[f32], cols: usize, n: usize, xk: &mut [f32]) {
    let (nb, m) = (cols / 32, super::row_stride(cols / 32));
    assert!(xs.len() >= n * cols && xk.len() >= n * m);
    // Lane l takes element 2l (odd: 2l + 1) of the 32 in (a, c): index bit 4
    // picks c.
    let even: [i32; 16] = std::array::from_fn(|l| 2 * l as i32);
    let odd: [i32; 16] = std::array::from_fn(|l| 2 * l as i32 + 1);
    let ie = _mm512_loadu_si512(even.as_ptr() as *const _);
    let io = _mm512_loadu_si512(odd.as_ptr() as *const _);
    for (t0, nt) in token_tiles(n, MT) {
        for t in 0..nt {
            let x = xs[(t0 + t) * cols..].as_ptr();
            for b in 0..nb {
                let d = xk[t0 * m + (b * nt + t) * 32..].as_mut_ptr();
                // 32 elements of x at 32b and of xk at d are in bounds (asserted).
                let a = _mm512_loadu_ps(x.add(32 * b));
                let c = _mm512_loadu_ps(x.add(32 * b + 16));
                _mm512_storeu_ps(d, _mm512_permutex2var_ps(a, ie, c));
                _mm512_storeu_ps(d.add(16), _mm512_permutex2var_ps(a, io, c));
            }
        }
    }
}

/// Dense rows `rows` (at most [`super::ROW_BLOCK`]) of the matrix `w`
/// (`[.., cols]` BF16 or F32 bytes) times the packed inputs `xk`
/// ([`pack_dense_inputs`]) into `part: [nr][n][32]` (overwritten), through
/// `panel` (row group `(i0, ni)` at `i0·m`, element `((p·nb + b)·ni + r)·16 + l`
/// = `W[r0 + i0 + r][32b + 16p + l]`, BF16 → f32 exact); `next` (the rows this
/// thread does next, maybe empty) is prefetched meanwhile.
///
/// # Safety
/// AVX-512F; `panel` at least `nr·m`, `part` at least `nr·n·32`.
// Exception: a SIMD inner kernel; its operands are raw panels and ranges the caller
// already sliced, which a struct would only rename.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx512f,avx2")]
pub(super) unsafe fn dense_rows(
    bf16: bool,
    w: &[u8],
    cols: usize,
    rows: Range<usize>,
    next: Range<usize>,
    xk: &[f32],
    n: usize,
    panel: &mut [f32],
    part: &mut [f32],
) {
    let es = if bf16 { 2 } else { 4 };
    let (nb, nr) = (cols / 32, rows.len());
    let m = super::row_stride(nb);
    assert!(w.len() >= rows.end.max(next.end) * cols * es);
    assert!(panel.len() >= nr * m && xk.len() == n * m && part.len() >= nr * n * 32);
    let (wp, pp, xp, ap) = (
        w.as_ptr(),
        panel.as_mut_ptr(),
        xk.as_ptr(),
        part.as_mut_ptr(),
    );
    for (i0, ni) in row_groups(nr, DR) {
        for r in 0..ni {
            let row = wp.add((rows.start + i0 + r) * cols * es);
            for p in 0..2 {
                for b in 0..nb {
                    let src = row.add((32 * b + 16 * p) * es);
                    let v = if bf16 {
                        let h = _mm256_loadu_si256(src as *const __m256i);
                        _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16))
                    } else {
                        _mm512_loadu_ps(src as *const f32)
                    };
                    _mm512_storeu_ps(pp.add(i0 * m + ((p * nb + b) * ni + r) * 16), v);
                }
            }
        }
    }
    part[..nr * n * 32].fill(0.0);
    let calls = n.div_ceil(DT) * 2 * nr.div_ceil(DR);
    let mut pf = Lines::new(&w[next.start * cols * es..next.end * cols * es], calls);
    for (t0, nt) in token_tiles(n, DT) {
        for p in 0..2 {
            for (i0, ni) in row_groups(nr, DR) {
                let a = Tile {
                    w: pp.add(i0 * m + p * nb * ni * 16),
                    s: std::ptr::null(),
                    x: xp.add(t0 * m + p * nb * nt * 16),
                    acc: ap.add((i0 * n + t0) * 32 + 16 * p),
                    ar: n * 32,
                    at: 32,
                    blocks: nb,
                    pf: pf.take(),
                };
                dispatch!(dense_tile, ni, [1 2 3 4], nt, [1 2 3 4 5 6], [a]);
            }
        }
    }
}

#[inline]
#[target_feature(enable = "avx512f,avx2")]
unsafe fn dense_tile<const R: usize, const T: usize>(a: Tile) {
    let mut acc = load_acc::<R, T>(&a);
    for j in 0..a.blocks {
        if j < a.pf.1 {
            _mm_prefetch::<_MM_HINT_T1>(a.pf.0.add(64 * j) as *const i8);
        }
        let w: [__m512; R] = std::array::from_fn(|r| _mm512_loadu_ps(a.w.add((j * R + r) * 16)));
        #[allow(clippy::needless_range_loop)] // acc[r][t]: registers by row and token
        for t in 0..T {
            let x = _mm512_loadu_ps(a.x.add((j * T + t) * 16));
            for r in 0..R {
                acc[r][t] = _mm512_add_ps(acc[r][t], _mm512_mul_ps(w[r], x));
            }
        }
    }
    store_acc(&a, &acc);
}

/// MXFP4 rows `rows` (at most [`super::ROW_BLOCK`]) of `packed` (`cols / 2`
/// bytes per row; E8M0 `scales`, `nb` per row) times the packed inputs `xk`
/// ([`pack_mxfp4_inputs`], magnitude range `x` from [`super::fold::input_range`]) into
/// `part: [nr][n][16]` (`lo | hi`, overwritten), through `panel` (row group
/// `(i0, ni)` at `i0·m`: `[nb][ni][even 16 | odd 16]` doubled E2M1 codes, byte
/// `j` of a block holding elements `2j`, `2j + 1`, times the block's half scale
/// where [`super::fold::fold_scales`] allows) and `sp` (else the half scales, `[nb][ni]` at
/// `i0·nb`); `next` rows prefetched as in [`dense_rows`].
///
/// # Safety
/// AVX-512F; `panel`, `sp`, `part` at least `nr·m`, `nr·nb`, `nr·n·16`.
// Exception: a SIMD inner kernel; its operands are raw panels and ranges the caller
// already sliced, which a struct would only rename.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx512f,avx2")]
pub(super) unsafe fn mxfp4_rows(
    packed: &[u8],
    scales: &[u8],
    cols: usize,
    rows: Range<usize>,
    next: Range<usize>,
    xk: &[f32],
    x: Option<(f32, f32)>,
    n: usize,
    panel: &mut [f32],
    sp: &mut [f32],
    part: &mut [f32],
) {
    let (nb, nr, pb) = (cols / 32, rows.len(), cols / 2);
    let m = super::row_stride(nb);
    let last = rows.end.max(next.end);
    assert!(packed.len() >= last * pb && scales.len() >= rows.end * nb);
    assert!(panel.len() >= nr * m && sp.len() >= nr * nb);
    assert!(xk.len() == n * m && part.len() >= nr * n * 16);
    let block_scales = &scales[rows.start * nb..rows.end * nb];
    let fold = fold_scales(x, block_scales.iter().copied());
    let lut = _mm_loadu_si128(E2M1_X2.as_ptr() as *const __m128i);
    let mask = _mm_set1_epi8(0x0F);
    let (qp, pp, xp, ap) = (
        packed.as_ptr(),
        panel.as_mut_ptr(),
        xk.as_ptr(),
        part.as_mut_ptr(),
    );
    for (i0, ni) in row_groups(nr, MR) {
        for r in 0..ni {
            let row = qp.add((rows.start + i0 + r) * pb);
            for b in 0..nb {
                let bytes = _mm_loadu_si128(row.add(16 * b) as *const __m128i);
                let ve = _mm_shuffle_epi8(lut, _mm_and_si128(bytes, mask));
                let vo = _mm_shuffle_epi8(lut, _mm_and_si128(_mm_srli_epi16(bytes, 4), mask));
                let hs = HALF_SCALE[block_scales[(i0 + r) * nb + b] as usize];
                let (mut e, mut o) = (
                    _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(ve)),
                    _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(vo)),
                );
                if fold {
                    // Exact: a small integer times a power of two.
                    let s = _mm512_set1_ps(hs);
                    (e, o) = (_mm512_mul_ps(e, s), _mm512_mul_ps(o, s));
                }
                let d = pp.add(i0 * m + (b * ni + r) * 32);
                _mm512_storeu_ps(d, e);
                _mm512_storeu_ps(d.add(16), o);
                sp[i0 * nb + b * ni + r] = hs;
            }
        }
    }
    part[..nr * n * 16].fill(0.0);
    let calls = n.div_ceil(MT) * nr.div_ceil(MR);
    let mut pf = Lines::new(&packed[next.start * pb..next.end * pb], calls);
    for (t0, nt) in token_tiles(n, MT) {
        for (i0, ni) in row_groups(nr, MR) {
            let a = Tile {
                w: pp.add(i0 * m),
                s: sp.as_ptr().add(i0 * nb),
                x: xp.add(t0 * m),
                acc: ap.add((i0 * n + t0) * 16),
                ar: n * 16,
                at: 16,
                blocks: nb,
                pf: pf.take(),
            };
            if fold {
                dispatch!(mx_tile_folded, ni, [1 2 3 4], nt, [1 2 3 4], [a]);
            } else {
                dispatch!(mx_tile, ni, [1 2 3 4], nt, [1 2 3 4], [a]);
            }
        }
    }
}

/// The matvec's MXFP4 step: `acc += (E_e·x_e + E_o·x_o)·S`.
#[inline]
#[target_feature(enable = "avx512f,avx2")]
unsafe fn mx_tile<const R: usize, const T: usize>(a: Tile) {
    mx_tile_impl::<R, T, false>(a)
}

/// The same step with `S` folded into the panel ([`super::fold::fold_scales`]):
/// `acc += (E·S)_e·x_e + (E·S)_o·x_o`, bit-identical where it is used.
#[inline]
#[target_feature(enable = "avx512f,avx2")]
unsafe fn mx_tile_folded<const R: usize, const T: usize>(a: Tile) {
    mx_tile_impl::<R, T, true>(a)
}

#[inline]
#[target_feature(enable = "avx512f,avx2")]
unsafe fn mx_tile_impl<const R: usize, const T: usize, const FOLDED: bool>(a: Tile) {
    let mut acc = load_acc::<R, T>(&a);
    for j in 0..a.blocks {
        if j < a.pf.1 {
            _mm_prefetch::<_MM_HINT_T1>(a.pf.0.add(64 * j) as *const i8);
        }
        let we: [__m512; R] = std::array::from_fn(|r| _mm512_loadu_ps(a.w.add((j * R + r) * 32)));
        let wo: [__m512; R] =
            std::array::from_fn(|r| _mm512_loadu_ps(a.w.add((j * R + r) * 32 + 16)));
        let s: [__m512; R] = std::array::from_fn(|r| {
            if FOLDED {
                _mm512_setzero_ps()
            } else {
                _mm512_set1_ps(*a.s.add(j * R + r))
            }
        });
        #[allow(clippy::needless_range_loop)] // acc[r][t]: registers by row and token
        for t in 0..T {
            let xe = _mm512_loadu_ps(a.x.add((j * T + t) * 32));
            let xo = _mm512_loadu_ps(a.x.add((j * T + t) * 32 + 16));
            for r in 0..R {
                let q = _mm512_add_ps(_mm512_mul_ps(we[r], xe), _mm512_mul_ps(wo[r], xo));
                let q = if FOLDED { q } else { _mm512_mul_ps(q, s[r]) };
                acc[r][t] = _mm512_add_ps(acc[r][t], q);
            }
        }
    }
    store_acc(&a, &acc);
}

#[cfg(test)]
mod tests {
    use super::token_tiles;

    #[test]
    fn token_tiles_cover_n_in_balanced_tiles() {
        let v: Vec<_> = token_tiles(16, 6).collect();
        assert_eq!(v, [(0, 6), (6, 5), (11, 5)]);
        let v: Vec<_> = token_tiles(16, 8).collect();
        assert_eq!(v, [(0, 8), (8, 8)]);
        let v: Vec<_> = token_tiles(1, 6).collect();
        assert_eq!(v, [(0, 1)]);
        let v: Vec<_> = token_tiles(17, 8).collect();
        assert_eq!(v, [(0, 6), (6, 6), (12, 5)]);
    }
}
