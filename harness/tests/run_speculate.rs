//! `memdial run --speculate`: the ids printed are those of `--speculate off` (resident
//! and at a streamed budget, greedy and seeded), the metrics count the forwards and
//! the drafts, and bad values are usage errors (exit 2) naming the value.

use std::process::{Command, Output};

use memdial_testkit as testkit;
use memdial_testkit::memdial_bin;
use memdial_testkit::shared_fixture;
use memdial_testkit::shared_scratch;
use testkit::output_text as text;

fn run(extra: &[&str]) -> Output {
    Command::new(memdial_bin!())
        .arg("run")
        .arg("--model")
        .arg(shared_fixture!("tiny-k3"))
        .args([
            "--prompt-ids",
            "5,6,7,5,6",
            "--max-tokens",
            "12",
            "--ignore-eos",
            "--output",
            "ids",
        ])
        .args(extra)
        .output()
        .unwrap()
}

fn metrics(path: &std::path::Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn speculation_prints_the_plain_ids_and_counts_its_drafts() {
    let dir = shared_scratch!();
    for sampling in [&[][..], &["--temperature", "0.8", "--seed", "7"][..]] {
        for budget in [&[][..], &["--budget", "3MiB", "--io", "buffered"][..]] {
            let base: Vec<&str> = sampling.iter().chain(budget).copied().collect();
            let off_json = dir.join("off.json");
            let mut a = base.clone();
            a.extend(["--metrics-json", off_json.to_str().unwrap()]);
            let off = run(&a);
            assert_eq!(off.status.code(), Some(0), "{}", text(&off));
            let ids = dir.join("ids.txt");
            std::fs::write(&ids, &off.stdout).unwrap();
            let m = metrics(&off_json);
            assert_eq!(
                m["forwards"], 11,
                "plain: one forward per token after the first"
            );
            assert_eq!(m["drafted_tokens"], 0);
            // A wrong id at position 4 of the replayed ids: a rejection, then the rest.
            let s = String::from_utf8(off.stdout.clone()).unwrap();
            let mut v: Vec<u32> = s.trim().split(',').map(|x| x.parse().unwrap()).collect();
            v[4] = (v[4] + 1) % 2048;
            let bad = dir.join("bad.txt");
            std::fs::write(
                &bad,
                v.iter()
                    .map(|x| x.to_string())
                    .collect::<Vec<_>>()
                    .join(","),
            )
            .unwrap();
            for spec in [
                format!("replay:{}:4", ids.display()),
                format!("replay:{}:3", bad.display()),
                "ngram:2".to_string(),
            ] {
                let js = dir.join("spec.json");
                let mut a = base.clone();
                a.extend(["--speculate", &spec, "--metrics-json", js.to_str().unwrap()]);
                let o = run(&a);
                assert_eq!(o.status.code(), Some(0), "{spec}: {}", text(&o));
                assert_eq!(o.stdout, off.stdout, "{spec} {base:?}");
                let m = metrics(&js);
                let (f, d, acc) = (
                    m["forwards"].as_u64().unwrap(),
                    m["drafted_tokens"].as_u64().unwrap(),
                    m["accepted_tokens"].as_u64().unwrap(),
                );
                // 11 ids after the first: each forward emits its accepted drafts + 1.
                assert_eq!(f + acc, 11, "{spec}: {m}");
                assert!(acc <= d);
                assert_eq!(m["decode_s_per_token"].as_array().unwrap().len(), 11);
                let mal = m["mean_accepted_length"].as_f64().unwrap();
                assert!((mal - acc as f64 / f as f64).abs() < 1e-12);
                if spec.contains("ids.txt") {
                    // Every draft accepted: 5 + 5 + 1 ids after the first, 3 forwards.
                    assert_eq!((f, d, acc), (3, 8, 8), "{spec}");
                }
                if !budget.is_empty() {
                    assert_eq!(m["budget_overflows"], 0, "{spec}");
                    assert!(m["bytes_read_per_forward"].as_f64().unwrap() > 0.0);
                }
            }
        }
    }
}

#[test]
fn bad_speculate_values_are_usage_errors() {
    let empty = shared_scratch!().join("empty-ids.txt");
    std::fs::write(&empty, "\n").unwrap();
    let words = shared_scratch!().join("word-ids.txt");
    std::fs::write(&words, "1,2,x").unwrap();
    let big = shared_scratch!().join("big-ids.txt");
    std::fs::write(&big, "1,99999").unwrap();
    for (v, want) in [
        ("ngram:0".to_string(), "out of range"),
        ("ngram:four".to_string(), "is not a number"),
        ("medusa:4".to_string(), "unknown draft source"),
        ("replay:/no/such/file:4".to_string(), "cannot read"),
        (format!("replay:{}:4", empty.display()), "holds no ids"),
        (format!("replay:{}:4", words.display()), "is not a token id"),
        (
            format!("replay:{}:4", big.display()),
            "out of range (vocab_size",
        ),
    ] {
        let o = run(&["--speculate", &v]);
        assert_eq!(o.status.code(), Some(2), "{v}: {}", text(&o));
        assert!(text(&o).contains(want), "{v}: {}", text(&o));
        assert!(o.stdout.is_empty(), "{v}: nothing generated");
    }
}
