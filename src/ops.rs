//! The kernel API the model calls: re-exports of [`crate::kernels`].
//!
//! Semantics: weights are little-endian bytes as stored on disk (possibly
//! unaligned), matrices are row-major `[rows, cols]` (PyTorch `nn.Linear`
//! `[out, in]`), arithmetic is f32 with a fixed reduction order, results are
//! bit-identical for every thread count, and `matmul_*` equals `matvec_*` on each
//! vector bit for bit. MXFP4 follows OCP MX v1.0 / compressed-tensors
//! `mxfp4-pack-quantized` (docs/model.md §6).

pub use crate::kernels::{
    bf16_to_f32, dequant_mxfp4, matmul_bf16, matmul_bf16_in, matmul_f32, matmul_f32_in,
    matmul_mxfp4, matmul_mxfp4_in, matvec_bf16, matvec_f32, matvec_mxfp4, matvec_mxfp4_in, Par,
    Workspace,
};

/// For model code that splits independent work (heads, elements) across the pool:
/// the shared output pointer and the kernels' single-thread cut-off.
pub(crate) use crate::kernels::{dense::PAR_MIN_ELEMS, par::OutPtr};
