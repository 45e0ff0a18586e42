//! The cross-engine verdict: each engine's output ids against the reference
//! engine's, per (prompt, max_tokens), and the engine × engine agreement table.
//!
//! Within an engine the verdict of [`crate::sweep::analysis::verdict`] holds (every run of
//! the engine gives the same ids). Across engines, each engine's reference ids (its
//! group's majority) are compared with the reference engine's: identical, or the
//! first differing position with both ids. Where the reference engine's logits
//! could be dumped (memdial, `--logits-out`), its top-2 margin at that position is
//! given: a margin under [`TIE_MARGIN`] is a `tie-break` (two engines that agree
//! up to rounding may pick either), a larger one `disagrees`. A mismatch of an
//! engine with `must_match` fails the sweep whatever the margin; the others are
//! reported. A text-only engine (no ids) is compared on the SHA-256 of its output
//! text with the reference's `output_text_sha256` (`identical text` / `text differs`:
//! a weaker claim), or is `not compared` when the reference recorded no text.

use crate::export::md_cell;
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::sweep::analysis::verdict::{first_difference, Verdict};
use crate::sweep::record::engine_meta::EngineMeta;
use crate::sweep::record::row::Row;
use crate::sweep::spec::engines::def::engine_or_default;

/// Largest top-2 logit margin of the reference that counts as a near-tie, in logit
/// units. Chosen from the measured spread between float32 engines on `mini`: their
/// first-step logits differ by up to 2e-3, so a margin 5× that can flip.
pub const TIE_MARGIN: f64 = 0.01;

/// Reference top-2 margins by (prompt index, max_tokens, position), as found by the
/// harness (`engines/margins.json` of the run directory).
pub type Margins = BTreeMap<String, f64>;

/// Key of [`Margins`].
pub fn margin_key(prompt_index: usize, max_tokens: usize, position: usize) -> String {
    format!("{prompt_index}:{max_tokens}:{position}")
}

/// One engine against the reference on one (prompt, max_tokens).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct EngineAgreement {
    /// Engine compared.
    pub engine: String,
    /// Prompt index.
    pub prompt_index: usize,
    /// Generated tokens requested.
    pub max_tokens: usize,
    /// Whether a mismatch fails the sweep.
    pub must_match: bool,
    /// `identical`, `tie-break`, `disagrees`, `differs` (no margin known), or
    /// `no runs` (one of the two has no finished run here); where one of the two is
    /// a text-only engine, `identical text`, `text differs` or `not compared` (the
    /// other recorded no output text hash).
    pub status: String,
    /// First differing position (0-based, in generated tokens).
    pub first_diff_position: Option<usize>,
    /// The reference engine's id there (`None` past its end).
    pub reference_id: Option<u32>,
    /// This engine's id there (`None` past its end).
    pub engine_id: Option<u32>,
    /// The reference's top-2 logit margin at that position, when its logits were dumped.
    pub reference_margin: Option<f64>,
}

/// The cross-engine verdict.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct CrossEngine {
    /// Reference engine.
    pub reference: String,
    /// Every must-match engine is identical to the reference wherever both ran.
    pub pass: bool,
    /// Each non-reference engine on each (prompt, max_tokens).
    pub comparisons: Vec<EngineAgreement>,
    /// Engines in axis order (rows and columns of `table`).
    pub engines: Vec<String>,
    /// `table[i][j]`: engine i against engine j over all prompts: `identical`,
    /// `differs at token K (prompt P)`, or `–` when they share no finished prompt.
    pub table: Vec<Vec<String>>,
}

/// The reference output of one (engine, prompt, max_tokens) group of the verdict.
#[derive(Clone, Copy)]
struct Out<'a> {
    ids: &'a [u32],
    text_sha256: Option<&'a str>,
    text_only: bool,
}

/// The two outputs compared on their text (one of them is a text-only engine's):
/// `identical text`, `text differs` or `not compared`.
fn text_status(a: &Out, b: &Out) -> &'static str {
    match (a.text_sha256, b.text_sha256) {
        (Some(x), Some(y)) if x == y => "identical text",
        (Some(_), Some(_)) => "text differs",
        _ => "not compared",
    }
}

/// The reference output of every (engine, prompt, max_tokens) group of the verdict
/// at depth 0.
fn group_ids<'a>(v: &Verdict, rows: &'a [Row]) -> BTreeMap<(String, usize, usize), Out<'a>> {
    let mut m = BTreeMap::new();
    // Only memdial takes a depth context: engines meet at depth 0.
    for g in v.groups.iter().filter(|g| g.depth == 0) {
        if let Some(r) = rows.iter().find(|r| r.run_id == g.reference_run) {
            m.insert(
                (
                    engine_or_default(&g.engine).to_string(),
                    g.prompt_index,
                    g.max_tokens,
                ),
                Out {
                    ids: r.metrics.output_ids.as_slice(),
                    text_sha256: r.metrics.output_text_sha256.as_deref(),
                    text_only: r.is_text_only(),
                },
            );
        }
    }
    m
}

/// Compares every engine of `engines` with the reference (`reference = true`).
pub fn cross(v: &Verdict, rows: &[Row], engines: &[EngineMeta], margins: &Margins) -> CrossEngine {
    let ids = group_ids(v, rows);
    let reference = engines
        .iter()
        .find(|e| e.reference)
        .map(|e| e.name.clone())
        .unwrap_or_else(|| crate::sweep::spec::engines::def::DEFAULT_ENGINE.to_string());
    let mut prompts: Vec<(usize, usize)> = ids.keys().map(|k| (k.1, k.2)).collect();
    prompts.sort();
    prompts.dedup();
    let mut comparisons = vec![];
    for e in engines.iter().filter(|e| e.name != reference) {
        for &(p, n) in &prompts {
            let a = ids.get(&(reference.clone(), p, n));
            let b = ids.get(&(e.name.clone(), p, n));
            let mut c = EngineAgreement {
                engine: e.name.clone(),
                prompt_index: p,
                max_tokens: n,
                must_match: e.must_match,
                status: "no runs".into(),
                first_diff_position: None,
                reference_id: None,
                engine_id: None,
                reference_margin: None,
            };
            if let (Some(a), Some(b)) = (a, b) {
                if a.text_only || b.text_only {
                    c.status = text_status(a, b).into();
                    comparisons.push(c);
                    continue;
                }
                let (a, b) = (a.ids, b.ids);
                match first_difference(a, b) {
                    None => c.status = "identical".into(),
                    Some(k) => {
                        c.first_diff_position = Some(k);
                        c.reference_id = a.get(k).copied();
                        c.engine_id = b.get(k).copied();
                        c.reference_margin = margins.get(&margin_key(p, n, k)).copied();
                        c.status = match c.reference_margin {
                            Some(m) if m < TIE_MARGIN => "tie-break",
                            Some(_) => "disagrees",
                            None => "differs",
                        }
                        .into();
                    }
                }
            }
            comparisons.push(c);
        }
    }
    let pass = comparisons.iter().all(|c| {
        !c.must_match
            || ["identical", "identical text", "no runs", "not compared"]
                .contains(&c.status.as_str())
    });
    let names: Vec<String> = engines.iter().map(|e| e.name.clone()).collect();
    let table = names
        .iter()
        .map(|a| {
            names
                .iter()
                .map(|b| pair_cell(&ids, &prompts, a, b))
                .collect()
        })
        .collect();
    CrossEngine {
        reference,
        pass,
        comparisons,
        engines: names,
        table,
    }
}

fn pair_cell(
    ids: &BTreeMap<(String, usize, usize), Out>,
    prompts: &[(usize, usize)],
    a: &str,
    b: &str,
) -> String {
    let mut shared = 0;
    let mut text_same = false;
    for &(p, n) in prompts {
        let (Some(x), Some(y)) = (
            ids.get(&(a.to_string(), p, n)),
            ids.get(&(b.to_string(), p, n)),
        ) else {
            continue;
        };
        if x.text_only || y.text_only {
            match text_status(x, y) {
                "identical text" => text_same = true,
                "text differs" => return format!("text differs (prompt {p})"),
                _ => continue,
            }
        } else if let Some(k) = first_difference(x.ids, y.ids) {
            return format!("differs at token {k} (prompt {p})");
        }
        shared += 1;
    }
    if shared == 0 {
        "–".into()
    } else if text_same {
        "identical text".into()
    } else {
        "identical".into()
    }
}

impl CrossEngine {
    /// One clause for the verdict line: `engines: mlx-lm identical to memdial` or
    /// `engines: llama.cpp differs from memdial at token 0 (expected 5, got 9; margin 0.8, disagrees; reported only)`.
    pub fn one_line(&self) -> String {
        let mut parts = vec![];
        let mut by: BTreeMap<&str, Vec<&EngineAgreement>> = BTreeMap::new();
        for c in &self.comparisons {
            by.entry(c.engine.as_str()).or_default().push(c);
        }
        for e in self.engines.iter().filter(|e| **e != self.reference) {
            let cs = by.get(e.as_str()).cloned().unwrap_or_default();
            let text = |s: &str| cs.iter().find(|c| c.status == s);
            if let Some(c) = text("text differs") {
                parts.push(format!(
                    "{e}'s output text differs from {}'s (prompt {}; ids not compared){}",
                    self.reference,
                    c.prompt_index,
                    if c.must_match {
                        ""
                    } else {
                        " (reported only: must_match = false)"
                    }
                ));
                continue;
            }
            if text("not compared").is_some() {
                parts.push(format!(
                    "{e}: not compared with {} (a text-only engine, and no output text hash on one side)",
                    self.reference
                ));
                continue;
            }
            if text("identical text").is_some() {
                parts.push(format!(
                    "{e} identical output text to {} (ids not compared)",
                    self.reference
                ));
                continue;
            }
            let bad = cs
                .iter()
                .find(|c| c.status != "identical" && c.status != "no runs");
            let ran = cs.iter().any(|c| c.status != "no runs");
            parts.push(match (bad, ran) {
                (Some(c), _) => format!(
                    "{e} differs from {} at token {} (expected {}, got {}{}){}",
                    self.reference,
                    c.first_diff_position
                        .map(|p| p.to_string())
                        .unwrap_or_default(),
                    c.reference_id
                        .map(|x| x.to_string())
                        .unwrap_or_else(|| "end".into()),
                    c.engine_id
                        .map(|x| x.to_string())
                        .unwrap_or_else(|| "end".into()),
                    match c.reference_margin {
                        Some(m) =>
                            format!("; {} top-2 margin {m:.4}: {}", self.reference, c.status),
                        None => String::new(),
                    },
                    if c.must_match {
                        ""
                    } else {
                        " (reported only: must_match = false)"
                    }
                ),
                (None, true) => format!("{e} identical to {}", self.reference),
                (None, false) => format!("{e}: no finished runs to compare"),
            });
        }
        if parts.is_empty() {
            return format!("engines: {} alone", self.reference);
        }
        format!("engines: {}", parts.join("; "))
    }

    /// The Markdown section: the agreement table and the per-prompt comparisons.
    pub fn markdown(&self) -> String {
        use std::fmt::Write as _;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "## Engines agreement\n\nReference engine: `{}`. Each cell compares the row engine's output ids with the column engine's \
             (every finished run of an engine gives the same ids, see the verdict). A `tie-break` is a first difference where the reference's \
             top-2 logit margin is under {TIE_MARGIN}; `disagrees` one above it; `differs` one where the reference's logits were not dumped. \
             A text-only engine is compared on its output text's SHA-256 (`identical text`, `text differs`; ids not compared), or `not compared` \
             when the other side recorded no output text hash.\n",
            md_cell(&self.reference)
        );
        let names: Vec<String> = self.engines.iter().map(|e| md_cell(e)).collect();
        let _ = writeln!(s, "| | {} |", names.join(" | "));
        let _ = writeln!(s, "|---|{}", "---|".repeat(self.engines.len()));
        for (i, e) in names.iter().enumerate() {
            let _ = writeln!(s, "| **{e}** | {} |", self.table[i].join(" | "));
        }
        s.push('\n');
        if !self.comparisons.is_empty() {
            let _ = writeln!(
                s,
                "| engine | prompt | tokens | against {} | first difference | {} id | engine id | {} top-2 margin | must match |\n|---|---|---|---|---|---|---|---|---|",
                md_cell(&self.reference),
                md_cell(&self.reference),
                md_cell(&self.reference)
            );
            for c in &self.comparisons {
                let o = |v: Option<String>| v.unwrap_or_else(|| "–".into());
                let _ = writeln!(
                    s,
                    "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                    md_cell(&c.engine),
                    c.prompt_index,
                    c.max_tokens,
                    c.status,
                    o(c.first_diff_position.map(|p| p.to_string())),
                    o(c.reference_id.map(|p| p.to_string())),
                    o(c.engine_id.map(|p| p.to_string())),
                    o(c.reference_margin.map(|m| format!("{m:.4}"))),
                    if c.must_match { "yes" } else { "no" }
                );
            }
            s.push('\n');
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sweep::analysis::verdict::verdict;
    use crate::sweep::util::ids_sha256;

    fn row(engine: &str, point: usize, ids: &[u32]) -> Row {
        Row {
            run_id: format!("p{point}#r0"),
            point_index: point,
            point_key: format!("k{point}"),
            status: crate::sweep::record::status::RunStatus::Ok,
            max_tokens: 4,
            engine: engine.into(),
            metrics: memdial::engine::metrics::RunMetrics {
                output_ids: ids.to_vec(),
                output_ids_sha256: Some(ids_sha256(ids)),
                generated_tokens: Some(ids.len() as u64),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn meta(name: &str, reference: bool, must_match: bool) -> EngineMeta {
        EngineMeta {
            name: name.into(),
            reference,
            must_match,
            ..Default::default()
        }
    }

    #[test]
    fn identical_tie_break_and_reported_only() {
        let rows = vec![
            row("memdial", 0, &[1, 2, 3]),
            row("a", 1, &[1, 2, 3]),
            row("b", 2, &[1, 5, 3]),
        ];
        let v = verdict(&rows);
        assert!(v.pass, "within-engine verdict: {}", v.summary());
        let engines = [
            meta("memdial", true, true),
            meta("a", false, true),
            meta("b", false, false),
        ];
        let mut margins = Margins::new();
        let c = cross(&v, &rows, &engines, &margins);
        assert!(c.pass, "b is not must_match");
        assert_eq!(c.comparisons[0].status, "identical");
        let b = &c.comparisons[1];
        assert_eq!(
            (
                b.status.as_str(),
                b.first_diff_position,
                b.reference_id,
                b.engine_id
            ),
            ("differs", Some(1), Some(2), Some(5))
        );
        assert_eq!(c.table[0][2], "differs at token 1 (prompt 0)");
        assert_eq!(c.table[0][1], "identical");
        margins.insert(margin_key(0, 4, 1), 0.001);
        let c = cross(&v, &rows, &engines, &margins);
        assert_eq!(c.comparisons[1].status, "tie-break");
        let engines = [meta("memdial", true, true), meta("b", false, true)];
        let c = cross(&v, &rows, &engines, &margins);
        assert!(!c.pass);
        assert!(
            c.one_line()
                .contains("b differs from memdial at token 1 (expected 2, got 5"),
            "{}",
            c.one_line()
        );
    }

    /// A text-only engine against the reference: on the output text's hash when the
    /// reference recorded one, else `not compared` (never `identical`).
    #[test]
    fn text_only_engine_is_compared_on_text() {
        let text_row = |engine: &str, point: usize, h: &str| {
            let mut r = row(engine, point, &[]);
            r.metrics = memdial::engine::metrics::RunMetrics {
                output_text_sha256: Some(h.repeat(64)),
                ..Default::default()
            };
            r.output_kind = Some(crate::sweep::record::row::TEXT_ONLY.into());
            r
        };
        let mut me = row("memdial", 0, &[1, 2, 3]);
        me.metrics.output_text_sha256 = Some("a".repeat(64));
        let engines = [meta("memdial", true, true), meta("t", false, true)];
        for (h, status, pass) in [("a", "identical text", true), ("b", "text differs", false)] {
            let rows = vec![me.clone(), text_row("t", 1, h)];
            let v = verdict(&rows);
            assert!(v.pass, "{}", v.summary());
            let c = cross(&v, &rows, &engines, &Margins::new());
            assert_eq!(c.comparisons[0].status, status);
            assert_eq!(c.pass, pass, "{status}");
        }
        let rows = vec![row("memdial", 0, &[1, 2, 3]), text_row("t", 1, "a")];
        let c = cross(&verdict(&rows), &rows, &engines, &Margins::new());
        assert_eq!(c.comparisons[0].status, "not compared");
        assert!(
            c.one_line().contains("t: not compared with memdial"),
            "{}",
            c.one_line()
        );
        assert_eq!(c.table[0][1], "–");
    }
}
