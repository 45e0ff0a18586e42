//! CPU compute kernels: BF16 / F32 / MXFP4 / RVQ matrix–vector products and MLA
//! decode attention ([`mla_attend`]).
//!
//! # Layouts
//! Weights are raw little-endian bytes exactly as stored in safetensors,
//! row-major `[rows, cols]` = PyTorch `nn.Linear.weight` `[out, in]`, so
//! `y[r] = Σ_c W[r, c] · x[c]`. Byte slices need no alignment.
//! Matrix–matrix ("prefill") variants take `xs` as `[n, cols]` and write
//! `ys` as `[n, rows]`, both row-major f32.
//!
//! # Determinism
//! * Each output element is computed by exactly one thread, by a sequential
//!   reduction whose order is fixed by `cols` alone (documented per format
//!   in [`dense`], [`mxfp4`] and [`rvq`]). Results are bit-identical for every
//!   thread count of [`Par`], and the `matmul_*` variants give bit-identical
//!   results to calling the matching `matvec_*` once per input vector.
//! * The SIMD (AVX-512 / AVX2) and scalar paths implement the *same* order
//!   with the same separately-rounded multiplies and adds (no FMA
//!   contraction), so they are bit-identical as well (tested): output does
//!   not depend on the CPU's vector extensions either. The ISA is chosen
//!   once per [`Par`] by [`Isa::detect`]; set `MEMDIAL_KERNELS=scalar` (or
//!   `avx2`) to force a path, or build a `Par` with [`Par::with_isa`].
//! * Denormals are not flushed (Rust default MXCSR).
//!
//! # Memory
//! One entry point per kernel. Those that need scratch take a caller-held
//! [`Workspace`] (sized by [`workspace::product_floats`] /
//! [`workspace::attend_floats`]) and allocate nothing while it holds that much;
//! tests and tools pass `&mut Workspace::default()`, which grows on first use.
//! Matrices are passed as views of their stored bytes ([`DenseMat`], [`Mxfp4Mat`]),
//! the MLA cache and queries as [`Latents`] and [`HeadQueries`].
//!
//! # Errors
//! Shape mismatches are programming errors and panic with a message naming
//! the kernel and the shapes (the loader validates shapes beforehand).

pub mod bandwidth;
pub mod dense;
mod matmul;
pub mod mla_attend;
pub mod mxfp4;
pub mod par;
pub mod peak;
pub mod rvq;
pub mod workspace;

pub use bandwidth::ram_read_bandwidth;
pub use dense::{bf16_le, bf16_to_f32, matmul_bf16, matmul_f32, matvec_bf16, matvec_f32, DenseMat};
pub use mla_attend::{attend_latent_heads, attend_latent_ref, HeadQueries, Latents};
pub use mxfp4::{dequant_mxfp4, matmul_mxfp4, matvec_mxfp4, Mxfp4Mat};
pub use par::Par;
pub use peak::f32_peak_flops;
pub use rvq::{dequant_rvq, matmul_rvq, matvec_rvq, RvqMat};
pub use workspace::Workspace;

/// Instruction-set path used by the kernels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Isa {
    /// Portable Rust (the compiler may still use SSE2 on x86_64; results are
    /// identical to the SIMD path by construction).
    Scalar,
    /// x86_64 AVX2 intrinsics (`std::arch`), runtime-detected.
    Avx2,
    /// AVX2 plus AVX-512F for the MXFP4 decoder and the prefill matmuls
    /// (16-lane tiles, `src/kernels/matmul/avx512.rs`); other kernels use AVX2.
    Avx512,
}

impl Isa {
    /// The best supported ISA on this CPU, unless the environment variable
    /// `MEMDIAL_KERNELS` is `scalar` (then [`Isa::Scalar`]) or `avx2` (then at
    /// most [`Isa::Avx2`]). Read at each
    /// call (cheap); [`Par`] stores the result, so one `Par` never switches.
    pub fn detect() -> Isa {
        if std::env::var("MEMDIAL_KERNELS").is_ok_and(|v| v.eq_ignore_ascii_case("scalar")) {
            return Isa::Scalar;
        }
        if std::env::var("MEMDIAL_KERNELS").is_ok_and(|v| v.eq_ignore_ascii_case("avx2"))
            && Isa::Avx2.is_supported()
        {
            return Isa::Avx2;
        }
        [Isa::Avx512, Isa::Avx2]
            .into_iter()
            .find(|i| i.is_supported())
            .unwrap_or(Isa::Scalar)
    }

    /// Whether this CPU can run the path.
    pub fn is_supported(self) -> bool {
        match self {
            Isa::Scalar => true,
            Isa::Avx2 => avx2_available(),
            Isa::Avx512 => avx2_available() && avx512_available(),
        }
    }
}

#[cfg(target_arch = "x86_64")]
fn avx2_available() -> bool {
    is_x86_feature_detected!("avx2")
}

#[cfg(target_arch = "x86_64")]
fn avx512_available() -> bool {
    is_x86_feature_detected!("avx512f")
}

#[cfg(not(target_arch = "x86_64"))]
fn avx2_available() -> bool {
    false
}

#[cfg(not(target_arch = "x86_64"))]
fn avx512_available() -> bool {
    false
}
