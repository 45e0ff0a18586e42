//! Products of a routed expert stored as residual vector quantization (`memdial pack
//! --rvq`, [`crate::format::config::rvq`]) against its codebooks.
//!
//! # Format
//! * `codes`: u8 `[rows, cols/8, stages]`: group `j` (weights `8j..8j+8`) of row `r`
//!   is codeword `codes[r, j, s]` of codebook `s`, summed over the stages.
//! * `codebooks`: little-endian F32 `[stages, 256, 8]` (one set per layer and matrix
//!   kind; the slice need not be aligned).
//!
//! # Summation order (fixed; identical on every path)
//! For one output row:
//! 1. Decode: `w[8j + i] = C[0][k0][i]`, then for `s` in `1..stages` in order
//!    `w[8j + i] = w[8j + i] + C[s][ks][i]` (`ks = codes[r, j, s]`; each sum rounded
//!    to f32).
//! 2. `y[r]` = the dense F32 product of the decoded row with `x` in the canonical
//!    order of [`super::dense`] (32 lane accumulators, separately rounded multiply and
//!    add, halving tree, tail).
//!
//! No FMA anywhere, so the AVX2 / AVX-512 and scalar paths are bit-identical; the
//! `matmul` variant decodes a row once and gives each vector the bytes [`matvec_rvq`]
//! gives it. Scratch: one decoded row (`cols` f32) per participant, within
//! [`super::workspace::product_floats`]`(cols, n)`.

use super::dense::{dot_f32_row, PAR_MIN_ELEMS};
use super::par::OutPtr;
use super::workspace::{product_floats, Workspace};
use super::Par;

/// Weights per code (the codewords' length).
pub const GROUP: usize = 8;
/// Codewords per codebook.
pub const CODEBOOK: usize = 256;

/// An RVQ weight matrix `[rows, cols]` as stored (see [the module docs](self)).
#[derive(Clone, Copy, Debug)]
pub struct RvqMat<'a> {
    /// `rvq_codes` u8 `[rows, cols/8, stages]`.
    pub codes: &'a [u8],
    /// `rvq_codebooks` little-endian F32 `[stages, 256, 8]`.
    pub codebooks: &'a [u8],
    /// Output width.
    pub rows: usize,
    /// Input width (multiple of 8).
    pub cols: usize,
    /// Residual stages (≥ 1).
    pub stages: usize,
}

fn check(kernel: &str, w: RvqMat<'_>) {
    let RvqMat {
        codes,
        codebooks,
        rows,
        cols,
        stages,
    } = w;
    assert!(
        stages >= 1 && cols.is_multiple_of(GROUP),
        "{kernel}: cols {cols} is not a multiple of {GROUP} or stages {stages} is 0"
    );
    assert!(
        codes.len() == rows * cols / GROUP * stages,
        "{kernel}: rvq_codes has {} bytes, expected rows {rows} x cols/8 {} x stages {stages}",
        codes.len(),
        cols / GROUP
    );
    assert!(
        codebooks.len() == stages * CODEBOOK * GROUP * 4,
        "{kernel}: rvq_codebooks has {} bytes, expected F32 [{stages}, {CODEBOOK}, {GROUP}]",
        codebooks.len()
    );
}

/// Decodes row `r` of `w` into `out` (`cols` f32), in the stage order of step 1.
#[inline]
fn decode_row(w: RvqMat<'_>, r: usize, out: &mut [f32]) {
    let g = w.cols / GROUP;
    let s = w.stages;
    let codes = &w.codes[r * g * s..(r + 1) * g * s];
    let word = |stage: usize, k: u8, i: usize| -> f32 {
        let o = ((stage * CODEBOOK + k as usize) * GROUP + i) * 4;
        f32::from_le_bytes([
            w.codebooks[o],
            w.codebooks[o + 1],
            w.codebooks[o + 2],
            w.codebooks[o + 3],
        ])
    };
    for (d, ks) in out.chunks_exact_mut(GROUP).zip(codes.chunks_exact(s)) {
        for (i, v) in d.iter_mut().enumerate() {
            *v = word(0, ks[0], i);
        }
        for (stage, &k) in ks.iter().enumerate().skip(1) {
            for (i, v) in d.iter_mut().enumerate() {
                *v += word(stage, k, i);
            }
        }
    }
}

/// Dequantizes `w` to f32 `[rows, cols]` (row-major) with step 1's order: the weights
/// the products multiply. For tests, tools and inspection.
///
/// # Panics
/// On a size mismatch (see [`RvqMat`]).
pub fn dequant_rvq(w: RvqMat<'_>) -> Vec<f32> {
    check("dequant_rvq", w);
    let mut out = vec![0f32; w.rows * w.cols];
    for (r, row) in out.chunks_exact_mut(w.cols.max(1)).enumerate() {
        decode_row(w, r, row);
    }
    out
}

/// `y[r] = Σ_c W[r,c]·x[c]` for an RVQ matrix `w`, each row decoded against the
/// codebooks into the workspace. `x.len() == cols`, `y.len() == rows`; order: see
/// [the module docs](self). No allocation while `ws` holds [`product_floats`]`(cols, 1)`.
///
/// # Panics
/// On shape mismatch.
pub fn matvec_rvq(par: &Par, ws: &mut Workspace, w: RvqMat<'_>, x: &[f32], y: &mut [f32]) {
    matmul_rvq(par, ws, w, x, 1, y)
}

/// Prefill variant of [`matvec_rvq`]: `xs` `[n, cols]` → `ys` `[n, rows]`,
/// `ys[v*rows + r]` bit-identical to [`matvec_rvq`] on vector `v`; each row is
/// decoded once for all `n` vectors. No allocation while `ws` holds
/// [`product_floats`]`(cols, n)`.
///
/// # Panics
/// On shape mismatch.
pub fn matmul_rvq(
    par: &Par,
    ws: &mut Workspace,
    w: RvqMat<'_>,
    xs: &[f32],
    n: usize,
    ys: &mut [f32],
) {
    check("matmul_rvq", w);
    let (rows, cols) = (w.rows, w.cols);
    assert!(
        xs.len() == n * cols,
        "matmul_rvq: xs has {} elements, expected n {n} x cols {cols}",
        xs.len()
    );
    assert!(
        ys.len() == n * rows,
        "matmul_rvq: ys has {} elements, expected n {n} x rows {rows}",
        ys.len()
    );
    if n == 0 {
        return;
    }
    let isa = par.isa();
    // One decoded row per participant (cols ≤ the per-participant panel).
    let (_, per) = product_floats(cols, n);
    let (_, slots) = ws.split(0, per, par.threads());
    let out = OutPtr::new(ys);
    par.for_ranges_on(
        rows,
        16,
        rows * cols * w.stages.max(n),
        PAR_MIN_ELEMS,
        &|who, range| {
            // SAFETY: one live view per participant (Par::for_ranges_on).
            let wf = &mut unsafe { slots.get(who) }[..cols];
            for r in range {
                decode_row(w, r, wf);
                for v in 0..n {
                    let s = dot_f32_row(isa, wf, &xs[v * cols..(v + 1) * cols]);
                    // SAFETY: row r belongs to this part only.
                    unsafe { out.slice(v * rows + r..v * rows + r + 1)[0] = s };
                }
            }
        },
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::Isa;

    /// Two stages, one group: w = C0[1] + C1[2] by hand; y = Σ w·x.
    #[test]
    fn one_group_by_hand() {
        let mut cb = vec![0f32; 2 * CODEBOOK * GROUP];
        for i in 0..GROUP {
            cb[GROUP + i] = i as f32; // C0[1] = 0..7
            cb[(CODEBOOK + 2) * GROUP + i] = 0.5; // C1[2] = 0.5
        }
        let bytes: Vec<u8> = cb.iter().flat_map(|v| v.to_le_bytes()).collect();
        let w = RvqMat {
            codes: &[1, 2],
            codebooks: &bytes,
            rows: 1,
            cols: 8,
            stages: 2,
        };
        assert_eq!(dequant_rvq(w), vec![0.5, 1.5, 2.5, 3.5, 4.5, 5.5, 6.5, 7.5]);
        let x = [1f32; 8];
        for isa in [Isa::Scalar, Isa::detect()] {
            let mut y = [0f32];
            matvec_rvq(
                &Par::with_isa(1, isa),
                &mut Workspace::default(),
                w,
                &x,
                &mut y,
            );
            // 0.5 + 1.5 + … + 7.5 = 32
            assert_eq!(y[0], 32.0);
        }
    }
}
