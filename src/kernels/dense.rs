//! Dense BF16 and F32 matrix–vector / matrix–matrix products.
//!
//! Weights are raw little-endian bytes (safetensors `BF16` / `F32`), shape
//! `[rows, cols]` row-major (PyTorch `nn.Linear.weight`, `[out, in]`); the
//! slice need not be aligned. BF16 → f32 is exact (`bits << 16`).
//!
//! # Summation order (fixed; identical on every path)
//! For one output row, with `m = cols - cols % 32`:
//! 1. 32 lane accumulators `a[l] = 0`; for `c` in `0..m`:
//!    `a[c % 32] = a[c % 32] + W[r,c] * x[c]` (product rounded to f32, then
//!    the sum rounded: no FMA), visiting `c` in increasing order.
//! 2. Halving tree: `b[l] = a[l] + a[l+16]` (l < 16), `c[l] = b[l] + b[l+8]`
//!    (l < 8), `d[l] = c[l] + c[l+4]` (l < 4), `e[l] = d[l] + d[l+2]`
//!    (l < 2), `s = e[0] + e[1]`.
//! 3. Tail: for `c` in `m..cols` in order, `s = s + W[r,c] * x[c]`.
//!
//! The AVX2 path keeps `a` in four 8-lane registers and performs exactly
//! these operations; the scalar path is the literal definition.

use super::par::OutPtr;
use super::workspace::{product_floats, Workspace};
use super::{Isa, Par};

/// Lanes of the canonical accumulator.
const LANES: usize = 32;

/// Below this many weight elements (`rows * cols`) a call runs on the
/// calling thread only. Chosen from the measured pool round trip (a few µs);
/// it never affects results.
pub const PAR_MIN_ELEMS: usize = 1 << 16;

/// Output-row boundaries between threads are multiples of this (16 f32 =
/// one 64-byte cache line), to avoid false sharing on `y`.
const ROW_ALIGN: usize = 16;

/// One BF16 value from its two little-endian bytes, as f32 (exact: a BF16 is the top
/// half of an f32; NaN payloads are kept bit for bit). The one BF16 decode of the crate.
#[inline(always)]
pub fn bf16_le(b: [u8; 2]) -> f32 {
    f32::from_bits((u16::from_le_bytes(b) as u32) << 16)
}

/// Converts little-endian BF16 bytes to f32 (exact). For small vectors such
/// as norm weights.
///
/// # Panics
/// If `bytes.len()` is odd.
pub fn bf16_to_f32(bytes: &[u8]) -> Vec<f32> {
    assert!(
        bytes.len().is_multiple_of(2),
        "bf16_to_f32: odd byte length {}",
        bytes.len()
    );
    bytes
        .chunks_exact(2)
        .map(|b| bf16_le([b[0], b[1]]))
        .collect()
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Dtype {
    Bf16,
    F32,
}

impl Dtype {
    fn size(self) -> usize {
        match self {
            Dtype::Bf16 => 2,
            Dtype::F32 => 4,
        }
    }
}

/// A dense weight matrix `[rows, cols]` as stored: row-major little-endian BF16 or
/// F32 bytes (`rows·cols·2` or `rows·cols·4`; no alignment needed). The element type
/// is the kernel's (`*_bf16` / `*_f32`).
#[derive(Clone, Copy, Debug)]
pub struct DenseMat<'a> {
    /// The stored bytes.
    pub bytes: &'a [u8],
    /// Output width.
    pub rows: usize,
    /// Input width.
    pub cols: usize,
}

impl<'a> DenseMat<'a> {
    /// The view of `bytes` as `[rows, cols]` (sizes are checked by the kernels).
    pub fn new(bytes: &'a [u8], rows: usize, cols: usize) -> Self {
        DenseMat { bytes, rows, cols }
    }
}

/// `y[r] = Σ_c W[r,c]·x[c]` with `W` = little-endian BF16 bytes `[rows, cols]`.
///
/// `w.bytes.len() == rows*cols*2`, `x.len() == cols`, `y.len() == rows`; f32
/// accumulation in the fixed order documented in [`self`](crate::kernels::dense).
///
/// # Panics
/// On any length mismatch.
pub fn matvec_bf16(par: &Par, w: DenseMat<'_>, x: &[f32], y: &mut [f32]) {
    matvec(par, Dtype::Bf16, w, x, y)
}

/// `y[r] = Σ_c W[r,c]·x[c]` with `W` = little-endian F32 bytes `[rows, cols]`
/// (e.g. router / gate weights). `w.bytes.len() == rows*cols*4`, `x.len() == cols`,
/// `y.len() == rows`. Same summation order as [`matvec_bf16`].
///
/// # Panics
/// On any length mismatch.
pub fn matvec_f32(par: &Par, w: DenseMat<'_>, x: &[f32], y: &mut [f32]) {
    matvec(par, Dtype::F32, w, x, y)
}

/// Prefill variant of [`matvec_bf16`]: `xs` is `[n, cols]`, `ys` is
/// `[n, rows]`; `ys[v*rows + r]` is bit-identical to `matvec_bf16` on
/// `xs[v*cols..][..cols]`. Each weight row is read from memory once for all
/// `n` vectors. Scratch in `ws`: no allocation while it holds
/// [`product_floats`]`(cols, n)` (results never depend on its size or contents).
///
/// # Panics
/// On any length mismatch.
pub fn matmul_bf16(
    par: &Par,
    ws: &mut Workspace,
    w: DenseMat<'_>,
    xs: &[f32],
    n: usize,
    ys: &mut [f32],
) {
    matmul(par, ws, Dtype::Bf16, w, xs, n, ys)
}

/// Prefill variant of [`matvec_f32`]: `xs` `[n, cols]` → `ys` `[n, rows]`,
/// bit-identical to `n` calls of [`matvec_f32`]; scratch in `ws` as [`matmul_bf16`].
///
/// # Panics
/// On any length mismatch.
pub fn matmul_f32(
    par: &Par,
    ws: &mut Workspace,
    w: DenseMat<'_>,
    xs: &[f32],
    n: usize,
    ys: &mut [f32],
) {
    matmul(par, ws, Dtype::F32, w, xs, n, ys)
}

fn check_w(kernel: &str, dt: Dtype, w: DenseMat<'_>) {
    let DenseMat { bytes, rows, cols } = w;
    let want = rows
        .checked_mul(cols)
        .and_then(|e| e.checked_mul(dt.size()))
        .expect("shape overflows usize");
    assert!(
        bytes.len() == want,
        "{kernel}: weight has {} bytes, expected rows {rows} x cols {cols} x {} = {want}",
        bytes.len(),
        dt.size()
    );
}

fn matvec(par: &Par, dt: Dtype, w: DenseMat<'_>, x: &[f32], y: &mut [f32]) {
    let k = match dt {
        Dtype::Bf16 => "matvec_bf16",
        Dtype::F32 => "matvec_f32",
    };
    check_w(k, dt, w);
    let DenseMat {
        bytes: w,
        rows,
        cols,
    } = w;
    assert!(
        x.len() == cols,
        "{k}: x has {} elements, cols = {cols}",
        x.len()
    );
    assert!(
        y.len() == rows,
        "{k}: y has {} elements, rows = {rows}",
        y.len()
    );
    let isa = par.isa();
    let rb = cols * dt.size();
    let out = OutPtr::new(y);
    par.for_ranges(rows, ROW_ALIGN, rows * cols, PAR_MIN_ELEMS, &|range| {
        // SAFETY: ranges of different threads are disjoint.
        let y = unsafe { out.slice(range.clone()) };
        for (yr, r) in y.iter_mut().zip(range) {
            *yr = dot(isa, dt, &w[r * rb..(r + 1) * rb], x);
        }
    });
}

fn matmul(
    par: &Par,
    ws: &mut Workspace,
    dt: Dtype,
    w: DenseMat<'_>,
    xs: &[f32],
    n: usize,
    ys: &mut [f32],
) {
    let k = match dt {
        Dtype::Bf16 => "matmul_bf16",
        Dtype::F32 => "matmul_f32",
    };
    check_w(k, dt, w);
    let (rows, cols) = (w.rows, w.cols);
    assert!(
        xs.len() == n * cols,
        "{k}: xs has {} elements, expected n {n} x cols {cols}",
        xs.len()
    );
    assert!(
        ys.len() == n * rows,
        "{k}: ys has {} elements, expected n {n} x rows {rows}",
        ys.len()
    );
    if n == 0 {
        return;
    }
    let isa = par.isa();
    #[cfg(target_arch = "x86_64")]
    if isa != Isa::Scalar {
        return super::matmul::dense(par, ws, dt == Dtype::Bf16, w, xs, n, ys);
    }
    let w = w.bytes;
    let rb = cols * dt.size();
    let (shared, per) = product_floats(cols, n);
    let (_, slots) = ws.split(shared, per, par.threads());
    let out = OutPtr::new(ys);
    par.for_ranges_on(
        rows,
        ROW_ALIGN,
        rows * cols * n,
        PAR_MIN_ELEMS,
        &|who, range| {
            // One f32 copy of the current weight row (exact for BF16), reused
            // for all n vectors; the f32 kernel has the same summation order.
            // SAFETY: one live view per participant (Par::for_ranges_on).
            let rowbuf = &mut unsafe { slots.get(who) }[..cols];
            for r in range {
                let wr = &w[r * rb..(r + 1) * rb];
                let wf: &[u8] = if dt == Dtype::Bf16 {
                    for (d, b) in rowbuf.iter_mut().zip(wr.chunks_exact(2)) {
                        *d = bf16_le([b[0], b[1]]);
                    }
                    bytemuck::cast_slice(&*rowbuf)
                } else {
                    wr
                };
                for v in 0..n {
                    let s = dot(isa, Dtype::F32, wf, &xs[v * cols..(v + 1) * cols]);
                    // SAFETY: row r belongs to this thread only.
                    unsafe { out.slice(v * rows + r..v * rows + r + 1)[0] = s };
                }
            }
        },
    );
}

/// One output element in the canonical order. `w` holds exactly `x.len()`
/// weights of type `dt`.
#[inline]
fn dot(isa: Isa, dt: Dtype, w: &[u8], x: &[f32]) -> f32 {
    debug_assert_eq!(w.len(), x.len() * dt.size());
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 | Isa::Avx512 => unsafe {
            // SAFETY: Par only selects an ISA the CPU supports (AVX-512 implies AVX2).
            match dt {
                Dtype::Bf16 => avx2::dot_bf16(w, x),
                Dtype::F32 => avx2::dot_f32(w, x),
            }
        },
        _ => match dt {
            Dtype::Bf16 => dot_scalar::<true>(w, x),
            Dtype::F32 => dot_scalar::<false>(w, x),
        },
    }
}

/// [`dot`] of a decoded f32 row `w` (as many values as `x`) with `x`: the same
/// canonical order as an F32 weight row read from its bytes.
#[inline]
pub(crate) fn dot_f32_row(isa: Isa, w: &[f32], x: &[f32]) -> f32 {
    assert_eq!(w.len(), x.len(), "dot_f32_row: lengths differ");
    #[cfg(target_endian = "little")]
    {
        // SAFETY: an f32 slice is plain bytes; on a little-endian target they are the
        // little-endian F32 bytes `dot` reads (4 per value, same length).
        let b = unsafe { std::slice::from_raw_parts(w.as_ptr().cast::<u8>(), w.len() * 4) };
        dot(isa, Dtype::F32, b, x)
    }
    #[cfg(not(target_endian = "little"))]
    {
        let b: Vec<u8> = w.iter().flat_map(|v| v.to_le_bytes()).collect();
        dot(isa, Dtype::F32, &b, x)
    }
}

/// Weight `i` of `b` (BF16 or F32 little-endian) as f32.
#[inline(always)]
fn weight<const BF16: bool>(b: &[u8], i: usize) -> f32 {
    if BF16 {
        bf16_le([b[2 * i], b[2 * i + 1]])
    } else {
        f32::from_le_bytes([b[4 * i], b[4 * i + 1], b[4 * i + 2], b[4 * i + 3]])
    }
}

/// The literal definition of the canonical order (see module docs).
#[inline]
fn dot_scalar<const BF16: bool>(w: &[u8], x: &[f32]) -> f32 {
    let es = if BF16 { 2 } else { 4 };
    let cols = x.len();
    let m = cols - cols % LANES;
    let mut a = [0f32; LANES];
    for (wc, xc) in w[..m * es]
        .chunks_exact(LANES * es)
        .zip(x[..m].chunks_exact(LANES))
    {
        let xc: &[f32; LANES] = xc.try_into().expect("chunk");
        let mut wv = [0f32; LANES];
        if BF16 {
            let wc: &[u8; 2 * LANES] = wc.try_into().expect("chunk");
            for (l, d) in wv.iter_mut().enumerate() {
                *d = bf16_le([wc[2 * l], wc[2 * l + 1]]);
            }
        } else {
            let wc: &[u8; 4 * LANES] = wc.try_into().expect("chunk");
            for (l, d) in wv.iter_mut().enumerate() {
                *d = f32::from_le_bytes([wc[4 * l], wc[4 * l + 1], wc[4 * l + 2], wc[4 * l + 3]]);
            }
        }
        for l in 0..LANES {
            a[l] += wv[l] * xc[l];
        }
    }
    let mut s = reduce32(&a);
    for (c, xc) in x.iter().enumerate().skip(m) {
        s += weight::<BF16>(w, c) * *xc;
    }
    s
}

/// Halving-tree reduction of 32 lanes (steps 2 of the module docs).
#[inline(always)]
pub(crate) fn reduce32(a: &[f32; 32]) -> f32 {
    let mut b = [0f32; 16];
    for l in 0..16 {
        b[l] = a[l] + a[l + 16];
    }
    let mut c = [0f32; 8];
    for l in 0..8 {
        c[l] = b[l] + b[l + 8];
    }
    reduce8(&c)
}

/// Halving-tree reduction of 8 lanes: `(l, l+4)`, `(l, l+2)`, `(0, 1)`.
#[inline(always)]
pub(crate) fn reduce8(c: &[f32; 8]) -> f32 {
    let d = [c[0] + c[4], c[1] + c[5], c[2] + c[6], c[3] + c[7]];
    let e = [d[0] + d[2], d[1] + d[3]];
    e[0] + e[1]
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2 {
    use std::arch::x86_64::*;

    /// Software-prefetch distance (bytes) ahead of the weight stream; rows
    /// are contiguous, so this runs into the following rows.
    const PREFETCH_BYTES: usize = 1024;

    /// Halving-tree reduction of one 8-lane register, identical to
    /// [`super::reduce8`].
    #[inline]
    #[target_feature(enable = "avx2")]
    pub(crate) fn hsum8(v: __m256) -> f32 {
        let d = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        let e = _mm_add_ps(d, _mm_movehl_ps(d, d));
        let s = _mm_add_ss(e, _mm_shuffle_ps(e, e, 0b01));
        _mm_cvtss_f32(s)
    }

    /// 8 weights starting at `p` (BF16 when `BF16`, else F32), as f32.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn load8<const BF16: bool>(p: *const u8) -> __m256 {
        if BF16 {
            let h = _mm_loadu_si128(p as *const __m128i);
            _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16))
        } else {
            _mm256_loadu_ps(p as *const f32)
        }
    }

    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn dot_generic<const BF16: bool>(w: &[u8], x: &[f32]) -> f32 {
        let esize = if BF16 { 2 } else { 4 };
        let cols = x.len();
        let m = cols - cols % 32;
        assert!(w.len() >= cols * esize);
        let wp = w.as_ptr();
        let xp = x.as_ptr();
        let mut a0 = _mm256_setzero_ps();
        let mut a1 = _mm256_setzero_ps();
        let mut a2 = _mm256_setzero_ps();
        let mut a3 = _mm256_setzero_ps();
        let mut c = 0;
        while c < m {
            _mm_prefetch::<_MM_HINT_T0>(wp.wrapping_add(c * esize + PREFETCH_BYTES) as *const i8);
            if !BF16 {
                _mm_prefetch::<_MM_HINT_T0>(
                    wp.wrapping_add(c * esize + 64 + PREFETCH_BYTES) as *const i8
                );
            }
            let w0 = load8::<BF16>(wp.add(c * esize));
            let w1 = load8::<BF16>(wp.add((c + 8) * esize));
            let w2 = load8::<BF16>(wp.add((c + 16) * esize));
            let w3 = load8::<BF16>(wp.add((c + 24) * esize));
            a0 = _mm256_add_ps(a0, _mm256_mul_ps(w0, _mm256_loadu_ps(xp.add(c))));
            a1 = _mm256_add_ps(a1, _mm256_mul_ps(w1, _mm256_loadu_ps(xp.add(c + 8))));
            a2 = _mm256_add_ps(a2, _mm256_mul_ps(w2, _mm256_loadu_ps(xp.add(c + 16))));
            a3 = _mm256_add_ps(a3, _mm256_mul_ps(w3, _mm256_loadu_ps(xp.add(c + 24))));
            c += 32;
        }
        // b = lanes (l, l+16); c = b[l] + b[l+8]
        let b_lo = _mm256_add_ps(a0, a2);
        let b_hi = _mm256_add_ps(a1, a3);
        let mut s = hsum8(_mm256_add_ps(b_lo, b_hi));
        for (c, xc) in x.iter().enumerate().skip(m) {
            s += super::weight::<BF16>(w, c) * *xc;
        }
        s
    }

    /// # Safety
    /// CPU must support AVX2; `w.len() >= 2 * x.len()`.
    #[target_feature(enable = "avx2")]
    pub(crate) unsafe fn dot_bf16(w: &[u8], x: &[f32]) -> f32 {
        dot_generic::<true>(w, x)
    }

    /// # Safety
    /// CPU must support AVX2; `w.len() >= 4 * x.len()`.
    #[target_feature(enable = "avx2")]
    pub(crate) unsafe fn dot_f32(w: &[u8], x: &[f32]) -> f32 {
        dot_generic::<false>(w, x)
    }
}
