//! Typed views of weights fetched through the [`WeightStore`].
//!
//! The store hands out raw bytes; this module checks each tensor's byte length
//! against the shape the config implies and decides its element type (BF16 or
//! F32: from a dtype hint taken from the checkpoint header when available, else
//! from the byte length), so that a misshapen tensor becomes an error naming it
//! instead of a kernel panic. Matrices stay in their stored form and are upcast
//! to f32 inside the kernels; vectors (norm weights, biases, `A_log`, …) are
//! decoded to f32.

use std::collections::HashMap;
use std::sync::Arc;

use anyhow::{bail, Context, Result};

use crate::format::schema::Dtype;
use crate::kernels::{self, bf16_le, DenseMat, Mxfp4Mat, Par, RvqMat, Workspace};
use crate::store::{Bytes, ExpertMat, WeightStore};

/// Element type of a dense weight as the model reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Elem {
    /// bfloat16 (upcast by shifting into the high half of an f32).
    Bf16,
    /// IEEE f32.
    F32,
}

/// A weight matrix `[rows, cols]` (`y = W x`), in stored form.
#[derive(Clone, Debug)]
pub enum Mat {
    /// BF16 or F32 row-major bytes.
    Dense {
        /// Stored bytes (`rows·cols·size`).
        bytes: Bytes,
        /// Element type.
        elem: Elem,
        /// Output width.
        rows: usize,
        /// Input width.
        cols: usize,
    },
    /// MXFP4 `weight_packed` `[rows, cols/2]` + E8M0 `weight_scale` `[rows, cols/32]`.
    Mxfp4 {
        /// Packed E2M1 pairs `[rows, cols/2]`.
        packed: Bytes,
        /// E8M0 block scales `[rows, cols/32]`.
        scale: Bytes,
        /// Output width.
        rows: usize,
        /// Input width (multiple of 32).
        cols: usize,
    },
    /// RVQ `rvq_codes` `[rows, cols/8, stages]` against F32 codebooks `[stages, 256, 8]`.
    Rvq {
        /// One byte per stage and group of 8 weights.
        codes: Bytes,
        /// The layer's codebooks of this matrix kind.
        codebooks: Bytes,
        /// Residual stages.
        stages: usize,
        /// Output width.
        rows: usize,
        /// Input width (multiple of 8).
        cols: usize,
    },
}

impl Mat {
    /// Output width.
    pub fn rows(&self) -> usize {
        match self {
            Mat::Dense { rows, .. } | Mat::Mxfp4 { rows, .. } | Mat::Rvq { rows, .. } => *rows,
        }
    }
    /// Input width.
    pub fn cols(&self) -> usize {
        match self {
            Mat::Dense { cols, .. } | Mat::Mxfp4 { cols, .. } | Mat::Rvq { cols, .. } => *cols,
        }
    }

    /// `y = W x`; `x: [cols]` → returns `[rows]` (allocates the result and the
    /// kernel workspace: tests and tools; the forward uses [`Mat::mv_into`]).
    pub fn mv(&self, par: &Par, x: &[f32]) -> Vec<f32> {
        let mut y = vec![0f32; self.rows()];
        self.mv_into(par, &mut Workspace::default(), x, &mut y);
        y
    }

    /// `y = W x` into `y: [rows]`, the kernels' scratch in `ws`.
    pub fn mv_into(&self, par: &Par, ws: &mut Workspace, x: &[f32], y: &mut [f32]) {
        match self.view() {
            View::Bf16(w) => kernels::matvec_bf16(par, w, x, y),
            View::F32(w) => kernels::matvec_f32(par, w, x, y),
            View::Mxfp4(w) => kernels::matvec_mxfp4(par, ws, w, x, y),
            View::Rvq(w) => kernels::matvec_rvq(par, ws, w, x, y),
        }
    }

    /// The kernels' view of the stored bytes.
    fn view(&self) -> View<'_> {
        match self {
            Mat::Dense {
                bytes,
                elem,
                rows,
                cols,
            } => {
                let w = DenseMat {
                    bytes,
                    rows: *rows,
                    cols: *cols,
                };
                match elem {
                    Elem::Bf16 => View::Bf16(w),
                    Elem::F32 => View::F32(w),
                }
            }
            Mat::Mxfp4 {
                packed,
                scale,
                rows,
                cols,
            } => View::Mxfp4(Mxfp4Mat {
                packed,
                scales: scale,
                rows: *rows,
                cols: *cols,
            }),
            Mat::Rvq {
                codes,
                codebooks,
                stages,
                rows,
                cols,
            } => View::Rvq(RvqMat {
                codes,
                codebooks,
                rows: *rows,
                cols: *cols,
                stages: *stages,
            }),
        }
    }

    /// Rows `[r0, r0+n)` of a dense matrix as a `[n, cols]` matrix (a view, no copy).
    ///
    /// # Panics
    /// On an MXFP4 matrix or an out-of-range block (callers pass config-derived ranges).
    pub fn row_block(&self, r0: usize, n: usize) -> Mat {
        match self {
            Mat::Dense {
                bytes,
                elem,
                rows,
                cols,
            } => {
                assert!(r0 + n <= *rows, "row_block out of range");
                let es = if *elem == Elem::Bf16 { 2 } else { 4 };
                Mat::Dense {
                    bytes: bytes.slice(r0 * cols * es, n * cols * es),
                    elem: *elem,
                    rows: n,
                    cols: *cols,
                }
            }
            Mat::Mxfp4 { .. } | Mat::Rvq { .. } => panic!("row_block of a quantized matrix"),
        }
    }

    /// Transposed product `y = Wᵀ x`, `x: [rows]` → `[cols]`, accumulated row by row
    /// in row order (`y += x[r]·W[r,:]`). Dense matrices only (MLA absorbed query).
    ///
    /// # Panics
    /// On an MXFP4 matrix or a size mismatch.
    pub fn tmv(&self, x: &[f32]) -> Vec<f32> {
        let mut y = vec![0f32; self.cols()];
        self.tmv_into(x, &mut y);
        y
    }

    /// [`Mat::tmv`] into `y: [cols]` (zeroed first, then accumulated in row order).
    ///
    /// # Panics
    /// On an MXFP4 matrix or a size mismatch.
    pub fn tmv_into(&self, x: &[f32], y: &mut [f32]) {
        let Mat::Dense {
            bytes,
            elem,
            rows,
            cols,
        } = self
        else {
            panic!("tmv of an MXFP4 matrix")
        };
        assert_eq!(x.len(), *rows, "tmv: x size");
        assert_eq!(y.len(), *cols, "tmv: y size");
        y.fill(0.0);
        for (r, xr) in x.iter().enumerate() {
            match elem {
                Elem::Bf16 => {
                    let row = &bytes[r * cols * 2..(r + 1) * cols * 2];
                    for (c, yc) in y.iter_mut().enumerate() {
                        let w = f32::from_bits(
                            (u16::from_le_bytes([row[2 * c], row[2 * c + 1]]) as u32) << 16,
                        );
                        *yc += w * xr;
                    }
                }
                Elem::F32 => {
                    let row = &bytes[r * cols * 4..(r + 1) * cols * 4];
                    for (c, yc) in y.iter_mut().enumerate() {
                        let w = f32::from_le_bytes([
                            row[4 * c],
                            row[4 * c + 1],
                            row[4 * c + 2],
                            row[4 * c + 3],
                        ]);
                        *yc += w * xr;
                    }
                }
            }
        }
    }

    /// Batched product: `xs` `[n, cols]` → `[n, rows]`, each row bit-identical to
    /// [`Mat::mv`] (allocates; the forward uses [`Mat::mm_into`]).
    pub fn mm(&self, par: &Par, xs: &[f32], n: usize) -> Vec<f32> {
        let mut ys = vec![0f32; n * self.rows()];
        self.mm_into(par, &mut Workspace::default(), xs, n, &mut ys);
        ys
    }

    /// [`Mat::mm`] into `ys: [n, rows]` (every element written; pass zeros for
    /// the same bytes as [`Mat::mm`] on any path), the kernels' scratch in `ws`
    /// (no allocation while it holds [`crate::kernels::workspace::product_floats`]`(cols, n)`).
    pub fn mm_into(&self, par: &Par, ws: &mut Workspace, xs: &[f32], n: usize, ys: &mut [f32]) {
        let (rows, cols) = (self.rows(), self.cols());
        let ys = &mut ys[..n * rows];
        match self.view() {
            View::Bf16(w) if n > 1 => kernels::matmul_bf16(par, ws, w, xs, n, ys),
            View::F32(w) if n > 1 => kernels::matmul_f32(par, ws, w, xs, n, ys),
            View::Mxfp4(w) if n > 1 => kernels::matmul_mxfp4(par, ws, w, xs, n, ys),
            View::Rvq(w) if n > 1 => kernels::matmul_rvq(par, ws, w, xs, n, ys),
            _ => {
                for v in 0..n {
                    self.mv_into(
                        par,
                        ws,
                        &xs[v * cols..(v + 1) * cols],
                        &mut ys[v * rows..(v + 1) * rows],
                    );
                }
            }
        }
    }
}

/// A [`Mat`] as the kernel that multiplies it takes it.
enum View<'a> {
    Bf16(DenseMat<'a>),
    F32(DenseMat<'a>),
    Mxfp4(Mxfp4Mat<'a>),
    Rvq(RvqMat<'a>),
}

/// Decodes little-endian F32 bytes.
pub fn f32_from_le(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// Decodes BF16 / F32 little-endian bytes into `out` (cleared first).
pub fn decode_into(elem: Elem, b: &[u8], out: &mut Vec<f32>) {
    out.clear();
    decode_append(elem, b, out);
}

/// Decodes BF16 / F32 little-endian bytes, appending to `out`.
fn decode_append(elem: Elem, b: &[u8], out: &mut Vec<f32>) {
    match elem {
        Elem::Bf16 => out.extend(b.chunks_exact(2).map(|c| bf16_le([c[0], c[1]]))),
        Elem::F32 => out.extend(
            b.chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])),
        ),
    }
}

/// Weight accessor: the store plus optional per-tensor dtype hints.
pub struct Weights {
    /// The store every weight is read from.
    pub store: Arc<dyn WeightStore>,
    /// Dtype per tensor name (without the weight prefix), from the checkpoint header.
    pub hints: HashMap<String, Dtype>,
}

fn full_name(layer: Option<usize>, name: &str) -> String {
    match layer {
        Some(l) => crate::format::schema::layer_name(l, name),
        None => name.to_string(),
    }
}

impl Weights {
    fn hint(&self, layer: Option<usize>, name: &str) -> Option<Dtype> {
        if self.hints.is_empty() {
            return None;
        }
        self.hints.get(&full_name(layer, name)).copied()
    }

    fn elem_for(&self, layer: Option<usize>, name: &str, len: usize, n: usize) -> Result<Elem> {
        let fname = full_name(layer, name);
        match self.hint(layer, name) {
            Some(Dtype::BF16) if len == 2 * n => Ok(Elem::Bf16),
            Some(Dtype::F32) if len == 4 * n => Ok(Elem::F32),
            Some(d) => bail!(
                "tensor {fname}: {len} bytes of {} do not hold the expected {n} elements",
                d.as_str()
            ),
            None if len == 2 * n => Ok(Elem::Bf16),
            None if len == 4 * n => Ok(Elem::F32),
            None => bail!(
                "tensor {fname}: {len} bytes, expected {n} elements as BF16 ({} bytes) or F32 ({} bytes)",
                2 * n,
                4 * n
            ),
        }
    }

    /// The element type of `len` bytes of tensor `name` of `layer` holding `n`
    /// elements (a part of it, e.g. one expert's slice of a stacked tensor): the
    /// checkpoint's dtype when known, else BF16 or F32 by length.
    ///
    /// Errors: `len` is not `n` elements of that dtype (the tensor named).
    pub fn part_elem(
        &self,
        layer: Option<usize>,
        name: &str,
        len: usize,
        n: usize,
    ) -> Result<Elem> {
        self.elem_for(layer, name, len, n)
    }

    fn raw(&self, layer: Option<usize>, name: &str) -> Result<Bytes> {
        self.store
            .tensor(layer, name)
            .with_context(|| format!("reading tensor {}", full_name(layer, name)))
    }

    /// Dense matrix `name` of `layer` with shape `[rows, cols]` (BF16 or F32).
    pub fn mat(&self, layer: Option<usize>, name: &str, rows: usize, cols: usize) -> Result<Mat> {
        let bytes = self.raw(layer, name)?;
        let elem = self.elem_for(layer, name, bytes.len(), rows * cols)?;
        Ok(Mat::Dense {
            bytes,
            elem,
            rows,
            cols,
        })
    }

    /// Vector `name` of `layer` with exactly `n` elements, decoded to f32.
    pub fn vec(&self, layer: Option<usize>, name: &str, n: usize) -> Result<Vec<f32>> {
        let bytes = self.raw(layer, name)?;
        Ok(match self.elem_for(layer, name, bytes.len(), n)? {
            Elem::Bf16 => kernels::bf16_to_f32(&bytes),
            Elem::F32 => f32_from_le(&bytes),
        })
    }

    /// [`Weights::vec`] into `out` (cleared; no reallocation within its capacity).
    pub fn vec_into(
        &self,
        layer: Option<usize>,
        name: &str,
        n: usize,
        out: &mut Vec<f32>,
    ) -> Result<()> {
        out.clear();
        self.vec_append(layer, name, n, out)
    }

    /// [`Weights::vec`] appended to `out` (no reallocation within its capacity).
    pub fn vec_append(
        &self,
        layer: Option<usize>,
        name: &str,
        n: usize,
        out: &mut Vec<f32>,
    ) -> Result<()> {
        let bytes = self.raw(layer, name)?;
        let elem = self.elem_for(layer, name, bytes.len(), n)?;
        decode_append(elem, &bytes, out);
        Ok(())
    }

    /// The first `n` elements of a tensor of any shape (K3 `A_log`: stored with
    /// `head_dim` entries, per-head values first; Kimi-Linear `[1,1,H,1]`). Without a
    /// dtype hint the element type is F32 when the byte length is a multiple of 4
    /// (published `A_log` is F32), else BF16.
    pub fn vec_prefix(&self, layer: Option<usize>, name: &str, n: usize) -> Result<Vec<f32>> {
        let mut out = Vec::with_capacity(n);
        self.vec_prefix_into(layer, name, n, &mut out)?;
        Ok(out)
    }

    /// [`Weights::vec_prefix`] into `out` (cleared; no reallocation within its capacity).
    pub fn vec_prefix_into(
        &self,
        layer: Option<usize>,
        name: &str,
        n: usize,
        out: &mut Vec<f32>,
    ) -> Result<()> {
        let bytes = self.raw(layer, name)?;
        let elem = match self.hint(layer, name) {
            Some(Dtype::BF16) => Elem::Bf16,
            Some(Dtype::F32) => Elem::F32,
            Some(d) => bail!(
                "tensor {}: dtype {} is not BF16/F32",
                full_name(layer, name),
                d.as_str()
            ),
            None if bytes.len() % 4 == 0 => Elem::F32,
            None => Elem::Bf16,
        };
        let size = if elem == Elem::F32 { 4 } else { 2 };
        if bytes.len() < n * size {
            bail!(
                "tensor {}: {} bytes hold fewer than the {n} elements needed",
                full_name(layer, name),
                bytes.len()
            );
        }
        decode_into(elem, &bytes[..n * size], out);
        Ok(())
    }

    /// Element type of the 2-D tensor `name` `[rows, cols]`: the dtype hint, else from
    /// the whole tensor's byte length (fetched once for that).
    fn elem_of(&self, layer: Option<usize>, name: &str, rows: usize, cols: usize) -> Result<Elem> {
        match self.hint(layer, name) {
            Some(Dtype::BF16) => Ok(Elem::Bf16),
            Some(Dtype::F32) => Ok(Elem::F32),
            _ => {
                let bytes = self.raw(layer, name)?;
                self.elem_for(layer, name, bytes.len(), rows * cols)
            }
        }
    }

    /// Rows `ids` of a `[rows, cols]` matrix (embedding lookup of a forward's tokens),
    /// decoded to f32 into `out: [ids.len(), cols]`. The store reads only these rows
    /// when it does not hold the table ([`WeightStore::rows`]).
    ///
    /// Errors: an id ≥ `rows`, a misshapen row, store errors (naming the tensor).
    pub fn rows_into(
        &self,
        layer: Option<usize>,
        name: &str,
        rows: usize,
        cols: usize,
        ids: &[usize],
        out: &mut [f32],
    ) -> Result<()> {
        if let Some(&bad) = ids.iter().find(|&&r| r >= rows) {
            bail!(
                "row {bad} out of range for tensor {} ({rows} rows)",
                full_name(layer, name)
            );
        }
        let elem = self.elem_of(layer, name, rows, cols)?;
        let rb = cols * if elem == Elem::Bf16 { 2 } else { 4 };
        let got = self
            .store
            .rows(layer, name, rb, ids)
            .with_context(|| format!("reading rows of tensor {}", full_name(layer, name)))?;
        for (b, o) in got.iter().zip(out.chunks_exact_mut(cols)) {
            if b.len() != rb {
                bail!(
                    "tensor {}: a row of {} bytes, expected {rb}",
                    full_name(layer, name),
                    b.len()
                );
            }
            match elem {
                Elem::Bf16 => {
                    for (o, c) in o.iter_mut().zip(b.chunks_exact(2)) {
                        *o = bf16_le([c[0], c[1]]);
                    }
                }
                Elem::F32 => {
                    for (o, c) in o.iter_mut().zip(b.chunks_exact(4)) {
                        *o = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
                    }
                }
            }
        }
        Ok(())
    }

    /// The row blocks in which the store streams `[rows, ·]` matrix `name` ([`WeightStore::row_blocks`]).
    pub fn row_blocks(
        &self,
        layer: Option<usize>,
        name: &str,
        rows: usize,
    ) -> Vec<std::ops::Range<usize>> {
        self.store.row_blocks(layer, name, rows)
    }

    /// Rows `r` (a block of [`Weights::row_blocks`]) of the `[rows, cols]` matrix `name`,
    /// as a `[r.len(), cols]` matrix.
    ///
    /// Errors: store errors; a block whose size does not match (naming the tensor).
    pub fn mat_rows(
        &self,
        layer: Option<usize>,
        name: &str,
        rows: usize,
        cols: usize,
        r: std::ops::Range<usize>,
    ) -> Result<Mat> {
        let elem = self.elem_of(layer, name, rows, cols)?;
        let rb = cols * if elem == Elem::Bf16 { 2 } else { 4 };
        let bytes = self
            .store
            .tensor_rows(layer, name, r.clone(), rb)
            .with_context(|| format!("reading rows {r:?} of tensor {}", full_name(layer, name)))?;
        if bytes.len() != r.len() * rb {
            bail!(
                "tensor {}: rows {r:?} are {} bytes, expected {}",
                full_name(layer, name),
                bytes.len(),
                r.len() * rb
            );
        }
        Ok(Mat::Dense {
            bytes,
            elem,
            rows: r.len(),
            cols,
        })
    }

    /// Row `row` of a `[rows, cols]` matrix, decoded to f32 into `out: [cols]`.
    ///
    /// Errors: `row` ≥ `rows`, a misshapen tensor, store errors (naming the tensor).
    pub fn row_into(
        &self,
        layer: Option<usize>,
        name: &str,
        rows: usize,
        cols: usize,
        row: usize,
        out: &mut [f32],
    ) -> Result<()> {
        let bytes = self.raw(layer, name)?;
        let elem = self.elem_for(layer, name, bytes.len(), rows * cols)?;
        if row >= rows {
            bail!(
                "row {row} out of range for tensor {} ({rows} rows)",
                full_name(layer, name)
            );
        }
        match elem {
            Elem::Bf16 => {
                for (o, c) in out
                    .iter_mut()
                    .zip(bytes[row * cols * 2..(row + 1) * cols * 2].chunks_exact(2))
                {
                    *o = bf16_le([c[0], c[1]]);
                }
            }
            Elem::F32 => {
                for (o, c) in out
                    .iter_mut()
                    .zip(bytes[row * cols * 4..(row + 1) * cols * 4].chunks_exact(4))
                {
                    *o = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
                }
            }
        }
        Ok(())
    }

    /// Converts a routed-expert matrix from the store, checking its size against `[rows, cols]`.
    pub fn expert_mat(
        &self,
        layer: usize,
        expert: usize,
        which: &str,
        m: ExpertMat,
        rows: usize,
        cols: usize,
    ) -> Result<Mat> {
        let what = || format!("layer {layer} expert {expert} {which}");
        match m {
            ExpertMat::Bf16(bytes) => {
                if bytes.len() != rows * cols * 2 {
                    bail!(
                        "{}: {} bytes, expected BF16 [{rows}, {cols}] = {} bytes",
                        what(),
                        bytes.len(),
                        rows * cols * 2
                    );
                }
                Ok(Mat::Dense {
                    bytes,
                    elem: Elem::Bf16,
                    rows,
                    cols,
                })
            }
            ExpertMat::Mxfp4 { packed, scale } => {
                if !cols.is_multiple_of(32)
                    || packed.len() != rows * cols / 2
                    || scale.len() != rows * cols / 32
                {
                    bail!(
                        "{}: MXFP4 weight_packed {} bytes / weight_scale {} bytes do not match [{rows}, {cols}] \
                         (expected {} / {})",
                        what(),
                        packed.len(),
                        scale.len(),
                        rows * cols / 2,
                        rows * cols / 32
                    );
                }
                Ok(Mat::Mxfp4 {
                    packed,
                    scale,
                    rows,
                    cols,
                })
            }
            ExpertMat::Rvq {
                codes,
                codebooks,
                stages,
            } => {
                let (g, k) = (kernels::rvq::GROUP, kernels::rvq::CODEBOOK);
                if !cols.is_multiple_of(g)
                    || codes.len() != rows * cols / g * stages
                    || codebooks.len() != stages * k * g * 4
                {
                    bail!(
                        "{}: RVQ rvq_codes {} bytes / rvq_codebooks {} bytes do not match [{rows}, {cols}] \
                         at {stages} stages (expected {} / {})",
                        what(),
                        codes.len(),
                        codebooks.len(),
                        rows * cols / g * stages,
                        stages * k * g * 4
                    );
                }
                Ok(Mat::Rvq {
                    codes,
                    codebooks,
                    stages,
                    rows,
                    cols,
                })
            }
        }
    }
}
