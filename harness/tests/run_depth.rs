//! `memdial run --depth N`: the ids generated after the N-token depth context are
//! those of `--prompt-ids` of the context ids followed by the prompt (resident and at
//! a streamed budget, whole and chunked prefill), the metrics time the context apart,
//! and a depth the context cannot hold is a usage error (exit 2).

use std::process::{Command, Output};

use memdial_testkit as testkit;
use memdial_testkit::memdial_bin;
use memdial_testkit::shared_fixture;
use memdial_testkit::shared_scratch;
use testkit::output_text as text;

/// tiny-k3's `vocab_size` (its config.json).
const VOCAB: u64 = 2304;

/// SplitMix64 (Vigna's splitmix64.c) written out here, apart from the engine's.
fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The documented depth context: output k of SplitMix64 from state 0, mod the vocabulary.
fn depth_ids(n: usize) -> Vec<u64> {
    let mut s = 0;
    (0..n).map(|_| splitmix64(&mut s) % VOCAB).collect()
}

fn run(prompt: &str, extra: &[&str]) -> Output {
    Command::new(memdial_bin!())
        .arg("run")
        .arg("--model")
        .arg(shared_fixture!("tiny-k3"))
        .args(["--prompt-ids", prompt, "--max-tokens", "6", "--ignore-eos"])
        .args(["--output", "ids"])
        .args(extra)
        .output()
        .unwrap()
}

fn join(ids: &[u64]) -> String {
    ids.iter()
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

#[test]
fn the_depth_stream_is_splitmix64_from_state_zero() {
    // splitmix64.c seeded with 0 prints these first (its published output).
    let mut s = 0;
    let first: Vec<u64> = (0..4).map(|_| splitmix64(&mut s)).collect();
    assert_eq!(
        first,
        [
            0xE220_A839_7B1D_CDAF,
            0x6E78_9E6A_A1B9_65F4,
            0x06C4_5D18_8009_454F,
            0xF88B_B8A8_724C_81EC
        ]
    );
    // Mod 2304 by hand: 0x…CDAF = 16294208416658607535 = 2304 · 7072139069730298 + 943.
    assert_eq!(depth_ids(4), [943, 756, 847, 2284]);
}

#[test]
fn decode_at_depth_is_decode_of_the_context_followed_by_the_prompt() {
    let dir = shared_scratch!();
    let prompt = [5u64, 6, 7, 5, 6];
    for depth in [1usize, 16, 300] {
        let mut whole = depth_ids(depth);
        whole.extend(prompt);
        for extra in [
            &[][..],
            &["--prefill-chunk", "7"][..],
            &["--budget", "floor", "--io", "buffered"][..],
        ] {
            let concatenated = run(&join(&whole), extra);
            assert_eq!(
                concatenated.status.code(),
                Some(0),
                "{}",
                text(&concatenated)
            );
            let m = dir.join(format!("depth-{depth}.json"));
            let mut a = extra.to_vec();
            let d = depth.to_string();
            a.extend(["--depth", &d, "--metrics-json", m.to_str().unwrap()]);
            let deep = run(&join(&prompt), &a);
            assert_eq!(deep.status.code(), Some(0), "{}", text(&deep));
            assert_eq!(
                String::from_utf8_lossy(&deep.stdout),
                String::from_utf8_lossy(&concatenated.stdout),
                "depth {depth} {extra:?}"
            );
            let m: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(&m).unwrap()).unwrap();
            assert_eq!(m["depth_tokens"], depth as u64, "{m}");
            assert!(m["depth_prefill_s"].as_f64().unwrap() > 0.0, "{m}");
            // The prompt's figures are the prompt's: 5 tokens, 5 decode steps after the first.
            assert_eq!(m["prompt_tokens"], 5, "{m}");
            assert_eq!(m["max_context"], (depth + 5 + 6) as u64, "{m}");
            assert_eq!(m["decode_s_per_token"].as_array().unwrap().len(), 5);
        }
    }
    // Without --depth the metrics say depth 0 and time no context.
    let m = dir.join("depth-0.json");
    let o = run(&join(&prompt), &["--metrics-json", m.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let m: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&m).unwrap()).unwrap();
    assert_eq!(m["depth_tokens"], 0, "{m}");
    assert!(m["depth_prefill_s"].is_null(), "{m}");
}

#[test]
fn a_depth_beyond_the_context_is_refused() {
    // 10 + 5 + 6 = 21 positions needed, 20 given.
    let o = run("5,6,7,5,6", &["--depth", "10", "--max-context", "20"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("--depth 10: the depth context, the prompt's 5 tokens and --max-tokens 6 need 21 positions, beyond --max-context 20"),
        "{}",
        text(&o)
    );
    assert!(o.stdout.is_empty());
    let o = run("5,6,7,5,6", &["--depth", "10", "--max-context", "21"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = run("5,6,7,5,6", &["--depth", "16777216"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("is more than 16777216 positions"),
        "{}",
        text(&o)
    );
    let o = run("5,6,7,5,6", &["--depth", "-1"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
}
