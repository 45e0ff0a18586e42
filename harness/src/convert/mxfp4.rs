//! MXFP4 experts from the checkpoint's compressed-tensors layout to ggml's.
//!
//! Source (`mxfp4-pack-quantized`, see `memdial::kernels::mxfp4`): per row, packed
//! byte `j` holds element `2j` in its low nibble and `2j+1` in its high nibble; one
//! E8M0 scale byte per 32 elements.
//!
//! Destination (ggml `block_mxfp4`, `ggml-common.h`; read by
//! `dequantize_row_mxfp4` in `ggml-quants.c`): per block of 32 elements, the E8M0
//! byte `e`, then `qs[16]` where `qs[j]` holds element `j` in its low nibble and
//! element `j + 16` in its high nibble. The 4-bit codes are the same E2M1 codes
//! (ggml's `kvalues_mxfp4` table holds twice the E2M1 values and
//! `ggml_e8m0_to_fp32_half(e)` half the scale, so each value is unchanged): the
//! repack only moves bits, as llama.cpp's converter does (`repack_mxfp4_blocks`).

/// Appends the `block_mxfp4` bytes of one `[rows, cols]` matrix (`packed`: rows ·
/// cols/2 bytes, `scales`: rows · cols/32 bytes) to `out` (rows · cols/32 · 17 bytes).
pub fn repack(packed: &[u8], scales: &[u8], out: &mut Vec<u8>) {
    for (b, &e) in scales.iter().enumerate() {
        let src = &packed[b * 16..b * 16 + 16];
        let el = |i: usize| -> u8 {
            let byte = src[i / 2];
            if i.is_multiple_of(2) {
                byte & 0x0F
            } else {
                byte >> 4
            }
        };
        out.push(e);
        for j in 0..16 {
            out.push(el(j) | (el(j + 16) << 4));
        }
    }
}

/// The f32 values of one `[rows, cols]` MXFP4 matrix (row-major), exact
/// (`memdial::kernels::mxfp4::dequant_mxfp4`: E2M1 · 2^(e − 127); e = 0xFF is NaN).
pub fn dequant(packed: &[u8], scales: &[u8]) -> Vec<f32> {
    // row-major blocks of 32 either way: `scales.len()` rows of 32 columns
    memdial::kernels::mxfp4::dequant_mxfp4(packed, scales, scales.len(), 32)
}
