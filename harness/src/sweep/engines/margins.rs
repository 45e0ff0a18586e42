//! The reference engine's top-2 logit margin where another engine's ids first
//! differ: one resident `memdial run --logits-out` per differing prompt (memdial's
//! output does not depend on the budget, so one run stands for every point), written
//! to `engines/margins.json` for [`super::agreement`].

use std::path::Path;

use anyhow::Result;

use crate::sweep::analysis::agreement::{cross, margin_key, Margins};
use crate::sweep::analysis::verdict::verdict;
use crate::sweep::record::engine_meta::EngineMeta;
use crate::sweep::record::row::Row;

/// max − second max of `row`.
pub fn top2_margin(row: &[f32]) -> f64 {
    let (mut a, mut b) = (f32::NEG_INFINITY, f32::NEG_INFINITY);
    for &x in row {
        if x > a {
            b = a;
            a = x;
        } else if x > b {
            b = x;
        }
    }
    (a as f64) - (b as f64)
}

/// Finds the reference margins of every first difference (reference = memdial only)
/// and writes `out/engines/margins.json`. `prompt_ids[i]` are prompt i's ids.
pub fn find(
    out: &Path,
    bin: &Path,
    model: &Path,
    rows: &[Row],
    engines: &[EngineMeta],
    prompt_ids: &[Vec<u32>],
    extra_args: &[String],
) -> Result<()> {
    let Some(r) = engines.iter().find(|e| e.reference) else {
        return Ok(());
    };
    if r.adapter != "memdial" {
        return Ok(());
    }
    let c = cross(&verdict(rows), rows, engines, &Margins::new());
    let mut margins = Margins::new();
    let dir = out.join("engines");
    std::fs::create_dir_all(&dir)?;
    for a in c.comparisons.iter() {
        let Some(k) = a.first_diff_position else {
            continue;
        };
        let key = margin_key(a.prompt_index, a.max_tokens, k);
        if margins.contains_key(&key) {
            continue;
        }
        let ids = &prompt_ids[a.prompt_index];
        let f = dir.join(format!("logits-p{}-n{}.npy", a.prompt_index, a.max_tokens));
        let ignore_eos = extra_args.iter().any(|x| x == "--ignore-eos");
        let (rows_n, cols, data) =
            crate::sweep::run::logits::logits_run(bin, model, ids, a.max_tokens, ignore_eos, &f)?;
        // Row i predicts token i+1: generated token k comes from row prompt + k − 1.
        let row = ids.len() + k - 1;
        if row < rows_n {
            margins.insert(key, top2_margin(&data[row * cols..(row + 1) * cols]));
        }
    }
    crate::export::write_json(&dir.join("margins.json"), &margins)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sweep::util::read_npy_f32;

    #[test]
    fn npy_and_margin() {
        // numpy's format 1.0, as `np.save` writes it (header padded to 64 bytes).
        let mut h = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }".to_string();
        h.push_str(&" ".repeat(64 - (10 + h.len() + 1) % 64));
        h.push('\n');
        let mut b = b"\x93NUMPY\x01\x00".to_vec();
        b.extend((h.len() as u16).to_le_bytes());
        b.extend(h.as_bytes());
        for v in [1.0f32, 3.0, 2.5, 0.0, -1.0, 0.5] {
            b.extend(v.to_le_bytes());
        }
        let (r, c, d) = read_npy_f32(&b).unwrap();
        assert_eq!((r, c), (2, 3));
        assert_eq!(top2_margin(&d[..3]), 0.5);
        assert_eq!(top2_margin(&d[3..]), 0.5);
        assert!(read_npy_f32(b"nope").is_err());
    }
}
