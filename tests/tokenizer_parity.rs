//! Parity of `memdial::format::tokenizer::Tokenizer` with Python tiktoken (Kimi's TikTokenTokenizer
//! semantics) on the committed cases in `fixtures/tokenizer/cases.json` (regenerate with
//! `fixtures/tokenizer/regen.sh`). The vocabulary is the `mini` one: o200k ranks 0..32768.

use std::path::{Path, PathBuf};

use memdial::format::tokenizer::{Tokenizer, KIMI_PAT_STR};
use memdial::tools::fixture::vocab::write_tokenizer_files;
use serde_json::Value;
use sha2::{Digest, Sha256};

fn sha256_hex(path: &Path) -> String {
    let bytes = std::fs::read(path).unwrap();
    Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

fn short(s: &str) -> String {
    let t: String = s.chars().take(60).collect();
    format!("{t:?}{}", if s.chars().count() > 60 { "…" } else { "" })
}

#[test]
fn parity_with_python_tiktoken() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(root.join("fixtures/tokenizer/cases.json")).unwrap();
    let doc: Value = serde_json::from_str(&text).unwrap();
    let n_base = doc["n_base"].as_u64().unwrap() as u32;
    assert_eq!(
        doc["pat_str"].as_str().unwrap(),
        KIMI_PAT_STR,
        "pattern drift"
    );

    let dir = memdial_testkit::scratch!("tok-parity");
    write_tokenizer_files(&dir, n_base).unwrap();
    assert_eq!(
        sha256_hex(&dir.join("tiktoken.model")),
        doc["tiktoken_model_sha256"].as_str().unwrap(),
        "generated tiktoken.model differs from the one the expected ids were computed with"
    );
    assert_eq!(
        sha256_hex(&dir.join("tokenizer_config.json")),
        doc["tokenizer_config_sha256"].as_str().unwrap(),
        "generated tokenizer_config.json differs from the fixture's"
    );
    let tok = Tokenizer::from_dir(&dir).unwrap();
    std::fs::remove_dir_all(&dir).ok();

    let mut failures = Vec::new();
    let cases = doc["cases"].as_array().unwrap();
    let mut n_ids = 0usize;
    for c in cases {
        let s = c["text"].as_str().unwrap();
        let want = ids(&c["ids"]);
        let want_ord = ids(&c["ids_no_special"]);
        n_ids += want.len();
        let got = tok.encode(s, true);
        if got != want {
            failures.push(format!("encode {}: got {got:?} want {want:?}", short(s)));
        }
        let got_ord = tok.encode(s, false);
        if got_ord != want_ord {
            failures.push(format!(
                "encode_ordinary {}: got {got_ord:?} want {want_ord:?}",
                short(s)
            ));
        }
        for (label, v) in [("ids", &want), ("ids_no_special", &want_ord)] {
            match tok.decode(v) {
                Ok(d) if d == s => {}
                other => failures.push(format!("decode {label} {}: {other:?}", short(s))),
            }
        }
    }
    let chats = doc["chat"].as_array().unwrap();
    for c in chats {
        let user = c["user"].as_str().unwrap();
        let system = c["system"].as_str();
        let want = ids(&c["ids"]);
        let got = tok.chat_prompt(user, system);
        if got != want {
            failures.push(format!(
                "chat {:?}/{:?}: got {got:?} want {want:?}",
                system, user
            ));
        }
        if tok.decode(&got).unwrap() != c["rendered"].as_str().unwrap() {
            failures.push(format!("chat decode {:?}", user));
        }
    }
    println!(
        "tokenizer parity: {} cases ({} ids, both allow_special modes, + decode round-trips) and {} chat prompts checked against Python tiktoken {}; {} failures",
        cases.len(),
        n_ids,
        chats.len(),
        doc["tiktoken_version"],
        failures.len()
    );
    assert!(cases.len() >= 500);
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures
            .iter()
            .take(30)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}
