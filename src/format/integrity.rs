//! Non-finite values are errors, never output.
//!
//! A NaN anywhere in the forward pass makes every logit NaN, and greedy sampling of an
//! all-NaN row picks id 0 at every budget — identical garbage that a byte-identity check
//! would pass. So:
//!
//! - [`check_logits`]: every forward checks the logits it returns (`rows × vocab` f32, a
//!   negligible cost next to the `lm_head` product that made them) and fails naming the
//!   position;
//! - [`check_hidden`]: with the debug option `Model::with_hidden_checks` (`memdial run
//!   --check-hidden`), the residual stream is checked after every layer, naming the
//!   first layer that produced a non-finite value;
//! - [`check_e8m0`]: MXFP4 scales are E8M0 bytes (OCP Microscaling Formats v1.0, §5.4.1:
//!   value `2^(s−127)`, and `s = 0xFF` encodes NaN). A store refuses a routed expert whose
//!   scales hold 0xFF when it reads the expert (the bytes are in memory then; no scan at
//!   load: a K3 checkpoint's scales alone are tens of GB);
//! - [`scan_e8m0`]: `memdial inspect` scans every scale tensor of a checkpoint.

use std::fs::File;
use std::os::unix::fs::FileExt;

use anyhow::{bail, Context, Result};

use crate::format::checkpoint::Checkpoint;

/// The E8M0 byte that encodes NaN (OCP MX v1.0 §5.4.1).
pub const E8M0_NAN: u8 = 0xFF;

/// Index of the first NaN or ±Inf in `xs`, if any.
pub fn first_non_finite(xs: &[f32]) -> Option<usize> {
    // Chunked so the common all-finite case vectorises (no early exit per element).
    let mut base = 0;
    for c in xs.chunks(256) {
        if !c.iter().fold(true, |ok, x| ok & x.is_finite()) {
            return c.iter().position(|x| !x.is_finite()).map(|i| base + i);
        }
        base += c.len();
    }
    None
}

/// Checks the logits of one forward: `logits` is `[rows.len(), vocab]` row-major, row `k`
/// belonging to the token at position `first_pos + rows[k]`.
///
/// Errors: the first non-finite value, naming its position, vocab id and value.
pub fn check_logits(logits: &[f32], vocab: usize, rows: &[usize], first_pos: usize) -> Result<()> {
    if let Some(i) = first_non_finite(logits) {
        let (k, id) = (i / vocab.max(1), i % vocab.max(1));
        let pos = first_pos + rows.get(k).copied().unwrap_or(k);
        bail!(
            "non-finite logits at position {pos} (logit of id {id} is {}): the checkpoint \
             or its config produces NaN/Inf; `memdial run --check-hidden` names the first \
             layer that does",
            logits[i]
        );
    }
    Ok(())
}

/// Checks the residual stream after layer `layer`: `hidden` is `[n, d]` row-major for the
/// tokens at positions `first_pos ..`.
///
/// Errors: names the layer, the position and the hidden-state index of the first
/// non-finite value.
pub fn check_hidden(hidden: &[f32], d: usize, layer: usize, first_pos: usize) -> Result<()> {
    if let Some(i) = first_non_finite(hidden) {
        bail!(
            "layer {layer} produced a non-finite hidden state at position {} (index {} is {})",
            first_pos + i / d.max(1),
            i % d.max(1),
            hidden[i]
        );
    }
    Ok(())
}

/// Refuses E8M0 scale bytes that encode NaN (0xFF). Block `b` of a scale tensor scales
/// the 32 weights `32·b .. 32·b + 32` of the matrix in row-major order (OCP MX v1.0
/// block size 32).
///
/// Errors: names `tensor` and the first bad block.
pub fn check_e8m0(tensor: &str, scales: &[u8]) -> Result<()> {
    let mut base = 0;
    for c in scales.chunks(4096) {
        if c.iter().fold(false, |bad, &s| bad | (s == E8M0_NAN)) {
            let b = base + c.iter().position(|&s| s == E8M0_NAN).unwrap_or(0);
            bail!(
                "{tensor}: E8M0 scale of block {b} is 0xFF (NaN; weights {}..{} of the matrix \
                 in row-major order): the checkpoint is corrupt",
                32 * b,
                32 * b + 32
            );
        }
        base += c.len();
    }
    Ok(())
}

/// Reads every `*.weight_scale` tensor (U8) of the checkpoint and returns one problem
/// line per tensor holding an E8M0 NaN scale (naming tensor and first bad block), in
/// tensor-name order. Reads in 8 MiB chunks.
///
/// Errors: a shard that cannot be read.
pub fn scan_e8m0(ck: &Checkpoint) -> Result<Vec<String>> {
    let mut names: Vec<&String> = ck
        .tensors
        .iter()
        .filter(|(n, l)| {
            (n.ends_with(".weight_scale") || n.ends_with("_scales")) && l.dtype == "U8"
        })
        .map(|(n, _)| n)
        .collect();
    names.sort();
    let mut files: Vec<Option<File>> = (0..ck.shards.len()).map(|_| None).collect();
    let mut buf = vec![0u8; 8 << 20];
    let mut problems = Vec::new();
    for name in names {
        let loc = &ck.tensors[name];
        let path = &ck.shards[loc.shard].path;
        if files[loc.shard].is_none() {
            files[loc.shard] =
                Some(File::open(path).with_context(|| format!("cannot open {}", path.display()))?);
        }
        let f = files[loc.shard].as_ref().expect("opened above");
        let mut done = 0u64;
        while done < loc.len {
            let n = (loc.len - done).min(buf.len() as u64) as usize;
            f.read_exact_at(&mut buf[..n], loc.offset + done)
                .with_context(|| {
                    format!(
                        "reading {name} from {} at offset {}",
                        path.display(),
                        loc.offset + done
                    )
                })?;
            if let Some(p) = buf[..n].iter().position(|&s| s == E8M0_NAN) {
                let b = done as usize + p;
                problems.push(format!(
                    "{name}: E8M0 scale of block {b} is 0xFF (NaN; weights {}..{} of the matrix \
                     in row-major order)",
                    32 * b,
                    32 * b + 32
                ));
                break;
            }
            done += n as u64;
        }
    }
    Ok(problems)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_non_finite_finds_the_first_across_chunks() {
        let mut v = vec![1.0f32; 1000];
        assert_eq!(first_non_finite(&v), None);
        v[700] = f32::INFINITY;
        v[900] = f32::NAN;
        assert_eq!(first_non_finite(&v), Some(700));
        v[3] = f32::NEG_INFINITY;
        assert_eq!(first_non_finite(&v), Some(3));
    }

    #[test]
    fn logits_error_names_position_and_id() {
        // rows 1 and 2 of a 3-token call starting at position 10; vocab 4.
        let mut l = vec![0.0f32; 8];
        l[6] = f32::NAN; // row index 1 -> token row 2 -> position 12, id 2
        let e = format!("{}", check_logits(&l, 4, &[1, 2], 10).unwrap_err());
        assert!(e.contains("position 12") && e.contains("id 2"), "{e}");
        assert!(check_logits(&[0.5; 8], 4, &[1, 2], 10).is_ok());
    }

    #[test]
    fn e8m0_nan_is_refused_naming_block() {
        let mut s = vec![127u8; 10_000];
        assert!(check_e8m0("t", &s).is_ok());
        s[5000] = 0xFF;
        let e = format!("{}", check_e8m0("x.weight_scale", &s).unwrap_err());
        assert!(
            e.contains("x.weight_scale") && e.contains("block 5000"),
            "{e}"
        );
        assert!(e.contains("160000..160032"), "{e}");
        // 0xFE is the largest finite scale (2^127), not NaN.
        assert!(check_e8m0("t", &[0xFE, 0]).is_ok());
    }
}
