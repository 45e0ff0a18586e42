//! The verdict: every run of the same prompt and token count must produce the same
//! output ids, whatever the budget, IO mode, prefetch policy, cache or threads.
//!
//! Runs are grouped by (prompt, depth, max_tokens): the `depth` axis's context
//! changes the ids, so runs are compared within a depth. A lossy layout's runs
//! (`rvqN`) form groups of their own: they must agree among themselves, and are
//! never counted as identical to the exact layouts' (their agreement with those is
//! [`super::lossy`]'s). In each group the reference is the
//! most common hash (ties: the hash of the earliest run in point order), so a
//! single deviating point is the one named. Any run that failed (non-zero exit,
//! timeout, no metrics) also fails the verdict, and so does a finished run whose
//! row does not prove its output (no ids, more ids than `max_tokens`,
//! `generated_tokens` not the number of ids, a hash that is not the hash of the ids,
//! a non-finite timing: see [`Row::prove`]); such a run is not compared. Points not
//! run because their budget resolved below the floor do not.
//!
//! A text-only engine's runs (it takes text and prints text, no ids) are compared on
//! the SHA-256 of their output text instead, and the verdict says so: identical text
//! is a weaker claim than identical ids (two tokenizations can print the same text).

use std::collections::BTreeMap;

use serde::Serialize;

use crate::sweep::record::row::Row;
use crate::sweep::record::status::RunStatus;

/// A run whose output differs from its group's reference.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Mismatch {
    /// Run id.
    pub run_id: String,
    /// Point index.
    pub point_index: usize,
    /// Point key.
    pub point_key: String,
    /// Its hash.
    pub hash: String,
    /// First position (0-based, in generated tokens) where the ids differ; `None`
    /// when the ids agree but the hash does not (the engine's hash is wrong).
    pub first_diff_position: Option<usize>,
    /// Reference id at that position (`None` past the end of the reference).
    pub expected_id: Option<u32>,
    /// This run's id at that position (`None` past its end).
    pub got_id: Option<u32>,
}

/// One (prompt, depth, max_tokens, engine, lossy layout) group.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Group {
    /// Engine (empty for single-engine sweeps of memdial).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub engine: String,
    /// The lossy layout whose runs these are (`rvq3`; empty for the exact layouts).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub lossy_layout: String,
    /// Prompt index.
    pub prompt_index: usize,
    /// Context tokens before the prompt (the `depth` axis; 0 without it).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub depth: usize,
    /// Generated tokens requested.
    pub max_tokens: usize,
    /// Reference hash.
    pub hash: String,
    /// Run whose ids are the reference.
    pub reference_run: String,
    /// Runs compared (finished runs only).
    pub runs: usize,
    /// Runs that differ.
    pub mismatches: Vec<Mismatch>,
    /// The group's runs are a text-only engine's, compared on their output text's
    /// hash (ids not compared).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub text_only: bool,
}

/// The verdict over all rows.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Verdict {
    /// True when the sweep is complete, every finished run matches and none failed.
    /// (Not serialised here: `verdict.json`'s `pass` is the layered verdict's, which
    /// also counts checks layered over this one, e.g. the cross-engine agreement.)
    #[serde(skip)]
    pub pass: bool,
    /// Every planned run has a row (finished, failed or below the floor); an
    /// incomplete sweep never passes. Set by [`Verdict::with_planned`].
    pub complete: bool,
    /// Distinct runs with a row: finished, failed, below the floor, or `n/a` for
    /// their engine (one row per such point). So it can exceed the runs actually
    /// executed (the sweep's "N runs in T s" line), e.g. 72 rows for 48 runs when
    /// 24 points are `n/a`; `runs_compared` counts the finished runs compared.
    pub runs_done: usize,
    /// Runs the directory is meant to hold (`sweep.json` `runs_planned`; 0 = unknown).
    pub runs_planned: usize,
    /// Planned runs not needed: slots of points that reached their precision under
    /// `repeats = "auto"` before `max_repeats` ([`super::repeats`]). They count
    /// toward completeness; no other missing run does.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub runs_not_needed: usize,
    /// Per-group results.
    pub groups: Vec<Group>,
    /// Runs that failed: (run id, status, error).
    pub failed: Vec<(String, String, String)>,
    /// Points skipped because the budget is below the floor.
    pub below_floor: Vec<String>,
    /// Runs whose engine hash does not match the hash of their `output_ids`.
    pub hash_inconsistent: Vec<String>,
    /// Finished runs whose row does not prove its output: (run id, the failing
    /// field and why). Not compared; the verdict fails.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unproven: Vec<(String, String)>,
    /// Finished runs compared.
    pub runs_compared: usize,
    /// Distinct points with at least one finished run.
    pub points: usize,
    /// Finished runs marked `over_budget` (unenforced, anon + page cache above budget
    /// + slack): their speed is not comparable. Does not affect `pass`.
    #[serde(default)]
    pub over_budget: Vec<String>,
    /// Points an engine cannot run (`n/a` rows: point key and reason).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub not_applicable: Vec<(String, String)>,
}

/// Position where `a` and `b` first differ (`None` when equal).
pub fn first_difference(a: &[u32], b: &[u32]) -> Option<usize> {
    let n = a.len().min(b.len());
    (0..n)
        .find(|&i| a[i] != b[i])
        .or((a.len() != b.len()).then_some(n))
}

/// The group of a run: (prompt, depth, max_tokens, engine, lossy layout or "").
type GroupKey = (usize, usize, usize, String, String);

/// [`GroupKey`] of `r`.
fn group_key(r: &Row) -> GroupKey {
    let lossy = r
        .layout()
        .filter(|l| l.is_lossy())
        .map_or(String::new(), |l| l.as_str().to_string());
    (
        r.prompt_index,
        r.depth(),
        r.max_tokens,
        r.engine.clone(),
        lossy,
    )
}

/// Computes the verdict of `rows`.
pub fn verdict(rows: &[Row]) -> Verdict {
    let all = rows;
    // A served run (the `concurrency` axis) is compared request by request.
    let rows = &crate::sweep::record::served::per_request_rows(rows)[..];
    let mut groups: BTreeMap<GroupKey, Vec<&Row>> = BTreeMap::new();
    let mut not_applicable = vec![];
    let mut failed = vec![];
    let mut below_floor = vec![];
    let mut hash_inconsistent = vec![];
    let mut unproven = vec![];
    let mut points = std::collections::BTreeSet::new();
    let over_budget: Vec<String> = rows
        .iter()
        .filter(|r| r.status == RunStatus::Ok && r.over_budget)
        .map(|r| r.run_id.clone())
        .collect();
    for r in rows {
        match r.status {
            RunStatus::Ok => {
                if let Err(why) = r.prove() {
                    if why.contains("output_ids_sha256:") {
                        hash_inconsistent.push(r.run_id.clone());
                    }
                    unproven.push((r.run_id.clone(), why));
                    continue;
                }
                points.insert(r.point_index);
                groups.entry(group_key(r)).or_default().push(r);
            }
            RunStatus::BelowFloor => below_floor.push(r.point_key.clone()),
            RunStatus::NotApplicable => {
                not_applicable.push((r.point_key.clone(), r.error.clone().unwrap_or_default()))
            }
            s => failed.push((
                r.run_id.clone(),
                s.as_str().to_string(),
                r.error.clone().unwrap_or_default(),
            )),
        }
    }
    let mut out = vec![];
    let mut runs_compared = 0;
    for ((prompt_index, depth, max_tokens, engine, lossy_layout), mut rs) in groups {
        rs.sort_by_key(|r| (r.point_index, r.warmup, r.repeat));
        runs_compared += rs.len();
        // most common hash; ties → earliest
        let mut counts: Vec<(String, usize, usize)> = vec![]; // hash, count, first idx
        for (i, r) in rs.iter().enumerate() {
            let h = r.output_hash().unwrap_or_default();
            match counts.iter_mut().find(|c| c.0 == h) {
                Some(c) => c.1 += 1,
                None => counts.push((h, 1, i)),
            }
        }
        counts.sort_by(|a, b| b.1.cmp(&a.1).then(a.2.cmp(&b.2)));
        let (hash, _, ref_i) = counts[0].clone();
        let reference = rs[ref_i];
        let mismatches = rs
            .iter()
            .filter(|r| r.output_hash().unwrap_or_default() != hash)
            .map(|r| {
                let pos = first_difference(&reference.metrics.output_ids, &r.metrics.output_ids);
                Mismatch {
                    run_id: r.run_id.clone(),
                    point_index: r.point_index,
                    point_key: r.point_key.clone(),
                    hash: r.output_hash().unwrap_or_default(),
                    first_diff_position: pos,
                    expected_id: pos.and_then(|p| reference.metrics.output_ids.get(p).copied()),
                    got_id: pos.and_then(|p| r.metrics.output_ids.get(p).copied()),
                }
            })
            .collect();
        out.push(Group {
            engine,
            lossy_layout,
            prompt_index,
            depth,
            max_tokens,
            hash,
            reference_run: reference.run_id.clone(),
            runs: rs.len(),
            mismatches,
            text_only: reference.is_text_only(),
        });
    }
    below_floor.sort();
    below_floor.dedup();
    not_applicable.sort();
    not_applicable.dedup();
    let pass = failed.is_empty()
        && unproven.is_empty()
        && runs_compared > 0
        && out.iter().all(|g| g.mismatches.is_empty());
    let runs_done = all
        .iter()
        .map(|r| r.run_id.as_str())
        .collect::<std::collections::BTreeSet<_>>()
        .len();
    Verdict {
        pass,
        complete: true,
        runs_done,
        runs_planned: 0,
        runs_not_needed: 0,
        groups: out,
        failed,
        below_floor,
        hash_inconsistent,
        unproven,
        runs_compared,
        points: points.len(),
        over_budget,
        not_applicable,
    }
}

impl Verdict {
    /// The verdict of a directory meant to hold `planned` runs, `not_needed` of them
    /// spared by `repeats = "auto"`: incomplete (and so not a pass) when fewer than
    /// `planned − not_needed` have a row.
    pub fn with_planned(mut self, planned: usize, not_needed: usize) -> Verdict {
        self.runs_planned = planned;
        self.runs_not_needed = not_needed;
        self.complete = self.runs_done + not_needed >= planned;
        self.pass &= self.complete;
        self
    }

    /// Distinct points that differ from their reference.
    pub fn differing_points(&self) -> Vec<(usize, String)> {
        let mut v: Vec<(usize, String)> = self
            .groups
            .iter()
            .flat_map(|g| {
                g.mismatches
                    .iter()
                    .map(|m| (m.point_index, m.point_key.clone()))
            })
            .collect();
        v.sort();
        v.dedup();
        v
    }

    /// No mismatch, no failed run, no unproven run (whatever was compared).
    pub fn checks_pass(&self) -> bool {
        self.failed.is_empty()
            && self.unproven.is_empty()
            && self.groups.iter().all(|g| g.mismatches.is_empty())
    }

    /// The ids part of the verdict line without its `PASS: ` / `FAIL: ` word:
    /// `30 runs at 10 points produced identical output ids (sha256 …)`, or what
    /// differs and what failed.
    pub fn summary(&self) -> String {
        let l = self.ids_line();
        l.strip_prefix("PASS: ")
            .or_else(|| l.strip_prefix("FAIL: "))
            .unwrap_or(&l)
            .to_string()
    }

    /// What the finished runs say while the directory is incomplete: `no finished
    /// runs yet`, `the 3 finished runs agree so far (sha256 …)`.
    pub fn so_far(&self) -> String {
        if self.runs_compared == 0 {
            "no finished runs yet".to_string()
        } else {
            let hashes: Vec<String> = self.groups.iter().map(|g| short(&g.hash)).collect();
            format!(
                "the {} finished runs agree so far (sha256 {})",
                self.runs_compared,
                hashes.join(", ")
            )
        }
    }

    /// The PASS line of a sweep with a lossy layout's groups among `ids` (`None`
    /// without them): the exact layouts' identity and the lossy ones' own, apart.
    fn lossy_pass_line(&self, ids: &[&Group], below: &str) -> Option<String> {
        let runs = |gs: &[&Group]| gs.iter().map(|g| g.runs).sum::<usize>();
        let hs = |gs: &[&Group]| gs.iter().map(|g| short(&g.hash)).collect::<Vec<_>>();
        let (lossy, exact): (Vec<&Group>, Vec<&Group>) =
            ids.iter().partition(|g| !g.lossy_layout.is_empty());
        if lossy.is_empty() || ids.len() != self.groups.len() {
            return None;
        }
        let layouts: std::collections::BTreeSet<&str> =
            lossy.iter().map(|g| g.lossy_layout.as_str()).collect();
        Some(format!(
            "PASS: {} at {}: {} of the exact layouts produced identical output ids \
             (sha256 {}); {} of the lossy {} agree among themselves (sha256 {}), \
             compared with the exact ids by agreement, never as identical{below}",
            count(self.runs_compared, "run"),
            count(self.points, "point"),
            count(runs(&exact), "run"),
            hs(&exact).join(", "),
            count(runs(&lossy), "run"),
            layouts.into_iter().collect::<Vec<_>>().join(", "),
            hs(&lossy).join(", "),
        ))
    }

    fn ids_line(&self) -> String {
        if self.runs_compared == 0 && self.failed.is_empty() && self.unproven.is_empty() {
            return "FAIL: no finished runs".into();
        }
        let hashes: Vec<String> = self.groups.iter().map(|g| short(&g.hash)).collect();
        let within_pass = self.failed.is_empty()
            && self.unproven.is_empty()
            && self.groups.iter().all(|g| g.mismatches.is_empty());
        if within_pass {
            let below = if self.below_floor.is_empty() {
                String::new()
            } else {
                format!(
                    "; {} below the floor skipped",
                    count(self.below_floor.len(), "point")
                )
            };
            let (text, ids): (Vec<&Group>, Vec<&Group>) =
                self.groups.iter().partition(|g| g.text_only);
            let runs = |gs: &[&Group]| gs.iter().map(|g| g.runs).sum::<usize>();
            let hs = |gs: &[&Group]| gs.iter().map(|g| short(&g.hash)).collect::<Vec<_>>();
            if let Some(l) = self.lossy_pass_line(&ids, &below) {
                return l;
            }
            if text.is_empty() {
                return format!(
                    "PASS: {} at {} produced identical output ids (sha256 {}){below}",
                    count(self.runs_compared, "run"),
                    count(self.points, "point"),
                    hashes.join(", "),
                );
            }
            let engines: std::collections::BTreeSet<&str> =
                text.iter().map(|g| g.engine.as_str()).collect();
            let text_part = format!(
                "identical output text; ids not compared (text-only: {}; sha256 {})",
                engines.into_iter().collect::<Vec<_>>().join(", "),
                hs(&text).join(", ")
            );
            if ids.is_empty() {
                return format!(
                    "PASS: {} at {} produced {text_part}{below}",
                    count(self.runs_compared, "run"),
                    count(self.points, "point"),
                );
            }
            return format!(
                "PASS: {} at {}: {} produced identical output ids (sha256 {}), {} {text_part}{below}",
                count(self.runs_compared, "run"),
                count(self.points, "point"),
                runs(&ids),
                hs(&ids).join(", "),
                runs(&text),
            );
        }
        let mut parts = vec![];
        for g in &self.groups {
            let mut seen = std::collections::BTreeSet::new();
            for m in &g.mismatches {
                if !seen.insert(m.point_index) {
                    continue;
                }
                let n = g
                    .mismatches
                    .iter()
                    .filter(|x| x.point_index == m.point_index)
                    .count();
                let at = match m.first_diff_position {
                    None if g.text_only => format!(
                        "output text differs from {}'s (text-only engine: ids not compared)",
                        g.reference_run
                    ),
                    Some(p) => format!(
                        "first difference at token {p}: expected {}, got {}",
                        m.expected_id
                            .map(|x| x.to_string())
                            .unwrap_or_else(|| "end".into()),
                        m.got_id
                            .map(|x| x.to_string())
                            .unwrap_or_else(|| "end".into())
                    ),
                    None => "ids equal, hash differs".into(),
                };
                parts.push(format!(
                    "p{} [{}] differs in {n} run(s), {at}",
                    m.point_index, m.point_key
                ));
            }
        }
        if !self.failed.is_empty() {
            let first = &self.failed[0];
            parts.push(format!(
                "{} run(s) failed (first: {} {}: {})",
                self.failed.len(),
                first.0,
                first.1,
                first.2
            ));
        }
        if let Some((id, why)) = self.unproven.first() {
            parts.push(format!(
                "{} finished run(s) do not prove their output (first: {id}: {why})",
                self.unproven.len()
            ));
        }
        format!(
            "FAIL: {} ({} runs compared, reference sha256 {})",
            parts.join("; "),
            self.runs_compared,
            hashes.join(", ")
        )
    }
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// First 12 hex digits of a hash.
pub fn short(h: &str) -> String {
    h.chars().take(12).collect()
}

/// `n` and the noun, plural unless `n` is 1: "1 run", "72 runs".
fn count(n: usize, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sweep::util::ids_sha256;

    fn row(point: usize, rep: u32, ids: &[u32]) -> Row {
        Row {
            run_id: format!("p{point}#r{rep}"),
            point_index: point,
            point_key: format!("k{point}"),
            repeat: rep,
            status: RunStatus::Ok,
            max_tokens: 4,
            metrics: memdial::engine::metrics::RunMetrics {
                output_ids: ids.to_vec(),
                output_ids_sha256: Some(ids_sha256(ids)),
                generated_tokens: Some(ids.len() as u64),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn pass_and_majority_reference() {
        let rows = vec![
            row(0, 0, &[1, 2, 3]),
            row(1, 0, &[1, 2, 3]),
            row(2, 0, &[1, 2, 3]),
        ];
        let v = verdict(&rows);
        assert!(v.pass, "{}", v.summary());
        assert!(v.summary().starts_with("3 runs at 3 points"));
        let rows = vec![
            row(0, 0, &[1, 9, 3]),
            row(1, 0, &[1, 2, 3]),
            row(2, 0, &[1, 2, 3]),
        ];
        let v = verdict(&rows);
        assert!(!v.pass);
        assert_eq!(v.differing_points(), vec![(0, "k0".to_string())]);
        let m = &v.groups[0].mismatches[0];
        assert_eq!(
            (m.first_diff_position, m.expected_id, m.got_id),
            (Some(1), Some(2), Some(9))
        );
        assert!(v.summary().contains("p0 [k0]"), "{}", v.summary());
    }

    #[test]
    fn failures_and_lengths() {
        assert_eq!(first_difference(&[1, 2], &[1, 2, 3]), Some(2));
        assert_eq!(first_difference(&[1, 2], &[1, 2]), None);
        let mut bad = row(1, 0, &[]);
        bad.status = RunStatus::Failed;
        bad.error = Some("boom".into());
        let v = verdict(&[row(0, 0, &[1]), bad]);
        assert!(!v.pass);
        assert!(v.summary().contains("boom"));
        let mut skipped = row(2, 0, &[]);
        skipped.status = RunStatus::BelowFloor;
        assert!(verdict(&[row(0, 0, &[1]), skipped]).pass);
        let mut lying = row(0, 0, &[1]);
        lying.metrics.output_ids_sha256 = Some("00".into());
        let v = verdict(&[lying.clone(), row(1, 0, &[1])]);
        assert!(!v.pass);
        assert_eq!(v.hash_inconsistent, vec!["p0#r0".to_string()]);
        assert!(v.summary().contains("do not prove their output"));
    }

    /// A finished run proves its output or fails the verdict, and a verdict that
    /// compared nothing is not a pass.
    #[test]
    fn unproven_runs_and_nothing_compared() {
        let no_ids = row(1, 0, &[]);
        let mut too_many = row(2, 0, &[1, 2, 3, 4, 5]);
        too_many.max_tokens = 4;
        let mut miscounted = row(3, 0, &[1, 2]);
        miscounted.metrics.generated_tokens = Some(3);
        for (bad, field) in [
            (no_ids, "output_ids: the run reported no ids"),
            (too_many, "more than max_tokens = 4"),
            (miscounted, "generated_tokens: 3, but"),
        ] {
            let v = verdict(&[row(0, 0, &[1, 2]), bad]);
            assert!(!v.pass, "{field}");
            assert_eq!(v.runs_compared, 1);
            assert!(v.unproven[0].1.contains(field), "{:?}", v.unproven);
            assert!(!v.checks_pass(), "{}", v.summary());
        }
        let mut skipped = row(0, 0, &[]);
        skipped.status = RunStatus::BelowFloor;
        let v = verdict(&[skipped]);
        assert!(!v.pass);
        assert_eq!(v.summary(), "no finished runs");
        assert!(!verdict(&[]).pass);
    }

    /// A text-only engine's runs are compared on their text's hash, with the weaker
    /// wording; empty text or a malformed hash proves nothing.
    #[test]
    fn text_only_runs() {
        let text = |point: usize, h: &str| {
            let mut r = row(point, 0, &[]);
            r.engine = "t".into();
            r.metrics = memdial::engine::metrics::RunMetrics {
                output_text_sha256: Some(h.into()),
                ..Default::default()
            };
            r.output_kind = Some(crate::sweep::spec::engines::def::OutputKind::Text);
            r
        };
        let a = "a".repeat(64);
        let v = verdict(&[text(0, &a), text(1, &a)]);
        assert!(v.pass, "{}", v.summary());
        assert!(
            v.summary()
                .starts_with("2 runs at 2 points produced identical output text; ids not compared (text-only: t;"),
            "{}",
            v.summary()
        );
        let mut ids = row(2, 0, &[4, 5]);
        ids.engine = "memdial".into();
        let v = verdict(&[text(0, &a), text(1, &a), ids]);
        assert!(v.pass);
        assert!(
            v.summary().contains(": 1 produced identical output ids")
                && v.summary()
                    .contains("2 identical output text; ids not compared"),
            "{}",
            v.summary()
        );
        let v = verdict(&[text(0, &a), text(1, &"b".repeat(64))]);
        assert!(!v.pass);
        assert!(
            v.summary().contains("output text differs from"),
            "{}",
            v.summary()
        );
        for (bad, why) in [
            (
                crate::sweep::record::row::EMPTY_SHA256.to_string(),
                "printed no text",
            ),
            ("xyz".to_string(), "is not a SHA-256"),
        ] {
            let v = verdict(&[text(0, &a), text(1, &bad)]);
            assert!(!v.pass, "{why}");
            assert!(v.unproven[0].1.contains(why), "{:?}", v.unproven);
        }
        // Only an empty-text run: nothing compared, not a pass.
        let v = verdict(&[text(0, crate::sweep::record::row::EMPTY_SHA256)]);
        assert!(!v.pass);
        assert_eq!(v.runs_compared, 0);
    }
}
