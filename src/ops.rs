//! Reference (scalar, single-threaded) implementations of the kernel API the model uses.
//!
//! The optimised kernels (`src/kernels/`, branch `kern`) expose exactly these
//! signatures; at merge this file becomes re-exports of them. Semantics shared by
//! both: weights are little-endian bytes as stored on disk (possibly unaligned),
//! matrices are row-major `[rows, cols]` (PyTorch `nn.Linear` `[out, in]`), all
//! arithmetic is f32, and `matmul_*` results are bit-identical to `matvec_*` on
//! each vector.
//!
//! MXFP4 (OCP MX v1.0, compressed-tensors `mxfp4-pack-quantized`, k3-architecture.md §5):
//! `W[o,i] = E2M1(nibble(packed[o, i/2])) · 2^(scale[o, i/32] − 127)`, even `i` in the
//! low nibble; E2M1 magnitudes `0, 0.5, 1, 1.5, 2, 3, 4, 6`, bit 3 = sign.

#![warn(missing_docs)]

/// Thread-count handle passed to every kernel (a dummy here: the reference kernels
/// are single-threaded, so results never depend on it).
#[derive(Debug, Clone)]
pub struct Par {
    threads: usize,
}

impl Par {
    /// A handle for `threads` worker threads (clamped to ≥ 1).
    pub fn new(threads: usize) -> Par {
        Par {
            threads: threads.max(1),
        }
    }
    /// Number of threads requested.
    pub fn threads(&self) -> usize {
        self.threads
    }
}

/// E2M1 code → value (codes 8..15 are the negatives; code 8 = −0).
pub const E2M1_VALUES: [f32; 16] = [
    0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0,
];

/// E8M0 scale byte `s` → `2^(s−127)` (s = 255 gives +inf, as transformers' `ldexp`).
#[inline]
pub fn e8m0(s: u8) -> f32 {
    2f32.powi(s as i32 - 127)
}

#[inline]
fn bf16_at(w: &[u8], i: usize) -> f32 {
    f32::from_bits((u16::from_le_bytes([w[2 * i], w[2 * i + 1]]) as u32) << 16)
}

#[inline]
fn f32_at(w: &[u8], i: usize) -> f32 {
    f32::from_le_bytes([w[4 * i], w[4 * i + 1], w[4 * i + 2], w[4 * i + 3]])
}

/// `y = W x` for a BF16 matrix `w` (`rows·cols·2` bytes). `x: [cols]`, `y: [rows]`.
///
/// # Panics
/// On a size mismatch (callers validate shapes first).
pub fn matvec_bf16(_par: &Par, w: &[u8], rows: usize, cols: usize, x: &[f32], y: &mut [f32]) {
    assert_eq!(w.len(), rows * cols * 2, "matvec_bf16: weight size");
    assert_eq!(x.len(), cols, "matvec_bf16: x size");
    assert_eq!(y.len(), rows, "matvec_bf16: y size");
    for (r, yr) in y.iter_mut().enumerate() {
        let row = &w[r * cols * 2..(r + 1) * cols * 2];
        let mut acc = 0f32;
        for (c, xc) in x.iter().enumerate() {
            acc += bf16_at(row, c) * xc;
        }
        *yr = acc;
    }
}

/// `y = W x` for an F32 matrix `w` (`rows·cols·4` bytes). `x: [cols]`, `y: [rows]`.
///
/// # Panics
/// On a size mismatch.
pub fn matvec_f32(_par: &Par, w: &[u8], rows: usize, cols: usize, x: &[f32], y: &mut [f32]) {
    assert_eq!(w.len(), rows * cols * 4, "matvec_f32: weight size");
    assert_eq!(x.len(), cols, "matvec_f32: x size");
    assert_eq!(y.len(), rows, "matvec_f32: y size");
    for (r, yr) in y.iter_mut().enumerate() {
        let row = &w[r * cols * 4..(r + 1) * cols * 4];
        let mut acc = 0f32;
        for (c, xc) in x.iter().enumerate() {
            acc += f32_at(row, c) * xc;
        }
        *yr = acc;
    }
}

/// `y = W x` for an MXFP4 matrix: `packed` `[rows, cols/2]`, `scales` `[rows, cols/32]`,
/// decoded on the fly (never expanded). `cols % 32 == 0`.
///
/// # Panics
/// On a size mismatch.
pub fn matvec_mxfp4(
    _par: &Par,
    packed: &[u8],
    scales: &[u8],
    rows: usize,
    cols: usize,
    x: &[f32],
    y: &mut [f32],
) {
    assert!(cols % 32 == 0, "matvec_mxfp4: cols % 32");
    assert_eq!(packed.len(), rows * cols / 2, "matvec_mxfp4: packed size");
    assert_eq!(scales.len(), rows * cols / 32, "matvec_mxfp4: scale size");
    assert_eq!(x.len(), cols, "matvec_mxfp4: x size");
    assert_eq!(y.len(), rows, "matvec_mxfp4: y size");
    let (pb, sb) = (cols / 2, cols / 32);
    for (r, yr) in y.iter_mut().enumerate() {
        let p = &packed[r * pb..(r + 1) * pb];
        let s = &scales[r * sb..(r + 1) * sb];
        let mut acc = 0f32;
        for (b, &sc) in s.iter().enumerate() {
            let mut blk = 0f32;
            for j in 0..16 {
                let byte = p[b * 16 + j];
                let i = b * 32 + 2 * j;
                blk += E2M1_VALUES[(byte & 15) as usize] * x[i];
                blk += E2M1_VALUES[(byte >> 4) as usize] * x[i + 1];
            }
            acc += blk * e8m0(sc);
        }
        *yr = acc;
    }
}

/// Batched BF16 product: `xs` `[n, cols]` → `ys` `[n, rows]`; row `v` of `ys` is
/// bit-identical to [`matvec_bf16`] on row `v` of `xs`.
///
/// # Panics
/// On a size mismatch.
pub fn matmul_bf16(
    par: &Par,
    w: &[u8],
    rows: usize,
    cols: usize,
    xs: &[f32],
    n: usize,
    ys: &mut [f32],
) {
    assert_eq!(xs.len(), n * cols, "matmul_bf16: xs size");
    assert_eq!(ys.len(), n * rows, "matmul_bf16: ys size");
    for v in 0..n {
        matvec_bf16(
            par,
            w,
            rows,
            cols,
            &xs[v * cols..(v + 1) * cols],
            &mut ys[v * rows..(v + 1) * rows],
        );
    }
}

/// Expands an MXFP4 matrix to f32 `[rows, cols]` (tests and inspection only; the
/// forward path never calls this).
///
/// # Panics
/// On a size mismatch.
pub fn dequant_mxfp4(packed: &[u8], scales: &[u8], rows: usize, cols: usize) -> Vec<f32> {
    assert!(cols % 32 == 0, "dequant_mxfp4: cols % 32");
    assert_eq!(packed.len(), rows * cols / 2, "dequant_mxfp4: packed size");
    assert_eq!(scales.len(), rows * cols / 32, "dequant_mxfp4: scale size");
    let mut out = Vec::with_capacity(rows * cols);
    for (i, &b) in packed.iter().enumerate() {
        let r = (2 * i) / cols;
        let c = (2 * i) % cols;
        let s = e8m0(scales[r * (cols / 32) + c / 32]);
        out.push(E2M1_VALUES[(b & 15) as usize] * s);
        out.push(E2M1_VALUES[(b >> 4) as usize] * s);
    }
    out
}
