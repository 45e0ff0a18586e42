//! The `quantization_config` of a checkpoint written by `memdial pack --rvq BITS`:
//! routed experts as residual vector quantization (docs/lossless.md, "Lossy: RVQ
//! experts").
//!
//! ```json
//! "quantization_config": {"quant_method": "memdial-rvq", "bits": 3, "stages": 3,
//!   "group_size": 8, "codebook_size": 256, "kmeans_iterations": 8, "seed": 1,
//!   "training_vectors": 65536}
//! ```
//!
//! A routed expert matrix `W [out, in]` is cut into groups of [`RVQ_GROUP`] consecutive
//! weights of a row; group `j` of row `r` is stored as `stages` one-byte codes
//! (`experts.{e}.{w1,w2,w3}.rvq_codes` U8 `[out, in/8, stages]`), and decodes as the
//! sum over stages, in stage order, of codeword `codes[r, j, s]` of codebook `s`
//! (`block_sparse_moe.rvq_codebooks.{w1,w2,w3}` F32 `[stages, 256, 8]`, one set per
//! layer and matrix). Bits per weight: `stages · 8 / 8 = stages`.

use anyhow::{bail, Result};
use serde_json::Value;

/// Weights per code: the codewords' length.
pub const RVQ_GROUP: usize = 8;
/// Codewords per codebook (one byte per code).
pub const RVQ_CODEBOOK: usize = 256;
/// Largest stage count accepted (8 bits per weight, the BF16 / 2 size).
pub const RVQ_MAX_STAGES: usize = 8;
/// The `quant_method` of an RVQ checkpoint.
pub const RVQ_METHOD: &str = "memdial-rvq";

/// RVQ parameters of the routed experts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RvqConfig {
    /// Residual stages (= bits per weight), 1..=[`RVQ_MAX_STAGES`].
    pub stages: usize,
}

impl RvqConfig {
    /// Stored bytes of the codes of a `[rows, cols]` matrix: `rows · cols/8 · stages`.
    pub fn codes_bytes(&self, rows: usize, cols: usize) -> usize {
        rows * (cols / RVQ_GROUP) * self.stages
    }
    /// Floats of one matrix kind's codebooks of a layer: `stages · 256 · 8`.
    pub fn codebook_floats(&self) -> usize {
        self.stages * RVQ_CODEBOOK * RVQ_GROUP
    }
}

/// Parses an RVQ `quantization_config` object `q` (its `quant_method` already seen).
///
/// Errors: `bits` missing or outside 1..=8; `stages`, `group_size` or
/// `codebook_size` present with another value than this format's.
pub fn parse(q: &Value) -> Result<RvqConfig> {
    let int = |k: &str| q.get(k).and_then(Value::as_u64);
    let Some(bits) = int("bits") else {
        bail!(
            "quantization_config {RVQ_METHOD}: `bits` (an integer 1..={RVQ_MAX_STAGES}) is missing"
        );
    };
    if bits == 0 || bits as usize > RVQ_MAX_STAGES {
        bail!("quantization_config {RVQ_METHOD}: bits {bits} is outside 1..={RVQ_MAX_STAGES}");
    }
    for (k, want) in [
        ("stages", bits),
        ("group_size", RVQ_GROUP as u64),
        ("codebook_size", RVQ_CODEBOOK as u64),
    ] {
        if let Some(v) = q.get(k) {
            if v.as_u64() != Some(want) {
                bail!("quantization_config {RVQ_METHOD}: {k} {v} (this format has {k} {want} for bits {bits})");
            }
        }
    }
    Ok(RvqConfig {
        stages: bits as usize,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parses_bits_and_refuses_other_shapes() {
        let q = json!({"quant_method": RVQ_METHOD, "bits": 3, "stages": 3, "group_size": 8});
        assert_eq!(parse(&q).unwrap(), RvqConfig { stages: 3 });
        // [640, 1024] at 3 stages: 640 · 128 · 3 = 245,760 bytes (vs 327,680 + 20,480 MXFP4).
        assert_eq!(RvqConfig { stages: 3 }.codes_bytes(640, 1024), 245_760);
        for bad in [
            json!({"bits": 0}),
            json!({"bits": 9}),
            json!({}),
            json!({"bits": 3, "group_size": 4}),
            json!({"bits": 3, "stages": 2}),
        ] {
            assert!(parse(&bad).is_err(), "{bad}");
        }
    }
}
