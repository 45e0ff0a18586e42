//! MLA decode attention (absorbed form) for all heads of one query position
//! over a latent cache, reading each cached latent once for all heads.
//!
//! # Definition (the reference order, [`attend_latent_ref`])
//! Cache: `len` positions of `ld = r + dr` f32, `lat_s = [c_s (r) | k_pe,s (dr)]`.
//! For each head `h` with absorbed query `q̂_h: [r]` and `q_pe,h: [dr]`:
//! 1. `a = Σ_{i<r} q̂_h[i]·c_s[i]`, `b = Σ_{i<dr} q_pe,h[i]·k_pe,s[i]`, each a
//!    sequential sum in increasing `i` starting from `−0.0` (Rust's `f32`
//!    `Sum`), products rounded, no FMA; `score_s = τ·a + τ·b`.
//! 2. `m = max_s score_s` (NaN ignored, as `f32::max`), `e_s = exp(score_s − m)`,
//!    `sum = Σ_s e_s` sequential from `+0.0`, `p_s = e_s / sum`.
//! 3. `ctx[j] = Σ_s p_s·c_s[j]`, sequential in `s` from `+0.0`.
//!
//! # Batched path (AVX2)
//! The same operations per `(s, h)` or `(h, j)` element, in the same order,
//! with heads or latent columns in SIMD lanes — so it is bit-identical to the
//! reference (tested), and to itself at every thread count:
//! * Scores are a `[len, ld] × [ld, H]` product computed in register tiles of
//!   5 positions × 16 heads whose inner loop runs over `i` in order; the
//!   latents of a tile's positions are read once for all heads (from L1).
//!   Threads split positions.
//! * Max, `exp` (scalar `f32::exp`, as the reference), sum and division run
//!   element-wise per head in position order.
//! * The context is a `[H, len] × [len, r]` product in register tiles of
//!   5 heads × 16 columns whose inner loop runs over positions in order
//!   (blocks of [`POS_BLOCK`] positions, the tile's accumulators stored and
//!   reloaded between blocks, which changes no rounding). Threads split the
//!   latent columns, so each thread reads only its slice of every latent.
//!
//! FLOPs per call: `2·H·len·(ld + r)` multiplies and adds (plus `H·len` exp).

use super::par::OutPtr;
use super::workspace::{attend_floats, Workspace};
use super::{Isa, Par};

/// Positions per block of the context product (the block's latent columns
/// stay in L1 across all head tiles).
pub const POS_BLOCK: usize = 32;

/// Below this many multiply–adds a call runs on the calling thread only
/// (never affects results).
const PAR_MIN_WORK: usize = 1 << 16;

/// A latent cache as the attention reads it: `len` positions of `ld = r + dr` f32
/// each, `[c_s (r) | k_pe,s (dr)]`, in `data` (at least `len·ld` long).
#[derive(Clone, Copy, Debug)]
pub struct Latents<'a> {
    /// `[len, r + dr]` (or longer: a cache with room for more positions).
    pub data: &'a [f32],
    /// Cached positions.
    pub len: usize,
    /// Latent rank (`kv_lora_rank`).
    pub r: usize,
    /// Rope part of a latent (`qk_rope_head_dim`).
    pub dr: usize,
}

/// The queries of all heads of one position: absorbed `q_abs: [heads, r]`
/// (`W_UK,hᵀ q_nope,h`), `q_pe: [heads, dr]` and the softmax scale `tau`
/// (`(dn + dr)^−½`).
#[derive(Clone, Copy, Debug)]
pub struct HeadQueries<'a> {
    /// `[heads, r]`.
    pub q_abs: &'a [f32],
    /// `[heads, dr]`.
    pub q_pe: &'a [f32],
    /// Query heads.
    pub heads: usize,
    /// Softmax scale.
    pub tau: f32,
}

/// Reference attention of one head over the cache (the definition above):
/// `qh: [r]`, `q_pe: [dr]`; returns `ctx: [r]`.
///
/// # Panics
/// If the cache is shorter than `len·(r+dr)` or `qh`/`q_pe` are shorter than `r`/`dr`.
pub fn attend_latent_ref(cache: Latents<'_>, qh: &[f32], q_pe: &[f32], tau: f32) -> Vec<f32> {
    let mut scores = vec![0f32; cache.len];
    let mut ctx = vec![0f32; cache.r];
    attend_one(cache, qh, q_pe, tau, &mut scores, &mut ctx);
    ctx
}

/// [`attend_latent_ref`] into `ctx: [r]` with `scores: [len]` as scratch (the same
/// operations in the same order).
fn attend_one(
    cache: Latents<'_>,
    qh: &[f32],
    q_pe: &[f32],
    tau: f32,
    scores: &mut [f32],
    ctx: &mut [f32],
) {
    let Latents {
        data: latents,
        len,
        r,
        dr,
    } = cache;
    let ld = r + dr;
    assert!(
        latents.len() >= len * ld,
        "attend_latent_ref: cache too short"
    );
    for (s, sc) in scores[..len].iter_mut().enumerate() {
        let lat = &latents[s * ld..(s + 1) * ld];
        let a: f32 = qh[..r].iter().zip(&lat[..r]).map(|(x, y)| x * y).sum();
        let b: f32 = q_pe[..dr].iter().zip(&lat[r..]).map(|(x, y)| x * y).sum();
        *sc = tau * a + tau * b;
    }
    let scores = &mut scores[..len];
    let m = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0f32;
    for sc in scores.iter_mut() {
        *sc = (*sc - m).exp();
        sum += *sc;
    }
    ctx.fill(0.0);
    for (s, p) in scores.iter().enumerate() {
        let p = p / sum;
        let lat = &latents[s * ld..s * ld + r];
        for (c, l) in ctx.iter_mut().zip(lat) {
            *c += p * l;
        }
    }
}

/// Attention of all heads of one query over the cache, bit-identical to
/// [`attend_latent_ref`] per head (for every thread count and ISA), into
/// `ctx: [heads, r]` (`Σ_s p_{h,s} c_s`). Scratch in `ws`'s shared region: no
/// allocation while it holds [`attend_floats`]`(len, r, dr, heads)` f32.
///
/// # Panics
/// On a length mismatch.
pub fn attend_latent_heads(
    par: &Par,
    ws: &mut Workspace,
    cache: Latents<'_>,
    q: HeadQueries<'_>,
    ctx: &mut [f32],
) {
    let Latents { len, r, dr, .. } = cache;
    let HeadQueries {
        q_abs,
        q_pe,
        heads,
        tau,
    } = q;
    let ld = r + dr;
    assert!(
        cache.data.len() >= len * ld,
        "attend_latent_heads: cache has {} f32, need len {len} x {ld}",
        cache.data.len()
    );
    assert!(
        q_abs.len() == heads * r && q_pe.len() == heads * dr && ctx.len() == heads * r,
        "attend_latent_heads: q_abs {} / q_pe {} / ctx {} for heads {heads}, r {r}, dr {dr}",
        q_abs.len(),
        q_pe.len(),
        ctx.len()
    );
    match par.isa() {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 | Isa::Avx512 => {
            let buf = ws.shared(attend_floats(len, r, dr, heads));
            batched(par, buf, cache, q, ctx)
        }
        _ => {
            let scores = ws.shared(len);
            for h in 0..heads {
                attend_one(
                    cache,
                    &q_abs[h * r..(h + 1) * r],
                    &q_pe[h * dr..(h + 1) * dr],
                    tau,
                    scores,
                    &mut ctx[h * r..(h + 1) * r],
                );
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
fn batched(par: &Par, buf: &mut [f32], cache: Latents<'_>, q: HeadQueries<'_>, ctx: &mut [f32]) {
    let Latents {
        data: latents,
        len,
        r,
        dr,
    } = cache;
    let HeadQueries {
        q_abs,
        q_pe,
        heads,
        tau,
    } = q;
    ctx.fill(0.0);
    if len == 0 {
        return;
    }
    let ld = r + dr;
    let hp = heads.div_ceil(8) * 8;
    // buf = [qt: ld·hp | sc: len·hp | m: hp | sum: hp] (attend_floats).
    let (qt, rest) = buf.split_at_mut(ld * hp);
    let (sc, rest) = rest.split_at_mut(len * hp);
    let (m, rest) = rest.split_at_mut(hp);
    let sum = &mut rest[..hp];
    // Queries transposed: qt[i][h] (heads padded with zeros to hp).
    qt.fill(0.0);
    for h in 0..heads {
        for i in 0..r {
            qt[i * hp + h] = q_abs[h * r + i];
        }
        for i in 0..dr {
            qt[(r + i) * hp + h] = q_pe[h * dr + i];
        }
    }
    // Pass 1: scores [len, hp], threads split positions.
    {
        let out = OutPtr::new(sc);
        let qt = &*qt;
        par.for_ranges(len, 5, len * hp * ld, PAR_MIN_WORK, &|range| {
            // SAFETY: AVX2 checked by Par; rows of different ranges are disjoint.
            unsafe {
                let s = out.slice(range.start * hp..range.end * hp);
                avx2::scores(latents, ld, r, qt, hp, tau, range, s)
            }
        });
    }
    // Softmax per head (element-wise across heads, in position order).
    m.fill(f32::NEG_INFINITY);
    for row in sc.chunks_exact(hp) {
        // SAFETY: AVX2 checked by Par.
        unsafe { avx2::max_into(m, row) };
    }
    {
        let out = OutPtr::new(sc);
        let m = &*m;
        par.for_ranges(len, 16, len * hp * 16, PAR_MIN_WORK, &|range| {
            // SAFETY: disjoint rows.
            let s = unsafe { out.slice(range.start * hp..range.end * hp) };
            for row in s.chunks_exact_mut(hp) {
                for (e, mh) in row.iter_mut().zip(m) {
                    *e = (*e - mh).exp();
                }
            }
        });
    }
    sum.fill(0.0);
    for row in sc.chunks_exact(hp) {
        for (a, e) in sum.iter_mut().zip(row) {
            *a += *e;
        }
    }
    for row in sc.chunks_exact_mut(hp) {
        for (e, s) in row.iter_mut().zip(&*sum) {
            *e /= *s;
        }
    }
    // Pass 2: ctx[h][j] = Σ_s p[s][h]·c_s[j]; threads split 8-column vectors.
    let rv = r / 8;
    let out = OutPtr::new(ctx);
    let p = &*sc;
    par.for_ranges(rv, 2, heads * len * r, PAR_MIN_WORK, &|range| {
        // SAFETY: AVX2 checked by Par; each range writes only its own columns.
        unsafe { avx2::context(latents, ld, len, r, p, hp, heads, range, out) }
    });
    // Columns past the last full vector (r % 8), same order.
    for j in rv * 8..r {
        for h in 0..heads {
            let mut c = 0f32;
            for s in 0..len {
                c += p[s * hp + h] * latents[s * ld + j];
            }
            ctx[h * r + j] = c;
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::super::par::OutPtr;
    use super::POS_BLOCK;
    use std::arch::x86_64::*;
    use std::ops::Range;

    /// Head vectors (8 heads each) per score tile.
    const SV: usize = 2;
    /// Positions per score tile.
    const SP: usize = 5;
    /// Heads per context tile.
    const CH: usize = 5;
    /// Column vectors (8 columns each) per context tile.
    const CJ: usize = 2;

    /// `m[h] = max(row[h], m[h])` ignoring NaN in `row` (as `f32::max` folds).
    ///
    /// # Safety
    /// AVX2; `m.len() == row.len()`, a multiple of 8.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn max_into(m: &mut [f32], row: &[f32]) {
        for (mv, rv) in m.chunks_exact_mut(8).zip(row.chunks_exact(8)) {
            // maxps returns the second operand when either is NaN.
            let v = _mm256_max_ps(_mm256_loadu_ps(rv.as_ptr()), _mm256_loadu_ps(mv.as_ptr()));
            _mm256_storeu_ps(mv.as_mut_ptr(), v);
        }
    }

    /// Scores of positions `range` for all `hp` heads into `out: [range.len(), hp]`.
    ///
    /// # Safety
    /// AVX2; `qt: [ld, hp]`, `hp % 8 == 0`, latents cover `range`.
    // Exception: a SIMD inner kernel over raw tiles and ranges the caller sliced.
    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn scores(
        lat: &[f32],
        ld: usize,
        r: usize,
        qt: &[f32],
        hp: usize,
        tau: f32,
        range: Range<usize>,
        out: &mut [f32],
    ) {
        assert!(
            lat.len() >= range.end * ld && qt.len() == ld * hp && out.len() == range.len() * hp
        );
        let hv = hp / 8;
        let mut s = range.start;
        while s < range.end {
            let np = (range.end - s).min(SP);
            let mut v = 0;
            while v < hv {
                let nv = (hv - v).min(SV);
                let o = out.as_mut_ptr().add((s - range.start) * hp);
                match (np, nv) {
                    (SP, SV) => score_tile::<SP, SV>(lat, ld, r, qt, hp, tau, s, v, o),
                    (SP, _) => score_tile::<SP, 1>(lat, ld, r, qt, hp, tau, s, v, o),
                    (_, SV) => score_tile::<1, SV>(lat, ld, r, qt, hp, tau, s, v, o),
                    _ => score_tile::<1, 1>(lat, ld, r, qt, hp, tau, s, v, o),
                }
                v += if nv == SV { SV } else { 1 };
            }
            s += if np == SP { SP } else { 1 };
        }
    }

    /// One tile: positions `s0..s0+P`, head vectors `v0..v0+V`; writes
    /// `o[p*hp + 8*(v0+v) ..]`.
    // Exception: a SIMD inner kernel over raw tiles and ranges the caller sliced.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn score_tile<const P: usize, const V: usize>(
        lat: &[f32],
        ld: usize,
        r: usize,
        qt: &[f32],
        hp: usize,
        tau: f32,
        s0: usize,
        v0: usize,
        o: *mut f32,
    ) {
        let lp = lat.as_ptr().add(s0 * ld);
        let qp = qt.as_ptr().add(8 * v0);
        let t = _mm256_set1_ps(tau);
        let a = dot_tile::<P, V>(lp, ld, qp, hp, 0..r);
        let b = dot_tile::<P, V>(lp, ld, qp, hp, r..ld);
        for p in 0..P {
            for v in 0..V {
                let sc = _mm256_add_ps(_mm256_mul_ps(t, a[p][v]), _mm256_mul_ps(t, b[p][v]));
                _mm256_storeu_ps(o.add(p * hp + 8 * (v0 + v)), sc);
            }
        }
    }

    /// `acc[p][v] = Σ_{i in is} qt[i][8v..8v+8]·lat[p][i]`, sequential in `i` from −0.0.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn dot_tile<const P: usize, const V: usize>(
        lp: *const f32,
        ld: usize,
        qp: *const f32,
        hp: usize,
        is: Range<usize>,
    ) -> [[__m256; V]; P] {
        let mut acc = [[_mm256_set1_ps(-0.0); V]; P];
        for i in is {
            let mut q = [_mm256_setzero_ps(); V];
            for (v, qv) in q.iter_mut().enumerate() {
                *qv = _mm256_loadu_ps(qp.add(i * hp + 8 * v));
            }
            for (p, ap) in acc.iter_mut().enumerate() {
                let b = _mm256_broadcast_ss(&*lp.add(p * ld + i));
                for (av, qv) in ap.iter_mut().zip(&q) {
                    *av = _mm256_add_ps(*av, _mm256_mul_ps(*qv, b));
                }
            }
        }
        acc
    }

    /// Context columns `8·jv` for `jv` in `range`, all heads: `ctx[h*r + j] =
    /// Σ_s p[s*hp + h]·lat[s*ld + j]`; `ctx` must hold zeros there.
    ///
    /// # Safety
    /// AVX2; shapes as in `batched`; no other thread writes these columns.
    // Exception: a SIMD inner kernel over raw tiles and ranges the caller sliced.
    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn context(
        lat: &[f32],
        ld: usize,
        len: usize,
        r: usize,
        p: &[f32],
        hp: usize,
        heads: usize,
        range: Range<usize>,
        ctx: OutPtr,
    ) {
        assert!(lat.len() >= len * ld && p.len() == len * hp && heads <= hp);
        let (c, clen) = ctx.raw();
        assert!(clen == heads * r);
        let mut s0 = 0;
        while s0 < len {
            let s1 = (s0 + POS_BLOCK).min(len);
            let mut jv = range.start;
            while jv < range.end {
                let nj = (range.end - jv).min(CJ);
                let mut h = 0;
                while h < heads {
                    let nh = (heads - h).min(CH);
                    match (nh, nj) {
                        (CH, CJ) => ctx_tile::<CH, CJ>(lat, ld, r, p, hp, s0..s1, h, jv, c),
                        (CH, _) => ctx_tile::<CH, 1>(lat, ld, r, p, hp, s0..s1, h, jv, c),
                        (_, CJ) => ctx_tile::<1, CJ>(lat, ld, r, p, hp, s0..s1, h, jv, c),
                        _ => ctx_tile::<1, 1>(lat, ld, r, p, hp, s0..s1, h, jv, c),
                    }
                    h += if nh == CH { CH } else { 1 };
                }
                jv += if nj == CJ { CJ } else { 1 };
            }
            s0 = s1;
        }
    }

    // Exception: a SIMD inner kernel over raw tiles and ranges the caller sliced.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn ctx_tile<const H: usize, const J: usize>(
        lat: &[f32],
        ld: usize,
        r: usize,
        p: &[f32],
        hp: usize,
        pos: Range<usize>,
        h0: usize,
        jv0: usize,
        c: *mut f32,
    ) {
        let cp = |h: usize, j: usize| c.wrapping_add((h0 + h) * r + 8 * (jv0 + j));
        let mut acc = [[_mm256_setzero_ps(); J]; H];
        for (h, ah) in acc.iter_mut().enumerate() {
            for (j, a) in ah.iter_mut().enumerate() {
                *a = _mm256_loadu_ps(cp(h, j));
            }
        }
        let lp = lat.as_ptr().add(8 * jv0);
        let pp = p.as_ptr().add(h0);
        for s in pos {
            let mut l = [_mm256_setzero_ps(); J];
            for (j, lj) in l.iter_mut().enumerate() {
                *lj = _mm256_loadu_ps(lp.add(s * ld + 8 * j));
            }
            for (h, ah) in acc.iter_mut().enumerate() {
                let b = _mm256_broadcast_ss(&*pp.add(s * hp + h));
                for (a, lj) in ah.iter_mut().zip(&l) {
                    *a = _mm256_add_ps(*a, _mm256_mul_ps(b, *lj));
                }
            }
        }
        for (h, ah) in acc.iter().enumerate() {
            for (j, a) in ah.iter().enumerate() {
                _mm256_storeu_ps(cp(h, j), *a);
            }
        }
    }
}
