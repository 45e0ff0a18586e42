//! The `mini-routed` preset: its bytes are pinned, and the routing the model itself
//! computes on a fixed English prompt has the statistics docs/simulate.md states —
//! look-ahead precision, re-use between consecutive tokens, and a popularity skew that
//! orders the caches `lru` < `lfru` < `belady` with room between them.
//!
//! Every figure is measured from a `memdial run --record-trace` of the model and its
//! `memdial simulate` replay; the ranges are the published targets' neighbourhood
//! (docs/simulate.md), not values of the generator's constants.

use std::collections::HashSet;
use std::path::Path;
use std::process::Command;

use memdial_testkit as testkit;
use serde_json::Value;
use sha2::{Digest, Sha256};

const BIN: &str = env!("CARGO_BIN_EXE_memdial");
const PROMPT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/routing-prompt.txt"
);
/// sha256 of `checksums.sha256` of `memdial fixture --preset mini-routed` at seed 0. If the
/// generator or the preset changes on purpose, regenerate, update, and re-measure
/// docs/simulate.md's tables (the fixture bytes changed).
const PINNED: &str = "8b435fd0c57904a806786420bd542b5b8803cb512c291050e79d5a89b789f039";
const TOP_K: usize = 8;
const EXPERTS: usize = 256;
const MOE_LAYERS: usize = 7;

fn memdial(args: &[&str], extra: &[&Path]) -> Vec<u8> {
    let out = Command::new(BIN).args(args).args(extra).output().unwrap();
    assert!(
        out.status.success(),
        "memdial {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// Mean over routing lines with a prediction of |chosen ∩ predicted| / k, the share of
/// lines whose rank-1 expert was predicted, and the mean overlap of consecutive tokens'
/// sets per layer.
fn trace_stats(trace: &str) -> (f64, f64, f64) {
    let (mut prec, mut rank1, mut n_pred) = (0f64, 0f64, 0usize);
    let (mut overlap, mut n_pairs) = (0f64, 0usize);
    let mut last: Vec<Option<(u64, HashSet<u64>)>> = vec![None; 64];
    for line in trace.lines().filter(|l| l.contains("\"layer\"")) {
        let v: Value = serde_json::from_str(line).unwrap();
        let ids = |k: &str| -> Vec<u64> {
            v[k].as_array()
                .map(|a| a.iter().map(|x| x.as_u64().unwrap()).collect())
                .unwrap_or_default()
        };
        let (chosen, predicted) = (ids("experts"), ids("predicted"));
        assert_eq!(chosen.len(), TOP_K, "{line}");
        if !predicted.is_empty() {
            let p: HashSet<u64> = predicted.into_iter().collect();
            prec += chosen.iter().filter(|e| p.contains(e)).count() as f64 / TOP_K as f64;
            rank1 += f64::from(u8::from(p.contains(&chosen[0])));
            n_pred += 1;
        }
        let (tok, layer) = (v["token"].as_u64().unwrap(), v["layer"].as_u64().unwrap());
        let set: HashSet<u64> = chosen.into_iter().collect();
        if let Some((t, prev)) = &last[layer as usize] {
            if *t + 1 == tok {
                overlap += prev.intersection(&set).count() as f64 / TOP_K as f64;
                n_pairs += 1;
            }
        }
        last[layer as usize] = Some((tok, set));
    }
    assert!(n_pred > 0 && n_pairs > 0);
    (
        prec / n_pred as f64,
        rank1 / n_pred as f64,
        overlap / n_pairs as f64,
    )
}

#[test]
fn mini_routed_routing_looks_real() {
    let s = testkit::scratch!("routed");
    let model = s.join("mini-routed");
    memdial(&["fixture", "--preset", "mini-routed", "--out"], &[&model]);
    let sums = std::fs::read(model.join("checksums.sha256")).unwrap();
    let got = memdial::util::digest::hex(&Sha256::digest(&sums));
    assert_eq!(
        got,
        PINNED,
        "mini-routed's bytes changed; checksums.sha256 is\n{}",
        String::from_utf8_lossy(&sums)
    );

    // The prompt one token per forward (every token gets a look-ahead prediction), then
    // 64 greedy tokens.
    let trace = s.join("trace.jsonl");
    let out = memdial(
        &[
            "run",
            "--prompt-file",
            PROMPT,
            "--max-tokens",
            "64",
            "--ignore-eos",
            "--budget",
            "60MiB",
            "--prefetch",
            "lookahead",
            "--prefill-chunk",
            "1",
            "--output",
            "json",
            "--record-trace",
        ],
        &[&trace, Path::new("--model"), &model],
    );
    let run: Value = serde_json::from_slice(&out).unwrap();
    let ids: Vec<u64> = run["output_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap())
        .collect();
    let grams: Vec<&[u64]> = ids.windows(4).collect();
    let repeats = grams.len() - grams.iter().collect::<HashSet<_>>().len();
    let (prec, rank1, overlap) = trace_stats(&std::fs::read_to_string(&trace).unwrap());

    let out = memdial(
        &[
            "simulate",
            "--budgets",
            "29MiB..48MiB:40",
            "--cache",
            "lru,lfru,belady",
            "--prefetch",
            "none",
            "--output",
            "json",
            "--trace",
        ],
        &[&trace, Path::new("--model"), &model],
    );
    let rows: Vec<Value> = serde_json::from_slice(&out).unwrap();
    // Hit rates of the budget whose expert cache is closest to `per_layer` slots per MoE layer.
    let at = |per_layer: usize| -> (f64, f64, f64) {
        let want = (per_layer * MOE_LAYERS) as i64;
        let slots = |r: &Value| r["expert_cache_experts"].as_i64().unwrap();
        let best = rows
            .iter()
            .map(slots)
            .min_by_key(|n| (n - want).abs())
            .unwrap();
        let hit = |p: &str| {
            rows.iter()
                .find(|r| slots(r) == best && r["policy"] == p)
                .and_then(|r| r["expert_hit_rate"].as_f64())
                .unwrap()
        };
        (hit("lru"), hit("lfru"), hit("belady"))
    };
    let (half, one, two) = (at(TOP_K / 2), at(TOP_K), at(2 * TOP_K));
    println!(
        "mini-routed: look-ahead precision {prec:.3}, rank-1 {rank1:.3}, consecutive-token \
         overlap {overlap:.3} (independent routing {:.3}); decode 4-gram repeats {repeats}/{}; \
         lru/lfru/belady at 0.5, 1, 2 tokens' experts: {half:.3?} {one:.3?} {two:.3?}",
        TOP_K as f64 / EXPERTS as f64,
        grams.len()
    );
    assert!((0.60..=0.85).contains(&prec), "look-ahead precision {prec}");
    assert!(rank1 >= 0.90, "rank-1 look-ahead {rank1}");
    assert!(
        overlap >= 5.0 * TOP_K as f64 / EXPERTS as f64,
        "consecutive-token overlap {overlap}"
    );
    assert!(
        repeats * 10 <= grams.len(),
        "decode loops: {repeats} repeated 4-grams"
    );
    for (lru, lfru, belady) in [half, one, two] {
        assert!(lru <= lfru && lfru <= belady, "{lru} {lfru} {belady}");
    }
    assert!(
        half.1 - half.0 >= 0.10,
        "lfru over lru below one token's experts: {half:?}"
    );
    assert!(
        (0.25..=0.50).contains(&half.2),
        "belady at half a token: {half:?}"
    );
    assert!(
        (0.50..=0.75).contains(&one.2),
        "belady at one token: {one:?}"
    );
}

/// A bad `--routing` spec is a usage error naming the key, and writes nothing.
#[test]
fn bad_routing_spec_is_a_clear_error() {
    let s = testkit::scratch!("routed-bad");
    let out_dir = s.join("m");
    for (spec, says) in [
        ("skew=-1", "skew=-1 must be ≥ 0"),
        ("nope=1", "unknown key \"nope\""),
        ("clusters=1.5", "clusters=1.5 must be an integer"),
        ("noise=2", "noise=2 must lie in [0, 1]"),
        ("gain", "\"gain\" is not key=value"),
        ("attn=inf", "is not a finite number"),
    ] {
        let out = Command::new(BIN)
            .args([
                "fixture",
                "--preset",
                "mini-routed",
                "--routing",
                spec,
                "--out",
            ])
            .arg(&out_dir)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{spec}: accepted");
        assert!(err.contains(says), "{spec}: {err}");
        assert!(!out_dir.exists(), "{spec}: wrote {}", out_dir.display());
    }
}
