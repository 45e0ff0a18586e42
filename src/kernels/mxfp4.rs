//! MXFP4 matrix–vector / matrix–matrix products straight from packed bytes.
//!
//! # Format
//! compressed-tensors `mxfp4-pack-quantized` (Kimi K3 routed experts;
//! `compressed_tensors/compressors/quantized_compressors/fp4_quantized.py`,
//! `pack_fp4_to_uint8`), element and scale encodings from the OCP
//! Microscaling Formats (MX) v1.0 spec:
//! * `weight_packed`: u8 `[rows, cols/2]`; byte `j` of a row holds element
//!   `2j` in its **low** nibble and element `2j+1` in its high nibble.
//! * Element = FP4 E2M1: bit 3 = sign, magnitude by code `0..7` =
//!   `0, 0.5, 1, 1.5, 2, 3, 4, 6` (no Inf/NaN; code 8 is −0).
//! * `weight_scale`: u8 `[rows, cols/32]`, E8M0: the block of 32 elements
//!   `32b..32b+32` of a row is scaled by `2^(s − 127)`.
//!   **`s = 0xFF` is NaN** per OCP MX v1.0; we follow the spec: the scale
//!   becomes NaN, so [`dequant_mxfp4`] yields NaN for that block and the
//!   output row of a product becomes NaN (a corrupt checkpoint shows up
//!   instead of silently producing `2^128`, which is what transformers'
//!   `ldexp` does).
//! * `W[r,c] = E2M1(nibble(packed[r, c/2], c%2)) · 2^(scale[r, c/32] − 127)`.
//! * `cols` must be a multiple of 32.
//!
//! The matrix is never expanded in memory: the products decode nibbles on
//! the fly (AVX2: `pshufb` lookup of 16 codes at a time; scalar: a 256-entry
//! byte → 2 floats table) and apply each block's scale once.
//!
//! # Summation order (fixed; identical on every path)
//! Let `E` be **twice** the E2M1 value (the integers `0, ±1, ±2, ±3, ±4,
//! ±6, ±8, ±12` as f32; code 8 gives +0) and `S_b = 2^(s_b − 128)` (half the
//! E8M0 scale, so `E·S_b` is the weight; both factors are exact). For one
//! output row, 8 lane accumulators `a[l] = 0`; for each block `b` in order:
//! 1. `p[l] = E[32b+l] · x[32b+l]` for `l < 32` (rounded to f32),
//! 2. `t[l] = p[l] + p[l+16]` (`l < 16`), `u[l] = t[l] + t[l+8]` (`l < 8`),
//! 3. `a[l] = a[l] + u[l] · S_b` (`u·S_b` is exact barring under/overflow).
//!
//! Finally `y = ((a0+a4)+(a2+a6)) + ((a1+a5)+(a3+a7))`, i.e. the halving
//! tree `(l,l+4)`, `(l,l+2)`, `(0,1)`. No FMA anywhere, so the AVX2 and
//! scalar paths are bit-identical. Doubling `E` and halving `S` lets AVX2
//! convert codes with an int8 lookup; it changes no rounding except in the
//! f32 overflow/underflow range.

use super::dense::{reduce8, PAR_MIN_ELEMS};
use super::par::OutPtr;
use super::{Isa, Par};

/// E2M1 values by 4-bit code (OCP MX v1.0 table; transformers `FP4_VALUES`).
pub const E2M1_VALUES: [f32; 16] = [
    0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0,
];

/// Twice the E2M1 value, as small integers (code 8 → 0).
const E2M1_X2: [i8; 16] = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];

/// `2^k` as f32 for `k` in the f32 normal or subnormal range (-149..=127).
const fn pow2(k: i32) -> f32 {
    if k >= -126 {
        f32::from_bits(((k + 127) as u32) << 23)
    } else {
        f32::from_bits(1u32 << (k + 149))
    }
}

const fn scale_table(bias: i32) -> [f32; 256] {
    let mut t = [0f32; 256];
    let mut s = 0;
    while s < 255 {
        t[s] = pow2(s as i32 - bias);
        s += 1;
    }
    t[255] = f32::NAN;
    t
}

/// E8M0 value by byte: `2^(s−127)`, NaN for 0xFF.
pub const E8M0_SCALE: [f32; 256] = scale_table(127);

/// Half the E8M0 value, `2^(s−128)` (pairs with the doubled E2M1 codes).
const HALF_SCALE: [f32; 256] = scale_table(128);

/// Byte → (even element, odd element), doubled values.
const BYTE_X2: [[f32; 2]; 256] = {
    let mut t = [[0f32; 2]; 256];
    let mut b = 0;
    while b < 256 {
        t[b] = [E2M1_X2[b & 15] as f32, E2M1_X2[b >> 4] as f32];
        b += 1;
    }
    t
};

fn check(kernel: &str, packed: &[u8], scales: &[u8], rows: usize, cols: usize) {
    assert!(
        cols % 32 == 0,
        "{kernel}: cols {cols} is not a multiple of the MXFP4 block size 32"
    );
    assert!(
        packed.len() == rows * cols / 2,
        "{kernel}: weight_packed has {} bytes, expected rows {rows} x cols/2 {}",
        packed.len(),
        cols / 2
    );
    assert!(
        scales.len() == rows * cols / 32,
        "{kernel}: weight_scale has {} bytes, expected rows {rows} x cols/32 {}",
        scales.len(),
        cols / 32
    );
}

/// Dequantizes a packed MXFP4 matrix to f32 `[rows, cols]` (row-major),
/// `W[r,c] = E2M1(code) · 2^(s−127)` exactly (NaN for blocks with
/// `s = 0xFF`; code 8 gives −0.0). For tests and inspection only — the
/// products never materialise this.
///
/// # Panics
/// If `cols % 32 != 0`, `packed.len() != rows*cols/2` or
/// `scales.len() != rows*cols/32`.
pub fn dequant_mxfp4(packed: &[u8], scales: &[u8], rows: usize, cols: usize) -> Vec<f32> {
    check("dequant_mxfp4", packed, scales, rows, cols);
    let mut out = Vec::with_capacity(rows * cols);
    for (i, &b) in packed.iter().enumerate() {
        let c = (2 * i) % cols;
        let r = (2 * i) / cols;
        let s = E8M0_SCALE[scales[r * (cols / 32) + c / 32] as usize];
        out.push(E2M1_VALUES[(b & 15) as usize] * s);
        out.push(E2M1_VALUES[(b >> 4) as usize] * s);
    }
    out
}

/// `y[r] = Σ_c W[r,c]·x[c]` for an MXFP4 matrix given as `weight_packed`
/// (`[rows, cols/2]` bytes) and `weight_scale` (`[rows, cols/32]` E8M0
/// bytes), decoded on the fly. `x.len() == cols`, `y.len() == rows`.
/// Summation order: see [the module docs](crate::kernels::mxfp4).
///
/// # Panics
/// On shape mismatch or `cols % 32 != 0`.
pub fn matvec_mxfp4(
    par: &Par,
    packed: &[u8],
    scales: &[u8],
    rows: usize,
    cols: usize,
    x: &[f32],
    y: &mut [f32],
) {
    check("matvec_mxfp4", packed, scales, rows, cols);
    assert!(
        x.len() == cols,
        "matvec_mxfp4: x has {} elements, cols = {cols}",
        x.len()
    );
    assert!(
        y.len() == rows,
        "matvec_mxfp4: y has {} elements, rows = {rows}",
        y.len()
    );
    let isa = par.isa();
    let (pb, sb) = (cols / 2, cols / 32);
    let out = OutPtr::new(y);
    par.for_ranges(rows, 16, rows * cols, PAR_MIN_ELEMS, &|range| {
        // SAFETY: ranges of different threads are disjoint.
        let y = unsafe { out.slice(range.clone()) };
        for (yr, r) in y.iter_mut().zip(range) {
            let p = &packed[r * pb..(r + 1) * pb];
            let s = &scales[r * sb..(r + 1) * sb];
            *yr = dot_packed(isa, p, s, x);
        }
    });
}

/// Prefill variant of [`matvec_mxfp4`]: `xs` `[n, cols]` → `ys` `[n, rows]`,
/// `ys[v*rows + r]` bit-identical to `matvec_mxfp4` on vector `v`. Each
/// weight row is read and decoded once (into a per-thread f32 row buffer of
/// `cols` doubled codes, the same values the on-the-fly decoder produces)
/// for all `n` vectors.
///
/// # Panics
/// On shape mismatch or `cols % 32 != 0`.
#[allow(clippy::too_many_arguments)]
pub fn matmul_mxfp4(
    par: &Par,
    packed: &[u8],
    scales: &[u8],
    rows: usize,
    cols: usize,
    xs: &[f32],
    n: usize,
    ys: &mut [f32],
) {
    check("matmul_mxfp4", packed, scales, rows, cols);
    assert!(
        xs.len() == n * cols,
        "matmul_mxfp4: xs has {} elements, expected n {n} x cols {cols}",
        xs.len()
    );
    assert!(
        ys.len() == n * rows,
        "matmul_mxfp4: ys has {} elements, expected n {n} x rows {rows}",
        ys.len()
    );
    if n == 0 {
        return;
    }
    let isa = par.isa();
    let (pb, sb) = (cols / 2, cols / 32);
    let out = OutPtr::new(ys);
    par.for_ranges(rows, 16, rows * cols * n, PAR_MIN_ELEMS, &|range| {
        let mut wf = vec![0f32; cols];
        let mut sf = vec![0f32; sb];
        for r in range {
            for (d, &b) in wf.chunks_exact_mut(2).zip(&packed[r * pb..(r + 1) * pb]) {
                d.copy_from_slice(&BYTE_X2[b as usize]);
            }
            for (d, &s) in sf.iter_mut().zip(&scales[r * sb..(r + 1) * sb]) {
                *d = HALF_SCALE[s as usize];
            }
            for v in 0..n {
                let s = dot_decoded(isa, &wf, &sf, &xs[v * cols..(v + 1) * cols]);
                // SAFETY: row r belongs to this thread only.
                unsafe { out.slice(v * rows + r..v * rows + r + 1)[0] = s };
            }
        }
    });
}

/// One output row from packed bytes `p` (`cols/2`) and scale bytes `s`.
#[inline]
fn dot_packed(isa: Isa, p: &[u8], s: &[u8], x: &[f32]) -> f32 {
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: Par only selects Avx2 when the CPU supports it.
        Isa::Avx2 => unsafe { avx2::dot_packed(p, s, x) },
        _ => dot_scalar(
            x,
            s.len(),
            |b, l| {
                let byte = p[16 * b + l / 2];
                BYTE_X2[byte as usize][l % 2]
            },
            |b| HALF_SCALE[s[b] as usize],
        ),
    }
}

/// One output row from a decoded row (`wf`: doubled codes, `sf`: half
/// scales as f32).
#[inline]
fn dot_decoded(isa: Isa, wf: &[f32], sf: &[f32], x: &[f32]) -> f32 {
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: Par only selects Avx2 when the CPU supports it.
        Isa::Avx2 => unsafe { avx2::dot_decoded(wf, sf, x) },
        _ => dot_scalar(x, sf.len(), |b, l| wf[32 * b + l], |b| sf[b]),
    }
}

/// The literal definition of the summation order (module docs).
#[inline(always)]
fn dot_scalar(
    x: &[f32],
    nblocks: usize,
    e: impl Fn(usize, usize) -> f32,
    scale: impl Fn(usize) -> f32,
) -> f32 {
    let mut a = [0f32; 8];
    for b in 0..nblocks {
        let xb = &x[32 * b..32 * b + 32];
        let mut p = [0f32; 32];
        for (l, pl) in p.iter_mut().enumerate() {
            *pl = e(b, l) * xb[l];
        }
        let mut t = [0f32; 16];
        for l in 0..16 {
            t[l] = p[l] + p[l + 16];
        }
        let sc = scale(b);
        for l in 0..8 {
            let u = t[l] + t[l + 8];
            a[l] += u * sc;
        }
    }
    reduce8(&a)
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::super::dense::avx2::hsum8;
    use super::{E2M1_X2, HALF_SCALE};
    use std::arch::x86_64::*;

    /// # Safety
    /// AVX2 required; `p.len() == 16 * s.len()`, `x.len() == 32 * s.len()`.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn dot_packed(p: &[u8], s: &[u8], x: &[f32]) -> f32 {
        let nb = s.len();
        assert!(p.len() == 16 * nb && x.len() == 32 * nb);
        let lut = _mm_loadu_si128(E2M1_X2.as_ptr() as *const __m128i);
        let mask = _mm_set1_epi8(0x0F);
        let pp = p.as_ptr();
        let xp = x.as_ptr();
        let mut acc = _mm256_setzero_ps();
        for b in 0..nb {
            let bytes = _mm_loadu_si128(pp.add(16 * b) as *const __m128i);
            let lo = _mm_and_si128(bytes, mask);
            let hi = _mm_and_si128(_mm_srli_epi16(bytes, 4), mask);
            let vlo = _mm_shuffle_epi8(lut, lo);
            let vhi = _mm_shuffle_epi8(lut, hi);
            let e0 = _mm_unpacklo_epi8(vlo, vhi); // elements 0..15
            let e1 = _mm_unpackhi_epi8(vlo, vhi); // elements 16..31
            let f0 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(e0));
            let f1 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_unpackhi_epi64(e0, e0)));
            let f2 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(e1));
            let f3 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_unpackhi_epi64(e1, e1)));
            let xb = xp.add(32 * b);
            let p0 = _mm256_mul_ps(f0, _mm256_loadu_ps(xb));
            let p1 = _mm256_mul_ps(f1, _mm256_loadu_ps(xb.add(8)));
            let p2 = _mm256_mul_ps(f2, _mm256_loadu_ps(xb.add(16)));
            let p3 = _mm256_mul_ps(f3, _mm256_loadu_ps(xb.add(24)));
            let u = _mm256_add_ps(_mm256_add_ps(p0, p2), _mm256_add_ps(p1, p3));
            let sc = _mm256_set1_ps(*HALF_SCALE.get_unchecked(*s.get_unchecked(b) as usize));
            acc = _mm256_add_ps(acc, _mm256_mul_ps(u, sc));
        }
        hsum8(acc)
    }

    /// # Safety
    /// AVX2 required; `wf.len() == x.len() == 32 * sf.len()`.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn dot_decoded(wf: &[f32], sf: &[f32], x: &[f32]) -> f32 {
        let nb = sf.len();
        assert!(wf.len() == 32 * nb && x.len() == 32 * nb);
        let wp = wf.as_ptr();
        let xp = x.as_ptr();
        let mut acc = _mm256_setzero_ps();
        for b in 0..nb {
            let wb = wp.add(32 * b);
            let xb = xp.add(32 * b);
            let p0 = _mm256_mul_ps(_mm256_loadu_ps(wb), _mm256_loadu_ps(xb));
            let p1 = _mm256_mul_ps(_mm256_loadu_ps(wb.add(8)), _mm256_loadu_ps(xb.add(8)));
            let p2 = _mm256_mul_ps(_mm256_loadu_ps(wb.add(16)), _mm256_loadu_ps(xb.add(16)));
            let p3 = _mm256_mul_ps(_mm256_loadu_ps(wb.add(24)), _mm256_loadu_ps(xb.add(24)));
            let u = _mm256_add_ps(_mm256_add_ps(p0, p2), _mm256_add_ps(p1, p3));
            let sc = _mm256_set1_ps(*sf.get_unchecked(b));
            acc = _mm256_add_ps(acc, _mm256_mul_ps(u, sc));
        }
        hsum8(acc)
    }
}
