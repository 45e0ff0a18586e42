//! The lossy layouts' agreement step, after the runs: per lossy layout and (prompt,
//! max_tokens), two resident teacher-forced `memdial run --logits-out` (the exact
//! model, then the lossy one, on the prompt followed by the exact ids without the
//! last), and the figures of [`crate::sweep::analysis::lossy`] written to
//! `lossy/agreement.json`. Both models' outputs do not depend on the budget, so one
//! resident run stands for every point.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{bail, Result};

use crate::sweep::analysis::lossy::{figures, LossyAgreement, AGREEMENT_FILE};
use crate::sweep::analysis::verdict::{first_difference, verdict};
use crate::sweep::layout::LossyLimits;
use crate::sweep::record::row::Row;

use super::packed::PackedLayout;

/// What the step reads.
pub struct LossyInputs<'a> {
    /// The run directory.
    pub out: &'a Path,
    /// The `memdial` binary.
    pub bin: &'a Path,
    /// The exact model directory.
    pub model: &'a Path,
    /// The prepared layouts (the lossy ones are compared).
    pub packed: &'a [PackedLayout],
    /// Each prompt's ids.
    pub prompt_ids: &'a [Vec<u32>],
    /// The spec's `[lossy.NAME]` tables.
    pub limits: &'a BTreeMap<String, LossyLimits>,
}

/// Computes and writes every lossy layout's agreement (nothing without one). A pair
/// that cannot be measured is recorded with its reason, never left out.
/// Errors: the file cannot be written.
pub fn measure(inp: &LossyInputs, rows: &[Row]) -> Result<()> {
    let lossy: Vec<&PackedLayout> = inp.packed.iter().filter(|p| p.kind.is_lossy()).collect();
    if lossy.is_empty() {
        return Ok(());
    }
    let v = verdict(rows);
    let ids_of = |run: &str| {
        rows.iter()
            .find(|r| r.run_id == run)
            .map(|r| r.metrics.output_ids.clone())
    };
    let memdial = |g: &crate::sweep::analysis::verdict::Group| {
        crate::sweep::spec::engines::def::engine_or_default(&g.engine)
            == crate::sweep::spec::engines::def::DEFAULT_ENGINE
            && g.depth == 0
    };
    let mut out = vec![];
    for p in &lossy {
        let name = p.kind.as_str();
        let mut pairs: Vec<(usize, usize)> = v
            .groups
            .iter()
            .filter(|g| memdial(g))
            .map(|g| (g.prompt_index, g.max_tokens))
            .collect();
        pairs.sort();
        pairs.dedup();
        for (prompt, max_tokens) in pairs {
            let group = |lossy: &str| {
                v.groups.iter().find(|g| {
                    memdial(g)
                        && g.lossy_layout == lossy
                        && (g.prompt_index, g.max_tokens) == (prompt, max_tokens)
                })
            };
            let exact = group("").and_then(|g| ids_of(&g.reference_run));
            let got = group(name).and_then(|g| ids_of(&g.reference_run));
            let mut a = LossyAgreement {
                layout: name.to_string(),
                prompt_index: prompt,
                max_tokens,
                positions: 0,
                top1_agreement: None,
                logit_max_rel_dev: None,
                logit_median_rel_dev: None,
                first_diff_token: None,
                min_top1: inp.limits.get(name).and_then(|l| l.min_top1),
                not_measured: None,
            };
            match (exact, got) {
                (Some(e), Some(l)) => {
                    a.first_diff_token = first_difference(&e, &l);
                    let input = [&inp.prompt_ids[prompt][..], &e[..e.len().saturating_sub(1)]];
                    let first = inp.prompt_ids[prompt].len().saturating_sub(1);
                    match teacher_forced(inp, &p.dir, &input.concat(), first, e.len(), &a) {
                        Ok((t, m, md)) => {
                            a.positions = e.len();
                            (
                                a.top1_agreement,
                                a.logit_max_rel_dev,
                                a.logit_median_rel_dev,
                            ) = (Some(t), Some(m), Some(md));
                        }
                        Err(err) => a.not_measured = Some(format!("{err:#}")),
                    }
                }
                (None, _) => a.not_measured = Some("no finished run of the exact layout".into()),
                (_, None) => a.not_measured = Some(format!("no finished run of {name}")),
            }
            out.push(a);
        }
    }
    let f = inp.out.join(AGREEMENT_FILE);
    std::fs::create_dir_all(f.parent().expect("a file in a folder"))?;
    crate::export::write_json(&f, &out)
}

/// The figures of the `n` positions from row `first` of the exact and the lossy
/// (`lossy_dir`) model's logits on `input`. Errors: a run fails or its logits have
/// too few rows.
fn teacher_forced(
    inp: &LossyInputs,
    lossy_dir: &Path,
    input: &[u32],
    first: usize,
    n: usize,
    a: &LossyAgreement,
) -> Result<(f64, f64, f64)> {
    if n == 0 {
        bail!("the exact run generated no token");
    }
    let tag = format!("{}-p{}-n{}", a.layout, a.prompt_index, a.max_tokens);
    let exact = logits(inp, inp.model, input, &format!("exact-{tag}"))?;
    let lossy = logits(inp, lossy_dir, input, &tag)?;
    if exact.1 != lossy.1 {
        bail!("the vocabularies differ ({} and {})", exact.1, lossy.1);
    }
    // Row i predicts token i + 1: rows P − 1 … P + n − 2 predict the generated tokens.
    let rows = |(r, c, d): &(usize, usize, Vec<f32>)| -> Result<Vec<f32>> {
        if *r < first + n {
            bail!("{r} logits rows for positions {first} … {}", first + n - 1);
        }
        Ok(d[first * c..(first + n) * c].to_vec())
    };
    figures(&rows(&exact)?, &rows(&lossy)?, n, exact.1)
}

/// The logits of `dir` on `input` (max-tokens 1), via a file in `lossy/`.
fn logits(
    inp: &LossyInputs,
    dir: &Path,
    input: &[u32],
    tag: &str,
) -> Result<(usize, usize, Vec<f32>)> {
    let f = inp.out.join("lossy").join(format!("logits-{tag}.npy"));
    std::fs::create_dir_all(f.parent().expect("a file in a folder"))?;
    super::logits::logits_run(inp.bin, dir, input, 1, false, &f)
}
