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
//! output row, 16 lane accumulators `a[i] = 0` (one per byte position of a
//! block); for each block `b` in order and each byte `i < 16` of it, with
//! `c = 32b + 2i`:
//! 1. `q = E[c]·x[c] + E[c+1]·x[c+1]` (each product rounded to f32, then
//!    the sum: low nibble's product first),
//! 2. `a[i] = a[i] + q · S_b` (`q·S_b` is exact barring under/overflow).
//!
//! Finally the halving tree `a[i] + a[i+8]` (i < 8), `(i, i+4)`, `(i, i+2)`,
//! `(0, 1)`. No FMA anywhere, so the AVX-512, AVX2 and scalar paths are
//! bit-identical. Doubling `E` and halving `S` lets AVX2 convert codes with
//! an int8 lookup; it changes no rounding except in the f32
//! overflow/underflow range. The SIMD paths read `x` through a per-call
//! copy permuted to `[x0, x2, …, x30, x1, x3, …, x31]` per block, so even
//! (low-nibble) and odd (high-nibble) elements sit in separate registers.
//!
//! One rewrite that keeps every bit: where all products and sums of a call
//! stay in the f32 normal range, `(E·x)·S_b = (E·S_b)·x` and
//! `(a + b)·S_b = a·S_b + b·S_b` exactly (`S_b` is a power of two), so the
//! AVX-512 prefill (`src/kernels/matmul/avx512.rs`) multiplies `S_b` into the decoded
//! weights once and saves one multiply per weight pair and token; it checks
//! that range per row block and otherwise runs the steps above.

use super::dense::{reduce8, PAR_MIN_ELEMS};
use super::par::OutPtr;
use super::workspace::{product_floats, Workspace};
use super::{Isa, Par};

/// E2M1 values by 4-bit code (OCP MX v1.0 table; transformers `FP4_VALUES`).
pub const E2M1_VALUES: [f32; 16] = [
    0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0,
];

/// Twice the E2M1 value, as small integers (code 8 → 0).
pub(super) const E2M1_X2: [i8; 16] = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];

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
pub(super) const HALF_SCALE: [f32; 256] = scale_table(128);

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

/// An MXFP4 weight matrix `[rows, cols]` as stored (see [the module docs](self)):
/// `weight_packed` `[rows, cols/2]` bytes and `weight_scale` `[rows, cols/32]` E8M0
/// bytes; `cols` a multiple of 32.
#[derive(Clone, Copy, Debug)]
pub struct Mxfp4Mat<'a> {
    /// `weight_packed`: two E2M1 codes per byte (low nibble first).
    pub packed: &'a [u8],
    /// `weight_scale`: one E8M0 byte per 32-element block.
    pub scales: &'a [u8],
    /// Output width.
    pub rows: usize,
    /// Input width (multiple of 32).
    pub cols: usize,
}

impl<'a> Mxfp4Mat<'a> {
    /// The view of `packed` and `scales` as `[rows, cols]` (sizes are checked by the kernels).
    pub fn new(packed: &'a [u8], scales: &'a [u8], rows: usize, cols: usize) -> Self {
        Mxfp4Mat {
            packed,
            scales,
            rows,
            cols,
        }
    }
}

fn check(kernel: &str, w: Mxfp4Mat<'_>) {
    let Mxfp4Mat {
        packed,
        scales,
        rows,
        cols,
    } = w;
    assert!(
        cols.is_multiple_of(32),
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
    let w = Mxfp4Mat {
        packed,
        scales,
        rows,
        cols,
    };
    check("dequant_mxfp4", w);
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

/// `y[r] = Σ_c W[r,c]·x[c]` for an MXFP4 matrix `w`, decoded on the fly.
/// `x.len() == cols`, `y.len() == rows`. Summation order: see
/// [the module docs](crate::kernels::mxfp4). Scratch (the SIMD paths' permuted copy
/// of `x`) in `ws`: no allocation while it holds [`product_floats`]`(cols, 1)`.
///
/// # Panics
/// On shape mismatch or `cols % 32 != 0`.
pub fn matvec_mxfp4(par: &Par, ws: &mut Workspace, w: Mxfp4Mat<'_>, x: &[f32], y: &mut [f32]) {
    check("matvec_mxfp4", w);
    let Mxfp4Mat {
        packed,
        scales,
        rows,
        cols,
    } = w;
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
    let xq: &[f32] = match isa {
        Isa::Scalar => x,
        _ => {
            // cols ≤ product_floats(cols, 1).0
            let q = ws.shared(cols);
            permute_block_order(x, q);
            q
        }
    };
    let out = OutPtr::new(y);
    par.for_ranges(rows, 16, rows * cols, PAR_MIN_ELEMS, &|range| {
        // SAFETY: ranges of different threads are disjoint.
        let y = unsafe { out.slice(range.clone()) };
        for (yr, r) in y.iter_mut().zip(range) {
            let p = &packed[r * pb..(r + 1) * pb];
            let s = &scales[r * sb..(r + 1) * sb];
            *yr = dot_packed(isa, p, s, xq);
        }
    });
}

/// Prefill variant of [`matvec_mxfp4`]: `xs` `[n, cols]` → `ys` `[n, rows]`,
/// `ys[v*rows + r]` bit-identical to `matvec_mxfp4` on vector `v`. Each
/// weight row is read and decoded once (into a per-thread f32 row buffer of
/// `cols` doubled codes, the same values the on-the-fly decoder produces)
/// for all `n` vectors. Scratch in `ws`: no allocation while it holds
/// [`product_floats`]`(cols, n)`.
///
/// # Panics
/// On shape mismatch or `cols % 32 != 0`.
pub fn matmul_mxfp4(
    par: &Par,
    ws: &mut Workspace,
    w: Mxfp4Mat<'_>,
    xs: &[f32],
    n: usize,
    ys: &mut [f32],
) {
    check("matmul_mxfp4", w);
    let Mxfp4Mat {
        packed,
        scales,
        rows,
        cols,
    } = w;
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
    #[cfg(target_arch = "x86_64")]
    if isa != Isa::Scalar {
        return super::matmul::mxfp4(par, ws, w, xs, n, ys);
    }
    // The decoded row and x in the permuted block order.
    let (shared, per) = product_floats(cols, n);
    let (xq, slots) = ws.split(shared, per, par.threads());
    let xq = &mut xq[..n * cols];
    for (x, q) in xs.chunks_exact(cols).zip(xq.chunks_exact_mut(cols)) {
        permute_block_order(x, q);
    }
    let xq = &*xq;
    let out = OutPtr::new(ys);
    par.for_ranges_on(rows, 16, rows * cols * n, PAR_MIN_ELEMS, &|who, range| {
        // SAFETY: one live view per participant (Par::for_ranges_on).
        let mine = unsafe { slots.get(who) };
        let (wf, sf) = mine.split_at_mut(cols);
        let sf = &mut sf[..sb];
        for r in range {
            for (d, pbk) in wf
                .chunks_exact_mut(32)
                .zip(packed[r * pb..(r + 1) * pb].chunks_exact(16))
            {
                for (i, &byte) in pbk.iter().enumerate() {
                    let [e0, e1] = BYTE_X2[byte as usize];
                    d[i] = e0;
                    d[16 + i] = e1;
                }
            }
            for (d, &s) in sf.iter_mut().zip(&scales[r * sb..(r + 1) * sb]) {
                *d = HALF_SCALE[s as usize];
            }
            for v in 0..n {
                let s = dot_decoded(isa, wf, sf, &xq[v * cols..(v + 1) * cols]);
                // SAFETY: row r belongs to this thread only.
                unsafe { out.slice(v * rows + r..v * rows + r + 1)[0] = s };
            }
        }
    });
}

/// `x` into `out` in the block-permuted order `[x0, x2, …, x30, x1, x3, …, x31]`
/// per 32-block (`out.len() == x.len()`).
fn permute_block_order(x: &[f32], out: &mut [f32]) {
    for (b, o) in x.chunks_exact(32).zip(out.chunks_exact_mut(32)) {
        for i in 0..16 {
            o[i] = b[2 * i];
            o[16 + i] = b[2 * i + 1];
        }
    }
}

/// One output row from packed bytes `p` (`cols/2`) and scale bytes `s`;
/// `x` is permuted for SIMD ISAs and natural for the scalar path.
#[inline]
fn dot_packed(isa: Isa, p: &[u8], s: &[u8], x: &[f32]) -> f32 {
    match isa {
        // SAFETY: Par only selects an ISA the CPU supports.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => unsafe { avx512::dot_packed(p, s, x) },
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => unsafe { avx2::dot_packed(p, s, x) },
        _ => {
            let mut a = [0f32; 16];
            for (b, (pb, xb)) in p.chunks_exact(16).zip(x.chunks_exact(32)).enumerate() {
                let pb: &[u8; 16] = pb.try_into().expect("block");
                let xb: &[f32; 32] = xb.try_into().expect("block");
                let sc = HALF_SCALE[s[b] as usize];
                for i in 0..16 {
                    let [e0, e1] = BYTE_X2[pb[i] as usize];
                    let q = e0 * xb[2 * i] + e1 * xb[2 * i + 1];
                    a[i] += q * sc;
                }
            }
            reduce16(&a)
        }
    }
}

/// One output row from a decoded row: `wf` holds doubled codes and `x` the
/// input, both in the permuted block order; `sf` the half scales.
#[inline]
fn dot_decoded(isa: Isa, wf: &[f32], sf: &[f32], x: &[f32]) -> f32 {
    match isa {
        // SAFETY: Par only selects an ISA the CPU supports (AVX-512 implies AVX2).
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 | Isa::Avx512 => unsafe { avx2::dot_decoded(wf, sf, x) },
        _ => {
            let mut a = [0f32; 16];
            for ((wb, xb), &sc) in wf.chunks_exact(32).zip(x.chunks_exact(32)).zip(sf) {
                let wb: &[f32; 32] = wb.try_into().expect("block");
                let xb: &[f32; 32] = xb.try_into().expect("block");
                for i in 0..16 {
                    let q = wb[i] * xb[i] + wb[16 + i] * xb[16 + i];
                    a[i] += q * sc;
                }
            }
            reduce16(&a)
        }
    }
}

/// Halving tree over 16 lanes: `(i, i+8)` then [`reduce8`].
#[inline(always)]
fn reduce16(a: &[f32; 16]) -> f32 {
    let mut c = [0f32; 8];
    for i in 0..8 {
        c[i] = a[i] + a[i + 8];
    }
    reduce8(&c)
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::super::dense::avx2::hsum8;
    use super::{E2M1_X2, HALF_SCALE};
    use std::arch::x86_64::*;

    /// Software-prefetch distance into `weight_packed` (rows are contiguous,
    /// so this runs into the following rows). Without it the decode is too
    /// long per byte for the out-of-order window to keep enough misses in
    /// flight (measured: 2.6 → 5.8 GB/s from RAM).
    pub(super) const PREFETCH_BYTES: usize = 1024;

    /// # Safety
    /// AVX2 required; `p.len() == 16 * s.len()`, `x.len() == 32 * s.len()`,
    /// `x` permuted.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn dot_packed(p: &[u8], s: &[u8], x: &[f32]) -> f32 {
        let nb = s.len();
        assert!(p.len() == 16 * nb && x.len() == 32 * nb);
        let lut = _mm_loadu_si128(E2M1_X2.as_ptr() as *const __m128i);
        let mask = _mm_set1_epi8(0x0F);
        let pp = p.as_ptr();
        let xp = x.as_ptr();
        let mut acc_lo = _mm256_setzero_ps();
        let mut acc_hi = _mm256_setzero_ps();
        for b in 0..nb {
            if b % 4 == 0 {
                _mm_prefetch::<_MM_HINT_T0>(pp.wrapping_add(16 * b + PREFETCH_BYTES) as *const i8);
            }
            let bytes = _mm_loadu_si128(pp.add(16 * b) as *const __m128i);
            let ve = _mm_shuffle_epi8(lut, _mm_and_si128(bytes, mask)); // even elements
            let vo = _mm_shuffle_epi8(lut, _mm_and_si128(_mm_srli_epi16(bytes, 4), mask));
            let e_lo = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(ve));
            let e_hi = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(ve, 8)));
            let o_lo = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(vo));
            let o_hi = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(vo, 8)));
            let xb = xp.add(32 * b);
            let q_lo = _mm256_add_ps(
                _mm256_mul_ps(e_lo, _mm256_loadu_ps(xb)),
                _mm256_mul_ps(o_lo, _mm256_loadu_ps(xb.add(16))),
            );
            let q_hi = _mm256_add_ps(
                _mm256_mul_ps(e_hi, _mm256_loadu_ps(xb.add(8))),
                _mm256_mul_ps(o_hi, _mm256_loadu_ps(xb.add(24))),
            );
            let sc = _mm256_set1_ps(*HALF_SCALE.get_unchecked(*s.get_unchecked(b) as usize));
            acc_lo = _mm256_add_ps(acc_lo, _mm256_mul_ps(q_lo, sc));
            acc_hi = _mm256_add_ps(acc_hi, _mm256_mul_ps(q_hi, sc));
        }
        hsum8(_mm256_add_ps(acc_lo, acc_hi))
    }

    /// # Safety
    /// AVX2 required; `wf.len() == x.len() == 32 * sf.len()`, both permuted.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn dot_decoded(wf: &[f32], sf: &[f32], x: &[f32]) -> f32 {
        let nb = sf.len();
        assert!(wf.len() == 32 * nb && x.len() == 32 * nb);
        let wp = wf.as_ptr();
        let xp = x.as_ptr();
        let mut acc_lo = _mm256_setzero_ps();
        let mut acc_hi = _mm256_setzero_ps();
        for b in 0..nb {
            let wb = wp.add(32 * b);
            let xb = xp.add(32 * b);
            let ld = |p: *const f32, k: usize| _mm256_loadu_ps(p.add(k));
            let q_lo = _mm256_add_ps(
                _mm256_mul_ps(ld(wb, 0), ld(xb, 0)),
                _mm256_mul_ps(ld(wb, 16), ld(xb, 16)),
            );
            let q_hi = _mm256_add_ps(
                _mm256_mul_ps(ld(wb, 8), ld(xb, 8)),
                _mm256_mul_ps(ld(wb, 24), ld(xb, 24)),
            );
            let sc = _mm256_set1_ps(*sf.get_unchecked(b));
            acc_lo = _mm256_add_ps(acc_lo, _mm256_mul_ps(q_lo, sc));
            acc_hi = _mm256_add_ps(acc_hi, _mm256_mul_ps(q_hi, sc));
        }
        hsum8(_mm256_add_ps(acc_lo, acc_hi))
    }
}

// AVX-512 intrinsics are stable since Rust 1.89, above the workspace's
// declared rust-version (1.85). The dependency tree already needs >= 1.88
// (sha2 0.11), so the declared MSRV is stale; bumping it to 1.89 makes this
// allow unnecessary.
#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::super::dense::avx2::hsum8;
    use super::avx2::PREFETCH_BYTES;
    use super::{E2M1_X2, HALF_SCALE};
    use std::arch::x86_64::*;

    /// # Safety
    /// AVX-512F required; `p.len() == 16 * s.len()`,
    /// `x.len() == 32 * s.len()`, `x` permuted.
    #[target_feature(enable = "avx512f,avx2")]
    pub(super) unsafe fn dot_packed(p: &[u8], s: &[u8], x: &[f32]) -> f32 {
        let nb = s.len();
        assert!(p.len() == 16 * nb && x.len() == 32 * nb);
        let mut lut_f = [0f32; 16];
        for (d, &v) in lut_f.iter_mut().zip(&E2M1_X2) {
            *d = v as f32;
        }
        let lut = _mm512_loadu_ps(lut_f.as_ptr());
        let pp = p.as_ptr();
        let xp = x.as_ptr();
        let mut acc = _mm512_setzero_ps();
        for b in 0..nb {
            if b % 4 == 0 {
                _mm_prefetch::<_MM_HINT_T0>(pp.wrapping_add(16 * b + PREFETCH_BYTES) as *const i8);
            }
            // Byte i of the block in dword lane i; vpermps uses the low 4
            // bits of each index, i.e. the low nibble (even element).
            let v = _mm512_cvtepu8_epi32(_mm_loadu_si128(pp.add(16 * b) as *const __m128i));
            let e = _mm512_permutexvar_ps(v, lut);
            let o = _mm512_permutexvar_ps(_mm512_srli_epi32::<4>(v), lut);
            let xb = xp.add(32 * b);
            let q = _mm512_add_ps(
                _mm512_mul_ps(e, _mm512_loadu_ps(xb)),
                _mm512_mul_ps(o, _mm512_loadu_ps(xb.add(16))),
            );
            let sc = _mm512_set1_ps(*HALF_SCALE.get_unchecked(*s.get_unchecked(b) as usize));
            acc = _mm512_add_ps(acc, _mm512_mul_ps(q, sc));
        }
        let lo = _mm512_castps512_ps256(acc);
        let hi = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(acc)));
        hsum8(_mm256_add_ps(lo, hi))
    }
}
